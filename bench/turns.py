"""Platform overhead of an agent turn (issue 27, target 1): real daphne, PostgreSQL and Redis.

    .venv/bin/python -m bench.turns                  # 50 turns/s for 20 s
    .venv/bin/python -m bench.turns --seconds 10 --rate 20

A person posts through the REST API at a steady rate; a stand-in bridge on /ws/agent/ answers
each work frame at once with the frames the reference bridge sends (``post`` with
``ref = "work:<item id>"`` and ``replyTo``, then ``ack`` once ``posted``); the person's browser
socket on /ws/live/ receives the answer's ``message.created``. For every turn: POST sent → work
frame at the bridge → reply frame sent → the reply's live event at the browser, whole and by
leg. It recreates the bench database (bench/pipeline.py) and reports; it never fails on a
missed target.
"""

import argparse
import asyncio
import itertools
import json
import resource
import time

import websockets

from bench import pipeline
from bench.pipeline import Daphne, percentile, verdict

# Issue 27: a turn's platform overhead at 50 turns/s on this machine.
TARGET_P50_MS = 25
TARGET_P99_MS = 80


def session_cookie(user) -> str:
    """A logged-in browser's cookie for USER (a session row, as the login page makes)."""
    from django.test import Client

    client = Client()
    client.force_login(user)
    return f"sessionid={client.cookies['sessionid'].value}"


async def open_browser(server: Daphne, cookie: str, open_timeout: float = 20):
    """A browser's /ws/live/ socket: its session cookie, and the page's own Origin."""
    ws = await websockets.connect(
        f"{server.ws_url}/ws/live/",
        additional_headers={"Cookie": cookie},
        origin=f"http://127.0.0.1:{server.port}",
        open_timeout=open_timeout,
        proxy=None,
        max_queue=None,
    )
    hello = json.loads(await asyncio.wait_for(ws.recv(), open_timeout))
    assert hello["type"] == "hello", hello
    return ws


class Turns:
    """The clocks of every turn, keyed by the person's message body."""

    def __init__(self):
        self.sent: dict[str, float] = {}
        self.responded: dict[str, float] = {}  # the POST's response
        self.work: dict[str, float] = {}  # the work frame at the bridge
        self.replied: dict[str, float] = {}  # the reply's post frame sent
        self.posted: dict[str, float] = {}  # the server's `posted` answer at the bridge
        self.own_live: dict[str, float] = {}  # the person's message at the browser
        self.live: dict[str, float] = {}  # the agent's reply at the browser
        self.refs: dict[str, str] = {}  # ref → body
        self.errors: list[dict] = []
        self.duplicates = 0
        self.frames: dict[str, int] = {}  # frames by type, at the bridges and the browser


async def stand_in_bridge(ws, turns: Turns) -> None:
    """Answer every work frame at once, as the reference bridge does with a model that takes no
    time: post the reply under the item's ref, ack when the server says it is stored."""
    async for raw in ws:
        now = time.perf_counter()
        frame = json.loads(raw)
        kind = frame["type"]
        turns.frames[f"bridge {kind}"] = turns.frames.get(f"bridge {kind}", 0) + 1
        if kind == "work":
            message = frame["payload"]["message"]
            body = message["body"]
            if body in turns.work:
                turns.duplicates += 1
            turns.work[body] = now
            ref = f"work:{frame['id']}"
            turns.refs[ref] = body
            reply = {
                "type": "post",
                "conversationId": message["conversationId"],
                "body": f"re {body}",
                "replyTo": message["id"],
                "ref": ref,
                "notice": False,
            }
            await ws.send(json.dumps(reply))
            turns.replied[body] = time.perf_counter()
        elif kind == "posted" and frame.get("ref") in turns.refs:
            turns.posted[turns.refs[frame["ref"]]] = now
            await ws.send(json.dumps({"type": "ack", "id": frame["ref"].removeprefix("work:")}))
        elif kind == "error":
            turns.errors.append(frame)


async def browser(ws, turns: Turns) -> None:
    """Note when each message.created reaches the person's browser socket."""
    async for raw in ws:
        now = time.perf_counter()
        frame = json.loads(raw)
        turns.frames[f"browser {frame['type']}"] = (
            turns.frames.get(f"browser {frame['type']}", 0) + 1
        )
        if frame["type"] != "message.created":
            continue
        body = frame["message"]["body"]
        if body.startswith("re "):
            turns.live.setdefault(body[3:], now)
        else:
            turns.own_live.setdefault(body, now)


async def heartbeats(ws) -> None:
    """The bridge's presence heartbeat, every 20 s."""
    while True:
        await asyncio.sleep(20)
        await ws.send(json.dumps({"type": "heartbeat"}))


async def wait_until(predicate, timeout: float) -> bool:
    deadline = time.perf_counter() + timeout
    while time.perf_counter() < deadline:
        if predicate():
            return True
        await asyncio.sleep(0.02)
    return False


async def open_bridge(server: Daphne, session: str, prefetch: int):
    ws = await websockets.connect(
        f"{server.ws_url}/ws/agent/?prefetch={prefetch}",
        additional_headers={"Authorization": f"Bearer {session}"},
        proxy=None,
        max_queue=None,
    )
    assert json.loads(await ws.recv())["type"] == "hello"
    return ws


async def measure(servers: list[Daphne], scene, cookie: str, args) -> dict:
    """Post at ARGS.rate for ARGS.seconds, round robin over the agents' channels: every turn's
    clocks. With several SERVERS (daphne processes of one node), the bridges and the posts
    take them in turn, as behind a balancer; the browser is on the first."""
    turns = Turns()
    bridges = [
        await open_bridge(servers[i % len(servers)], session, args.prefetch)
        for i, (_, _, session) in enumerate(scene.phases.values())
    ]
    browser_ws = await open_browser(servers[0], cookie)
    tasks = [asyncio.create_task(browser(browser_ws, turns))]
    for ws in bridges:
        tasks += [
            asyncio.create_task(stand_in_bridge(ws, turns)),
            asyncio.create_task(heartbeats(ws)),
        ]
    paths = itertools.cycle(
        f"/api/v1/conversations/{conversation.id}/messages/"
        for _, conversation, _ in scene.phases.values()
    )
    clients = [pipeline.http_client(server.url, scene.person_token) for server in servers]
    client_for = itertools.cycle(clients)

    async def post(body: str):
        turns.sent[body] = time.perf_counter()
        response = await next(client_for).post(next(paths), {"body": body})
        turns.responded[body] = time.perf_counter()
        assert response.status_code == 201, response.text

    try:
        warm = [f"w{i}" for i in range(20)]  # every code path once, unmeasured
        for body in warm:
            await post(body)
        await wait_until(lambda: all(b in turns.live for b in warm), 30)
        count = round(args.rate * args.seconds)
        bodies = [str(i) for i in range(count)]
        cpu = sum(server.cpu_seconds() for server in servers)
        own_cpu = sum(resource.getrusage(resource.RUSAGE_SELF)[:2])
        start = time.perf_counter()
        posts = []
        for i, body in enumerate(bodies):
            delay = start + i / args.rate - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            posts.append(asyncio.create_task(post(body)))
        offered = (count - 1) / (time.perf_counter() - start)
        await asyncio.gather(*posts)
        await wait_until(lambda: all(b in turns.live for b in bodies), 60)
        elapsed = time.perf_counter() - start
        cpu = sum(server.cpu_seconds() for server in servers) - cpu
        own_cpu = sum(resource.getrusage(resource.RUSAGE_SELF)[:2]) - own_cpu
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for ws in bridges:
            await ws.close()
        await browser_ws.close()
        for client in clients:
            await client.aclose()

    done = [b for b in bodies if b in turns.live]

    def leg(to: dict, since: dict) -> list[float]:
        return [(to[b] - since[b]) * 1000 for b in done if b in to and b in since]

    last = max((turns.live[b] for b in done), default=start)
    return {
        "offered": offered,
        "completed_per_s": len(done) / (last - start) if done else 0.0,
        "turns": count,
        "lost": count - len(done),
        "duplicates": turns.duplicates,
        "errors": turns.errors,
        "daphne_cpu": cpu / elapsed,
        "cpu_ms": cpu / max(1, len(done)) * 1000,
        "client_cpu": own_cpu / elapsed,
        "frames": turns.frames,
        "legs": {
            "whole: POST sent -> reply's live event": leg(turns.live, turns.sent),
            "1. POST sent -> work frame at the bridge": leg(turns.work, turns.sent),
            "2. work frame -> reply frame sent": leg(turns.replied, turns.work),
            "3. reply frame sent -> live event at the browser": leg(turns.live, turns.replied),
            "   (POST sent -> its response)": leg(turns.responded, turns.sent),
            "   (POST sent -> the person's own message live)": leg(turns.own_live, turns.sent),
            "   (reply frame sent -> `posted` at the bridge)": leg(turns.posted, turns.replied),
        },
    }


def report(r: dict, args, facts: dict, load_end: str) -> None:
    whole = r["legs"]["whole: POST sent -> reply's live event"]
    p50, p99 = percentile(whole, 50), percentile(whole, 99)
    print()
    print("agntchat: platform overhead of an agent turn (issue 27, target 1)")
    print(
        f"machine: nproc={facts['nproc']}  Python {facts['python']}  PostgreSQL {facts['postgres']}"
        f"  Redis {facts['redis']}  load avg at start {facts['load']}, at end {load_end}"
    )
    print(f"code: commit {facts['commit']}; libs: {facts['libs']}")
    print(
        f"setup: {args.processes} daphne process(es) (DEBUG=0); {args.agents} agents, each with one stand-in bridge socket "
        f"(prefetch {args.prefetch}) answering at once and a channel of its own; posts round "
        f"robin over those channels; the person's browser socket sees them all"
    )
    print(
        f"offered {r['offered']:.1f} turns/s for {args.seconds:.0f} s ({r['turns']} turns); "
        f"completed {r['completed_per_s']:.1f} turns/s; lost {r['lost']}, work frames twice "
        f"{r['duplicates']}, error frames {len(r['errors'])}"
    )
    print(
        f"CPU: daphne {r['daphne_cpu']:.0%} of a core (all processes) ({r['cpu_ms']:.1f} ms per turn); "
        f"this client {r['client_cpu']:.0%}"
    )
    print(
        "frames received, warm-up included: "
        + ", ".join(f"{kind} {n}" for kind, n in sorted(r["frames"].items()))
    )
    print()
    width = max(len(name) for name in r["legs"])
    print(f"{'ms':<{width}}  {'p50':>6}  {'p95':>6}  {'p99':>6}  {'max':>6}")
    for name, values in r["legs"].items():
        cells = [percentile(values, p) for p in (50, 95, 99, 100)]
        print(f"{name:<{width}}  " + "  ".join(f"{c:6.1f}" for c in cells))
    print()
    print(f"target p50 <= {TARGET_P50_MS} ms: {p50:.1f} ms {verdict(p50 <= TARGET_P50_MS)}")
    print(f"target p99 <= {TARGET_P99_MS} ms: {p99:.1f} ms {verdict(p99 <= TARGET_P99_MS)}")
    for error in r["errors"][:5]:
        print("error frame:", error)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--rate", type=float, default=50.0, help="turns per second")
    parser.add_argument("--agents", type=int, default=10, help="agents, a socket and channel each")
    parser.add_argument(
        "--prefetch", type=int, default=2, help="each socket's prefetch (the bridge's chat lanes)"
    )
    parser.add_argument(
        "--processes",
        type=int,
        default=1,
        help="daphne processes of the node (one per core, as docs/operations.md advises)",
    )
    args = parser.parse_args()

    pipeline.fresh_start()
    facts = pipeline.machine_facts()
    scene = pipeline.create_scene([f"turns{i}" for i in range(args.agents)])
    cookie = session_cookie(scene.user)
    pipeline.analyze()
    servers = [Daphne() for _ in range(args.processes)]
    try:
        print(f"posting {args.rate:.0f} turns/s for {args.seconds:.0f} s", flush=True)
        r = asyncio.run(measure(servers, scene, cookie, args))
    except BaseException:
        for server in servers:
            print(f"--- daphne log tail\n{server.log_tail()}")
        raise
    finally:
        for server in servers:
            server.stop()
    report(r, args, facts, pipeline.load_average())


if __name__ == "__main__":
    main()
