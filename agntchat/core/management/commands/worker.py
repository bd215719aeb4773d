"""The job worker of the Procfile: django-q2's ``qcluster``, stopped cleanly.

Process managers stop a process by signalling its whole process group (honcho on Ctrl-C of
``make run``; systemd's default ``KillMode=control-group`` likewise). qcluster's own processes
then die while its main process is still telling them to stop, and it waits for them forever
(a multiprocessing Event's ``set()`` waits for every waiter to wake, dead ones included). So the
cluster runs in a session of its own, and a stop request reaches its main process alone, once.
"""

import os
import signal
import subprocess
import sys
import time

from django.core.management.base import BaseCommand

# How long the cluster may take to finish the jobs in hand before it is killed.
STOP_GRACE_SECONDS = 30


class Command(BaseCommand):
    help = "Run the job worker (django-q2's qcluster); SIGTERM or SIGINT stop it cleanly."

    def handle(self, *args, **options):
        # ``python -m django qcluster`` gets the qcluster settings (see DATABASES).
        cluster = subprocess.Popen(
            [sys.executable, "-m", "django", "qcluster"], start_new_session=True
        )
        stop_requested = []  # when

        def stop(signum, frame):
            if not stop_requested:
                stop_requested.append(time.monotonic())
                cluster.send_signal(signal.SIGTERM)

        signal.signal(signal.SIGTERM, stop)
        signal.signal(signal.SIGINT, stop)
        while True:
            try:
                code = cluster.wait(timeout=1)
                break
            except subprocess.TimeoutExpired:
                if stop_requested and time.monotonic() - stop_requested[0] > STOP_GRACE_SECONDS:
                    self.stderr.write("The job worker did not stop in time: killed.")
                    os.killpg(cluster.pid, signal.SIGKILL)
        sys.exit(code if code >= 0 else 1)
