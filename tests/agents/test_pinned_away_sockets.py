"""An agent its owner pins away from a workspace stops acting there at once (AGT-1): a socket it
opened before can neither post there nor keep a turn of it, and its session is refused over
REST too. Nova starts out in all of Alice's workspaces, #general of team A among them."""

import pytest
from asgiref.sync import sync_to_async
from rest_framework.test import APIClient

from agents import actions as agent_actions
from conversations import actions
from conversations.models import Message
from tests.conftest import agent_session
from tests.socket_helpers import agent_communicator, next_frame

pytestmark = pytest.mark.django_db(transaction=True)


async def connect(token):
    comm = agent_communicator(token)
    assert (await comm.connect())[0]
    assert (await next_frame(comm))["type"] == "hello"
    return comm


def pin_to_personal_workspace(alice, nova) -> None:
    personal = alice.owned_workspaces.get(kind="personal")
    agent_actions.set_agent_pins(nova, [personal.id])


@sync_to_async
def bodies(channel) -> list[str]:
    return list(
        Message.objects.filter(conversation=channel)
        .order_by("created_at")
        .values_list("body", flat=True)
    )


async def test_a_socket_opened_before_stops_posting_there_at_once(alice, channel, nova):
    comm = await connect(await sync_to_async(agent_session)(nova))
    await sync_to_async(actions.post_message)(alice, channel, "@nova anything new?")
    work = await next_frame(comm)
    assert work["type"] == "work"
    await comm.send_json_to({"type": "post", "conversationId": str(channel.id), "body": "Yes"})
    assert (await next_frame(comm))["type"] == "posted"

    await sync_to_async(pin_to_personal_workspace)(alice, nova)

    await comm.send_json_to({"type": "post", "conversationId": str(channel.id), "body": "More"})
    assert (await next_frame(comm)).get("code") == "conversation_not_found"
    # The turn it held there cannot be kept either: its lease runs out.
    await comm.send_json_to({"type": "extend", "id": work["id"]})
    assert (await next_frame(comm)).get("code") == "conversation_not_found"
    assert await bodies(channel) == ["@nova anything new?", "Yes"]
    await comm.disconnect()


async def test_unpinning_one_of_two_workspaces_stops_the_socket_there(alice, channel, nova):
    personal = await sync_to_async(lambda: alice.owned_workspaces.get(kind="personal"))()
    await sync_to_async(agent_actions.set_agent_pins)(nova, [personal.id, channel.workspace_id])
    comm = await connect(await sync_to_async(agent_session)(nova))
    await comm.send_json_to({"type": "post", "conversationId": str(channel.id), "body": "Yes"})
    assert (await next_frame(comm))["type"] == "posted"

    await sync_to_async(agent_actions.set_agent_pins)(nova, [personal.id])

    await comm.send_json_to({"type": "post", "conversationId": str(channel.id), "body": "More"})
    assert (await next_frame(comm)).get("code") == "conversation_not_found"
    assert await bodies(channel) == ["Yes"]
    await comm.disconnect()


def test_its_session_cannot_post_there_over_rest(alice, channel, nova):
    as_nova = APIClient()
    as_nova.credentials(HTTP_AUTHORIZATION=f"Bearer {agent_session(nova)}")
    path = f"/api/v1/conversations/{channel.id}/messages/"
    assert as_nova.post(path, {"body": "Yes"}, format="json").status_code == 201

    pin_to_personal_workspace(alice, nova)

    refused = as_nova.post(path, {"body": "More"}, format="json")
    assert refused.status_code == 404
    assert refused.json()["error"]["code"] == "conversation_not_found"
    assert list(Message.objects.filter(conversation=channel).values_list("body", flat=True)) == [
        "Yes"
    ]
