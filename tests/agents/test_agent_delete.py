"""An owner deletes their agent for good: over REST (the agent page's "Delete agent" calls it).
What it said stays, shown as a deleted author's; its keys, queue, tasks and memory go; a turn it
held passes on; its open sockets close. A teammate is refused (403), anyone else finds nothing
(404), and nothing changes for either."""

import pytest
from asgiref.sync import sync_to_async

from agents import actions as agent_actions
from agents.models import Agent, AgentKey
from conversations.actions import post_message
from conversations.models import Delivery, Message, Task
from conversations.tasks import create_task
from tests.conftest import agent_session
from tests.socket_helpers import agent_communicator, next_frame
from work import memory
from work.models import MemoryItem
from workspaces.models import AuditEntry

BUDGET = "Please review the budget numbers"


@pytest.mark.django_db
def test_the_owner_deletes_an_agent_what_it_said_stays(alice, team_a, channel, nova, api, client):
    said = post_message(nova, channel, "Here is what I found.")
    create_task(alice, team_a, nova, "Summarise the quarter")
    memory.remember(nova, team_a.id, "Alice likes short answers")
    agent_actions.create_agent_key(nova)

    assert api(alice).delete(f"/api/v1/agents/{nova.id}/").status_code == 204

    assert not Agent.objects.filter(pk=nova.pk).exists()
    assert not AgentKey.objects.exists() and not Task.objects.exists()
    assert not MemoryItem.objects.exists()
    said.refresh_from_db()
    assert said.body == "Here is what I found." and said.author_agent_id is None
    assert api(alice).get(f"/api/v1/agents/{nova.id}/").status_code == 404
    entry = AuditEntry.objects.get(action="agent.deleted")
    assert entry.target_label == "Nova" and entry.actor_user == alice
    client.force_login(alice)
    page = client.get(f"/w/{team_a.id}/c/{channel.id}/").content.decode()
    assert "Deleted author" in page and "Here is what I found." in page


@pytest.mark.django_db
def test_a_teammate_cannot_delete_it_and_an_outsider_finds_nothing(team_a, bob, charlie, nova, api):
    assert api(bob).delete(f"/api/v1/agents/{nova.id}/").status_code == 403
    assert api(charlie).delete(f"/api/v1/agents/{nova.id}/").status_code == 404
    assert Agent.objects.filter(pk=nova.pk).exists()


@pytest.mark.django_db
def test_a_turn_it_held_passes_on(alice, bob, api, budget_room):
    conversation, rex, gus = budget_room
    asked = post_message(alice, conversation, BUDGET)

    assert api(bob).delete(f"/api/v1/agents/{rex.id}/").status_code == 204

    assert Delivery.objects.get(message=asked, agent=gus, acked_at__isnull=True).holds_turn


@pytest.mark.django_db(transaction=True)
async def test_its_open_socket_is_told_and_closed(alice, nova):
    token = await sync_to_async(agent_session)(nova)
    comm = agent_communicator(token)
    assert (await comm.connect())[0]
    assert (await next_frame(comm))["type"] == "hello"

    await sync_to_async(agent_actions.delete_agent)(nova)

    refusal = await next_frame(comm)
    assert refusal["code"] == "unauthorized"
    assert refusal["message"] == "The agent was deleted by its owner."
    assert (await comm.receive_output(timeout=2))["type"] == "websocket.close"
    assert not await Message.objects.filter(author_agent_id=nova.id).aexists()
