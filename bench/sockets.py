"""Many sockets on one daphne (issue 27, target 3): memory, idle CPU, fan-out, mass close.

    .venv/bin/python -m bench.sockets                   # 1,000 agent + 1,000 browser sockets
    .venv/bin/python -m bench.sockets --sockets 300 --idle 20 --messages 5

On one daphne (started as the Procfile starts it): M idle agent sockets (M agents of one owner,
one socket each), then M browser sockets of another person (one logged-in session each), each
kind opened in one burst. Daphne's resident memory before and after each burst gives KB per
socket. Then ARGS.idle seconds with the clients' heartbeats (agents every 20 s, browsers' ping
every 25 s, as the bridge and app.js send them): daphne's CPU; then a third as long with the
browsers' pings alone, to tell the agents' heartbeats apart. Then fan-out: the person posts
into a channel that all M of their browser sockets watch; each socket's time from the POST to the
message's live event. Last, every socket closes at once (half say goodbye, half vanish) and the
channel layer's subscriptions in Redis are counted until none remain. It recreates the bench
database (bench/pipeline.py) and reports; it never fails on a missed target.
"""

import argparse
import asyncio
import itertools
import json
import resource
import time
from pathlib import Path

import websockets

from bench import pipeline
from bench.pipeline import Daphne, percentile, verdict
from bench.turns import open_browser, session_cookie

TARGET_KB = 60  # per socket, either kind
TARGET_FANOUT_P99_MS = 500
OPEN_TIMEOUT = 120  # a burst of a thousand connects queues at the server; none should give up


def build_cast(m: int) -> dict:
    """M agents of Bob's with a live session each; Alice with M logged-in browser sessions, her
    API token, and a channel of her workspace with no agent in it."""
    from django.db import transaction

    from agents import actions as agent_actions
    from conversations.actions import create_conversation
    from workspaces.models import User

    scene = pipeline.create_scene([], username="alice")
    with transaction.atomic():  # one commit: the cast is built in seconds
        bob = User.objects.create_user("bob", "bob@example.com", "bench-password-123456")
        agents, tokens = [], []
        for i in range(m):
            agent = agent_actions.create_agent(
                bob, name=f"Idle {i}", handle=f"idle-{i}", backend="scripted"
            )
            _, key = agent_actions.create_agent_key(agent)
            _, token = agent_actions.open_agent_session(key)
            agents.append(agent.id)
            tokens.append(token)
        cookies = [session_cookie(scene.user) for _ in range(m)]
    channel = create_conversation(scene.user, scene.workspace, kind="channel", title="fan-out")
    return {
        "agent_ids": agents,
        "tokens": tokens,
        "cookies": cookies,
        "channel": channel,
        "person_token": scene.person_token,
    }


async def open_agent(server: Daphne, token: str):
    ws = await websockets.connect(
        f"{server.ws_url}/ws/agent/",
        additional_headers={"Authorization": f"Bearer {token}"},
        open_timeout=OPEN_TIMEOUT,
        proxy=None,
        max_queue=None,
    )
    hello = json.loads(await asyncio.wait_for(ws.recv(), OPEN_TIMEOUT))
    assert hello["type"] == "hello", hello
    return ws


class Clients:
    """Every socket of the run, a reader on each, and when each browser saw which message."""

    def __init__(self):
        self.agents: list = []
        self.browsers: list = []
        self.readers: list[asyncio.Task] = []
        self.arrivals: dict[str, list[float]] = {}  # message body → arrival on each browser
        self.frames = 0
        self.kinds: dict[str, int] = {}  # frames the browsers received, by type
        self.errors: list[str] = []

    async def read(self, ws, browser: bool) -> None:
        try:
            async for raw in ws:
                now = time.perf_counter()
                self.frames += 1
                if browser:
                    kind = raw[: raw.find(",")]  # '{"type":"…"', as the server writes it first
                    self.kinds[kind] = self.kinds.get(kind, 0) + 1
                if browser and '"message.created"' in raw:
                    body = json.loads(raw)["message"]["body"]
                    self.arrivals.setdefault(body, []).append(now)
                elif '"error"' in raw:
                    self.errors.append(raw[:300])
        except websockets.ConnectionClosed:
            pass

    async def open_burst(self, opener, credentials, browser: bool) -> dict:
        """Open one socket per credential, all at once: seconds taken and failures."""
        start = time.perf_counter()
        results = await asyncio.gather(*(opener(c) for c in credentials), return_exceptions=True)
        elapsed = time.perf_counter() - start
        opened = [r for r in results if not isinstance(r, BaseException)]
        failed = [r for r in results if isinstance(r, BaseException)]
        (self.browsers if browser else self.agents).extend(opened)
        self.readers += [asyncio.create_task(self.read(ws, browser)) for ws in opened]
        return {
            "opened": len(opened),
            "failed": len(failed),
            "seconds": elapsed,
            "why": sorted({f"{type(f).__name__}: {f}"[:120] for f in failed})[:3],
        }


def rss_kb(pid: int) -> int:
    """Resident memory of process PID, in KB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError("no VmRSS")


async def settled_rss(pid: int) -> int:
    """RSS once the server has finished what the last burst started."""
    await asyncio.sleep(3)
    return rss_kb(pid)


async def heartbeats(sockets, frame: dict, period: float, until: float) -> int:
    """Each socket sends FRAME every PERIOD seconds, spread evenly, until UNTIL: frames sent."""
    raw = json.dumps(frame)
    interval = period / max(1, len(sockets))
    start = time.perf_counter()
    sent = 0
    for n in itertools.count():
        due = start + n * interval
        if due >= until:
            return sent
        await asyncio.sleep(max(0.0, due - time.perf_counter()))
        try:
            await sockets[n % len(sockets)].send(raw)
            sent += 1
        except websockets.ConnectionClosed:
            pass


def subscriptions() -> int:
    """Channel-layer subscriptions under the bench's prefix: each socket's own channel and the
    groups its sockets are in (the layer keeps who is in a group in the process itself)."""
    import redis

    client = redis.Redis.from_url(pipeline.REDIS_URL)
    return len(client.pubsub_channels(f"{pipeline.REDIS_PREFIX}:asgi:*"))


def log_errors(server: Daphne) -> list[str]:
    """Errors daphne logged: each as its message and the last line of its traceback."""
    log = Path(server.log.name).read_text(errors="replace")
    errors = []
    for line in log.splitlines():
        if '"level": "ERROR"' in line or '"level":"ERROR"' in line:
            try:
                entry = json.loads(line)
                exc = (entry.get("exc") or "").strip().splitlines()
                errors.append(f"{entry.get('msg')}: {exc[-1] if exc else ''}")
            except ValueError:
                errors.append(line)
        elif "Traceback" in line or "Too many connections" in line:
            errors.append(line)
    return errors


def own_cpu() -> float:
    return sum(resource.getrusage(resource.RUSAGE_SELF)[:2])


async def run(server: Daphne, cast: dict, args) -> dict:
    r: dict = {}
    pid = server.proc.pid
    clients = Clients()

    def agent(token):
        return open_agent(server, token)

    def browser(cookie):
        return open_browser(server, cookie, OPEN_TIMEOUT)

    try:
        # Every code path once, so the bursts measure sockets, not first imports and caches.
        warm = await asyncio.gather(
            *(agent(t) for t in cast["tokens"][:5]), *(browser(c) for c in cast["cookies"][:5])
        )
        await asyncio.gather(*(ws.close() for ws in warm))
        r["rss_start"] = await settled_rss(pid)

        print(f"opening {len(cast['tokens'])} agent sockets at once", flush=True)
        r["agents_open"] = await clients.open_burst(agent, cast["tokens"], browser=False)
        r["rss_agents"] = await settled_rss(pid)
        print(f"opening {len(cast['cookies'])} browser sockets at once", flush=True)
        r["browsers_open"] = await clients.open_burst(browser, cast["cookies"], browser=True)
        r["rss_browsers"] = await settled_rss(pid)
        r["members_open"] = await asyncio.to_thread(subscriptions)

        print(f"idle with heartbeats for {args.idle:.0f} s", flush=True)
        cpu, mine, frames = server.cpu_seconds(), own_cpu(), clients.frames
        start = time.perf_counter()
        until = start + args.idle
        sent = await asyncio.gather(
            heartbeats(clients.agents, {"type": "heartbeat"}, 20, until),
            heartbeats(clients.browsers, {"type": "ping"}, 25, until),
        )
        await asyncio.sleep(max(0.0, until - time.perf_counter()))
        elapsed = time.perf_counter() - start
        r["idle"] = {
            "seconds": elapsed,
            "cpu": (server.cpu_seconds() - cpu) / elapsed,
            "client_cpu": (own_cpu() - mine) / elapsed,
            "heartbeats": sent[0],
            "pings": sent[1],
            "frames_in": clients.frames - frames,
        }
        r["rss_idle"] = rss_kb(pid)
        # The same with the browsers' pings alone (agents silent for less than the 2 minutes that
        # make them offline): what is left of the first figure is the agents' heartbeats.
        cpu, start = server.cpu_seconds(), time.perf_counter()
        until = start + args.idle / 3
        await heartbeats(clients.browsers, {"type": "ping"}, 25, until)
        await asyncio.sleep(max(0.0, until - time.perf_counter()))
        r["idle"]["pings_cpu"] = (server.cpu_seconds() - cpu) / (time.perf_counter() - start)

        print(f"fan-out: {args.messages} messages to {len(clients.browsers)} browsers", flush=True)
        r["fanout"] = await fan_out(server, cast, clients, args)

        print("closing every socket at once", flush=True)
        r["close"] = await close_all(clients, cast)
        r["rss_closed"] = rss_kb(pid)
    finally:
        for task in clients.readers:
            task.cancel()
        await asyncio.gather(*clients.readers, return_exceptions=True)
    r["socket_errors"] = clients.errors
    r["kinds"] = clients.kinds
    return r


async def fan_out(server: Daphne, cast: dict, clients: Clients, args) -> dict:
    """ARGS.messages posts into the channel, one at a time: POST → live event on each browser."""
    path = f"/api/v1/conversations/{cast['channel'].id}/messages/"
    watchers = len(clients.browsers)
    latencies, per_message, responses, missing = [], [], [], 0
    async with pipeline.http_client(server.url, cast["person_token"]) as client:
        for k in range(args.messages + 1):  # the first warms the path, unmeasured
            body = f"fan-out {k}"
            sent = time.perf_counter()
            reply = await client.post(path, {"body": body})
            answered = time.perf_counter()
            if reply.status_code != 201:
                clients.errors.append(f"POST {reply.status_code}: {reply.text[:200]}")
                continue
            deadline = sent + 30
            while len(clients.arrivals.get(body, [])) < watchers:
                if time.perf_counter() > deadline:
                    break
                await asyncio.sleep(0.005)
            arrived = [(t - sent) * 1000 for t in clients.arrivals.get(body, [])]
            if k == 0:
                continue
            missing += watchers - len(arrived)
            latencies += arrived
            responses.append((answered - sent) * 1000)
            per_message.append(
                (
                    min(arrived, default=float("nan")),
                    percentile(arrived, 50),
                    percentile(arrived, 99),
                    max(arrived, default=float("nan")),
                )
            )
            await asyncio.sleep(1)
    return {
        "watchers": watchers,
        "messages": args.messages,
        "p50": percentile(latencies, 50),
        "p95": percentile(latencies, 95),
        "p99": percentile(latencies, 99),
        "max": max(latencies, default=float("nan")),
        "first_p50": percentile([m[0] for m in per_message], 50),
        "post_p50": percentile(responses, 50),
        "per_message": per_message,
        "missing": missing,
    }


async def close_all(clients: Clients, cast: dict) -> dict:
    """Every socket closes at once: half with a goodbye, half by vanishing (a network blip). Then
    the channel-layer subscriptions left in Redis, polled until none remain (or 60 s)."""
    from asgiref.sync import sync_to_async

    from agntchat.core import presence

    sockets = clients.agents + clients.browsers
    start = time.perf_counter()
    for ws in sockets[1::2]:
        ws.transport.abort()
    results = await asyncio.gather(*(ws.close() for ws in sockets[::2]), return_exceptions=True)
    closed = time.perf_counter() - start
    members = await asyncio.to_thread(subscriptions)
    while members and time.perf_counter() - start < 60:
        await asyncio.sleep(0.5)
        members = await asyncio.to_thread(subscriptions)
    emptied = time.perf_counter() - start

    async def online() -> int:
        return sum((await sync_to_async(presence.online)(cast["agent_ids"])).values())

    still_online = await online()
    while still_online and time.perf_counter() - start < 60:
        await asyncio.sleep(0.5)
        still_online = await online()
    offline = time.perf_counter() - start
    return {
        "sockets": len(sockets),
        "close_failures": sum(isinstance(x, BaseException) for x in results),
        "closed_s": closed,
        "members_left": members,
        "emptied_s": emptied,
        "still_online": still_online,
        "offline_s": offline,
    }


def report(r: dict, args, facts: dict, errors: list[str], load_end: str) -> None:
    a, b = r["agents_open"], r["browsers_open"]
    kb_agent = (r["rss_agents"] - r["rss_start"]) / max(1, a["opened"])
    kb_browser = (r["rss_browsers"] - r["rss_agents"]) / max(1, b["opened"])
    idle, fan, close = r["idle"], r["fanout"], r["close"]
    print()
    print("agntchat: many sockets on one daphne (issue 27, target 3)")
    print(
        f"machine: nproc={facts['nproc']}  Python {facts['python']}  PostgreSQL {facts['postgres']}"
        f"  Redis {facts['redis']}  load avg at start {facts['load']}, at end {load_end}"
    )
    print(f"code: commit {facts['commit']}; libs: {facts['libs']}")
    print(f"setup: one daphne as the Procfile starts it (DEBUG=0); {args.sockets} of each kind")
    print()
    for kind, burst in (("agent", a), ("browser", b)):
        print(
            f"{kind} sockets: {burst['opened']} opened in one burst in {burst['seconds']:.1f} s, "
            f"{burst['failed']} failed {burst['why'] or ''}"
        )
    print(
        f"daphne RSS: {r['rss_start'] / 1024:.0f} MB at start, {r['rss_agents'] / 1024:.0f} MB with "
        f"the agents, {r['rss_browsers'] / 1024:.0f} MB with the browsers too, "
        f"{r['rss_idle'] / 1024:.0f} MB after idling, {r['rss_closed'] / 1024:.0f} MB "
        f"after all closed; channel-layer subscriptions while open: {r['members_open']}"
    )
    print(
        f"idle {idle['seconds']:.0f} s: daphne {idle['cpu']:.1%} of a core; "
        f"{idle['heartbeats']} agent heartbeats + {idle['pings']} browser pings sent, "
        f"{idle['frames_in']} frames back; "
        f"{idle['cpu'] * idle['seconds'] / max(1, idle['heartbeats'] + idle['pings']) * 1000:.2f} ms"
        f" of daphne CPU per frame; this client {idle['client_cpu']:.1%}"
    )
    per_heartbeat = (idle["cpu"] - idle["pings_cpu"]) * idle["seconds"] / max(1, idle["heartbeats"])
    print(
        f"  with the browsers' pings alone: daphne {idle['pings_cpu']:.1%} of a core; so an "
        f"agent's heartbeat costs about {per_heartbeat * 1000:.1f} ms of daphne CPU"
    )
    print(
        f"fan-out: {fan['messages']} messages to {fan['watchers']} browser sockets; POST answered "
        f"p50 {fan['post_p50']:.0f} ms; first socket p50 {fan['first_p50']:.0f} ms; missing "
        f"{fan['missing']}; per message (first/p50/p99/max ms): "
        + ", ".join("/".join(f"{x:.0f}" for x in m) for m in fan["per_message"])
    )
    print(
        f"close: {close['sockets']} sockets at once ({close['close_failures']} close errors, "
        f"{close['closed_s']:.1f} s); subscriptions left {close['members_left']} after "
        f"{close['emptied_s']:.1f} s; agents still online {close['still_online']} after "
        f"{close['offline_s']:.1f} s; daphne log "
        f"errors {len(errors)}; error frames {len(r['socket_errors'])}"
    )
    print("frames at the browsers, by type:", r["kinds"])
    counted: dict[str, int] = {}
    for line in errors + r["socket_errors"]:
        counted[line[:300]] = counted.get(line[:300], 0) + 1
    for line, times in counted.items():
        print(f"   {times} x {line}")
    print()
    rows = [
        ("KB per agent socket", f"{kb_agent:.1f} KB", f"<= {TARGET_KB}", kb_agent <= TARGET_KB),
        (
            "KB per browser socket",
            f"{kb_browser:.1f} KB",
            f"<= {TARGET_KB}",
            kb_browser <= TARGET_KB,
        ),
        ("daphne CPU, idle with heartbeats", f"{idle['cpu']:.1%} of a core", "(reported)", None),
        (
            f"fan-out to {fan['watchers']} p50 / p95",
            f"{fan['p50']:.0f} / {fan['p95']:.0f} ms",
            "",
            None,
        ),
        (
            f"fan-out to {fan['watchers']} p99",
            f"{fan['p99']:.0f} ms",
            f"<= {TARGET_FANOUT_P99_MS} ms",
            fan["p99"] <= TARGET_FANOUT_P99_MS and not fan["missing"],
        ),
        (
            "subscriptions left after mass close",
            str(close["members_left"]),
            "0, no error logged",
            close["members_left"] == 0 and not errors,
        ),
    ]
    pipeline.print_table([(n, m, t, "" if ok is None else verdict(ok)) for n, m, t, ok in rows])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sockets", type=int, default=1000, help="sockets of each kind")
    parser.add_argument("--idle", type=float, default=60.0, help="seconds idle with heartbeats")
    parser.add_argument("--messages", type=int, default=10, help="fan-out messages")
    args = parser.parse_args()

    # Each socket is a descriptor here and one in daphne, which inherits this limit.
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    if hard < 2 * args.sockets + 200:
        print(f"warning: RLIMIT_NOFILE is {hard}, too few for {2 * args.sockets} sockets")

    pipeline.fresh_start()
    facts = pipeline.machine_facts()
    print(f"building {args.sockets} agents and {args.sockets} browser sessions", flush=True)
    cast = build_cast(args.sockets)
    pipeline.analyze()
    # The Procfile's: a burst of connects queues longer than daphne's default 5 s handshake.
    server = Daphne(args=("--websocket_connect_timeout", "20"))
    try:
        r = asyncio.run(run(server, cast, args))
        errors = log_errors(server)
    except BaseException:
        print(f"--- daphne log tail\n{server.log_tail()}")
        raise
    finally:
        server.stop()
    report(r, args, facts, errors, pipeline.load_average())


if __name__ == "__main__":
    main()
