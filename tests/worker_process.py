"""The real django-q2 worker in tests: started as `make run` starts it, jobs queued to it, and
stopped as a process manager stops it (which must end it cleanly)."""

import os
import signal
import subprocess
import sys
import time
from contextlib import contextmanager

from django_q.models import Success
from django_q.tasks import async_task

from agntchat.core.management.commands.worker import STOP_GRACE_SECONDS
from tests.socket_helpers import LoggedProcess, database_url
from tests.waiting import wait_until


@contextmanager
def running_worker():
    """The worker as `make run` starts it; stopped after as a process manager stops it, which
    must end it cleanly (exit 0, no traceback)."""
    worker = LoggedProcess(
        [sys.executable, "manage.py", "worker"],
        env=dict(os.environ, DATABASE_URL=database_url(), Q_WORKERS="1"),
        start_new_session=True,
    )
    try:
        yield worker
    finally:
        # As honcho (Ctrl-C of `make run`) and systemd stop a service: the whole process group.
        # Plain qcluster hung forever here.
        os.killpg(worker.pid, signal.SIGTERM)
        try:
            # The worker's own grace for the jobs in hand, and a margin: on a loaded machine a
            # cluster finishing its jobs took over 20 s here, well within what it is allowed.
            code = worker.wait(timeout=STOP_GRACE_SECONDS + 10)
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
    output = worker.communicate()[0]
    assert code == 0, output[-3000:]
    assert "Traceback" not in output


def queue_job(function: str, **kwargs) -> str:
    """FUNCTION queued for the worker; the name its result is found by (``job_result``)."""
    name = f"test-{function}-{time.monotonic_ns()}"
    async_task(function, task_name=name, **kwargs)
    return name


def job_result(name: str):
    done = wait_until(
        lambda: Success.objects.filter(name=name).first(),
        timeout=30,
        what=f"the worker to run {name}",
    )
    return done.result


def run_job(function: str, **kwargs):
    """FUNCTION run by the worker; its result."""
    return job_result(queue_job(function, **kwargs))
