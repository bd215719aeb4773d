"""Redis down behind the balancer (issue 27, faults): the nodes stay in. PostgreSQL or Redis out
of reach is out of reach for every node alike; the balancer checks /livez (the node answers),
so each request still reaches a node and gets its JSON 503 saying what is down. With /healthz as
the check, every node was out within a second and every request got HAProxy's bare page."""

import shutil
import subprocess
import time

import httpx
import pytest

from bench.multi_node import Layout, free_port, missing_programs
from tests.socket_helpers import database_url
from tests.waiting import wait_until

MISSING = missing_programs() + ([] if shutil.which("redis-server") else ["redis-server"])
pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.slow,
    pytest.mark.skipif(bool(MISSING), reason="needs " + " ".join(MISSING) + " (.ci/run installs)"),
]


def test_with_redis_down_the_nodes_stay_in_and_say_so(tmp_path):
    port = free_port()
    redis = subprocess.Popen(
        ["redis-server", "--port", str(port), "--save", "", "--appendonly", "no"],
        stdout=subprocess.DEVNULL,
    )
    layout = Layout(
        database_url(), tmp_path, workers=0, env={"REDIS_URL": f"redis://127.0.0.1:{port}/0"}
    )
    try:
        layout.start()
        wait_until(lambda: httpx.get(f"{layout.url}/healthz").status_code == 200, what="up")
        redis.terminate()
        redis.wait(10)
        time.sleep(3)  # six of the balancer's checks (every 500 ms, out at the first failure)
        answer = httpx.get(f"{layout.url}/healthz", timeout=10)
        assert answer.status_code == 503
        assert answer.json()["redis"].startswith("error"), answer.text  # a node's, not HAProxy's
        assert answer.json()["db"] == "ok"
    finally:
        layout.stop()
        if redis.poll() is None:
            redis.kill()
