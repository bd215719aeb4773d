"""The browser live socket: who hears about new conversations."""

import json

import pytest
from asgiref.sync import sync_to_async

from conversations.actions import create_conversation
from tests.conftest import client_for
from tests.socket_helpers import frames_until, live_socket_for, next_frame

pytestmark = pytest.mark.django_db(transaction=True)


async def test_a_new_channel_is_news_for_every_member_and_a_dm_only_for_its_people(
    alice, bob, charlie, team_a, team_b
):
    bob_live, charlie_live = await live_socket_for(bob), await live_socket_for(charlie)
    channel = await sync_to_async(create_conversation)(alice, team_a, kind="channel", title="ideas")
    seen = await frames_until(bob_live, lambda f: f.get("type") == "conversation.created")
    assert seen[-1]["conversationId"] == str(channel.id)
    await sync_to_async(create_conversation)(alice, team_a, kind="direct", title="private")
    assert await bob_live.receive_nothing(timeout=0.3)  # Bob is not in that DM
    assert await charlie_live.receive_nothing(timeout=0.2)
    for comm in (bob_live, charlie_live):
        await comm.disconnect()


async def test_typing_reaches_the_readers_of_the_conversation_and_no_one_else(
    alice, bob, charlie, team_a, team_b
):
    channel = await sync_to_async(create_conversation)(alice, team_a, kind="channel", title="c")
    elsewhere = await sync_to_async(create_conversation)(charlie, team_b, kind="channel", title="b")
    alice_live, bob_live, charlie_live = (
        await live_socket_for(alice),
        await live_socket_for(bob),
        await live_socket_for(charlie),
    )
    await alice_live.send_json_to({"type": "typing", "conversationId": str(channel.id)})
    seen = await frames_until(bob_live, lambda f: f.get("type") == "typing")
    assert seen[-1] == {
        "type": "typing",
        "conversationId": str(channel.id),
        "user": {"id": str(alice.id), "name": "alice"},
    }
    # The sender hears itself (the browser ignores its own user); the outsider hears nothing.
    own = await frames_until(alice_live, lambda f: f.get("type") == "typing")
    assert own[-1]["user"]["id"] == str(alice.id)
    assert await charlie_live.receive_nothing(timeout=0.3)
    # Another workspace's conversation, or no id: an error frame, and nothing is sent.
    for conversation_id, code in (
        (str(elsewhere.id), "conversation_not_found"),
        (None, "bad_frame"),
    ):
        await alice_live.send_json_to({"type": "typing", "conversationId": conversation_id})
        error = await next_frame(alice_live)
        assert (error["type"], error["code"]) == ("error", code)
    assert await bob_live.receive_nothing(timeout=0.3)
    assert await charlie_live.receive_nothing(timeout=0.2)
    for comm in (alice_live, bob_live, charlie_live):
        await comm.disconnect()


async def test_a_message_reads_the_same_over_rest_and_live(alice, bob, team_a):
    channel = await sync_to_async(create_conversation)(alice, team_a, kind="channel", title="c")
    bob_live = await live_socket_for(bob)
    alice_api, bob_api = (
        await sync_to_async(client_for)(alice),
        await sync_to_async(client_for)(bob),
    )
    response = await sync_to_async(alice_api.post)(
        f"/api/v1/conversations/{channel.id}/messages/", {"body": "same everywhere"}, format="json"
    )
    assert response.status_code == 201
    seen = await frames_until(bob_live, lambda f: f.get("type") == "message.created")
    # Timestamps included: one conversion (events.wire) for the API and the sockets.
    assert seen[-1]["message"] == json.loads(response.content)
    history = await sync_to_async(bob_api.get)(f"/api/v1/conversations/{channel.id}/messages/")
    assert history.json()["results"] == [seen[-1]["message"]]
    await bob_live.disconnect()
