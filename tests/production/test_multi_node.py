"""Several nodes (GW-3): two daphne nodes and two django-q2 worker clusters behind a real HAProxy,
on PgBouncer in transaction mode in front of PostgreSQL, sharing one Redis — the production
layout of docs/operations.md, on loopback (bench/multi_node.py starts the same for a person).

A message crosses nodes, presence and sign-in lockouts are shared, a routine slot runs once, and
a node killed mid-flow loses nothing: its bridge comes back through the balancer to the other.
The tests share one layout (starting it costs seconds); the one that kills a node runs last."""

import json
import secrets
import threading
import time
from collections import Counter
from types import SimpleNamespace

import httpx
import pytest
from django.utils import timezone
from websockets.sync.client import connect

from bench.multi_node import Layout, missing_programs
from conversations.models import Delivery, Message, Task
from routines.models import RoutineRun
from tests.conftest import agent_session, make_person
from tests.routines.test_routines_worker import many_routines
from tests.socket_helpers import agent_replies, database_url, start_bridge
from tests.waiting import wait_until
from tests.worker_process import job_result, queue_job
from workspaces.actions import issue_api_token

MISSING = missing_programs()
pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.slow,
    pytest.mark.skipif(
        bool(MISSING),
        reason="the multi-node layout needs "
        + " ".join(MISSING)
        + " (apt-get install -y "
        + " ".join(MISSING)
        + "; .ci/run installs them)",
    ),
]

# Work held by a killed node comes back when its lease runs out: short here, so the test does
# not wait a minute (the bridge's turns take far less).
LEASE = 4


@pytest.fixture(scope="module")
def layout(django_db_setup, tmp_path_factory):
    started = Layout(
        database_url(),
        tmp_path_factory.mktemp("layout"),
        env={"CLAIM_LEASE_SECONDS": str(LEASE)},
    ).start()
    yield started
    started.stop()


def at(url):
    """A server as start_bridge takes one: where the bridge connects."""
    return SimpleNamespace(url=url)


def stop(bridge):
    bridge.terminate()
    try:
        bridge.communicate(timeout=10)
    except Exception:
        bridge.kill()
        bridge.communicate()


def online_via(url, person_token, agent) -> bool:
    response = httpx.get(
        f"{url}/api/v1/agents/{agent.id}/", headers={"Authorization": f"Bearer {person_token}"}
    )
    assert response.status_code == 200, response.text
    return response.json()["online"]


def post(url, person_token, conversation, body, ref=None):
    return httpx.post(
        f"{url}/api/v1/conversations/{conversation.id}/messages/",
        json={"body": body, **({"ref": ref} if ref else {})},
        headers={"Authorization": f"Bearer {person_token}"},
        timeout=10,
    )


def answered_once(message, agent) -> Message:
    replies = wait_until(
        lambda: list(Message.objects.filter(reply_to=message, author_agent=agent)),
        timeout=30,
        what=f"{agent.name}'s answer to {message.body!r}",
    )
    assert len(replies) == 1, [r.body for r in replies]
    return replies[0]


def test_a_message_posted_through_node_a_reaches_a_bridge_on_node_b(
    layout, alice, channel, nova, tmp_path
):
    _, person = issue_api_token(alice)
    bridge = start_bridge(at(layout.node_url("b")), nova, tmp_path)
    try:
        wait_until(
            lambda: online_via(layout.node_url("a"), person, nova), timeout=60, what="nova online"
        )
        response = post(layout.node_url("a"), person, channel, "posted to A, answered on B")
        assert response.status_code == 201, response.text
        message = Message.objects.get(pk=response.json()["id"])
        assert "posted to A, answered on B" in answered_once(message, nova).body
    finally:
        stop(bridge)

    # The same with both ends on the balancer, whichever nodes it picks.
    bridge = start_bridge(at(layout.url), nova, tmp_path)
    try:
        wait_until(
            lambda: online_via(layout.url, person, nova), timeout=60, what="nova online again"
        )
        for n in range(4):  # round robin: the posts land on both nodes
            response = post(layout.url, person, channel, f"through the balancer {n}")
            assert response.status_code == 201, response.text
        for message in Message.objects.filter(body__startswith="through the balancer"):
            answered_once(message, nova)
    finally:
        stop(bridge)


def test_presence_and_sign_in_lockout_are_shared_by_the_nodes(layout, alice, nova):
    _, person = issue_api_token(alice)
    node_a, node_b = layout.node_url("a"), layout.node_url("b")
    assert not online_via(node_a, person, nova)
    with connect(
        node_b.replace("http", "ws") + "/ws/agent/",
        additional_headers={"Authorization": f"Bearer {agent_session(nova)}"},
    ) as ws:
        assert json.loads(ws.recv(timeout=5))["type"] == "hello"
        assert online_via(node_a, person, nova)  # online via B, seen via A
    wait_until(lambda: not online_via(node_a, person, nova), what="nova offline after leaving B")

    # Failed sign-ins counted in Redis: alternating nodes, the fifth locks the name on both.
    # (Nodes trust X-Forwarded-For, as behind the balancer: an address of this run's own, so
    # the per-address count of other runs and tests is not touched.)
    name = f"victim-{secrets.token_hex(4)}"
    make_person(name)
    address = f"10.{secrets.randbelow(250)}.{secrets.randbelow(250)}.{secrets.randbelow(250) + 1}"

    def sign_in(url, password):
        return httpx.post(
            f"{url}/api/v1/auth/token/",
            json={"username": name, "password": password},
            headers={"X-Forwarded-For": address},
        )

    for attempt in range(5):
        assert sign_in((node_a, node_b)[attempt % 2], "wrong").status_code == 401
    for url in (node_a, node_b):
        refused = sign_in(url, f"pw-{name}-123456")  # the right password, locked all the same
        assert refused.status_code == 429, refused.text
        assert refused.json()["error"]["code"] == "login_throttled"
        assert int(refused.headers["Retry-After"]) > 0


def test_a_routine_slot_runs_once_with_two_worker_clusters(layout, alice, team_a):
    total = many_routines(alice, team_a)
    now = timezone.now()
    # Both queued at once: each cluster (behind PgBouncer) takes one; they race over the routines.
    names = [queue_job("routines.jobs.run_due_routines", now=now) for _ in range(2)]
    counts = [job_result(name) for name in names]
    assert job_result(queue_job("routines.jobs.run_due_routines", now=now)) == 0
    assert sum(counts) == total
    assert RoutineRun.objects.count() == total == Task.objects.count()


def test_killing_the_node_a_bridge_is_on_loses_nothing(layout, alice, channel, nova, tmp_path):
    """Runs last: node A stays dead."""
    _, person = issue_api_token(alice)
    # B drained for a moment (as an operator drains a node), so the bridge lands on A.
    layout.balancer_command("disable server nodes/b")
    bridge = start_bridge(at(layout.url), nova, tmp_path, options=json.dumps({"delay_ms": 600}))
    try:
        wait_until(
            lambda: online_via(layout.url, person, nova), timeout=60, what="nova online via A"
        )
        layout.balancer_command("enable server nodes/b")
        layout.wait_until_serving("a", "b")

        total, kill_after = 30, 8
        outcomes = {}

        def post_all():
            for n in range(total):
                ref = f"kill-{n}"
                # A client whose post failed with the node retries it under the same ref:
                # the same message, never a second one.
                for _ in range(3):
                    try:
                        response = post(layout.url, person, channel, f"m{n}", ref=ref)
                    except httpx.HTTPError as exc:
                        outcomes.setdefault(ref, []).append(type(exc).__name__)
                        continue
                    outcomes.setdefault(ref, []).append(response.status_code)
                    if response.status_code in (200, 201):
                        break
                if n + 1 == kill_after:
                    killer.set()
                time.sleep(0.25)  # a steady flow, for longer than the lease

        killer = threading.Event()
        poster = threading.Thread(target=post_all)
        poster.start()
        assert killer.wait(30)
        layout.kill("a")  # mid-flow: A holds work its bridge was given
        poster.join(60)
        assert not poster.is_alive()
        assert all(o[-1] in (200, 201) for o in outcomes.values()), outcomes

        posted = list(Message.objects.filter(conversation=channel, author_user=alice))
        assert sorted(m.body for m in posted) == sorted(f"m{n}" for n in range(total))

        def all_answered():
            replies = Counter(r.reply_to_id for r in agent_replies(channel, nova))
            return len(replies) == total and replies

        replies = wait_until(all_answered, timeout=90, what="every message answered")
        assert set(replies) == {m.id for m in posted}
        time.sleep(LEASE + 1)  # no lease left to run out and hand an answered message out again
        again = Counter(
            Message.objects.filter(conversation=channel, author_agent=nova).values_list(
                "reply_to_id", flat=True
            )
        )
        assert again == Counter({m.id: 1 for m in posted}), again
        # Mid-flow indeed: turns are slower than the posts, so A held work when it died, and
        # that work came back (a second attempt) through B.
        assert Delivery.objects.filter(attempts__gt=1).exists()
        assert layout.serving() == {"b"}
        assert bridge.poll() is None  # the same bridge process, reconnected through the balancer
    finally:
        stop(bridge)
