"""Does each performance mechanism earn its place? Its figure with and without it, alternated.

    .venv/bin/python -m bench.mechanisms                      # every mechanism, 3 pairs each
    .venv/bin/python -m bench.mechanisms --only http --pairs 5
    .venv/bin/python -m bench.mechanisms --against /work/wt/base   # bench.pipeline, this tree
                                                                   # against another checkout

For each mechanism, runs the benchmark that measures the figure it targets, with it (A) and
without it (B, ``BENCH_WITHOUT=<name>``: see bench/without.py), A B A B …, each run a fresh
process on a freshly created database. On a shared machine a figure drifts between runs more
than some mechanisms are worth; alternating puts the drift on both sides. Prints, per figure,
the median and range of each side, and the gain: the median over pairs of what the mechanism
saves (a time) or adds (a rate), relative to running without it. A mechanism is kept when the
gain on its target figure is at least 10 % (docs/benchmarks.md).

``--against DIR`` alternates the whole ``bench.pipeline`` (every phase, raw figures) between
this checkout and DIR, to compare two versions of the code.
"""

import argparse
import ast
import json
import os
import re
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from bench.without import SWITCHES

ROOT = Path(__file__).resolve().parent.parent
KEEP_AT = 0.10


@dataclass
class Figure:
    path: str  # where the figure is in the benchmark's JSON: "key" or "phase.key"
    label: str
    unit: str
    lower_is_better: bool

    def read(self, data: dict) -> float:
        for key in self.path.split("."):
            data = data[key]
        return float(data)

    def gain(self, with_it: float, without_it: float) -> float:
        """What the mechanism buys, as a fraction of the figure without it."""
        if self.lower_is_better:
            return (without_it - with_it) / without_it
        return (with_it - without_it) / without_it


def cpu(path, label):
    return Figure(path, label, "ms", True)


def rate(path, label, unit):
    return Figure(path, label, unit, False)


HOTPATH = ["-m", "bench.hotpath", "--json", "--rounds", "3", "--count", "200"]
HISTORY = ["-m", "bench.history", "--json"]


def pipeline(phases: str) -> list[str]:
    return ["-m", "bench.pipeline", "--only", phases, "--json"]


@dataclass
class Mechanism:
    command: list[str]
    figures: list[Figure]  # the first is the one it targets
    note: str = ""  # what the figures cannot show, printed under the table


MECHANISMS = {
    "compiled": Mechanism(
        HOTPATH,
        [
            cpu("post_ms", "CPU per post, in process (hotpath)"),
            cpu("claim_ms", "CPU per claim of one item with payload"),
            cpu("history_ms", "CPU per GET of a page of 50"),
            cpu("answer_ms", "CPU per agent's answer (claim, post, ack)"),
        ],
    ),
    "http": Mechanism(
        pipeline("base,posts"),
        [
            rate("posts.rps", "POST a message, closed loop (pipeline)", "req/s"),
            cpu("posts.cpu_ms", "daphne CPU per POST"),
            rate("base.rps", "bare DRF endpoint (pipeline baseline)", "req/s"),
        ],
    ),
    "n_distinct": Mechanism(
        HISTORY,
        [
            cpu("page before (REST)", "page before an anchor, 20k-message channel, wall"),
            cpu("newest page (REST, 50)", "newest page, wall"),
            cpu("claim of its delivery, with payload", "claim with payload, wall"),
        ],
        "a generic plan may read a whole channel for a page without it, depending on the"
        " statistics: tests/conversations/test_read_plans.py (plan forced generic) catches it",
    ),
    "prepared": Mechanism(
        HISTORY,
        [
            cpu("claim of its delivery, with payload", "claim with payload, wall (history)"),
            cpu("person's post after an agent's", "person's post, wall"),
            cpu("newest page (REST, 50)", "newest page, wall"),
        ],
    ),
    "relaxed_commit": Mechanism(
        pipeline("raw"),
        [
            rate("shallow.cycles_per_s", "raw claim+ack, 100 queued", "/s"),
            rate("deep.cycles_per_s", "raw claim+ack, 5000 queued", "/s"),
        ],
    ),
    "publisher_thread": Mechanism(
        pipeline("posts,lat"),
        [
            rate("posts.rps", "POST a message, closed loop (pipeline)", "req/s"),
            cpu("posts.cpu_ms", "daphne CPU per POST"),
            cpu("lat.p50", "post->push p50 @ 50 msg/s"),
        ],
    ),
    "thread_cache": Mechanism(
        HOTPATH,
        [
            cpu("history_ms", "CPU per GET of a page of 50 (hotpath)"),
            cpu("post_ms", "CPU per post"),
        ],
    ),
}
assert set(MECHANISMS) == set(SWITCHES)


def run(command: list[str], env: dict, cwd: Path = ROOT) -> dict:
    """One benchmark process; its figures (the last line of its output, JSON)."""
    done = subprocess.run(
        [sys.executable, *command], cwd=cwd, env=env, capture_output=True, text=True
    )
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def spread(values) -> str:
    return f"{statistics.median(values):8.2f}  ({min(values):.2f}-{max(values):.2f})"


def measure(name: str, pairs: int) -> list[tuple]:
    """Rows of the table for one mechanism: A B A B … PAIRS times."""
    mechanism = MECHANISMS[name]
    runs: dict[str, list[dict]] = {"with": [], "without": []}
    for pair in range(pairs):
        for side in ("with", "without"):
            env = dict(os.environ, BENCH_WITHOUT="" if side == "with" else name)
            started = time.monotonic()
            runs[side].append(run(mechanism.command, env))
            print(
                f"  {name} pair {pair + 1}/{pairs} {side}: {time.monotonic() - started:.0f} s",
                file=sys.stderr,
                flush=True,
            )
    rows = []
    for figure in mechanism.figures:
        with_it = [figure.read(r) for r in runs["with"]]
        without_it = [figure.read(r) for r in runs["without"]]
        gains = [figure.gain(a, b) for a, b in zip(with_it, without_it, strict=True)]
        rows.append((name, figure, with_it, without_it, gains))
    return rows


def print_table(rows) -> None:
    print(
        f"{'mechanism':17s} {'figure':52s} {'unit':6s} {'with: median (range)':24s} "
        f"{'without: median (range)':24s} {'gain: median (range)':22s} verdict"
    )
    last = None
    for name, figure, with_it, without_it, gains in rows:
        target = name != last
        last = name
        gain = statistics.median(gains)
        verdict = ("KEEP" if gain >= KEEP_AT else "REMOVE") if target else ""
        print(
            f"{name if target else '':17s} {figure.label:52s} {figure.unit:6s} "
            f"{spread(with_it):24s} {spread(without_it):24s} "
            f"{gain:+6.1%} ({min(gains):+.0%}..{max(gains):+.0%})  {verdict}"
        )


def flatten(result: dict) -> dict:
    """phase → figures, as one level of "phase.key" numbers."""
    return {
        f"{phase}.{key}": value
        for phase, figures in result.items()
        for key, value in figures.items()
        if isinstance(value, int | float) and not isinstance(value, bool)
    }


def run_pipeline_in(tree: Path, quick: bool) -> dict:
    """bench.pipeline in TREE, every phase, its raw figures (read from the ``--only`` output,
    which older versions print as one Python dict per phase)."""
    phases = "base,e2e,posts,replies,lat,low,raw,drain,djq,scale"
    command = [str(tree / ".venv/bin/python"), "-m", "bench.pipeline", "--only", phases]
    command += ["--quick"] if quick else []
    done = subprocess.run(command, cwd=tree, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"bench.pipeline in {tree} failed:\n{done.stderr[-3000:]}")
    result = {}
    for line in done.stdout.splitlines():
        phase, _, figures = line.partition(" ")
        if figures.startswith("{"):
            result[phase] = ast.literal_eval(re.sub(r"\bnan\b", "None", figures))
    return flatten(result)


def compare_trees(other: Path, pairs: int, quick: bool) -> None:
    trees = {"this": ROOT, "other": other}
    runs: dict[str, list[dict]] = {"this": [], "other": []}
    for pair in range(pairs):
        for side, tree in trees.items():
            started = time.monotonic()
            runs[side].append(run_pipeline_in(tree, quick))
            print(
                f"  pipeline pair {pair + 1}/{pairs} {side} ({tree}): "
                f"{time.monotonic() - started:.0f} s",
                file=sys.stderr,
                flush=True,
            )
    print(f"bench.pipeline, {pairs} pairs alternated: this = {ROOT}, other = {other}")
    print(f"{'figure':32s} {'this: median (range)':26s} {'other: median (range)':26s} change")
    for key in runs["this"][0]:
        if not all(key in r and r[key] is not None for side in runs.values() for r in side):
            continue
        ours = [r[key] for r in runs["this"]]
        theirs = [r[key] for r in runs["other"]]
        changes = [a / b - 1 for a, b in zip(ours, theirs, strict=True) if b]
        change = f"{statistics.median(changes):+.1%}" if changes else "n/a"
        print(f"{key:32s} {spread(ours):26s} {spread(theirs):26s} {change}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", help=f"comma-separated, of: {', '.join(MECHANISMS)}")
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--against", type=Path, help="another checkout: compare bench.pipeline")
    parser.add_argument("--quick", action="store_true", help="with --against: quick pipelines")
    args = parser.parse_args()
    if args.against:
        compare_trees(args.against.resolve(), args.pairs, args.quick)
        return
    names = args.only.split(",") if args.only else list(MECHANISMS)
    unknown = set(names) - set(MECHANISMS)
    if unknown:
        parser.error(f"unknown mechanisms {sorted(unknown)}")
    print(f"load average at start: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    rows = []
    for name in names:
        rows += measure(name, args.pairs)
    print(f"load average at end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print(f"{args.pairs} pairs, A (with) then B (without) in each; gain >= {KEEP_AT:.0%} on the")
    print("first figure of a mechanism (its target) keeps it.")
    print_table(rows)
    for name in names:
        if MECHANISMS[name].note:
            print(f"{name}: {MECHANISMS[name].note}")


if __name__ == "__main__":
    main()
