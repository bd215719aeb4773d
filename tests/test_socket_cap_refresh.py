"""A person's browser sockets count against BROWSER_MAX_CONNECTIONS in Redis for as long as
they check in (a ping's sign-in check), an agent's sockets against AGENT_MAX_CONNECTIONS for as
long as they heartbeat. One that never checks in is closed before its place lapses: were it
left open, a client could open its cap's worth again each time the earlier ones stopped
counting, and get past the cap in steps."""

import asyncio
import time

import pytest
from asgiref.sync import sync_to_async
from channels.testing import WebsocketCommunicator
from django.test import Client

from agntchat.asgi import application
from agntchat.core import presence
from conversations import actions, consumers
from conversations.models import Delivery
from tests.conftest import agent_session
from tests.socket_helpers import agent_communicator, live_socket_for, next_frame

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def quick_checks(monkeypatch, settings):
    """One socket per person; a socket checks in on every ping, is closed after 1 s without
    one, and is counted for 2 s after its last."""
    settings.BROWSER_MAX_CONNECTIONS = 1
    monkeypatch.setattr(consumers, "SIGNED_IN_CHECK_SECONDS", 0)
    monkeypatch.setattr(consumers, "CHECK_IN_SLACK_SECONDS", 1)


async def logged_in(user) -> Client:
    client = Client()
    await sync_to_async(client.force_login)(user)
    return client


async def open_socket(client: Client) -> WebsocketCommunicator:
    comm = WebsocketCommunicator(
        application,
        "/ws/live/",
        headers=[
            (b"cookie", f"sessionid={client.cookies['sessionid'].value}".encode()),
            (b"origin", b"http://127.0.0.1"),
            (b"host", b"127.0.0.1"),
        ],
    )
    assert (await comm.connect())[0]
    return comm


async def counted_until(user) -> list[float]:
    """When each of USER's counted sockets stops counting (epoch seconds)."""
    key = presence._key(user.pk, "person")
    entries = await sync_to_async(presence.client().zrange)(key, 0, -1, withscores=True)
    return [expiry for _, expiry in entries]


async def test_a_socket_that_never_pings_is_closed_while_still_counted(alice, quick_checks):
    client = await logged_in(alice)
    silent = await live_socket_for(alice, client=client)
    refused = await open_socket(client)
    assert (await next_frame(refused))["code"] == "too_many_connections"
    await refused.disconnect()

    error = await next_frame(silent, timeout=10)
    assert error == {
        "type": "error",
        "code": "ping_missed",
        "message": "No ping in 1 second: this connection closes; reconnect.",
    }
    assert await silent.receive_output(timeout=5) == {"type": "websocket.close", "code": 4408}
    # Closed before its place lapsed: at no moment was it open and uncounted.
    (expiry,) = await counted_until(alice)
    assert expiry > time.time()
    await silent.disconnect()
    assert await counted_until(alice) == []
    again = await open_socket(client)
    assert (await next_frame(again))["type"] == "hello"
    await again.disconnect()


async def test_a_socket_that_pings_stays_open_past_the_unchecked_limit(alice, quick_checks):
    comm = await live_socket_for(alice, client=await logged_in(alice))
    opened = time.monotonic()
    while time.monotonic() - opened < 2.5:  # past 1 s without a check-in, twice over
        await comm.send_json_to({"type": "ping"})
        assert (await next_frame(comm)) == {"type": "pong"}
        await asyncio.sleep(0.3)  # the time the test is about, between a client's pings
    (expiry,) = await counted_until(alice)
    assert expiry > time.time()
    await comm.disconnect()


# An agent's sockets: counted against AGENT_MAX_CONNECTIONS for PRESENCE_TTL_SECONDS after each
# heartbeat, and closed when three quarters of that passed without one.


@pytest.fixture
def quick_heartbeats(settings):
    """One socket per agent, counted for 2 s after its last heartbeat, closed after 1 s."""
    settings.AGENT_MAX_CONNECTIONS = 1
    settings.PRESENCE_TTL_SECONDS = 2


async def agent_socket(token: str) -> WebsocketCommunicator:
    comm = agent_communicator(token)
    assert (await comm.connect())[0]
    return comm


async def agent_counted_until(agent) -> list[float]:
    key = presence._key(agent.id)
    entries = await sync_to_async(presence.client().zrange)(key, 0, -1, withscores=True)
    return [expiry for _, expiry in entries]


async def test_an_agent_socket_that_never_heartbeats_is_closed_while_still_counted(
    alice, channel, nova, quick_heartbeats
):
    token = await sync_to_async(agent_session)(nova)
    silent = await agent_socket(token)
    assert (await next_frame(silent))["type"] == "hello"
    await sync_to_async(actions.post_message)(alice, channel, "Write a long essay")
    work = await next_frame(silent)
    refused = await agent_socket(token)
    assert (await next_frame(refused))["code"] == "too_many_connections"
    await refused.disconnect()

    error = await next_frame(silent, timeout=10)
    assert error == {
        "type": "error",
        "code": "ping_missed",
        "message": "No heartbeat in 1 second: this connection closes; reconnect.",
    }
    # Closed before its place lapsed, and having let go of it and of the item it held.
    assert await silent.receive_output(timeout=5) == {"type": "websocket.close", "code": 4408}
    assert await agent_counted_until(nova) == []
    delivery = await Delivery.objects.aget(pk=work["id"])
    assert delivery.claimed_by is None and delivery.acked_at is None
    await silent.disconnect()
    again = await agent_socket(token)
    assert (await next_frame(again))["type"] == "hello"
    assert (await next_frame(again))["id"] == work["id"]  # the item, offered again
    await again.disconnect()


async def test_an_agent_socket_that_heartbeats_stays_open_past_the_limit(nova, quick_heartbeats):
    comm = await agent_socket(await sync_to_async(agent_session)(nova))
    assert (await next_frame(comm))["type"] == "hello"
    opened = time.monotonic()
    while time.monotonic() - opened < 2.5:  # past 1 s without a heartbeat, twice over
        await comm.send_json_to({"type": "heartbeat"})
        assert await comm.receive_nothing(timeout=0.3)  # between a bridge's heartbeats
    (expiry,) = await agent_counted_until(nova)
    assert expiry > time.time()
    await comm.send_json_to({"type": "personality.get"})
    assert (await next_frame(comm))["type"] == "personality"
    await comm.disconnect()
