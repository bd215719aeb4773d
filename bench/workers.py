"""The job worker's memory: what its forked processes share, before and after a full collection.

    .venv/bin/python -m bench.workers               # 4 worker processes
    .venv/bin/python -m bench.workers --workers 2

Starts the worker as the Procfile does (``manage.py worker``: django-q2's cluster, which forks
its processes), waits for a first job to run, and reads each process's memory from
/proc/PID/smaps_rollup: RSS, PSS (shared pages divided among their sharers) and USS (pages
this process alone holds). Then every worker runs a full collection (``gc.collect`` as a job,
several per worker), as a long-lived worker does sooner or later, and the figures are read
again. A collection writes to every object it walks, so each shared page it reaches becomes a
private copy; what a worker froze (``gc.freeze``) it never walks. It recreates the bench
database (bench/pipeline.py) and reports; it never fails.
"""

import argparse
import os
import signal
import subprocess
import time
from pathlib import Path

from bench import pipeline


def descendants(pid: int) -> list[int]:
    """PID's children, their children, and so on."""
    found = []
    for child in Path(f"/proc/{pid}/task/{pid}/children").read_text().split():
        found += [int(child), *descendants(int(child))]
    return found


def memory(pid: int) -> dict:
    """RSS, PSS and USS of PID in MB."""
    fields = {}
    for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines()[1:]:
        name, value = line.split(":", 1)
        fields[name] = int(value.split()[0]) / 1024
    return {
        "rss": fields["Rss"],
        "pss": fields["Pss"],
        "uss": fields["Private_Clean"] + fields["Private_Dirty"],
    }


def report(title: str, cluster: list[int]) -> None:
    print(f"\n{title}")
    totals = {"rss": 0.0, "pss": 0.0, "uss": 0.0}
    for pid in cluster:
        figures = memory(pid)
        name = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()[:40]
        print(f"  {pid:>7}  {name:<40}  " + "  ".join(f"{k} {v:6.1f}" for k, v in figures.items()))
        for key in totals:
            totals[key] += figures[key]
    print(
        f"  total of {len(cluster)} processes: "
        + ", ".join(f"{k} {v:.1f} MB" for k, v in totals.items())
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=4, help="django-q2 worker processes")
    args = parser.parse_args()

    pipeline.fresh_start()
    from django_q.models import Success
    from django_q.tasks import async_task

    worker = subprocess.Popen(
        [pipeline.PYTHON, "manage.py", "worker"],
        cwd=pipeline.ROOT,
        env=dict(os.environ, **pipeline.BENCH_ENV, Q_WORKERS=str(args.workers)),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        async_task("time.time", task_name="warm-up")
        deadline = time.monotonic() + 60
        while not Success.objects.filter(name="warm-up").exists():
            if time.monotonic() > deadline:
                raise SystemExit("the worker ran no job in 60 s")
            time.sleep(0.2)
        time.sleep(2)  # every process of the cluster up and idle
        cluster = descendants(worker.pid)
        report("after start, idle", cluster)

        jobs = args.workers * 10
        for index in range(jobs):
            async_task("gc.collect", task_name=f"collect-{index}")
        deadline = time.monotonic() + 60
        while Success.objects.filter(name__startswith="collect-").count() < jobs:
            if time.monotonic() > deadline:
                raise SystemExit("the worker did not run the collections in 60 s")
            time.sleep(0.2)
        report(f"after {jobs} full collections (gc.collect as jobs)", cluster)
    finally:
        worker.send_signal(signal.SIGTERM)  # the worker stops its cluster itself
        worker.wait(timeout=60)


if __name__ == "__main__":
    main()
