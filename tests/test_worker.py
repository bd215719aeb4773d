"""The real django-q2 worker (ORM broker on PostgreSQL) runs our jobs with our settings, and
stops cleanly when a process manager stops it."""

import os
import signal
import subprocess
import sys
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

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


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
    worker = subprocess.Popen(
        [sys.executable, "manage.py", "worker"],
        env=dict(os.environ, DATABASE_URL=database_url(), Q_WORKERS="1"),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    try:
        async_task("conversations.jobs.abandon_threads", task_name="test-abandon")
        done = wait_until(
            lambda: Success.objects.filter(name="test-abandon").first(),
            timeout=30,
            what="the worker to run the job",
        )
        assert done.result == 1
        assert Conversation.objects.get(kind="thread").thread_status == "abandoned"
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
