"""Routines (PRO-2): schedules read right (interval, cron in a time zone), at most ten per agent,
each due slot a real task for the agent, once, delivered in the routine's own workspace; after
downtime one catch-up run with the missed slots recorded. Time is passed explicitly."""

from datetime import UTC, datetime, timedelta

import pytest

from agents import actions as agent_actions
from agntchat.core.exceptions import Conflict
from conversations.models import Conversation, Message, Task
from routines import actions, schedules
from routines.models import PulseReport, Routine, RoutineRun
from tests.work.tooling import claimed, held_message
from work import actions as work_actions
from work.tools.registry import REGISTRY, granted_tools
from workspaces import actions as workspace_actions

pytestmark = pytest.mark.django_db

T0 = datetime(2026, 12, 3, 8, 2, tzinfo=UTC)


def every(alice, nova, workspace, minutes=60, **fields):
    return actions.create_routine(
        alice,
        nova,
        workspace,
        name=fields.pop("name", "Inbox sweep"),
        instructions="Sweep the inbox and list what needs an answer.",
        interval_minutes=None if "cron" in fields else minutes,
        now=T0,
        **fields,
    )


def test_schedules_in_words_and_slots_in_the_routines_time_zone(alice, team_a, nova):
    hourly = every(alice, nova, team_a)
    assert schedules.describe(hourly) == "Every hour"
    assert hourly.next_run_at == T0 + timedelta(hours=1)
    weekdays = every(
        alice, nova, team_a, name="Standup", cron="0 9 * * 1-5", timezone_name="America/New_York"
    )
    assert schedules.describe(weekdays) == "At 09:00 AM, Monday through Friday (America/New_York)"
    # 9:00 in New York is 14:00 UTC in December; the 3rd is a Thursday.
    assert weekdays.next_run_at == datetime(2026, 12, 3, 14, 0, tzinfo=UTC)
    assert schedules.next_slot(weekdays, weekdays.next_run_at) == datetime(
        2026, 12, 4, 14, 0, tzinfo=UTC
    )
    assert schedules.next_slot(weekdays, datetime(2026, 12, 4, 15, tzinfo=UTC)) == datetime(
        2026, 12, 7, 14, 0, tzinfo=UTC
    )  # Monday


@pytest.mark.parametrize(
    "fields, says",
    [
        ({"interval_minutes": 2}, "between 5"),
        ({"interval_minutes": None, "cron": "61 * * * *"}, "not a cron expression"),
        (
            {"interval_minutes": None, "cron": "0 9 * * *", "timezone_name": "Mars/Olympus"},
            "time zone",
        ),
        ({"interval_minutes": None}, "either intervalMinutes or cron"),
    ],
)
def test_a_bad_schedule_is_refused_saying_why(alice, team_a, nova, fields, says):
    with pytest.raises(schedules.ScheduleInvalid) as refused:
        actions.create_routine(
            alice, nova, team_a, name="x", instructions="y", **{"interval_minutes": 60, **fields}
        )
    assert says in refused.value.message
    assert not Routine.objects.exists()


def test_a_due_routine_becomes_one_task_delivered_in_its_workspace(alice, team_a, nova):
    routine = every(alice, nova, team_a)
    assert routine.conversation.kind == "direct"
    assert actions.run_due_routines(now=T0 + timedelta(minutes=59)) == 0
    due = T0 + timedelta(hours=1, minutes=3)
    assert actions.run_due_routines(now=due) == 1
    assert actions.run_due_routines(now=due) == 0  # the slot ran; the next is an hour later
    (task,) = Task.objects.all()
    assert (task.agent, task.workspace, task.conversation) == (nova, team_a, routine.conversation)
    assert "Sweep the inbox" in task.instructions and "Every hour" in task.instructions
    run = RoutineRun.objects.get()
    assert (run.slot, run.task, run.skipped_count) == (T0 + timedelta(hours=1), task, 0)
    routine.refresh_from_db()
    assert routine.next_run_at == T0 + timedelta(hours=2)


def test_after_downtime_one_catch_up_run_records_the_missed_slots(alice, team_a, nova):
    every(alice, nova, team_a)
    assert actions.run_due_routines(now=T0 + timedelta(hours=5, minutes=30)) == 1
    run = RoutineRun.objects.get()
    assert run.slot == T0 + timedelta(hours=5)
    assert run.skipped_count == 4
    assert run.skipped_slots == [(T0 + timedelta(hours=h)).isoformat() for h in range(1, 5)]
    assert "4 earlier runs were missed" in Task.objects.get().instructions


def test_a_routine_still_delivers_where_it_was_set_up_after_its_agent_is_re_pinned(
    alice, team_a, nova
):
    routine = every(alice, nova, team_a)
    other = workspace_actions.create_team_workspace(alice, "Elsewhere")
    agent_actions.set_agent_pins(nova, [other.id])
    assert actions.run_due_routines(now=T0 + timedelta(hours=1)) == 1
    task = Task.objects.get()
    assert (task.workspace, task.conversation) == (team_a, routine.conversation)


def test_a_routine_of_an_owner_who_left_the_workspace_runs_no_task_there(bob, team_a):
    """Set up where it was (PRO-2) is not past its owner's membership: Bob left team A, so his
    agent's routine there was paused (tests/routines/test_owner_left.py); enabling it again from
    outside is refused saying why, rather than queuing work nobody takes."""
    rex = agent_actions.create_agent(bob, name="Rex", backend="scripted")
    routine = every(bob, rex, team_a)
    workspace_actions.leave_workspace(team_a.memberships.get(user=bob))
    routine.refresh_from_db()
    with pytest.raises(Conflict) as refused:
        actions.update_routine(bob, routine, enabled=True, now=T0)
    assert refused.value.message.endswith("The owner of Rex is not a member of Team A.")
    assert actions.run_due_routines(now=T0 + timedelta(hours=1)) == 0
    assert not Task.objects.exists() and not RoutineRun.objects.exists()


def test_paused_routines_do_not_run_and_resume_from_now(alice, team_a, nova):
    routine = every(alice, nova, team_a)
    actions.update_routine(alice, routine, enabled=False, now=T0)
    assert routine.next_run_at is None
    assert actions.run_due_routines(now=T0 + timedelta(days=2)) == 0
    back = T0 + timedelta(days=2)
    actions.update_routine(alice, routine, enabled=True, now=back)
    assert routine.next_run_at == back + timedelta(hours=1)  # nothing of the pause replayed
    actions.update_routine(alice, routine, cron="30 7 * * *", now=back)
    assert (routine.interval_minutes, routine.cron) == (None, "30 7 * * *")


def test_at_most_ten_routines_per_agent(alice, team_a, nova, api):
    for n in range(actions.MAX_PER_AGENT):
        every(alice, nova, team_a, name=f"r{n}")
    body = {
        "agent": str(nova.id),
        "workspace": str(team_a.id),
        "instructions": "One more.",
        "intervalMinutes": 60,
    }
    refused = api(alice).post("/api/v1/routines/", body, format="json")
    assert refused.status_code == 409
    assert refused.json()["error"]["code"] == "routine_limit"
    assert "10 routines already" in refused.json()["error"]["message"]
    assert Routine.objects.count() == actions.MAX_PER_AGENT


def test_rest_for_the_owner_and_404_for_everyone_else(
    alice, bob, charlie, team_a, team_b, nova, api
):
    owner = api(alice)
    made = owner.post(
        "/api/v1/routines/",
        {
            "agent": str(nova.id),
            "workspace": str(team_a.id),
            "instructions": "Post the weekly numbers.",
            "cron": "0 9 * * 1",
            "timezone": "Europe/Lisbon",
        },
        format="json",
    )
    assert made.status_code == 201, made.json()
    routine = made.json()
    assert routine["schedule"] == "At 09:00 AM, only on Monday (Europe/Lisbon)"
    url = f"/api/v1/routines/{routine['id']}/"
    paused = owner.patch(url, {"enabled": False}, format="json").json()
    assert paused["enabled"] is False and paused["nextRunAt"] is None
    assert owner.patch(url, {"cron": "nope"}, format="json").status_code == 400
    assert owner.get(url + "runs/").json()["results"] == []
    assert [r["id"] for r in owner.get("/api/v1/routines/").json()["results"]] == [routine["id"]]
    for who in (bob, charlie):
        client = api(who)
        assert client.get(url).status_code == 404
        assert client.patch(url, {"enabled": True}, format="json").status_code == 404
        assert client.delete(url).status_code == 404
        assert client.get("/api/v1/routines/").json()["results"] == []
    # Charlie cannot aim a routine of his at team A, nor at Alice's agent.
    orion = agent_actions.create_agent(charlie, name="Orion", handle="orion", backend="scripted")
    for agent, workspace in ((orion, team_a), (nova, team_b)):
        body = {"agent": str(agent.id), "workspace": str(workspace.id), "instructions": "x"}
        response = api(charlie).post(
            "/api/v1/routines/", {**body, "intervalMinutes": 60}, format="json"
        )
        assert response.status_code == 404
    assert owner.delete(url).status_code == 204
    assert not Routine.objects.exists()
    assert Conversation.objects.filter(kind="direct").count() == 1  # the DM stays


def test_a_pulse_walks_its_checklist_and_only_flagged_items_reach_the_owner(
    alice, team_a, nova, api
):
    pulse = actions.create_routine(
        alice, nova, team_a, name="", instructions="", interval_minutes=60 * 24,
        checklist=["Open pull requests older than a week", "Failed deploys"], now=T0,
    )  # fmt: skip
    assert (pulse.kind, pulse.name) == ("pulse", "Pulse")
    assert "pulse_report" in [t.name for t in granted_tools(nova)]  # given with the pulse
    with pytest.raises(Conflict):
        actions.create_routine(
            alice, nova, team_a, name="", instructions="", interval_minutes=60, checklist=["x"]
        )
    assert actions.run_due_routines(now=T0 + timedelta(days=1)) == 1
    task = Task.objects.get()
    assert task.conversation is None  # a report, not a chat message
    assert "- Failed deploys" in task.instructions and "pulse_report" in task.instructions
    held = claimed(nova, "task")
    report = held.output(
        "pulse_report",
        {
            "items": [
                {"item": "Open pull requests older than a week", "status": "ok"},
                {"item": "Failed deploys", "status": "flagged", "finding": "web-3 failed twice"},
            ],
            "summary": "One thing to look at.",
        },
    )
    assert report["flagged"] == 1
    (sent,) = Message.objects.filter(conversation=pulse.conversation, author_agent=nova)
    assert "**Failed deploys**: web-3 failed twice" in sent.body
    assert "Open pull requests" not in sent.body
    listed = api(alice).get(f"/api/v1/agents/{nova.id}/pulse-reports/").json()["results"]
    assert [i["status"] for i in listed[0]["items"]] == ["ok", "flagged"]


def test_pulse_report_outside_a_pulse_run_is_refused(alice, team_a, channel, nova):
    work_actions.set_tool_grant(alice, nova, REGISTRY["pulse_report"], True)
    held = held_message(nova, channel, alice)
    refused = held.error("pulse_report", {"items": [{"item": "x", "status": "ok"}]})
    assert refused["code"] == "not_a_pulse"
    assert not PulseReport.objects.exists()
