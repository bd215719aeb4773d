"""What an agent's heartbeat costs one daphne: its CPU per heartbeat, under a steady rate of them.

    .venv/bin/python -m bench.heartbeats                          # 200 agents, 800 beats/s, 10 s
    .venv/bin/python -m bench.heartbeats --agents 500 --rate 1000

M idle agent sockets (one agent each, nothing queued, as bench.sockets opens them) send
heartbeats in rounds, the same frame the bridge sends every 20 s, at RATE heartbeats/s in all:
daphne's CPU over the run divided by the heartbeats sent. bench.sockets reports the same cost
from a minute of real 20 s periods at 1,000 sockets; this one gives a steadier figure in seconds,
for before/after comparisons. It recreates the bench database (bench/pipeline.py); it never fails.
"""

import argparse
import asyncio
import json
import time

from bench import pipeline
from bench.pipeline import Daphne
from bench.sockets import build_cast, open_agent


async def run(server: Daphne, tokens: list[str], rate: float, seconds: float) -> dict:
    sockets = await asyncio.gather(*(open_agent(server, token) for token in tokens))
    errors = []

    async def read(ws):
        async for raw in ws:
            if '"error"' in raw:
                errors.append(raw[:200])

    readers = [asyncio.create_task(read(ws)) for ws in sockets]
    await asyncio.sleep(3)  # every socket's first claim done
    frame = json.dumps({"type": "heartbeat"})
    cpu, sent, start = server.cpu_seconds(), 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        for ws in sockets:
            await ws.send(frame)
        sent += len(sockets)
        await asyncio.sleep(len(sockets) / rate)
    await asyncio.sleep(2)  # the last round handled
    cpu = server.cpu_seconds() - cpu
    for ws in sockets:
        await ws.close()
    for reader in readers:
        reader.cancel()
    return {"sent": sent, "cpu": cpu, "errors": errors}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--agents", type=int, default=200, help="idle agent sockets")
    parser.add_argument("--rate", type=float, default=800.0, help="heartbeats per second, in all")
    parser.add_argument("--seconds", type=float, default=10.0)
    args = parser.parse_args()

    pipeline.fresh_start()
    cast = build_cast(args.agents)
    server = Daphne()
    try:
        result = asyncio.run(run(server, cast["tokens"], args.rate, args.seconds))
    finally:
        server.stop()
    print(
        f"{result['sent']} heartbeats from {args.agents} agent sockets in {args.seconds:.0f} s: "
        f"daphne {result['cpu']:.2f} s of CPU, {result['cpu'] / result['sent'] * 1000:.3f} ms "
        f"per heartbeat; error frames {len(result['errors'])}"
    )


if __name__ == "__main__":
    main()
