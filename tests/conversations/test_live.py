"""The browser live socket: who hears about new conversations."""

import pytest
from asgiref.sync import sync_to_async
from channels.testing import WebsocketCommunicator
from django.test import Client

from agntchat.asgi import application
from conversations.actions import create_conversation
from tests.socket_helpers import frames_until, next_frame

pytestmark = pytest.mark.django_db(transaction=True)


async def live_for(user):
    client = Client()
    await sync_to_async(client.force_login)(user)
    cookie = f"sessionid={client.cookies['sessionid'].value}".encode()
    comm = WebsocketCommunicator(
        application,
        "/ws/live/",
        headers=[(b"cookie", cookie), (b"origin", b"http://127.0.0.1"), (b"host", b"127.0.0.1")],
    )
    assert (await comm.connect())[0]
    assert (await next_frame(comm))["type"] == "hello"
    return comm


async def test_a_new_channel_is_news_for_every_member_and_a_dm_only_for_its_people(
    alice, bob, charlie, team_a, team_b
):
    bob_live, charlie_live = await live_for(bob), await live_for(charlie)
    channel = await sync_to_async(create_conversation)(alice, team_a, kind="channel", title="ideas")
    seen = await frames_until(bob_live, lambda f: f.get("type") == "conversation.created")
    assert seen[-1]["conversationId"] == str(channel.id)
    await sync_to_async(create_conversation)(alice, team_a, kind="direct", title="private")
    assert await bob_live.receive_nothing(timeout=0.3)  # Bob is not in that DM
    assert await charlie_live.receive_nothing(timeout=0.2)
    for comm in (bob_live, charlie_live):
        await comm.disconnect()
