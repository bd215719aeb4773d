"""Several nodes on this machine: the production layout (docs/operations.md) on loopback.

    HAProxy (HTTP + WebSocket) → daphne A, daphne B → PgBouncer (transaction mode) → PostgreSQL
                                  django-q2 worker clusters ↗            Redis (shared by all)

``serve`` starts it on a database of its own and prints the URL and how to stop it; ``bench``
measures scale-out (issue 27, target 2): messages/s posted through one node directly, then
through the balancer in front of two, and prints both figures and the ratio to 2 × one node's.

    .venv/bin/python -m bench.multi_node serve            # Ctrl-C stops everything
    .venv/bin/python -m bench.multi_node bench --seconds 15 --concurrency 16
    .venv/bin/python -m bench.multi_node bench --node-cpu 0.3   # each node held to 0.3 core

On a machine with fewer cores than the layout has parts (2 here: nodes, PostgreSQL, PgBouncer,
Redis, HAProxy and the load generator), one node already keeps it busy and a second has no core
to run on. ``--node-cpu`` holds each node to a share of one core (a cgroup of its own; root),
so the nodes are what limits the rate and the rest of the machine serves the shared parts: the
ratio is then the scale-out of the node tier.

Needs ``haproxy`` and ``pgbouncer`` (Debian: apt-get install haproxy pgbouncer), PostgreSQL on
127.0.0.1:5432 (user postgres, trust) and Redis on 127.0.0.1:6379, as the other benchmarks do.
``Layout`` is also what tests/production/test_multi_node.py starts; it imports nothing of Django.
"""

import argparse
import asyncio
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import unquote, urlsplit, urlunsplit

ROOT = Path(__file__).resolve().parent.parent
PYTHON = sys.executable


def missing_programs() -> list[str]:
    """What this layout needs and this machine lacks (Debian package names)."""
    return [name for name in ("haproxy", "pgbouncer") if not _which(name)]


def _which(name: str) -> str | None:
    return shutil.which(name) or next(
        (str(p) for p in (Path("/usr/sbin") / name, Path("/sbin") / name) if p.exists()), None
    )


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for_port(port: int, proc: subprocess.Popen, what: str, log: Path, timeout=60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited ({proc.returncode}): {log.read_text()[-3000:]}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"{what} not listening on {port} after {timeout} s")


def haproxy_config(port: int, nodes: dict[str, int], admin_socket: Path) -> str:
    servers = "\n".join(
        f"  server {name} 127.0.0.1:{node_port} check inter 500ms fall 1 rise 2"
        for name, node_port in nodes.items()
    )
    return f"""\
global
  maxconn 4000
  # The runtime API: drain a node (`disable server nodes/a`) before stopping it.
  stats socket {admin_socket} mode 600 level admin

defaults
  mode http
  option http-server-close
  timeout connect 2s
  timeout client 60s
  timeout server 60s
  # An upgraded connection (a WebSocket) lives on the tunnel timeout, not the server's: agent
  # and browser sockets send a heartbeat every 20 s, so an hour is only a bound on dead peers.
  timeout tunnel 1h
  timeout client-fin 5s
  # A slow client (headers, then a body byte a second) gets 408 after 10 s: daphne itself never
  # gives up on a request still arriving (Twisted's 60 s idle timeout restarts at every byte), so
  # the bound is here. Buffering the request makes the timeout cover its body too.
  timeout http-request 10s
  option http-buffer-request
  # A node that refuses the connection (just killed) costs the client nothing: another is tried.
  retries 3
  option redispatch 1

frontend web
  bind 127.0.0.1:{port}
  # daphne --proxy-headers takes the client address from X-Forwarded-For (sign-in lockout per
  # address): set to the connection's own, never appended to what a client sent.
  http-request set-header X-Forwarded-For %[src]
  default_backend nodes

backend nodes
  balance roundrobin
  # A node is in while it answers /livez (a store down for every node is said by their 503s).
  option httpchk
  http-check send meth GET uri /livez hdr Host 127.0.0.1
{servers}
"""


def pgbouncer_config(port: int, upstream_host: str, upstream_port: int, dir: Path) -> str:
    return f"""\
[databases]
; Every database of the upstream server, by the name the client asks for. A transaction pooler
; refuses the startup options Django would send (random_page_cost): set them per server
; connection here (or ALTER DATABASE … SET in production).
* = host={upstream_host} port={upstream_port} connect_query='SET random_page_cost = 1.1'

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = {port}
unix_socket_dir =
auth_type = trust
auth_file = {dir}/userlist.txt
pool_mode = transaction
max_client_conn = 2000
default_pool_size = 40
server_reset_query =
ignore_startup_parameters = extra_float_digits
; Django opens a connection per request behind a transaction pooler: one log line each is noise.
log_connections = 0
log_disconnections = 0
"""


@dataclass
class Layout:
    """Two (or N) daphne nodes and worker clusters behind HAProxy, on PgBouncer in transaction
    mode in front of DATABASE_URL's server, sharing REDIS_URL. ``start()``; ``stop()``."""

    database_url: str  # direct, to PostgreSQL: PgBouncer is put in front of it
    dir: Path
    nodes: int = 2
    workers: int = 2
    env: dict = field(default_factory=dict)  # extra environment of nodes and workers
    procs: dict = field(default_factory=dict)  # name → Popen
    ports: dict = field(default_factory=dict)  # name → port

    @property
    def node_names(self) -> list[str]:
        return [chr(ord("a") + i) for i in range(self.nodes)]

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.ports['balancer']}"

    def node_url(self, name: str) -> str:
        return f"http://127.0.0.1:{self.ports[name]}"

    @property
    def pooled_database_url(self) -> str:
        parts = urlsplit(self.database_url)
        user = parts.username or "postgres"
        return urlunsplit(
            (parts.scheme, f"{user}@127.0.0.1:{self.ports['pgbouncer']}", parts.path, "", "")
        )

    def app_env(self) -> dict:
        return dict(
            os.environ,
            DATABASE_URL=self.pooled_database_url,
            DB_POOLER="transaction",
            **self.env,
        )

    # --- processes -----------------------------------------------------------------------

    def start(self) -> "Layout":
        if missing := missing_programs():
            raise RuntimeError("install " + " ".join(missing))
        self.dir.mkdir(parents=True, exist_ok=True)
        try:
            self.start_pgbouncer()
            for name in self.node_names:
                self.start_node(name)
            for n in range(self.workers):
                self.start_worker(f"worker{n + 1}")
            self.start_balancer()
        except BaseException:
            self.stop()
            raise
        return self

    def start_pgbouncer(self) -> None:
        parts = urlsplit(self.database_url)
        # The host as written: a socket directory (the embedded server's) is %-quoted, and
        # urlsplit's hostname would lower-case it.
        netloc = parts.netloc.rpartition("@")[2]
        host = unquote(netloc.rpartition(":")[0] if parts.port else netloc) or "127.0.0.1"
        port = self.ports["pgbouncer"] = free_port()
        (self.dir / "userlist.txt").write_text(f'"{parts.username or "postgres"}" ""\n')
        ini = self.dir / "pgbouncer.ini"
        ini.write_text(pgbouncer_config(port, host, parts.port or 5432, self.dir))
        command = [_which("pgbouncer"), str(ini)]
        if os.geteuid() == 0:  # PgBouncer refuses to run as root: it drops to another user,
            # the one that owns the server's socket directory when it is reached by one (the
            # embedded server's), so that it may enter it.
            command[1:1] = ["-u", _pooler_user(host)]
            for path in (self.dir, ini, self.dir / "userlist.txt"):
                path.chmod(0o755 if path.is_dir() else 0o644)
        self.spawn("pgbouncer", command)
        wait_for_port(port, self.procs["pgbouncer"], "pgbouncer", self.log("pgbouncer"))

    def start_node(self, name: str) -> None:
        port = self.ports.setdefault(name, free_port())
        self.spawn(
            name,
            [
                PYTHON,
                "-m",
                "daphne",
                "-b",
                "127.0.0.1",
                "-p",
                str(port),
                "--proxy-headers",
                "--websocket-max-message-size",
                str(4 * 1024 * 1024),
                "--websocket-max-frame-size",
                str(4 * 1024 * 1024),
                "--websocket_connect_timeout",
                "20",
                "agntchat.asgi:application",
            ],
            env=self.app_env(),
        )
        wait_for_port(port, self.procs[name], f"daphne {name}", self.log(name))

    def start_worker(self, name: str) -> None:
        self.spawn(
            name,
            [PYTHON, "manage.py", "worker"],
            env=dict(self.app_env(), Q_WORKERS=self.env.get("Q_WORKERS", "1")),
        )

    def start_balancer(self) -> None:
        port = self.ports["balancer"] = free_port()
        config = self.dir / "haproxy.cfg"
        nodes = {name: self.ports[name] for name in self.node_names}
        config.write_text(haproxy_config(port, nodes, self.dir / "haproxy.sock"))
        checked = subprocess.run(
            [_which("haproxy"), "-c", "-q", "-f", str(config)], capture_output=True, text=True
        )
        if checked.returncode:
            raise RuntimeError(f"haproxy refused its configuration: {checked.stderr}")
        self.spawn("balancer", [_which("haproxy"), "-db", "-f", str(config)])
        wait_for_port(port, self.procs["balancer"], "haproxy", self.log("balancer"))
        self.wait_until_serving(*self.node_names)

    def log(self, name: str) -> Path:
        return self.dir / f"{name}.log"

    def spawn(self, name: str, command: list, **options) -> None:
        """NAME running COMMAND, its output in NAME.log (a pipe nobody reads would fill up and
        stall it)."""
        # Each in a session of its own: Ctrl-C in a terminal (a signal to the whole foreground
        # group) reaches this script alone, which stops them in order (stop()), workers before
        # the pooler they finish their jobs through.
        with self.log(name).open("ab") as log:
            self.procs[name] = subprocess.Popen(
                command,
                cwd=ROOT,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                **options,
            )

    def balancer_command(self, command: str) -> str:
        """One command of HAProxy's runtime API (``show servers state``, ``disable server
        nodes/b``…); its answer."""
        with socket.socket(socket.AF_UNIX) as s:
            s.connect(str(self.dir / "haproxy.sock"))
            s.sendall(command.encode() + b"\n")
            chunks = []
            while chunk := s.recv(65536):
                chunks.append(chunk)
        return b"".join(chunks).decode()

    def serving(self) -> set[str]:
        """The nodes the balancer sends requests to now (up and not drained)."""
        state = self.balancer_command("show servers state nodes").splitlines()
        # Columns: be_id be_name srv_id srv_name srv_addr srv_op_state srv_admin_state …
        return {
            line.split()[3]
            for line in state[2:]
            if line.strip() and line.split()[5] == "2" and line.split()[6] == "0"
        }

    def wait_until_serving(self, *names: str, timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        while set(names) - self.serving():
            if time.monotonic() > deadline:
                raise RuntimeError(f"the balancer does not serve {names}: {self.serving()}")
            time.sleep(0.1)

    def kill(self, name: str) -> None:
        """NAME dies at once (SIGKILL): nothing released, no goodbye to anyone."""
        self.procs[name].kill()
        self.procs[name].wait()

    def stop(self) -> None:
        for name, proc in reversed(list(self.procs.items())):
            if proc.poll() is not None:
                continue
            if name.startswith("worker"):
                os.killpg(proc.pid, signal.SIGTERM)
            else:
                proc.terminate()
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                if name.startswith("worker"):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.kill()
                proc.wait()
        self.procs.clear()


def _pooler_user(host: str) -> str:
    import pwd

    if host.startswith("/") and (owner := os.stat(host).st_uid) != 0:
        return pwd.getpwuid(owner).pw_name
    try:
        return pwd.getpwnam("postgres").pw_name
    except KeyError:
        return "nobody"


# --- the script ------------------------------------------------------------------------------

BASE_URL = os.environ.get("BENCH_PG", "postgres://postgres@127.0.0.1:5432")
REDIS_URL = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")

SEED = """
from workspaces import actions as w
from conversations.actions import create_conversation
from workspaces.models import User
import json
person = User.objects.create_user("ops", "ops@example.com", "ops-password-123456")
space = w.create_team_workspace(person, "Ops")
conversation = create_conversation(person, space, kind="channel", title="load")
_, token = w.issue_api_token(person)
print(json.dumps({"token": token, "conversation": str(conversation.id)}))
"""


def prepare_database(name: str) -> dict:
    """Database NAME recreated, migrated, and seeded with a person, a channel and a token."""
    import psycopg

    with psycopg.connect(f"{BASE_URL}/postgres", autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}"')
    env = dict(os.environ, DATABASE_URL=f"{BASE_URL}/{name}", REDIS_URL=REDIS_URL)
    env.setdefault("REDIS_PREFIX", name)
    subprocess.run(
        [PYTHON, "manage.py", "migrate", "--noinput", "-v0"], cwd=ROOT, env=env, check=True
    )
    seeded = subprocess.run(
        [PYTHON, "manage.py", "shell", "-c", SEED],
        cwd=ROOT,
        env=env,
        check=True,
        capture_output=True,
        text=True,
    )
    return json.loads(seeded.stdout.strip().splitlines()[-1])


async def post_for(url: str, seed: dict, seconds: float, concurrency: int) -> float:
    """Messages/s posted to URL by CONCURRENCY clients for SECONDS (after a short warm-up)."""
    import httpx

    path = f"/api/v1/conversations/{seed['conversation']}/messages/"
    headers = {"Authorization": f"Bearer {seed['token']}"}
    counted = [0]
    measuring = [False]
    stop_at = time.monotonic() + 2 + seconds

    async def client():
        # One connection per client, as one browser or integration keeps one.
        async with httpx.AsyncClient(base_url=url, headers=headers, timeout=30) as http:
            n = 0
            while time.monotonic() < stop_at:
                n += 1
                response = await http.post(path, json={"body": f"load {n}"})
                if response.status_code != 201:
                    raise RuntimeError(f"{response.status_code}: {response.text[:200]}")
                if measuring[0]:
                    counted[0] += 1

    async def clock():
        await asyncio.sleep(2)  # warm-up: connections opened, code paths hot
        measuring[0] = True

    await asyncio.gather(clock(), *(client() for _ in range(concurrency)))
    return counted[0] / seconds


def limit_cpu(pid: int, name: str, share: float) -> Path:
    """PID held to SHARE of one core, in a cgroup of its own (cgroup v1's cpu controller, or
    v2's); the group's directory, to remove once PID has ended."""
    v1 = Path("/sys/fs/cgroup/cpu")
    root = v1 if (v1 / "cgroup.procs").exists() else Path("/sys/fs/cgroup")
    group = root / f"agntchat-bench-{name}"
    group.mkdir(exist_ok=True)
    quota = str(int(share * 100_000))
    if root == v1:
        (group / "cpu.cfs_period_us").write_text("100000")
        (group / "cpu.cfs_quota_us").write_text(quota)
    else:
        (group / "cpu.max").write_text(f"{quota} 100000")
    (group / "cgroup.procs").write_text(str(pid))
    return group


def cpu_seconds(pids) -> float:
    """User + system CPU time used so far by PIDS (Linux /proc)."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0
    for pid in pids:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        total += int(fields[11]) + int(fields[12])
    return total / tick


def machine_busy() -> tuple[float, float]:
    """(busy, all) CPU seconds of the whole machine so far."""
    values = [int(v) for v in Path("/proc/stat").read_text().split("\n")[0].split()[1:]]
    idle = values[3] + values[4]
    return (sum(values) - idle) / os.sysconf("SC_CLK_TCK"), sum(values) / os.sysconf("SC_CLK_TCK")


def measured(layout, names, url, seed, args) -> tuple[float, float, float]:
    """(messages/s, CPU ms of the nodes per message, share of the machine's CPU busy)."""
    pids = [layout.procs[name].pid for name in names]
    cpu_before, (busy_before, all_before) = cpu_seconds(pids), machine_busy()
    started = time.monotonic()
    rate = asyncio.run(post_for(url, seed, args.seconds, args.concurrency))
    elapsed = time.monotonic() - started
    cpu = cpu_seconds(pids) - cpu_before
    busy_after, all_after = machine_busy()
    posted = rate * elapsed  # about: the warm-up's messages are in the CPU time too
    return rate, 1000 * cpu / max(posted, 1), (busy_after - busy_before) / (all_after - all_before)


def bench(args) -> None:
    seed = prepare_database(args.database)
    # One person posts all of it: the throughput measured, not the per-person limit.
    env = {
        "REDIS_PREFIX": args.database,
        "REDIS_URL": REDIS_URL,
        "PERSON_POSTS_PER_MINUTE": "1000000000",
        "PERSON_POSTS_BURST": "1000000000",
    }
    with tempfile.TemporaryDirectory(prefix="agntchat-multi-node-") as tmp:
        layout = Layout(f"{BASE_URL}/{args.database}", Path(tmp), workers=0, env=env).start()
        groups = [
            limit_cpu(layout.procs[name].pid, name, args.node_cpu)
            for name in (layout.node_names if args.node_cpu else ())
        ]
        if groups:
            print(f"each node held to {args.node_cpu:g} of a core", flush=True)
        try:
            figures = {}
            cases = (
                ("one node (direct)", ["a"], layout.node_url("a")),
                ("two nodes (balancer)", ["a", "b"], layout.url),
            )
            for label, names, url in cases:
                runs = [measured(layout, names, url, seed, args) for _ in range(args.runs)]
                rate, cpu, busy = sorted(runs)[len(runs) // 2]
                figures[label] = rate
                print(
                    f"{label:22} {rate:8.1f} messages/s  (runs: "
                    + ", ".join(f"{r[0]:.1f}" for r in runs)
                    + f")  nodes' CPU {cpu:.1f} ms/message, machine {busy:.0%} busy",
                    flush=True,
                )
            one, two = figures.values()
            print(
                f"scale-out: {two / one:.2f} × one node's; target ≥ 1.60 (0.8 × 2) — "
                + ("PASS" if two >= 1.6 * one else "MISS")
            )
        finally:
            layout.stop()
            for group in groups:
                group.rmdir()


def serve(args) -> None:
    prepare_database(args.database)
    env = {"REDIS_PREFIX": args.database, "REDIS_URL": REDIS_URL}
    directory = Path(tempfile.mkdtemp(prefix="agntchat-multi-node-"))
    layout = Layout(f"{BASE_URL}/{args.database}", directory, env=env).start()
    print(
        f"agntchat on {layout.url}  (balancer; nodes "
        + ", ".join(f"{n} {layout.node_url(n)}" for n in layout.node_names)
        + f"; PgBouncer 127.0.0.1:{layout.ports['pgbouncer']}; configs in {directory})"
    )
    print(
        "Sign in as ops / ops-password-123456. Ctrl-C (or kill -TERM "
        f"{os.getpid()}) stops every process.",
        flush=True,
    )
    signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt))
    try:
        while all(p.poll() is None for p in layout.procs.values()):
            time.sleep(0.5)
        print("a process exited:", [n for n, p in layout.procs.items() if p.poll() is not None])
    except KeyboardInterrupt:
        pass
    finally:
        layout.stop()
        shutil.rmtree(directory, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("command", choices=["serve", "bench"])
    parser.add_argument("--database", default=os.environ.get("BENCH_DB", "agntchat_multi_node"))
    parser.add_argument("--seconds", type=float, default=10)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument(
        "--node-cpu", type=float, help="hold each node to this share of one core (root)"
    )
    args = parser.parse_args()
    if missing := missing_programs():
        sys.exit("needs " + " ".join(missing) + " (apt-get install -y " + " ".join(missing) + ")")
    serve(args) if args.command == "serve" else bench(args)


if __name__ == "__main__":
    main()
