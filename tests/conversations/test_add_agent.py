"""Bringing an agent into a conversation (conversations.actions.add_agent_to_conversation): the
person must be able to read the conversation and the agent must appear in its workspace."""

import pytest

from agents import actions as agent_actions
from conversations import live
from conversations.actions import add_agent_to_conversation, create_conversation
from conversations.exceptions import ConversationNotFound, ConversationRule
from conversations.models import Participant
from workspaces.models import Workspace

pytestmark = pytest.mark.django_db


@pytest.fixture
def published(monkeypatch):
    """Events the actions hand to the channel layer: (topics, event type)."""
    sent = []
    monkeypatch.setattr(
        live, "publish_live", lambda topics, event_type, **data: sent.append((topics, event_type))
    )
    return sent


def test_a_member_brings_in_an_agent_of_the_workspace(bob, alice, team_a, channel, published):
    rex = agent_actions.create_agent(alice, name="Rex", backend="scripted")
    # Bob did not create #general and is no admin: reading it is enough.
    participant = add_agent_to_conversation(bob, channel, rex)
    assert participant.conversation_id == channel.id and participant.agent_id == rex.id
    assert published == [([f"workspace.{team_a.id}"], "conversation.updated")]
    # Twice is the same participant, and no news.
    assert add_agent_to_conversation(bob, channel, rex) == participant
    assert len(published) == 1


def test_refused_changes_nothing(alice, charlie, team_a, team_b, channel, published):
    personal = Workspace.objects.get(owner=alice, kind="personal")
    private = agent_actions.create_agent(
        alice, name="Private", backend="scripted", pinned_workspace_ids=[personal.id]
    )
    rex = agent_actions.create_agent(alice, name="Rex", backend="scripted")
    spy = agent_actions.create_agent(charlie, name="Spy", backend="scripted")
    dm = create_conversation(alice, team_a, kind="direct")
    published.clear()
    before = Participant.objects.count()
    # An agent pinned away from the workspace never joins, even when its owner asks.
    with pytest.raises(ConversationRule, match="Private does not appear in this workspace"):
        add_agent_to_conversation(alice, channel, private)
    # Someone who cannot read the conversation: not found, whatever the agent.
    with pytest.raises(ConversationNotFound):
        add_agent_to_conversation(charlie, channel, spy)
    with pytest.raises(ConversationNotFound):
        add_agent_to_conversation(charlie, dm, rex)
    # An agent of another workspace.
    with pytest.raises(ConversationRule):
        add_agent_to_conversation(alice, channel, spy)
    # A direct conversation is found again by who is in it: an agent added would make a second
    # one with the same people (open_direct); only channels take agents in.
    with pytest.raises(ConversationRule, match="channels only"):
        add_agent_to_conversation(alice, dm, rex)
    assert Participant.objects.count() == before and published == []


def test_a_new_channel_naming_no_agent_id_says_so_on_the_page(client, alice, team_a):
    """A value that is no UUID at all, as a hand-made form sends: the form says what is wrong
    (it was a 500, Django's own UUID error escaping the view), and no channel is made."""
    client.force_login(alice)
    before = team_a.conversations.count()
    response = client.post(
        f"/w/{team_a.id}/channels/new/", {"title": "plans", "agents": ["not-a-uuid"]}
    )
    assert response.status_code == 200
    assert "Some participants are not in this workspace." in response.content.decode()
    assert team_a.conversations.count() == before


def test_the_page_says_why_an_agent_was_not_added(client, alice, team_a, channel):
    personal = Workspace.objects.get(owner=alice, kind="personal")
    private = agent_actions.create_agent(
        alice, name="Private", backend="scripted", pinned_workspace_ids=[personal.id]
    )
    client.force_login(alice)
    response = client.post(
        f"/w/{team_a.id}/c/{channel.id}/agents/", {"agent": private.id}, follow=True
    )
    assert response.status_code == 200
    assert "Private does not appear in this workspace." in response.content.decode()
    assert not channel.participants.filter(agent=private).exists()
