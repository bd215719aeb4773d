"""An agent's scheduled work in a workspace its owner left (probe F1): when Alice removes Bob from
team A, his agent Rex's routines, pulse, loops and reminders there stop in the same moment and
say why; what Rex has elsewhere goes on, and so does everything of an agent only pinned
elsewhere (PRO-2). Time is passed explicitly where the scheduler reads it."""

from datetime import timedelta

import pytest
from django.utils import timezone

from agents import actions as agent_actions
from conversations.models import Message, Task
from routines import actions, loops, reminders
from routines.models import Reminder
from workspaces import actions as workspace_actions

pytestmark = pytest.mark.django_db

REASON = "The owner of Rex left this workspace."


@pytest.fixture
def rex(bob):
    return agent_actions.create_agent(bob, name="Rex", backend="scripted")


def set_up_everything(person, agent, workspace, now):
    """A routine, a pulse, a loop with its first iteration running, and a reminder: each of the
    scheduled kinds, for AGENT in WORKSPACE."""
    routine = actions.create_routine(
        person, agent, workspace, name="Digest", instructions="Summarise the channel.",
        interval_minutes=60, now=now,
    )  # fmt: skip
    pulse = actions.create_routine(
        person, agent, workspace, name="", instructions="", interval_minutes=60,
        checklist=["Failed deploys"], now=now,
    )  # fmt: skip
    loop = loops.start_loop(person, agent, workspace, "Tidy the backlog", now=now)
    assert loops.advance_loops(now=now) == 1  # its first iteration is a queued task
    reminder = reminders.set_reminder(
        agent, workspace, "Send the report", now + timedelta(hours=2), user=person, now=now
    )
    return routine, pulse, loop, reminder


def test_removing_the_owner_stops_their_agents_scheduled_work_there_saying_why(
    alice, bob, team_a, rex, api
):
    now = timezone.now()
    routine, pulse, loop, reminder = set_up_everything(bob, rex, team_a, now)
    personal = bob.memberships.get(workspace__kind="personal").workspace
    at_home = actions.create_routine(
        bob, rex, personal, name="Home", instructions="Water the plants.", interval_minutes=60,
        now=now,
    )  # fmt: skip

    workspace_actions.remove_member(
        team_a.memberships.get(user=alice), team_a.memberships.get(user=bob)
    )

    for paused in (routine, pulse):
        paused.refresh_from_db()
        assert (paused.enabled, paused.next_run_at) == (False, None)
        assert paused.paused_reason == REASON
    loop.refresh_from_db()
    assert (loop.status, loop.stop_reason, loop.next_run_at) == ("stopped", REASON, None)
    reminder.refresh_from_db()
    assert reminder.status == "cancelled"
    shown = api(bob).get(f"/api/v1/routines/{routine.id}/").json()
    assert (shown["enabled"], shown["pausedReason"]) == (False, REASON)
    # Elsewhere Rex's routine goes on.
    at_home.refresh_from_db()
    assert at_home.enabled and at_home.paused_reason == ""

    # Nothing more is given or posted in team A: only the routine at home runs.
    queued = set(Task.objects.values_list("pk", flat=True))
    later = now + timedelta(days=1)
    assert actions.run_due_routines(now=later) == 1
    assert loops.advance_loops(now=later) == 0
    assert reminders.fire_due_reminders(now=later) == 0
    (new_task,) = Task.objects.exclude(pk__in=queued)
    assert new_task.workspace_id == personal.id
    assert not Message.objects.filter(body__startswith="⏰").exists()
    # The loop's running iteration was cancelled with the rest of Rex's work there.
    assert set(Task.objects.filter(workspace=team_a).values_list("status", flat=True)) == {
        "cancelled"
    }


def test_back_in_the_workspace_the_owner_enables_a_routine_again_and_its_reason_goes(
    alice, bob, team_a, rex, client
):
    now = timezone.now()
    routine = actions.create_routine(
        bob, rex, team_a, name="Digest", instructions="Summarise the channel.",
        interval_minutes=60, now=now,
    )  # fmt: skip
    workspace_actions.leave_workspace(team_a.memberships.get(user=bob))
    _, token = workspace_actions.create_invitation(team_a.memberships.get(user=alice))
    workspace_actions.accept_invitation(bob, token)
    routine.refresh_from_db()
    assert not routine.enabled  # kept as it was, until its owner says so
    client.force_login(bob)
    page = client.get(f"/w/{team_a.id}/agents/{rex.id}/routines/{routine.id}/")
    assert "The owner of Rex left this workspace." in page.content.decode()

    actions.update_routine(bob, routine, enabled=True, now=now)
    routine.refresh_from_db()
    assert (routine.enabled, routine.paused_reason) == (True, "")
    assert actions.run_due_routines(now=now + timedelta(hours=1)) == 1
    assert Task.objects.get().workspace == team_a


def test_an_agent_pinned_elsewhere_keeps_what_was_set_up_in_the_workspace(alice, team_a, nova):
    """Its owner is still a member: pins move where it appears, not where its routines run."""
    now = timezone.now()
    routine, pulse, loop, reminder = set_up_everything(alice, nova, team_a, now)
    elsewhere = workspace_actions.create_team_workspace(alice, "Elsewhere")
    agent_actions.set_agent_pins(nova, [elsewhere.id])
    for row in (routine, pulse, loop, reminder):
        row.refresh_from_db()
    assert routine.enabled and pulse.enabled and routine.paused_reason == ""
    assert (loop.status, reminder.status) == ("running", "pending")


def test_a_reminder_due_after_its_owner_left_is_cancelled_not_posted(alice, bob, team_a, rex):
    """One set at the very moment its owner left (after the clean-up read the pending ones):
    the sweep checks the owner still belongs where it would post."""
    now = timezone.now()
    reminder = reminders.set_reminder(
        rex, team_a, "Send the report", now + timedelta(minutes=5), user=bob, now=now
    )
    workspace_actions.leave_workspace(team_a.memberships.get(user=bob))
    Reminder.objects.filter(pk=reminder.pk).update(status=Reminder.Status.PENDING)

    assert reminders.fire_due_reminders(now=now + timedelta(minutes=6)) == 0
    reminder.refresh_from_db()
    assert (reminder.status, reminder.message_id) == ("cancelled", None)
    assert not Message.objects.filter(body__startswith="⏰").exists()
    # And not tried again at the next sweep.
    assert not Reminder.objects.filter(status=Reminder.Status.PENDING).exists()
