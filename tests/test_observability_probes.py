"""Observability under faults: /metrics and the staff health page while a part is down."""

import pytest
from django.test import Client, override_settings
from prometheus_client.parser import text_string_to_metric_families

from agntchat.core import logs, presence
from tests.test_observability import Lines, clear_presence, json_lines

pytestmark = pytest.mark.django_db(transaction=True)

METRICS = {"METRICS_TOKEN": "m-secret-token", "METRICS_ALLOWED_ADDRESSES": []}
BEARER = {"Authorization": "Bearer m-secret-token"}


@pytest.fixture
def redis_down(settings):
    settings.REDIS_URL = "redis://127.0.0.1:1/0"  # nothing listens there
    presence.client.cache_clear()
    yield
    presence.client.cache_clear()


@override_settings(**METRICS)
def test_metrics_still_answer_with_this_process_figures_while_redis_is_down(redis_down):
    response = Client(headers=BEARER).get("/metrics")
    assert response.status_code == 200, response.content[:500]
    names = {family.name for family in text_string_to_metric_families(response.content.decode())}
    # What this process knows is there (an outage is when an operator needs it most) ...
    assert {"agntchat_open_sockets", "agntchat_http_server_errors"} <= names
    # ... and the queue depth, read from PostgreSQL, too; agents online cannot be known.
    assert "agntchat_queue_depth" in names
    assert "agntchat_agents_online" not in names


@pytest.fixture
def no_presence():
    clear_presence()
    yield
    clear_presence()


def test_the_health_page_counts_every_agent_online_not_only_those_listed(
    staff, alice, nova, no_presence, monkeypatch
):
    from agents import actions as agent_actions
    from agntchat.ui import health

    orion = agent_actions.create_agent(alice, name="Orion", backend="scripted")
    presence.beat(nova.id, "c-nova")
    presence.beat(orion.id, "c-orion")
    monkeypatch.setattr(health, "AGENTS_SHOWN", 1)  # as with more agents than the page lists
    response = staff.get("/staff/health/")
    assert response.status_code == 200
    assert b"2 of 2 agents online" in response.content, response.content.decode()
    assert b"Nova" in response.content and b"Orion" not in response.content


def test_a_message_given_up_is_logged_under_its_trace(budget_room, alice, settings):
    # grep <message id> over the logs must show why a message went unanswered.
    from conversations.actions import post_message
    from conversations.models import Delivery
    from work.gateway import claim_work

    conversation, rex, _ = budget_room
    asked = post_message(alice, conversation, "Please review the budget numbers")
    Delivery.objects.filter(message=asked, agent=rex).update(attempts=settings.WORK_MAX_ATTEMPTS)
    with Lines(logs.JsonFormatter()) as captured:
        assert claim_work(rex, "conn-rex", {"message": 5}) == []
    records = {r["msg"]: r for r in json_lines(captured.text())}
    assert records["message item given up"]["trace"] == str(asked.id), records
    # The notice saying so joins the same path.
    assert records["message posted"]["trace"] == str(asked.id), records


def test_a_task_given_up_is_logged_under_its_trace(alice, team_a, nova, settings):
    from conversations.tasks import create_task
    from work.gateway import claim_work

    task = create_task(alice, team_a, nova, "Summarise the quarter")
    type(task).objects.filter(pk=task.pk).update(attempts=settings.WORK_MAX_ATTEMPTS)
    with Lines(logs.JsonFormatter()) as captured:
        assert claim_work(nova, "conn-nova", {"task": 5}) == []
    records = {r["msg"]: r for r in json_lines(captured.text())}
    assert records["task given up"]["trace"] == str(task.id), records


# --- two nodes, one socket dropped without a close frame --------------------------------------


@pytest.fixture
def two_nodes(django_db_setup):
    """Two real daphne processes on the test database and Redis (DEBUG: loopback may scrape)."""
    from tests.socket_helpers import Daphne

    nodes = [Daphne(), Daphne()]
    yield nodes
    for node in nodes:
        node.stop()


def scrape(node) -> dict:
    import httpx

    response = httpx.get(f"{node.url}/metrics", timeout=10, trust_env=False)
    assert response.status_code == 200, response.text[:300]
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(response.text)
        for sample in family.samples
    }


def figure(samples, name, **labels) -> float:
    return samples.get((name, frozenset(labels.items())), 0.0)


@pytest.mark.slow
def test_each_node_counts_right_before_and_after_a_socket_drops_without_closing(
    two_nodes, alice, channel, nova, no_presence
):
    import json
    import socket as sockets

    from websockets.sync.client import connect

    from conversations.actions import post_message
    from tests.conftest import agent_session
    from tests.waiting import wait_until

    a, b = two_nodes
    for i in range(3):
        post_message(alice, channel, f"m{i}")

    def depth(samples, state):
        return figure(samples, "agntchat_queue_depth", kind="message", state=state)

    token = agent_session(nova)
    with connect(
        f"{a.ws_url}/ws/agent/?prefetch=1", additional_headers={"Authorization": f"Bearer {token}"}
    ) as ws:
        assert json.loads(ws.recv(timeout=10))["type"] == "hello"
        assert json.loads(ws.recv(timeout=10))["type"] == "work"

        on_a, on_b = scrape(a), scrape(b)
        assert figure(on_a, "agntchat_open_sockets", socket="agent") == 1
        assert figure(on_b, "agntchat_open_sockets", socket="agent") == 0
        for samples in (on_a, on_b):  # the deployment's figures: every node says the same
            assert figure(samples, "agntchat_agents_online") == 1
            assert (depth(samples, "queued"), depth(samples, "in_flight")) == (2, 1)

        # The bridge's machine vanishes: no close frame, the connection just ends.
        ws.socket.shutdown(sockets.SHUT_RDWR)

    def settled():
        on_a, on_b = scrape(a), scrape(b)
        return (
            figure(on_a, "agntchat_open_sockets", socket="agent") == 0
            and all(figure(s, "agntchat_agents_online") == 0 for s in (on_a, on_b))
            and all((depth(s, "queued"), depth(s, "in_flight")) == (3, 0) for s in (on_a, on_b))
        )

    wait_until(settled, timeout=20, what="both nodes to count the dropped socket gone")


@override_settings(METRICS_TOKEN="", METRICS_ALLOWED_ADDRESSES=["10.0.0.0/8"])
def test_metrics_know_an_allowed_ipv4_address_given_as_ipv6(db):
    # A daphne bound to "::" sees IPv4 clients as ::ffff:a.b.c.d (as the sign-in lockout knows).
    assert Client(REMOTE_ADDR="::ffff:10.1.2.3").get("/metrics").status_code == 200
    assert Client(REMOTE_ADDR="::ffff:192.168.1.5").get("/metrics").status_code == 404
