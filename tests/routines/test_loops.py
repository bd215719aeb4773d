"""Goal loops (PRO-3): one task per iteration, each ended by the agent's loop_report; the server
decides whether another follows and records why it stopped (complete, blocked, max iterations,
token budget, deadline, no progress); the owner hears how it ended. Time is passed explicitly."""

from datetime import UTC, datetime, timedelta

import pytest
from django.utils import timezone

from conversations import tasks
from conversations.models import Message, Task
from conversations.usage import record_usage
from routines import loops
from routines.models import Loop
from tests.work.tooling import claimed
from work.tools.registry import granted_tools
from workspaces.actions import update_profile

pytestmark = pytest.mark.django_db


def iterate(nova, now, outcome="continue", reason="working", progress="", text="done", tokens=0):
    """Run the loop's current iteration as the agent's bridge would: claim its task, report,
    finish it (with its usage); then the sweep at NOW weighs it."""
    held = claimed(nova, "task")
    arguments = {"outcome": outcome, "reason": reason}
    if progress:
        arguments["progress"] = progress
    held.output("loop_report", arguments)
    task = tasks.record_result(
        held.item_id, "completed", connection_id=held.connection_id, result={"text": text}
    )
    if tokens:
        record_usage(nova, task.workspace_id, {"input_tokens": tokens}, task_id=task.id)
    return loops.advance_loops(now=now)


def test_a_loop_iterates_until_the_agent_reports_the_goal_complete(alice, team_a, nova, api):
    made = api(alice).post(
        "/api/v1/loops/",
        {"agent": str(nova.id), "workspace": str(team_a.id), "goal": "Get the test suite green"},
        format="json",
    )
    assert made.status_code == 201, made.json()
    loop = Loop.objects.get(pk=made.json()["id"])
    now = timezone.now()
    assert "loop_report" in [t.name for t in granted_tools(nova)]
    assert loops.advance_loops(now=now) == 1  # the first iteration starts
    first = Task.objects.get()
    assert "iteration 1 of at most 10" in first.instructions and "green" in first.instructions
    iterate(nova, now, progress="3 of 10 tests fixed")
    second = Task.objects.exclude(pk=first.pk).get()  # continuous: the next one at once
    assert "Progress so far: 3 of 10 tests fixed" in second.instructions
    iterate(nova, now, outcome="complete", reason="All green.", progress="10 of 10")
    loop.refresh_from_db()
    assert (loop.status, loop.stop_reason) == ("complete", "All green.")
    told = Message.objects.get(conversation=loop.conversation, author_agent=nova)
    assert told.body.startswith("✅ Goal complete")
    iterations = api(alice).get(f"/api/v1/loops/{loop.id}/iterations/").json()["results"]
    assert [i["outcome"] for i in iterations] == ["complete", "continue"]
    assert loops.advance_loops(now=now + timedelta(hours=1)) == 0 and Task.objects.count() == 2


@pytest.mark.parametrize(
    "settings_, steps, stopped, says",
    [
        ({}, [{"outcome": "blocked", "reason": "I need the staging password."}], "blocked",
         "I need the staging password."),
        ({"max_iterations": 2}, [{"progress": "a"}, {"progress": "b"}], "stopped",
         "ran its 2 iterations"),
        ({"token_budget": 1000}, [{"progress": "a", "tokens": 600}, {"progress": "b", "tokens": 600}],
         "stopped", "1200 tokens of its budget of 1000"),
        ({"no_progress_limit": 2}, [{"progress": "a", "text": "x"}, {"progress": "b", "text": "x"}],
         "stopped", "No progress in its last 2"),
        ({"no_progress_limit": 2}, [{"progress": "a"}, {"progress": "a", "text": "y"},
                                    {"progress": "a", "text": "z"}],
         "stopped", "No progress in its last 2"),
    ],
)  # fmt: skip
def test_guardrails_stop_a_loop_and_say_why(alice, team_a, nova, settings_, steps, stopped, says):
    now = timezone.now()
    loop = loops.start_loop(alice, nova, team_a, "Tidy the backlog", now=now, **settings_)
    loops.advance_loops(now=now)
    for n, step in enumerate(steps):
        iterate(nova, now, text=step.pop("text", f"out {n}"), **step)
    loop.refresh_from_db()
    assert loop.status == stopped and says in loop.stop_reason
    assert Task.objects.count() == len(steps)  # no iteration after the stop
    assert says in Message.objects.get(conversation=loop.conversation).body


def test_an_interval_loop_waits_a_deadline_stops_it_and_pause_resume_stop(alice, team_a, nova):
    now = timezone.now()
    loop = loops.start_loop(
        alice,
        nova,
        team_a,
        "Watch the queue",
        interval_minutes=30,
        deadline=now + timedelta(hours=1),
        now=now,
    )
    loops.advance_loops(now=now)
    iterate(nova, now, progress="queue at 40")
    assert Task.objects.count() == 1  # the next waits half an hour
    assert loops.advance_loops(now=now + timedelta(minutes=29)) == 0
    loops.set_loop_status(alice, loop, "paused", now=now)
    assert loops.advance_loops(now=now + timedelta(minutes=31)) == 0
    loops.set_loop_status(alice, loop, "running", now=now + timedelta(minutes=31))
    assert loops.advance_loops(now=now + timedelta(minutes=31)) == 1 and Task.objects.count() == 2
    iterate(nova, now + timedelta(minutes=62), progress="queue at 12")
    loop.refresh_from_db()
    assert (loop.status, loop.stop_reason) == ("stopped", "Its deadline passed.")
    with pytest.raises(Exception, match="stopped already"):
        loops.set_loop_status(alice, loop, "running")


def test_loops_are_their_owners_only(alice, bob, charlie, team_a, nova, api):
    loop = loops.start_loop(alice, nova, team_a, "Draft the newsletter")
    url = f"/api/v1/loops/{loop.id}/"
    for who in (bob, charlie):
        assert api(who).get(url).status_code == 404
        assert api(who).patch(url, {"status": "stopped"}, format="json").status_code == 404
        assert api(who).get("/api/v1/loops/").json()["results"] == []
    stopped = api(alice).patch(url, {"status": "stopped"}, format="json")
    assert stopped.status_code == 200 and stopped.json()["status"] == "stopped"
    assert api(alice).patch(url, {"status": "running"}, format="json").status_code == 409
    bad = {"agent": str(nova.id), "workspace": str(team_a.id), "goal": "x", "maxIterations": 0}
    assert api(alice).post("/api/v1/loops/", bad, format="json").status_code == 400


def test_a_deadline_without_an_offset_is_read_in_the_owners_time_zone(alice, team_a, nova, api):
    update_profile(alice, zone_name="Asia/Tokyo")
    year = timezone.now().year + 1
    body = {
        "agent": str(nova.id),
        "workspace": str(team_a.id),
        "goal": "Ship it",
        "deadline": f"{year}-03-01T09:00",
    }
    made = api(alice).post("/api/v1/loops/", body, format="json")
    assert made.status_code == 201, made.json()
    loop = Loop.objects.get(pk=made.json()["id"])
    assert loop.deadline == datetime(year, 3, 1, 0, 0, tzinfo=UTC)  # 9:00 in Tokyo
    bad = api(alice).post("/api/v1/loops/", {**body, "deadline": "soon"}, format="json")
    assert bad.status_code == 400 and Loop.objects.count() == 1


def test_a_deadline_past_what_can_be_kept_is_refused_and_nothing_is_stored(
    alice, team_a, nova, api
):
    """9999-12-31T23:59:59-12:00 is year 10000 in UTC: stored, no read of the row (the loop, the
    owner's list, the sweep) could have turned it back into a time."""
    body = {"agent": str(nova.id), "workspace": str(team_a.id), "goal": "Ship it"}
    for deadline, field_says in (
        ("9999-12-31T23:59:59-12:00", "Not an ISO 8601 date and time."),
        (f"{timezone.now().year + 3}-01-01T00:00Z", "Too far."),
    ):
        refused = api(alice).post("/api/v1/loops/", {**body, "deadline": deadline}, format="json")
        assert refused.status_code == 400, refused.json()
        error = refused.json()["error"]
        assert (error["code"], error["fields"]) == ("loop_invalid", {"deadline": field_says})
    assert not Loop.objects.exists()
    assert api(alice).get("/api/v1/loops/").status_code == 200


def test_an_agent_runs_at_most_ten_loops_at_once(alice, team_a, nova, api):
    """Each loop queues a task per iteration: without a cap one person could fill the queue."""
    made = [
        loops.start_loop(alice, nova, team_a, f"Goal {n}") for n in range(loops.MAX_LOOPS_PER_AGENT)
    ]
    refused = api(alice).post(
        "/api/v1/loops/",
        {"agent": str(nova.id), "workspace": str(team_a.id), "goal": "One more"},
        format="json",
    )
    assert refused.status_code == 409 and refused.json()["error"]["code"] == "loop_limit"
    assert Loop.objects.filter(agent=nova).count() == loops.MAX_LOOPS_PER_AGENT
    loops.set_loop_status(alice, made[0], Loop.Status.STOPPED)  # a stopped one frees its place
    assert loops.start_loop(alice, nova, team_a, "Now it fits").status == Loop.Status.RUNNING
