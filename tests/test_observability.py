"""Observability: one message followed by its id through the logs (post → claim → reply → ack,
and through a real bridge), /metrics after real work, and the staff health page."""

import io
import json
import logging
from datetime import timedelta

import pytest
from asgiref.sync import sync_to_async
from django.conf import settings
from django.test import AsyncClient, Client, RequestFactory, override_settings
from django.utils import timezone
from django_q.models import Schedule
from prometheus_client.parser import text_string_to_metric_families

from agntchat.core import logs, metrics, presence
from conversations import actions
from conversations.models import Delivery, Message
from tests.conftest import agent_session
from tests.socket_helpers import Daphne, agent_communicator, agent_replies, next_frame, start_bridge
from tests.waiting import until, wait_until

pytestmark = pytest.mark.django_db(transaction=True)

post = sync_to_async(actions.post_message)


class Lines:
    """Records of every logger at INFO, formatted as production writes them."""

    def __init__(self, formatter):
        self.stream = io.StringIO()
        self.handler = logging.StreamHandler(self.stream)
        self.handler.setFormatter(formatter)
        self.handler.addFilter(logs.TraceFilter())
        self.root = logging.getLogger()

    def __enter__(self):
        self.level = self.root.level
        self.root.addHandler(self.handler)
        self.root.setLevel(logging.INFO)
        return self

    def __exit__(self, *exc):
        self.root.removeHandler(self.handler)
        self.root.setLevel(self.level)

    def text(self) -> str:
        return self.stream.getvalue()


def json_lines(text: str) -> list[dict]:
    """Every line must be a JSON object (a line that is not fails the test)."""
    return [json.loads(line) for line in text.splitlines() if line.strip()]


async def test_every_record_of_a_message_carries_its_id_from_post_to_ack(alice, channel, nova):
    token = await sync_to_async(agent_session)(nova)
    comm = agent_communicator(token)
    assert (await comm.connect())[0]
    hello = await next_frame(comm)
    with Lines(logs.JsonFormatter()) as captured:
        message = await post(alice, channel, "Where is the plan?")
        work = await next_frame(comm)
        assert work["type"] == "work" and work["trace"] == str(message.id)
        await comm.send_json_to(
            {
                "type": "post",
                "conversationId": str(channel.id),
                "body": "Here.",
                "replyTo": str(message.id),
                "ref": f"work:{work['id']}",
            }
        )
        posted = await next_frame(comm)
        assert posted["type"] == "posted"
        await comm.send_json_to({"type": "ack", "id": work["id"]})
        await until(
            lambda: Delivery.objects.filter(id=work["id"], acked_at__isnull=False).aexists()
        )
        assert await comm.receive_nothing(timeout=0.2)
    await comm.disconnect()

    records = json_lines(captured.text())
    trace = str(message.id)
    ours = [
        r
        for r in records
        if trace in json.dumps(r) or r.get("item") == work["id"] or posted["messageId"] in str(r)
    ]
    # Every record about this message or its item carries the message's id as its trace.
    assert ours and all(r.get("trace") == trace for r in ours), ours
    steps = [(r["logger"], r["msg"]) for r in ours]
    assert steps == [
        ("conversations.actions", "message posted"),
        ("work.gateway", "work claimed"),
        ("conversations.actions", "message posted"),  # the reply, traced by what it answers
        ("work.consumers", "work acked"),
    ], steps
    posted_record, claimed, reply, acked = ours
    assert posted_record["message_id"] == trace and posted_record["queued_for"] == [str(nova.id)]
    assert claimed["connection"] == hello["connectionId"] and claimed["item"] == work["id"]
    assert claimed["kind"] == "message" and claimed["attempt"] == 1
    assert reply["message_id"] == posted["messageId"] and reply["author"] == f"agent:{nova.id}"
    assert acked["connection"] == hello["connectionId"]
    for record in ours:
        assert {"time", "level", "logger", "msg"} <= set(record)


def test_text_logs_show_the_trace_for_a_person_to_grep(alice, channel, nova):
    with Lines(logs.TextFormatter()) as captured:
        message = actions.post_message(alice, channel, "hello")
    (line,) = [line for line in captured.text().splitlines() if "message posted" in line]
    assert f"trace={message.id}" in line and not line.startswith("{")


@pytest.fixture
def json_server(django_db_setup):
    """A real daphne writing JSON logs (as in production), on the test database."""
    daphne = Daphne(extra_env={"LOG_FORMAT": "json"})
    yield daphne
    daphne.stop()


@pytest.mark.slow
def test_a_message_is_followed_through_the_server_and_a_real_bridge(
    alice, channel, nova, tmp_path, json_server
):
    server = json_server
    bridge = start_bridge(server, nova, tmp_path, LOG_FORMAT="json")
    try:
        message = actions.post_message(alice, channel, "What is the plan?")
        wait_until(lambda: agent_replies(channel, nova), what="the agent's reply")
        wait_until(
            lambda: Delivery.objects.filter(acked_at__isnull=False).count() == 1, what="the ack"
        )
    except AssertionError:
        bridge.terminate()
        server.stop()
        raise AssertionError(bridge.communicate()[0] + server.proc.output()) from None
    finally:
        bridge.terminate()
        bridge_output = bridge.communicate(timeout=10)[0]
        server.stop()
        server_output = server.proc.output()
    trace = str(message.id)
    reply = Message.objects.get(reply_to=message)
    bridge_records = [r for r in json_lines(bridge_output) if trace in json.dumps(r)]
    assert [r["msg"] for r in bridge_records] == ["work received", "reply posted", "work acked"]
    assert all(r["trace"] == trace for r in bridge_records)
    assert bridge_records[1]["message_id"] == str(reply.id)
    server_records = [r for r in json_lines(server_output) if trace in json.dumps(r)]
    assert [r["msg"] for r in server_records] == ["work claimed", "message posted", "work acked"]
    assert all(r["trace"] == trace for r in server_records)
    assert server_records[1]["message_id"] == str(reply.id)
    assert server_records[2]["backend"] == "scripted"  # the ack carried the turn's usage


# --- /metrics ------------------------------------------------------------------------------


def scrape(text: str) -> dict:
    """{(sample name, frozenset(labels)): value}."""
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def value(samples, name, **labels) -> float:
    return samples.get((name, frozenset(labels.items())), 0.0)


USAGE = {  # as the bridge sends it: the usage object's own keys
    "input_tokens": 10,
    "output_tokens": 5,
    "latency_ms": 1500,
    "backend": "scripted",
}
METRICS = {"METRICS_TOKEN": "m-secret-token", "METRICS_ALLOWED_ADDRESSES": []}


@override_settings(**METRICS)
async def test_metrics_after_real_work_match_the_database(alice, channel, nova):
    client = AsyncClient()
    bearer = {"Authorization": "Bearer m-secret-token"}
    before = scrape((await client.get("/metrics", headers=bearer)).content.decode())
    for i in range(3):
        await post(alice, channel, f"m{i}")
    token = await sync_to_async(agent_session)(nova)
    comm = agent_communicator(token, "prefetch=1")
    assert (await comm.connect())[0]
    await next_frame(comm)  # hello
    work = await next_frame(comm)
    await comm.send_json_to({"type": "nonsense"})  # an error frame
    assert (await next_frame(comm))["code"] == "unknown_type"
    await comm.send_json_to({"type": "ack", "id": work["id"], "usage": USAGE})
    second = await next_frame(comm)  # the ack made room: the next one is claimed
    assert second["type"] == "work", second

    response = await client.get("/metrics", headers=bearer)
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/plain; version=")
    after = scrape(response.content.decode())
    queued = await Delivery.objects.filter(acked_at__isnull=True, claimed_by__isnull=True).acount()
    in_flight = await Delivery.objects.filter(
        acked_at__isnull=True, claimed_by__isnull=False
    ).acount()
    assert (queued, in_flight) == (1, 1)
    assert value(after, "agntchat_queue_depth", kind="message", state="queued") == queued
    assert value(after, "agntchat_queue_depth", kind="message", state="in_flight") == in_flight
    assert value(after, "agntchat_queue_depth", kind="task", state="queued") == 0
    assert (
        "agntchat_queue_depth",
        frozenset({"kind": "permission", "state": "waiting"}.items()),
    ) in after
    assert value(after, "agntchat_agents_online") >= 1
    sockets = value(after, "agntchat_open_sockets", socket="agent")
    assert sockets - value(before, "agntchat_open_sockets", socket="agent") == 1
    claims = "agntchat_claim_seconds_count"
    assert value(after, claims, kind="message") - value(before, claims, kind="message") == 2
    waits = "agntchat_claim_wait_seconds_count"
    assert value(after, waits, kind="message") - value(before, waits, kind="message") == 2
    turns = "agntchat_turn_seconds_count"
    assert value(after, turns, backend="scripted") - value(before, turns, backend="scripted") == 1
    assert value(after, "agntchat_turn_seconds_sum", backend="scripted") - value(
        before, "agntchat_turn_seconds_sum", backend="scripted"
    ) == pytest.approx(1.5)
    frames = "agntchat_error_frames_total"
    labels = {"socket": "agent", "code": "unknown_type"}
    assert value(after, frames, **labels) - value(before, frames, **labels) == 1

    await comm.disconnect()
    closed = scrape((await client.get("/metrics", headers=bearer)).content.decode())
    assert value(closed, "agntchat_open_sockets", socket="agent") == sockets - 1


@override_settings(**METRICS)
def test_metrics_are_refused_without_the_token_and_leak_nothing(db):
    for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": "m-secret-token"}):
        response = Client(headers=headers).get("/metrics")
        assert response.status_code == 404
        assert b"agntchat_" not in response.content and b"# HELP" not in response.content


@override_settings(METRICS_TOKEN="", METRICS_ALLOWED_ADDRESSES=["127.0.0.1", "10.0.0.0/8"])
def test_metrics_are_open_to_the_allowed_addresses_only(db):
    assert Client(REMOTE_ADDR="127.0.0.1").get("/metrics").status_code == 200
    assert Client(REMOTE_ADDR="10.1.2.3").get("/metrics").status_code == 200
    assert Client(REMOTE_ADDR="192.168.1.5").get("/metrics").status_code == 404
    # No token configured: a bearer of the empty token is nobody.
    assert (
        Client(REMOTE_ADDR="192.168.1.5", headers={"Authorization": "Bearer "})
        .get("/metrics")
        .status_code
        == 404
    )


def test_server_errors_are_counted():
    from django.http import HttpResponse

    before = metrics.HTTP_ERRORS.labels("500")._value.get()
    middleware = metrics.ServerErrorMetrics(lambda request: HttpResponse(status=500))
    middleware(RequestFactory().get("/"))
    metrics.ServerErrorMetrics(lambda request: HttpResponse(status=404))(RequestFactory().get("/"))
    assert metrics.HTTP_ERRORS.labels("500")._value.get() - before == 1


# --- the staff health page -------------------------------------------------------------------


def parts(response) -> dict:
    """{part name: "ok" or "down"} from the page."""
    import re

    html = response.content.decode()
    return dict(re.findall(r'data-part="([^"]+)" data-state="(ok|down)"', html))


def clear_presence():
    """No agent counted online from another test (presence keys outlive their sockets)."""
    redis = presence.client()
    for key in redis.scan_iter(f"{settings.REDIS_PREFIX}:presence:agent:*", count=1000):
        redis.delete(key)


def test_staff_see_each_part_of_the_deployment(staff, channel, nova):
    clear_presence()  # the page counts every agent online in the deployment
    Schedule.objects.all().delete()
    Schedule.objects.create(
        name="soon",
        func="conversations.jobs.abandon_threads",
        next_run=timezone.now() + timedelta(hours=1),
    )
    response = staff.get("/staff/health/")
    assert response.status_code == 200, response.content
    assert parts(response) == {
        "Database": "ok",
        "Redis": "ok",
        "Worker (django-q2)": "ok",
        "Schedules": "ok",
        "Bridges": "ok",
    }
    assert b"Nova" in response.content and b"0 of 1 agents online" in response.content
    # A message waiting for Nova, whose bridge is off: said, and still healthy (any tenant
    # could otherwise make the page answer 503, paging whoever watches it).
    actions.post_message(nova.owner, channel, "anyone?")
    response = staff.get("/staff/health/")
    assert response.status_code == 200 and parts(response)["Bridges"] == "ok"
    assert b"offline with messages waiting: Nova" in response.content


def test_a_part_that_is_down_shows_red_with_its_reason(staff, alice, channel, nova):
    Schedule.objects.create(
        name="stuck",
        func="conversations.jobs.abandon_threads",
        next_run=timezone.now() - timedelta(hours=1),
    )
    actions.post_message(alice, channel, "anyone?")  # queued for Nova, whose bridge is down
    with override_settings(REDIS_URL="redis://127.0.0.1:1/0"):
        response = staff.get("/staff/health/")
    assert response.status_code == 503
    state = parts(response)
    assert state["Database"] == "ok" and state["Redis"] == "down"
    assert state["Worker (django-q2)"] == "down" and state["Schedules"] == "down"
    assert state["Bridges"] == "ok"  # an agent offline with work waiting is its owner's business
    html = response.content.decode()
    assert "unreachable: ConnectionError" in html
    assert "stuck" in html and "offline with messages waiting: Nova" in html


def test_the_health_page_is_staff_only(alice, bob):
    anonymous = Client().get("/staff/health/")
    assert anonymous.status_code == 302 and "/login/" in anonymous["Location"]
    member = Client()
    member.force_login(bob)
    response = member.get("/staff/health/")
    assert response.status_code == 404 and b"Database" not in response.content
