"""The embedded launcher: `make test` (--scratch) next to a running `make run` leaves it alone.

These start real embedded servers (no DATABASE_URL / REDIS_URL) in a folder of their own."""

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from types import SimpleNamespace

import psycopg
import pytest
import redis

from agntchat.core.embedded import postgres_running, stop_postgres

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def var_dir():
    """A data folder the embedded PostgreSQL can reach. Run as root, it drops to a user of its
    own, which cannot enter pytest's private tmp folders (mode 0700): use the checkout's var/."""
    (ROOT / "var").mkdir(exist_ok=True)
    folder = Path(tempfile.mkdtemp(prefix="test-embedded-", dir=ROOT / "var"))
    folder.chmod(0o755)
    yield folder / "var"
    shutil.rmtree(folder, ignore_errors=True)


# What a command under the launcher sees; with "serve" it then waits, as `make run` would,
# until Ctrl-C.
PROBE = """
import json, os, sys, psycopg, redis
with psycopg.connect(os.environ["DATABASE_URL"].replace("postgres://", "postgresql://")) as c:
    c.execute("SELECT 1")
redis.Redis.from_url(os.environ["REDIS_URL"]).ping()
print(json.dumps({k: os.environ.get(k) for k in ("DATABASE_URL", "REDIS_URL", "AGNTCHAT_VAR_DIR")}),
      flush=True)
if sys.argv[1:] == ["serve"]:
    try:
        sys.stdin.read()
    except KeyboardInterrupt:
        pass
"""


def launcher(var_dir: Path, *args: str, **popen) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL")}
    env["AGNTCHAT_VAR_DIR"] = str(var_dir)
    return subprocess.Popen(
        [sys.executable, "-m", "agntchat.core.embedded", *args],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        **popen,
    )


def healthy(urls: dict) -> bool:
    database_url = urls["DATABASE_URL"].replace("postgres://", "postgresql://")
    try:
        with psycopg.connect(database_url, connect_timeout=5) as conn:
            conn.execute("SELECT 1")
        return redis.Redis.from_url(urls["REDIS_URL"], socket_timeout=5).ping()
    except (psycopg.OperationalError, redis.ConnectionError):
        return False


def run_once(var_dir: Path, *args: str) -> tuple[dict, str]:
    proc = launcher(var_dir, *args, sys.executable, "-c", PROBE)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    return json.loads(out.splitlines()[-1]), err


@pytest.mark.timeout(240)
def test_a_scratch_run_next_to_a_running_instance_leaves_it_running(var_dir):
    # `make run`: its own session, as in a terminal, so that Ctrl-C can be sent to its group.
    running = launcher(
        var_dir, sys.executable, "-c", PROBE, "serve", stdin=subprocess.PIPE, start_new_session=True
    )
    try:
        served = json.loads(running.stdout.readline())
        assert healthy(served)

        # `make test`: servers and data of its own, in var/test-<pid>, gone afterwards.
        scratch, _ = run_once(var_dir, "--scratch")
        assert scratch["DATABASE_URL"] != served["DATABASE_URL"]
        assert scratch["REDIS_URL"] != served["REDIS_URL"]
        scratch_dir = Path(scratch["AGNTCHAT_VAR_DIR"])
        assert scratch_dir.parent == var_dir and scratch_dir.name.startswith("test-")
        assert not scratch_dir.exists()
        assert not healthy(scratch)  # its servers were stopped
        assert healthy(served)

        # A second plain launcher on the same data shares the running PostgreSQL and, since
        # it did not start it, leaves it running when it ends.
        shared, _ = run_once(var_dir)
        assert shared["DATABASE_URL"] == served["DATABASE_URL"]
        assert healthy(served)
        assert not list(var_dir.glob("test-*"))
    finally:
        # Ctrl-C in `make run`'s terminal: the whole group gets SIGINT.
        os.killpg(running.pid, signal.SIGINT)
        _, err = running.communicate(timeout=60)
    assert running.returncode == 0
    assert "Traceback" not in err, err
    assert not postgres_running(var_dir / "pg")
    assert not healthy(served)


def test_stopping_a_postgres_that_already_stopped_says_so_in_one_line(tmp_path, capsys):
    (tmp_path / "pg").mkdir()
    stop_postgres(SimpleNamespace(pgdata=tmp_path / "pg", system_user=None))
    assert "had already stopped" in capsys.readouterr().err
