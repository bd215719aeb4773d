"""Probes of pulses, loops, routines and reminders as a demanding user and an attacker would try
them: a pulse that finds much to flag or is pointed at a channel, a loop paused or stopped while
its iteration waits or runs, a loop past its budget or deadline mid-iteration, a routine enabled
where it cannot run, and reminders asked for in one workspace filling the agent's queue. Time is
passed explicitly."""

from datetime import UTC, datetime, timedelta

import pytest
from django.utils import timezone

from conversations import tasks
from conversations.actions import MAX_BODY, remove_agent_from_conversation
from conversations.models import Message, Task
from conversations.usage import record_usage
from routines import actions, loops, reminders
from routines.models import PulseReport, Routine
from tests.work.tooling import claimed
from workspaces import actions as workspace_actions

pytestmark = pytest.mark.django_db

T0 = datetime(2026, 12, 3, 8, 2, tzinfo=UTC)


def test_a_pulse_that_flags_everything_at_length_still_files_its_report_and_tells(
    alice, team_a, nova
):
    """Thirty flagged items with long findings, as pulse_report allows: the report is kept whole
    and Alice hears of every item, the findings shortened to fit one message."""
    checklist = [f"Check {n:02} " + "x" * 280 for n in range(30)]
    pulse = actions.create_routine(
        alice, nova, team_a, name="", instructions="", interval_minutes=60 * 24,
        checklist=checklist, now=T0,
    )  # fmt: skip
    actions.run_due_routines(now=T0 + timedelta(days=1))
    held = claimed(nova, "task")
    items = [{"item": item, "status": "flagged", "finding": "y" * 2000} for item in checklist]
    filed = held.output("pulse_report", {"items": items})
    assert filed["flagged"] == 30, filed
    report = PulseReport.objects.get()
    assert [i["finding"] for i in report.items] == ["y" * 2000] * 30
    (sent,) = Message.objects.filter(conversation=pulse.conversation, author_agent=nova)
    assert len(sent.body) <= MAX_BODY
    assert all(f"**Check {n:02} " in sent.body for n in range(30))
    assert sent.body.endswith("(Findings shortened here; the whole report is kept with the pulse.)")
    assert Task.objects.get().status == "running"


def test_a_loop_paused_while_its_agent_is_away_does_not_run_its_iteration_later(
    alice, team_a, nova
):
    """Nova is offline when Alice pauses its loop: the iteration it has not picked up is
    withdrawn (Nova, back, does no work for a paused loop), and resuming starts it afresh. An
    iteration Nova is working on is left to finish."""
    now = timezone.now()
    loop = loops.start_loop(alice, nova, team_a, "Tidy the backlog", now=now)
    loops.advance_loops(now=now)
    loops.set_loop_status(alice, loop, "paused", now=now)
    withdrawn = Task.objects.get()
    assert withdrawn.status == "cancelled" and "was paused" in withdrawn.error
    assert not loop.iterations.exists()

    loops.set_loop_status(alice, loop, "running", now=now)
    assert loops.advance_loops(now=now) == 1
    again = Task.objects.exclude(pk=withdrawn.pk).get()
    assert "iteration 1 of at most 10" in again.instructions
    assert loop.iterations.get().task == again

    claimed(nova, "task")
    loops.set_loop_status(alice, loop, "paused", now=now)
    again.refresh_from_db()
    assert again.status == "running" and loop.iterations.get().task == again


def test_a_loop_stopped_during_an_iteration_still_counts_what_that_iteration_spent(
    alice, team_a, nova, api
):
    """Alice stops the loop while Nova works on an iteration, which ends anyway: its cost is
    counted in the loop's tokens and its outcome shows, and nothing else follows."""
    now = timezone.now()
    loop = loops.start_loop(alice, nova, team_a, "Tidy the backlog", token_budget=50_000, now=now)
    loops.advance_loops(now=now)
    held = claimed(nova, "task")
    loops.set_loop_status(alice, loop, "stopped", now=now)
    held.output("loop_report", {"outcome": "continue", "reason": "Half done", "progress": "5/10"})
    task = tasks.record_result(
        held.item_id, "cancelled", connection_id=held.connection_id, error="stopped as asked"
    )
    record_usage(nova, team_a.id, {"input_tokens": 4000, "output_tokens": 500}, task_id=task.id)
    assert loops.advance_loops(now=now) == 0  # weighed, moved no further
    weighed = loop.iterations.get().evaluated_at
    loops.advance_loops(now=now + timedelta(minutes=1))
    assert loop.iterations.get().evaluated_at == weighed  # once
    shown = api(alice).get(f"/api/v1/loops/{loop.id}/").json()
    assert (shown["status"], shown["tokensUsed"], shown["iterations"]) == ("stopped", 4500, 1)
    (iteration,) = api(alice).get(f"/api/v1/loops/{loop.id}/iterations/").json()["results"]
    assert (iteration["outcome"], iteration["tokens"]) == ("continue", 4500)
    assert iteration["evaluatedAt"] is not None
    assert Task.objects.count() == 1
    assert Message.objects.filter(conversation=loop.conversation, author_agent=nova).count() == 1


def test_a_pulse_cannot_be_set_to_report_in_a_channel(alice, team_a, nova, channel, api):
    """What a pulse flags is for its owner (PRO-1): it is not posted where others read it."""
    body = {
        "agent": str(nova.id),
        "workspace": str(team_a.id),
        "checklist": ["Failed deploys"],
        "intervalMinutes": 60,
        "conversation": str(channel.id),
    }
    refused = api(alice).post("/api/v1/routines/", body, format="json")
    assert refused.status_code == 400
    assert "conversation" in refused.json()["error"]["fields"]
    assert not Routine.objects.exists()


@pytest.mark.parametrize(
    "budget, spent, after, says",
    [
        (10_000, 12_000, timedelta(0), "It spent 12000 tokens of its budget of 10000."),
        (None, 0, timedelta(hours=2), "Its deadline passed."),
    ],
)
def test_a_loop_past_its_budget_or_deadline_mid_iteration_stops_then(
    alice, team_a, nova, budget, spent, after, says
):
    """Nova's iteration goes on and on, spending: the loop's guardrails hold while it runs, not
    only once it ends. The loop stops saying why and Nova is asked to stop."""
    now = timezone.now()
    loop = loops.start_loop(
        alice, nova, team_a, "Index everything", token_budget=budget,
        deadline=now + timedelta(hours=1), now=now,
    )  # fmt: skip
    loops.advance_loops(now=now)
    held = claimed(nova, "task")
    if spent:
        record_usage(nova, team_a.id, {"input_tokens": spent}, task_id=held.item_id)
    assert loops.advance_loops(now=now + after) == 1
    loop.refresh_from_db()
    assert (loop.status, loop.stop_reason) == ("stopped", says)
    task = Task.objects.get()
    assert (task.status, task.cancel_state) == ("running", "requested")
    tasks.record_result(held.item_id, "cancelled", connection_id=held.connection_id)
    loops.advance_loops(now=now + after)
    loop.refresh_from_db()
    assert loop.tokens_used == spent and loop.iterations.get().evaluated_at is not None
    assert loop.iterations.get().reason == "the iteration's task cancelled"


def test_enabling_a_routine_that_cannot_run_is_refused_saying_why(
    alice, team_a, nova, channel, api
):
    """Nova was taken out of #general, where its routine reports, so the routine paused itself:
    enabled again as it is, it would only pause again at its next slot. Alice hears why now."""
    routine = actions.create_routine(
        alice, nova, team_a, name="Digest", instructions="Summarise the day.",
        interval_minutes=60, conversation=channel, now=T0,
    )  # fmt: skip
    remove_agent_from_conversation(alice, channel, nova.id)
    actions.run_due_routines(now=T0 + timedelta(hours=1))
    refused = api(alice).patch(f"/api/v1/routines/{routine.id}/", {"enabled": True}, format="json")
    assert refused.status_code == 409
    assert refused.json()["error"]["code"] == "routine_cannot_run"
    assert "Nova no longer takes part" in refused.json()["error"]["message"]
    routine.refresh_from_db()
    assert not routine.enabled and "no longer takes part" in routine.paused_reason
    renamed = api(alice).patch(f"/api/v1/routines/{routine.id}/", {"name": "Day"}, format="json")
    assert renamed.status_code == 200  # still hers to change while paused


def test_reminders_filling_an_agents_queue_in_one_workspace_leave_the_others_alone(
    alice, charlie, team_a, nova, monkeypatch
):
    """Charlie, in a workspace Alice shares with him, has Nova set reminders until it may set
    no more there: Alice's own reminders in team A are still taken."""
    monkeypatch.setattr(reminders, "MAX_PENDING_PER_AGENT", 3)
    shared = workspace_actions.create_team_workspace(alice, "Shared")
    _, token = workspace_actions.create_invitation(shared.memberships.get(user=alice))
    workspace_actions.accept_invitation(charlie, token)
    later = T0 + timedelta(days=1)
    for n in range(3):
        reminders.set_reminder(nova, shared, f"Ping {n}", later, now=T0)
    mine = reminders.set_reminder(nova, team_a, "Pay rent", later, user=alice, now=T0)
    assert mine.status == "pending"
    with pytest.raises(reminders.ReminderInvalid) as refused:
        reminders.set_reminder(nova, shared, "Ping 3", later, now=T0)
    assert "3 reminders waiting in Shared already" in refused.value.message
