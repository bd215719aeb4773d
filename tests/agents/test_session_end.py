"""A session that ends closes its open sockets at once, on whatever server node they are:
revocation of its key, or its expiry. What they held goes back to the queue, the agent goes
offline, and a fresh session picks the work up. Real daphne, real WebSockets, real Redis."""

import asyncio
import json

import pytest
import websockets
from agntchat_bridge.runtime import Bridge, Config
from asgiref.sync import sync_to_async

from agents import actions as agent_actions
from agents.models import AgentSession
from agntchat.core import presence
from agntchat.core.events import group_name
from conversations import actions
from conversations.models import Delivery, Message
from tests.socket_helpers import Daphne, agent_communicator, lose_group_events, next_frame
from tests.waiting import until

pytestmark = pytest.mark.django_db(transaction=True)

post = sync_to_async(actions.post_message)


@sync_to_async
def open_session(agent):
    """A new key and a session opened with it, as a bridge gets them."""
    key, secret = agent_actions.create_agent_key(agent)
    _, token = agent_actions.open_agent_session(secret)
    return key, token


async def open_socket(server, token, prefetch=1):
    ws = await websockets.connect(
        f"{server.ws_url}/ws/agent/?prefetch={prefetch}",
        additional_headers={"Authorization": f"Bearer {token}"},
    )
    assert json.loads(await ws.recv())["type"] == "hello"
    return ws


async def frames_until_closed(ws, timeout=5) -> list[dict]:
    """Every frame until the server closes the socket (within TIMEOUT seconds)."""
    frames = []
    async with asyncio.timeout(timeout):
        try:
            while True:
                frames.append(json.loads(await ws.recv()))
        except websockets.ConnectionClosed:
            return frames


async def work_frames(ws, count, timeout=3) -> list[dict]:
    frames = []
    async with asyncio.timeout(timeout):
        while len(frames) < count:
            frame = json.loads(await ws.recv())
            if frame["type"] == "work":
                frames.append(frame)
    return frames


@pytest.mark.slow
async def test_revoking_a_key_closes_its_open_socket_and_frees_what_it_held(
    alice, channel, nova, server, api
):
    key, token = await open_session(nova)
    ws = await open_socket(server, token)
    held = await post(alice, channel, "held when the key is revoked")
    (work,) = await work_frames(ws, 1)
    assert work["payload"]["message"]["id"] == str(held.id)

    rest = await sync_to_async(api)(alice)
    response = await sync_to_async(rest.delete)(f"/api/v1/agents/{nova.id}/keys/{key.id}/")
    assert response.status_code == 204
    frames = await frames_until_closed(ws)
    assert ws.close_code == 4401
    assert [(f["type"], f["code"]) for f in frames] == [("error", "unauthorized")]
    assert frames[0]["message"] == "The agent key of this session was revoked."
    # Offline, for presence and for whoever asks REST.
    assert not await sync_to_async(presence.is_online)(nova.id)
    shown = await sync_to_async(rest.get)(f"/api/v1/agents/{nova.id}/")
    assert shown.json()["online"] is False

    later = await post(alice, channel, "posted after the revocation")
    _, fresh_token = await open_session(nova)
    fresh = await open_socket(server, fresh_token, prefetch=2)
    # Both at once: the held item was released on the spot, not after its 60 s lease.
    got = await work_frames(fresh, 2)
    assert [(f["payload"]["message"]["id"], f["payload"]["attempt"]) for f in got] == [
        (str(held.id), 2),
        (str(later.id), 1),
    ]
    await fresh.close()


@pytest.mark.slow
async def test_an_idle_socket_closes_when_its_session_expires(
    alice, channel, nova, server, settings
):
    settings.AGENT_SESSION_TTL = 4  # time enough to connect on a busy machine
    _, token = await open_session(nova)
    settings.AGENT_SESSION_TTL = 15 * 60
    ws = await open_socket(server, token)
    held = await post(alice, channel, "held when the session runs out")
    await work_frames(ws, 1)

    frames = await frames_until_closed(ws, timeout=8)  # no frame sent: the server's timer
    assert ws.close_code == 4401
    assert [(f["type"], f["code"]) for f in frames] == [("error", "unauthorized")]
    assert "expired" in frames[0]["message"]
    assert not await sync_to_async(presence.is_online)(nova.id)

    _, fresh_token = await open_session(nova)
    fresh = await open_socket(server, fresh_token)
    (again,) = await work_frames(fresh, 1)
    assert (again["payload"]["message"]["id"], again["payload"]["attempt"]) == (str(held.id), 2)
    await fresh.close()


@pytest.mark.slow
async def test_a_bridge_renews_its_session_on_the_open_socket(alice, channel, nova, tmp_path):
    """Sessions here last 5 s and the bridge beats every 0.2 s: it takes a new token well
    before each expiry and hands it to the open socket, which goes on (no reconnect)."""
    server = Daphne(extra_env={"AGENT_SESSION_TTL": "5"})
    # A first socket warms the server up, so the bridge's first 5 s session is not spent on it.
    _, token = await open_session(nova)
    await (await open_socket(server, token)).close()
    online = sync_to_async(presence.is_online)

    async def offline():
        return not await online(nova.id)

    await until(offline, timeout=5, what="the first socket gone")
    agent_key, key = await sync_to_async(agent_actions.create_agent_key)(nova)
    bridge = Bridge(
        Config(url=server.url, key=key, workdir=tmp_path, heartbeat_seconds=0.2, max_backoff=1)
    )
    running = asyncio.create_task(bridge.run_forever())
    try:
        # The bridge's own view first: the server may count it online a moment before the
        # bridge's connect returns in this event loop.
        socket = await until(lambda: bridge.ws, timeout=10, what="the bridge connected")
        await until(lambda: online(nova.id), timeout=10, what="the bridge online")
        # What must not close the socket is the server's timer for the first session, in
        # another process: the behaviour under test is real time passing its expiry.
        await asyncio.sleep(6)  # past the first session's 5 s
        assert bridge.ws is socket
        await post(alice, channel, "still there?")
        replied = Message.objects.filter(author_agent=nova)
        await until(replied.aexists, timeout=10, what="the reply")
        reply = await Message.objects.aget(author_agent=nova)
        assert reply.body == "Echo: still there?"
        assert bridge.ws is socket
        assert await Delivery.objects.filter(attempts=1).acount() == 1
        # Renewed a third of a session's life before its end, not at every beat: some 8 s of
        # 5 s sessions took two or three exchanges (every beat would be 40, past the limit).
        assert 2 <= await AgentSession.objects.filter(key=agent_key).acount() <= 4
    finally:
        await bridge.stop()
        await asyncio.wait_for(running, 10)
        server.stop()


@pytest.mark.slow
async def test_a_refused_renewal_does_not_stop_the_heartbeats(
    alice, channel, nova, tmp_path, caplog
):
    """One key exchange a minute here: the bridge's renewals are refused (429), which it says
    and tries again at the next beat; its heartbeats go on, so the server keeps it online
    until the session runs out."""
    # Renewals start with a third of the session's life left: 2 s of beats to refuse, and on a
    # loaded machine a refused renewal's round trip alone took over the 1 s that 3 s sessions left.
    server = Daphne(
        extra_env={
            "AGENT_SESSION_TTL": "6",
            "AGENT_SESSIONS_PER_MINUTE": "1",
            "AGENT_SESSIONS_BURST": "1",
        }
    )
    _, key = await sync_to_async(agent_actions.create_agent_key)(nova)
    bridge = Bridge(
        Config(url=server.url, key=key, workdir=tmp_path, heartbeat_seconds=0.2, max_backoff=1)
    )
    running = asyncio.create_task(bridge.run_forever())
    try:
        await until(lambda: bridge.ws, timeout=10, what="the bridge connected")

        def refusals():
            return [
                r
                for r in caplog.records
                if r.name == "agntchat.bridge" and "could not renew the session" in r.getMessage()
            ]

        # Each beat past the renewal point tries again: several refusals, each saying why.
        await until(lambda: len(refusals()) >= 3, timeout=10, what="renewals tried again")
        assert all("429" in r.getMessage() for r in refusals())
        assert not running.done()
    finally:
        await bridge.stop()
        await asyncio.wait_for(running, 10)
        server.stop()


async def test_nothing_a_revoked_socket_sends_is_acted_on(alice, channel, nova):
    key, token = await open_session(nova)
    comm = agent_communicator(token)
    assert (await comm.connect())[0]
    assert (await next_frame(comm))["type"] == "hello"
    await sync_to_async(agent_actions.revoke_agent_key)(key)
    assert (await next_frame(comm))["code"] == "unauthorized"
    assert await comm.receive_output(timeout=3) == {"type": "websocket.close", "code": 4401}
    # Frames already on their way when it closed: dropped, and no work is pushed.
    await comm.send_json_to({"type": "post", "conversationId": str(channel.id), "body": "late"})
    await post(alice, channel, "after the revocation")
    assert await comm.receive_nothing(timeout=0.5)
    assert await Message.objects.filter(author_agent=nova).acount() == 0
    assert await Delivery.objects.filter(claimed_by__isnull=False).acount() == 0
    await comm.disconnect()


async def test_a_heartbeat_closes_a_socket_whose_revocation_event_was_lost(nova):
    key, token = await open_session(nova)
    comm = agent_communicator(token)
    assert (await comm.connect())[0]
    assert (await next_frame(comm))["type"] == "hello"
    # Lose the event for real before revoking.
    (session_id,) = await sync_to_async(list)(
        AgentSession.objects.filter(key=key).values_list("id", flat=True)
    )
    await lose_group_events(group_name(agent_actions.session_topic(session_id)))
    await sync_to_async(agent_actions.revoke_agent_key)(key)
    assert await comm.receive_nothing(timeout=0.3)
    await comm.send_json_to({"type": "heartbeat"})
    assert (await next_frame(comm))["code"] == "unauthorized"
    assert await comm.receive_output(timeout=3) == {"type": "websocket.close", "code": 4401}
    assert not await sync_to_async(presence.is_online)(nova.id)
    await comm.disconnect()


async def test_a_socket_renewed_with_another_session_outlives_the_first(alice, bob, nova):
    first_key, first = await open_session(nova)
    _, second = await open_session(nova)
    stranger = await sync_to_async(agent_actions.create_agent)(bob, name="Stranger")
    _, strangers = await open_session(stranger)
    comm = agent_communicator(first)
    assert (await comm.connect())[0]
    assert (await next_frame(comm))["type"] == "hello"
    for bad, code in (
        (strangers, "unauthorized"),
        ("ags_forged", "unauthorized"),
        (42, "bad_frame"),
    ):
        await comm.send_json_to({"type": "session.renew", "token": bad})
        assert (await next_frame(comm))["code"] == code
    await comm.send_json_to({"type": "session.renew", "token": second})
    renewed = await next_frame(comm)
    assert renewed["type"] == "session.renewed" and renewed["expiresAt"]
    await sync_to_async(agent_actions.revoke_agent_key)(first_key)
    assert await comm.receive_nothing(timeout=0.5)  # it serves under the second session now
    await comm.send_json_to({"type": "heartbeat"})
    assert await comm.receive_nothing(timeout=0.3)
    assert await sync_to_async(presence.is_online)(nova.id)
    await comm.disconnect()
