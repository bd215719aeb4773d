"""A laptop's supervisor socket (/ws/host/, signed in with the person's API token) lasts as long
as that token: revoking it, or making the person inactive, closes the socket at once (4401), on
every node. Before, it went on hearing the person's agents' wake-ups after the token was gone."""

import asyncio

import pytest
from asgiref.sync import sync_to_async
from channels.testing import WebsocketCommunicator

from agntchat.asgi import application
from tests.socket_helpers import next_frame
from workspaces import actions

pytestmark = pytest.mark.django_db(transaction=True)


async def supervisor(secret):
    comm = WebsocketCommunicator(
        application, "/ws/host/", headers=[(b"authorization", f"Bearer {secret}".encode())]
    )
    assert (await comm.connect())[0]
    assert (await next_frame(comm))["type"] == "hello"
    return comm


async def closed_for_good(comm) -> bool:
    error = await next_frame(comm, timeout=15)  # through Redis: slow on a loaded machine
    closed = await comm.receive_output(timeout=15)
    return error["code"] == "unauthorized" and closed == {"type": "websocket.close", "code": 4401}


async def still_open(comm) -> bool:
    await comm.send_json_to({"type": "heartbeat"})
    return (await next_frame(comm)) == {"type": "heartbeat.ok"}


async def test_revoking_the_token_closes_its_supervisor_socket_only(alice):
    revoked, secret = await sync_to_async(actions.issue_api_token)(alice)
    _, other_secret = await sync_to_async(actions.issue_api_token)(alice)
    doomed, kept = await supervisor(secret), await supervisor(other_secret)
    await sync_to_async(actions.revoke_api_token)(revoked)
    assert await closed_for_good(doomed)
    assert await still_open(kept)
    await kept.disconnect()


async def test_a_person_made_inactive_loses_their_supervisor_sockets(alice):
    _, secret = await sync_to_async(actions.issue_api_token)(alice)
    comm = await supervisor(secret)
    alice.is_active = False
    await sync_to_async(alice.save)(update_fields=["is_active"])
    assert await closed_for_good(comm)


async def test_a_laptop_has_at_most_agent_max_connections_supervisor_sockets(alice, settings):
    settings.AGENT_MAX_CONNECTIONS = 2
    _, secret = await sync_to_async(actions.issue_api_token)(alice)
    first, second = await supervisor(secret), await supervisor(secret)
    third = WebsocketCommunicator(
        application, "/ws/host/", headers=[(b"authorization", f"Bearer {secret}".encode())]
    )
    await third.connect()
    assert (await next_frame(third))["code"] == "too_many_connections"
    assert await third.receive_output(timeout=5) == {"type": "websocket.close", "code": 4429}
    await first.disconnect()
    fourth = await supervisor(secret)  # a closed one frees its place
    for comm in (second, fourth):
        await comm.disconnect()


async def test_a_socket_to_no_route_is_refused_not_a_500():
    comm = WebsocketCommunicator(application, "/ws/nothing-here/")
    connected, _ = await comm.connect()
    assert connected is False


async def test_a_supervisor_socket_that_never_heartbeats_is_closed_before_its_place_lapses(
    alice, settings
):
    """Its place under the cap is counted for PRESENCE_TTL_SECONDS after each heartbeat: one
    that sends none is closed (4408) at three quarters of that, so sockets cannot pile up past
    the cap a batch at a time; one that beats stays."""
    settings.AGENT_MAX_CONNECTIONS = 2
    settings.PRESENCE_TTL_SECONDS = 2  # closed after 1 s without a heartbeat
    _, secret = await sync_to_async(actions.issue_api_token)(alice)
    silent, beating = await supervisor(secret), await supervisor(secret)
    for _ in range(8):  # 2.4 s, past the silent one's second
        assert await still_open(beating)
        await asyncio.sleep(0.3)
    assert (await next_frame(silent)) == {
        "type": "error",
        "code": "ping_missed",
        "message": "No heartbeat in 1 second: this connection closes; reconnect.",
    }
    assert await silent.receive_output(timeout=5) == {"type": "websocket.close", "code": 4408}
    replacement = await supervisor(secret)  # the closed one's place is free again
    assert await still_open(beating)
    for comm in (beating, replacement):
        await comm.disconnect()
