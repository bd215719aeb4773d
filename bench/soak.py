"""Soak under faults (issue 27): 1,000 messages through each fault, bounded: about 1½ to 2
minutes a fault here (its flow, then at most 2 minutes of retries and 2 of waiting for answers).

    .venv/bin/python -m bench.soak                      # every scenario, 1,000 messages each
    .venv/bin/python -m bench.soak --messages 300 --only kill,stall

Starts its own PostgreSQL and Redis (the embedded servers, in a temp folder: the machine's
shared ones are never touched), one daphne and scripted bridges (bench/faults.py), and prints
per scenario: messages lost, answered twice, and seconds to recover. Exits 1 if any message was
lost or answered twice.
"""

import argparse
import asyncio
import shutil
import sys
import tempfile
import time
from pathlib import Path

from bench import faults


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=1000, help="per scenario")
    parser.add_argument("--rate", type=float, default=25, help="messages posted a second")
    parser.add_argument("--only", default=",".join(faults.SCENARIOS), help="comma-separated")
    parser.add_argument("--keep", action="store_true", help="keep the temp folder (logs)")
    args = parser.parse_args()
    names = [name for name in args.only.split(",") if name]
    if unknown := set(names) - set(faults.SCENARIOS):
        parser.error(f"unknown scenario {', '.join(sorted(unknown))}")

    folder = Path(tempfile.mkdtemp(prefix="agntchat-soak-"))
    began = time.monotonic()
    print(f"private PostgreSQL and Redis under {folder}; migrating…", flush=True)
    stack = faults.Stack(folder).start()
    results = []
    try:
        stack.seed(*faults.SCENES)
        for name in names:
            started = time.monotonic()
            result = asyncio.run(faults.SCENARIOS[name](stack, args.messages, args.rate))
            results.append(result)
            print(f"{result.line()}  [{time.monotonic() - started:.0f} s]", flush=True)
            for bad in result.bad[:3]:
                print(f"    refused without a clear error: {bad}")
    finally:
        stack.stop()
        if args.keep:
            print(f"logs kept in {folder}")
        else:
            shutil.rmtree(folder, ignore_errors=True)
    lost = sum(r.lost for r in results)
    twice = sum(r.twice for r in results)
    print(
        f"total: {sum(r.posted for r in results)} messages, lost {lost}, answered twice {twice}, "
        f"{time.monotonic() - began:.0f} s"
    )
    return 1 if lost or twice else 0


if __name__ == "__main__":
    sys.exit(main())
