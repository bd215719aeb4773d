"""The real django-q2 worker (ORM broker on PostgreSQL) runs our jobs with our settings, and
stops cleanly when a process manager stops it."""

import os
import signal
import subprocess
import sys
import time
from contextlib import contextmanager
from datetime import timedelta

import pytest
from django.utils import timezone
from django_q.models import Success
from django_q.tasks import async_task

from agents import actions as agent_actions
from conversations.actions import create_conversation, post_message
from conversations.models import Conversation
from tests.socket_helpers import database_url
from tests.waiting import wait_until
from work import memory
from work.models import MemoryItem

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


@contextmanager
def running_worker():
    """The worker as `make run` starts it; stopped after as a process manager stops it, which
    must end it cleanly (exit 0, no traceback)."""
    worker = subprocess.Popen(
        [sys.executable, "manage.py", "worker"],
        env=dict(os.environ, DATABASE_URL=database_url(), Q_WORKERS="1"),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    try:
        yield worker
    finally:
        # As honcho (Ctrl-C of `make run`) and systemd stop a service: the whole process group.
        # Plain qcluster hung forever here.
        os.killpg(worker.pid, signal.SIGTERM)
        try:
            code = worker.wait(timeout=20)
        except subprocess.TimeoutExpired:
            code = "hung"
            # Its cluster runs in a session of its own, led by the worker's child.
            found = subprocess.run(["pgrep", "-P", str(worker.pid)], capture_output=True)
            for pid in [worker.pid, *map(int, found.stdout.split())]:
                try:
                    os.killpg(pid, signal.SIGKILL)
                except ProcessLookupError:  # not a group's leader
                    os.kill(pid, signal.SIGKILL)
            worker.wait()
    assert code == 0
    assert b"Traceback" not in worker.stderr.read()


def run_job(function: str, **kwargs):
    """FUNCTION run by the worker; its result."""
    name = f"test-{function}-{time.monotonic_ns()}"
    async_task(function, task_name=name, **kwargs)
    done = wait_until(
        lambda: Success.objects.filter(name=name).first(),
        timeout=30,
        what=f"the worker to run {function}",
    )
    return done.result


def test_the_worker_abandons_an_idle_thread(alice, team_a):
    nova = agent_actions.create_agent(alice, name="Nova", backend="scripted")
    rex = agent_actions.create_agent(alice, name="Rex", backend="scripted")
    room = create_conversation(
        alice, team_a, kind="channel", title="room", agent_ids=[nova.id, rex.id]
    )
    post_message(nova, room, '<dm target="Rex">costs?</dm>')
    Conversation.objects.filter(kind="thread").update(
        last_message_at=timezone.now() - timedelta(days=1)
    )
    with running_worker():
        assert run_job("conversations.jobs.abandon_threads") == 1
        assert Conversation.objects.get(kind="thread").thread_status == "abandoned"


def test_the_worker_decays_and_consolidates_memory_at_the_time_it_is_given(alice, team_a, nova):
    faded = memory.remember(nova, team_a.id, "The old printer code is 4471")
    pinned = memory.remember(nova, team_a.id, "Always answer in English", pinned=True)
    first = memory.remember(nova, team_a.id, "Standup is at nine every weekday", family=True)
    memory.remember(nova, team_a.id, "Standup is at nine, every weekday", family=True)
    later = timezone.now() + 8 * memory.HALF_LIFE  # strength 0.5**8, under the floor
    with running_worker():
        assert run_job("work.jobs.decay_memories") == 0  # today: nothing has faded yet
        assert run_job("work.jobs.consolidate_family_memory", now=later) == 1
        assert run_job("work.jobs.decay_memories", now=later) == 2  # the item and the family one
    archived = dict(
        MemoryItem.objects.filter(archived_at__isnull=False).values_list("pk", "archived_reason")
    )
    assert archived[faded.pk] == "decayed" and pinned.pk not in archived
    assert list(archived.values()).count("merged") == 1 and first.pk in archived
