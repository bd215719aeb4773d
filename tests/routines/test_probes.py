"""Probes of the scheduled side as a demanding user and an attacker would try it: an agent
offline for days, an agent taken out of the channel its routine reports to, a routine emptied
of its instructions, and a long history of reminders. Time is passed explicitly."""

from datetime import UTC, datetime, timedelta

import pytest
from django.utils import timezone

from agntchat.core.exceptions import AppError
from conversations.actions import create_conversation, remove_agent_from_conversation
from conversations.models import Message, Task
from routines import actions, loops, reminders
from routines.models import Reminder, Routine, RoutineRun
from tests.work.tooling import claimed, held_message
from workspaces import actions as workspace_actions
from workspaces.actions import update_profile

pytestmark = pytest.mark.django_db

T0 = datetime(2026, 12, 3, 8, 2, tzinfo=UTC)


def every(alice, nova, workspace, minutes=60, **fields):
    return actions.create_routine(
        alice, nova, workspace, name="Inbox sweep", instructions="Sweep the inbox.",
        interval_minutes=minutes, now=T0, **fields,
    )  # fmt: skip


def test_an_offline_agent_finds_one_run_of_a_routine_waiting_not_one_per_slot(alice, team_a, nova):
    """Nova is offline for a day: its routine's runs nobody picked up are not all waiting for
    it when it is back (288 tasks for a five-minute routine); each new run stands for the one
    still waiting, which is cancelled saying why."""
    every(alice, nova, team_a, minutes=5)
    for n in range(1, 13):
        assert actions.run_due_routines(now=T0 + timedelta(minutes=5 * n)) == 1
    assert RoutineRun.objects.count() == 12
    (waiting,) = Task.objects.filter(status="queued")
    assert waiting == RoutineRun.objects.order_by("-slot").first().task
    cancelled = Task.objects.exclude(pk=waiting.pk)
    assert set(cancelled.values_list("status", flat=True)) == {"cancelled"}
    assert "next run" in cancelled.first().error


def test_a_run_the_agent_is_working_on_is_left_alone(alice, team_a, nova):
    every(alice, nova, team_a)
    actions.run_due_routines(now=T0 + timedelta(hours=1))
    claimed(nova, "task")  # Nova's bridge took it
    actions.run_due_routines(now=T0 + timedelta(hours=2))
    assert sorted(Task.objects.values_list("status", flat=True)) == ["queued", "running"]


def test_pausing_or_deleting_a_routine_cancels_its_run_still_waiting(alice, team_a, nova):
    """Nova is offline: the run it has not picked up is not done when it is back, once its
    owner paused or deleted the routine. A run it is working on is left alone."""
    routine = every(alice, nova, team_a)
    actions.run_due_routines(now=T0 + timedelta(hours=1))
    actions.update_routine(alice, routine, enabled=False, now=T0 + timedelta(hours=1))
    (paused,) = Task.objects.all()
    assert paused.status == "cancelled" and "was paused" in paused.error

    actions.update_routine(alice, routine, enabled=True, now=T0 + timedelta(hours=1))
    actions.run_due_routines(now=T0 + timedelta(hours=2))
    claimed(nova, "task")  # Nova's bridge took that one
    actions.run_due_routines(now=T0 + timedelta(hours=3))
    actions.delete_routine(alice, routine)
    statuses = dict(Task.objects.exclude(pk=paused.pk).values_list("status", "error"))
    assert set(statuses) == {"running", "cancelled"}
    assert "was deleted" in statuses["cancelled"]


def test_a_routine_stops_once_its_agent_is_removed_from_the_channel_it_reports_to(
    alice, team_a, nova, channel
):
    """The channel's admins took Nova out: its routine posts there no more, and says why."""
    routine = every(alice, nova, team_a, conversation=channel)
    remove_agent_from_conversation(alice, channel, nova.id)
    assert actions.run_due_routines(now=T0 + timedelta(hours=1)) == 1
    assert not Task.objects.exists()
    run = RoutineRun.objects.get()
    assert "no longer takes part" in run.error and "Nova" in run.error
    routine.refresh_from_db()
    assert (routine.enabled, routine.next_run_at) == (False, None)
    assert "no longer takes part" in routine.paused_reason
    assert actions.run_due_routines(now=T0 + timedelta(days=1)) == 0
    assert not Message.objects.filter(conversation=channel, author_agent=nova).exists()


def test_a_routine_cannot_be_emptied_of_its_instructions(alice, team_a, nova, api):
    routine = every(alice, nova, team_a)
    with pytest.raises(AppError) as refused:
        actions.update_routine(alice, routine, instructions="   ")
    assert "needs instructions" in refused.value.message
    response = api(alice).patch(
        f"/api/v1/routines/{routine.id}/", {"instructions": ""}, format="json"
    )
    assert response.status_code == 400
    assert Routine.objects.get().instructions == "Sweep the inbox."


def test_the_reminder_list_shows_whats_coming_after_a_long_history(alice, team_a, nova, api):
    """A year of daily reminders sent: the next one still shows, first."""
    now = datetime.now(UTC)
    old = [
        Reminder(
            agent=nova, workspace=team_a, conversation_id=None, text=f"Day {n}",
            due_at=now - timedelta(days=n), status=Reminder.Status.SENT,
        )
        for n in range(1, 251)
    ]  # fmt: skip
    coming = reminders.set_reminder(nova, team_a, "Renew the lease", now + timedelta(days=1))
    for row in old:
        row.conversation_id = coming.conversation_id
    Reminder.objects.bulk_create(old)
    listed = api(alice).get("/api/v1/reminders/").json()["results"]
    assert listed[0]["id"] == str(coming.id)
    assert listed[1]["text"] == "Day 1"  # then the rest, newest first


def test_stopping_a_loop_cancels_the_iteration_it_had_queued(alice, team_a, nova, api):
    """Stopped, the loop gives its agent no more work: not even the iteration still waiting."""
    loop = loops.start_loop(alice, nova, team_a, "Tidy the backlog")
    assert loops.advance_loops(now=timezone.now()) == 1
    stopped = api(alice).patch(f"/api/v1/loops/{loop.id}/", {"status": "stopped"}, format="json")
    assert stopped.status_code == 200
    assert Task.objects.get().status == "cancelled"


def test_an_iteration_not_started_by_the_deadline_is_not_started_after_it(alice, team_a, nova):
    """Nova is offline past the loop's deadline: the loop stops at its deadline, and its
    queued iteration is cancelled rather than run whenever Nova is back."""
    now = timezone.now()
    loop = loops.start_loop(
        alice, nova, team_a, "Watch the queue", deadline=now + timedelta(hours=1), now=now
    )
    loops.advance_loops(now=now)
    assert loops.advance_loops(now=now + timedelta(hours=2)) == 1
    loop.refresh_from_db()
    assert (loop.status, loop.stop_reason) == ("stopped", "Its deadline passed.")
    assert Task.objects.get().status == "cancelled"


def test_a_reminder_sent_late_after_downtime_says_when_it_was_due(alice, team_a, nova):
    """The worker was down all morning: "Call the bank" still arrives, once, but says it was
    due at nine (in Alice's time zone), not as if nine were now."""
    update_profile(alice, zone_name="Europe/Lisbon")
    due = datetime(2026, 12, 4, 9, 0, tzinfo=UTC)  # 09:00 in Lisbon in December
    reminders.set_reminder(nova, team_a, "Call the bank", due, user=alice, now=T0)
    assert reminders.fire_due_reminders(now=due + timedelta(hours=5)) == 1
    (sent,) = Message.objects.filter(body__startswith="⏰")
    assert sent.body == "⏰ Reminder: Call the bank\n\n(Due Fri 4 Dec, 09:00; sent late.)"


def test_an_agent_cancels_only_the_reminders_of_the_workspace_it_is_asked_in(
    alice, charlie, team_a, nova
):
    """Nova appears in Alice's workspace with Charlie too: asked there, it cannot cancel the
    reminder it set for Alice in team A (reminder_list there does not show it either)."""
    shared = workspace_actions.create_team_workspace(alice, "Shared")
    _, token = workspace_actions.create_invitation(shared.memberships.get(user=alice))
    workspace_actions.accept_invitation(charlie, token)
    room = create_conversation(alice, shared, kind="channel", title="room", agent_ids=[nova.id])
    reminder = reminders.set_reminder(nova, team_a, "Pay rent", T0 + timedelta(days=1), now=T0)
    held = held_message(nova, room, charlie, "Cancel that reminder.")
    refused = held.error("reminder_cancel", {"reminder_id": str(reminder.id)})
    assert refused["code"] == "reminder_not_found"
    reminder.refresh_from_db()
    assert reminder.status == "pending"
