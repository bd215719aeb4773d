"""Rate limits in the real Redis (core/throttle.py): posting per person and per agent, API
tokens, agent key → session exchanges (and their lockout), socket frames, agent connections."""

import json

import pytest
import requests
import websockets
from asgiref.sync import async_to_sync
from django.db import connection
from django.test import override_settings
from django.test.utils import CaptureQueriesContext

from agents import actions as agent_actions
from agents.models import AgentSession
from agntchat.core import presence, throttle
from conversations import actions
from conversations.models import Message
from tests.conftest import agent_session, client_for
from tests.socket_helpers import Daphne, agent_communicator, drain, live_socket_for, next_frame
from workspaces.models import ApiToken

pytestmark = pytest.mark.django_db(transaction=True)

RIGHT = "pw-alice-123456"  # the cast's password for alice (tests/conftest.py)


def post_rest(client, conversation, body):
    return client.post(
        f"/api/v1/conversations/{conversation.id}/messages/", {"body": body}, format="json"
    )


def test_a_rate_allows_its_burst_then_says_how_long_to_wait():
    rate = throttle.Rate("test:burst", per=60, burst=3)
    assert [throttle.hit(rate, "k") for _ in range(3)] == [0, 0, 0]
    assert throttle.hit(rate, "k") == 1  # one a second on average: the next in a second
    assert throttle.hit(rate, "other") == 0  # keys are counted apart
    slow = throttle.Rate("test:slow", per=2, window=60, burst=1)
    assert throttle.hit(slow, "k") == 0
    assert 29 <= throttle.hit(slow, "k") <= 30


def test_a_bucket_refills_with_time():
    bucket = throttle.Bucket(60, burst=2)  # one a second, two at once
    assert bucket.hit(100.0) == 0 and bucket.hit(100.0) == 0
    assert bucket.hit(100.0) == pytest.approx(1.0)
    assert bucket.hit(101.0) == 0


@override_settings(PERSON_POSTS_PER_MINUTE=60, PERSON_POSTS_BURST=3)
def test_a_person_over_the_post_rate_gets_429_and_nothing_is_written(alice, channel):
    client = client_for(alice)
    for n in range(3):
        assert post_rest(client, channel, f"hello {n}").status_code == 201
    refused = post_rest(client, channel, "one too many")
    assert refused.status_code == 429
    assert refused.json() == {
        "error": {
            "code": "rate_limited",
            "message": "Too many messages: try again in 1 second.",
        }
    }
    assert refused["Retry-After"] == "1"
    assert Message.objects.filter(conversation=channel).count() == 3
    assert not Message.objects.filter(body="one too many").exists()


@override_settings(PERSON_POSTS_PER_MINUTE=60, PERSON_POSTS_BURST=2)
def test_the_post_rate_is_per_person_and_a_retry_of_a_post_is_not_counted(alice, bob, channel):
    client = client_for(alice)
    first = client.post(
        f"/api/v1/conversations/{channel.id}/messages/",
        {"body": "once", "ref": "r1"},
        format="json",
    )
    assert first.status_code == 201
    assert post_rest(client, channel, "two").status_code == 201
    again = client.post(
        f"/api/v1/conversations/{channel.id}/messages/",
        {"body": "once", "ref": "r1"},
        format="json",
    )
    assert again.status_code in (200, 201) and again.json()["id"] == first.json()["id"]
    assert post_rest(client, channel, "three").status_code == 429
    assert post_rest(client_for(bob), channel, "bob's own").status_code == 201


def test_a_post_costs_one_redis_round_trip(alice, channel, monkeypatch):
    redis = presence.client()
    sent = []
    real = redis.execute_command

    def counting(*args, **kwargs):
        sent.append(args[0])
        return real(*args, **kwargs)

    actions.post_message(alice, channel, "warm up")  # the script is loaded once per server
    monkeypatch.setattr(redis, "execute_command", counting)
    with CaptureQueriesContext(connection):
        actions.post_message(alice, channel, "counted")
    assert sent == ["EVALSHA"]


@override_settings(AGENT_POSTS_PER_MINUTE=60, AGENT_POSTS_BURST=1)
def test_an_agent_over_its_post_rate_gets_an_error_frame(alice, channel, nova):
    token = agent_session(nova)

    async def run():
        comm = agent_communicator(token)
        assert (await comm.connect())[0]
        assert (await next_frame(comm))["type"] == "hello"
        for n in range(2):
            await comm.send_json_to(
                {"type": "post", "conversationId": str(channel.id), "body": f"n{n}", "ref": f"p{n}"}
            )
        frames = await drain(comm, quiet=0.5)
        await comm.disconnect()
        return frames

    frames = async_to_sync(run)()
    errors = [f for f in frames if f["type"] == "error"]
    assert [(e["code"], e.get("ref")) for e in errors] == [("rate_limited", "p1")]
    assert list(Message.objects.filter(author_agent=nova).values_list("body", flat=True)) == ["n0"]


@override_settings(TOKENS_PER_MINUTE=60, TOKENS_BURST=2)
def test_api_tokens_over_the_rate_get_429_and_none_is_issued(alice, client):
    def ask():
        return client.post(
            "/api/v1/auth/token/",
            {"username": "alice", "password": RIGHT},
            content_type="application/json",
        )

    assert [ask().status_code for _ in range(2)] == [201, 201]
    refused = ask()
    assert refused.status_code == 429 and refused.json()["error"]["code"] == "rate_limited"
    assert int(refused["Retry-After"]) >= 1
    assert ApiToken.objects.filter(user=alice).count() == 2


def exchange(client, secret, address="127.0.0.1"):
    return client.post(
        "/api/v1/agent/session/", HTTP_AUTHORIZATION=f"Bearer {secret}", REMOTE_ADDR=address
    )


@override_settings(AGENT_SESSIONS_PER_MINUTE=60, AGENT_SESSIONS_BURST=2)
def test_session_exchanges_over_the_agents_rate_get_429_and_open_nothing(nova, client):
    _, key = agent_actions.create_agent_key(nova)
    assert [exchange(client, key).status_code for _ in range(2)] == [200, 200]
    refused = exchange(client, key)
    assert refused.status_code == 429 and refused.json()["error"]["code"] == "rate_limited"
    assert AgentSession.objects.filter(agent=nova).count() == 2


@override_settings(AGENT_KEY_FAILURES_PER_ADDRESS=3)
def test_bad_keys_lock_the_address_even_against_a_good_key(nova, client):
    _, key = agent_actions.create_agent_key(nova)
    for _ in range(3):
        assert exchange(client, "agk_wrong").status_code == 401
    locked = exchange(client, key)
    assert locked.status_code == 429
    assert locked.json() == {
        "error": {
            "code": "key_exchange_throttled",
            "message": "Too many invalid agent keys from this address. Try again in 1 minute.",
        }
    }
    assert 55 <= int(locked["Retry-After"]) <= 60
    assert AgentSession.objects.filter(agent=nova).count() == 0
    assert exchange(client, key, address="10.0.0.2").status_code == 200  # another address


@override_settings(BROWSER_FRAMES_PER_MINUTE=60, BROWSER_FRAMES_BURST=2)
def test_browser_frames_over_the_rate_get_an_error_and_typing_is_dropped_quietly(alice, channel):
    async def run():
        comm = await live_socket_for(alice)
        typing = {"type": "typing", "conversationId": str(channel.id)}
        await comm.send_json_to({"type": "ping"})
        await comm.send_json_to({"type": "ping", "id": "p2"})
        await comm.send_json_to({"type": "ping", "id": "p3"})
        await comm.send_json_to(typing)
        frames = await drain(comm, quiet=0.5)
        await comm.disconnect()
        return frames

    frames = async_to_sync(run)()
    assert [f["type"] for f in frames] == ["pong", "pong", "error"]
    assert frames[2]["code"] == "rate_limited" and frames[2]["id"] == "p3"
    assert frames[2]["message"] == "Too many frames: try again in 1 second."


@override_settings(
    BROWSER_FRAMES_PER_MINUTE=600, BROWSER_FRAMES_BURST=100, TYPING_PER_MINUTE=6, TYPING_BURST=3
)
def test_typing_is_limited_per_person_over_all_their_sockets(alice, bob, channel):
    """Each socket is well within its own frame rate; the person, over three of them, is not:
    the others hear TYPING_BURST announcements, and the rest is dropped without a word."""

    async def run():
        listener = await live_socket_for(bob)
        tabs = [await live_socket_for(alice) for _ in range(3)]
        for tab in tabs:
            for _ in range(2):
                await tab.send_json_to({"type": "typing", "conversationId": str(channel.id)})
        heard = await drain(listener, quiet=0.7)
        said = [await drain(tab, quiet=0.1) for tab in tabs]
        for comm in (listener, *tabs):
            await comm.disconnect()
        return heard, said

    heard, said = async_to_sync(run)()
    assert [f["type"] for f in heard] == ["typing"] * 3
    assert all(f["type"] == "typing" for frames in said for f in frames)  # no error frame


@override_settings(AGENT_MAX_CONNECTIONS=2)
def test_an_agent_over_its_connection_cap_is_refused_with_a_reason(nova):
    token = agent_session(nova)

    async def run():
        first, second = agent_communicator(token), agent_communicator(token)
        for comm in (first, second):
            assert (await comm.connect())[0]
            assert (await next_frame(comm))["type"] == "hello"
        third = agent_communicator(token)
        await third.connect()
        refused = await next_frame(third)
        closed = await third.receive_output(timeout=2)
        await first.disconnect()  # its place is free again
        fourth = agent_communicator(token)
        await fourth.connect()
        admitted = await next_frame(fourth)
        for comm in (second, fourth):
            await comm.disconnect()
        return refused, closed, admitted

    refused, closed, admitted = async_to_sync(run)()
    assert refused["type"] == "error" and refused["code"] == "too_many_connections"
    assert "2 open connections" in refused["message"]
    assert closed == {"type": "websocket.close", "code": 4429}
    assert admitted["type"] == "hello"
    assert presence.connections(nova.id) == []


@pytest.mark.slow
def test_two_server_processes_count_one_limit(alice, channel):
    """Posts alternated between two daphnes: the person's rate is counted once, in Redis."""
    limits = {"PERSON_POSTS_PER_MINUTE": "60", "PERSON_POSTS_BURST": "4"}
    token = client_for(alice)._credentials["HTTP_AUTHORIZATION"]
    servers = [Daphne(limits), Daphne(limits)]
    try:
        statuses = []
        for n in range(6):
            server = servers[n % 2]
            answer = requests.post(
                f"{server.url}/api/v1/conversations/{channel.id}/messages/",
                json={"body": f"alternate {n}"},
                headers={"Authorization": token},
                timeout=10,
            )
            statuses.append(answer.status_code)
        assert statuses == [201, 201, 201, 201, 429, 429]
        assert answer.headers["Retry-After"] and answer.json()["error"]["code"] == "rate_limited"
        assert Message.objects.filter(body__startswith="alternate").count() == 4
    finally:
        for server in servers:
            server.stop()


@pytest.mark.slow
def test_a_real_server_closes_an_agents_extra_connection_4429(nova):
    token = agent_session(nova)
    server = Daphne({"AGENT_MAX_CONNECTIONS": "1"})

    async def run():
        headers = {"Authorization": f"Bearer {token}"}
        async with websockets.connect(
            f"{server.ws_url}/ws/agent/", additional_headers=headers
        ) as one:
            assert json.loads(await one.recv())["type"] == "hello"
            async with websockets.connect(
                f"{server.ws_url}/ws/agent/", additional_headers=headers
            ) as two:
                refused = json.loads(await two.recv())
                with pytest.raises(websockets.ConnectionClosed) as closed:
                    await two.recv()
                return refused, closed.value.rcvd

    try:
        refused, close = async_to_sync(run)()
    finally:
        server.stop()
    assert refused["code"] == "too_many_connections"
    assert close.code == 4429 and "connection" in refused["message"]


@override_settings(STOPS_PER_MINUTE=60, STOPS_BURST=2)
def test_stops_over_the_rate_get_429_before_anything_is_read(alice, channel):
    client = client_for(alice)
    url = f"/api/v1/conversations/{channel.id}/stop/"
    work = "00000000-0000-4000-8000-000000000001"  # no turn: each press is a 409 until the rate
    first = [client.post(url, {"work": work}, format="json").status_code for _ in range(2)]
    assert first == [409, 409]
    with CaptureQueriesContext(connection) as queries:
        refused = client.post(url, {"work": work}, format="json")
    assert refused.status_code == 429
    assert refused.json()["error"]["message"] == "Too many stops: try again in 1 second."
    assert not [q for q in queries if "delivery" in q["sql"]]
