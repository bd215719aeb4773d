"""Routines run by the real scheduler: several schedulers at once never run a slot twice (two
worker clusters; many connections racing), and a routine set up over REST becomes a task the
agent's real bridge answers, delivered in the DM of the routine's workspace."""

from datetime import timedelta

import pytest
from django.utils import timezone

from agents import actions as agent_actions
from conversations import tasks
from conversations.models import Message, Task
from routines import actions, loops, reminders
from routines.models import Routine, RoutineRun
from tests.concurrency import run_together
from tests.socket_helpers import Daphne, start_bridge
from tests.waiting import wait_until
from tests.work.tooling import claimed
from tests.worker_process import job_result, queue_job, run_job, running_worker

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


def many_routines(alice, team_a, count_per_agent=10):
    agents = [
        agent_actions.create_agent(
            alice, name=f"Runner {n}", handle=f"runner{n}", backend="scripted"
        )
        for n in range(3)
    ]
    start = timezone.now() - timedelta(hours=3)
    for agent in agents:
        for n in range(count_per_agent):
            actions.create_routine(
                alice,
                agent,
                team_a,
                name=f"r{n}",
                instructions=f"Check thing {n}.",
                interval_minutes=60,
                now=start,
            )
    return len(agents) * count_per_agent


def test_many_schedulers_at_once_run_each_slot_once(alice, team_a):
    total = many_routines(alice, team_a)
    now = timezone.now()
    results = run_together(lambda: actions.run_due_routines(now=now), [()] * 4, catching=Exception)
    errors = [result for result in results if isinstance(result, Exception)]
    assert errors == []
    assert sum(results) == total
    assert RoutineRun.objects.count() == total == Task.objects.count()
    assert all(run.skipped_count == 2 for run in RoutineRun.objects.all())


def test_two_worker_clusters_run_each_slot_once(alice, team_a):
    total = many_routines(alice, team_a)
    now = timezone.now()
    with running_worker(), running_worker():
        # Both queued at once: each cluster takes one, and they race over the same routines.
        names = [queue_job("routines.jobs.run_due_routines", now=now) for _ in range(2)]
        counts = [job_result(name) for name in names]
        assert run_job("routines.jobs.run_due_routines", now=now) == 0
    assert sum(counts) == total
    assert RoutineRun.objects.count() == total == Task.objects.count()


def test_a_routine_set_over_rest_is_answered_by_the_agents_bridge_in_its_dm(
    alice, team_a, nova, api, tmp_path
):
    made = api(alice).post(
        "/api/v1/routines/",
        {
            "agent": str(nova.id),
            "workspace": str(team_a.id),
            "name": "Numbers",
            "instructions": "Post the weekly numbers.",
            "intervalMinutes": 60,
        },
        format="json",
    )
    assert made.status_code == 201
    routine = Routine.objects.get(pk=made.json()["id"])
    server = Daphne()
    bridge = start_bridge(server, nova, tmp_path)
    try:
        with running_worker():
            later = timezone.now() + timedelta(hours=1, minutes=1)
            assert run_job("routines.jobs.run_due_routines", now=later) == 1
        relayed = wait_until(
            lambda: Message.objects.filter(
                conversation=routine.conversation, author_agent=nova
            ).first(),
            what="the routine's result in the DM",
            timeout=60,
        )
        assert "Post the weekly numbers." in relayed.body
        assert routine.conversation.workspace_id == team_a.id
        task = Task.objects.get()
        assert task.status == "completed" and task.conversation == routine.conversation
        runs = api(alice).get(f"/api/v1/routines/{routine.id}/runs/").json()["results"]
        assert [(r["taskId"], r["taskStatus"]) for r in runs] == [(str(task.id), "completed")]
    finally:
        bridge.terminate()
        bridge.communicate(timeout=10)
        server.stop()


def test_the_worker_fires_a_reminder_at_its_time_in_the_owners_dm(alice, team_a, nova):
    due = timezone.now() + timedelta(hours=2)
    reminder = reminders.set_reminder(nova, team_a, "Call the bank", due, user=alice)
    with running_worker():
        assert run_job("routines.jobs.fire_reminders", now=due - timedelta(seconds=1)) == 0
        assert run_job("routines.jobs.fire_reminders", now=due) == 1
    reminder.refresh_from_db()
    assert reminder.status == "sent" and reminder.message.conversation == reminder.conversation
    assert reminder.message.body == "⏰ Reminder: Call the bank"


def test_the_worker_starts_a_loops_iteration_and_stops_it_at_its_deadline(alice, team_a, nova):
    now = timezone.now()
    loop = loops.start_loop(
        alice, nova, team_a, "Keep the docs current", deadline=now + timedelta(hours=1), now=now
    )
    with running_worker():
        assert run_job("routines.jobs.advance_loops", now=now) == 1
        (task,) = Task.objects.all()
        assert "Keep the docs current" in task.instructions
        held = claimed(nova, "task")
        tasks.record_result(
            held.item_id, "failed", connection_id=held.connection_id, error="the bridge went away"
        )
        assert run_job("routines.jobs.advance_loops", now=now + timedelta(hours=2)) == 1
    loop.refresh_from_db()
    assert (loop.status, loop.stop_reason) == ("stopped", "Its deadline passed.")
    assert "the bridge went away" in loop.iterations.get().reason
