"""Probes of a routine changed by its owner while the scheduler runs it: the scheduler holds the
routine's row for the whole of a run (``core.sweeps``, SKIP LOCKED); a change or a removal made
meanwhile waits for the run and then sees what it did. Real PostgreSQL, one connection per
thread; time is passed explicitly."""

import threading
from datetime import UTC, datetime, timedelta

import pytest
from django.db import connection, transaction

from conversations.models import Task
from routines import actions
from routines.models import Routine, RoutineRun
from tests.concurrency import sessions_waiting_on_me
from tests.waiting import wait_until

pytestmark = pytest.mark.django_db(transaction=True)

T0 = datetime(2026, 12, 3, 8, 2, tzinfo=UTC)


def every_hour(alice, nova, workspace):
    return actions.create_routine(
        alice, nova, workspace, name="Inbox sweep", instructions="Sweep the inbox.",
        interval_minutes=60, now=T0,
    )  # fmt: skip


def while_it_runs(routine, now, change):
    """The scheduler runs ROUTINE's slot due by NOW as its sweep does (the row locked, in one
    transaction); meanwhile another connection calls CHANGE(the routine as it loaded it), which
    is let through once it waits for the run. What CHANGE returned or raised."""
    loaded = Routine.objects.get(pk=routine.pk)  # the request read it before the run began
    outcome = []

    def request():
        try:
            outcome.append(change(loaded))
        except Exception as exc:
            outcome.append(exc)
        finally:
            connection.close()

    thread = threading.Thread(target=request)
    with transaction.atomic():
        running = Routine.objects.select_for_update().get(pk=routine.pk)
        assert actions._run(running, now) == 1
        thread.start()
        wait_until(
            lambda: sessions_waiting_on_me() or not thread.is_alive(),
            what="the change waiting for the run",
        )
    thread.join(timeout=20)
    (result,) = outcome
    return result


def test_a_routine_deleted_while_its_run_is_made_leaves_no_work_behind(alice, team_a, nova):
    """Alice deletes the routine as the scheduler turns its slot into a task: the delete goes
    through, and the task, not picked up yet, is not done for a routine that is gone."""
    routine = every_hour(alice, nova, team_a)
    result = while_it_runs(
        routine, T0 + timedelta(hours=1), lambda loaded: actions.delete_routine(alice, loaded)
    )
    assert result is None
    assert not Routine.objects.exists() and not RoutineRun.objects.exists()
    task = Task.objects.get()
    assert task.status == "cancelled" and "was deleted" in task.error


def test_a_routine_paused_while_its_run_is_made_does_not_run_it(alice, team_a, nova):
    routine = every_hour(alice, nova, team_a)
    now = T0 + timedelta(hours=1)
    while_it_runs(
        routine, now, lambda loaded: actions.update_routine(alice, loaded, enabled=False, now=now)
    )
    routine.refresh_from_db()
    assert (routine.enabled, routine.next_run_at, routine.last_run_at) == (False, None, now)
    task = Task.objects.get()
    assert task.status == "cancelled" and "was paused" in task.error


def test_a_routine_renamed_while_it_runs_keeps_what_the_run_recorded(alice, team_a, nova):
    """A rename loaded before the run does not put back the slot the run moved past (which
    would make it due again) nor its last run."""
    routine = every_hour(alice, nova, team_a)
    now = T0 + timedelta(hours=1)
    renamed = while_it_runs(
        routine, now, lambda loaded: actions.update_routine(alice, loaded, name="Mail sweep")
    )
    routine.refresh_from_db()
    assert (routine.name, routine.last_run_at, routine.next_run_at) == (
        "Mail sweep",
        now,
        T0 + timedelta(hours=2),
    )
    assert (renamed.last_run_at, renamed.next_run_at) == (now, T0 + timedelta(hours=2))
    assert Task.objects.get().status == "queued"
