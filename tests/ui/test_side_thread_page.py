"""A side thread's page names the conversation it hangs off only to who may read it: an agent's
owner reads its side threads, not always the conversation they were opened from."""

import pytest

from agents import actions as agent_actions
from conversations.actions import create_conversation, post_message
from conversations.models import Conversation

pytestmark = pytest.mark.django_db


def test_the_banner_names_the_origin_only_to_its_readers(client, alice, bob, team_a):
    nova = agent_actions.create_agent(alice, name="Nova", handle="nova", backend="scripted")
    rex = agent_actions.create_agent(alice, name="Rex", handle="rex", backend="scripted")
    dm = create_conversation(
        bob, team_a, kind="direct", title="salary talk", agent_ids=[nova.id, rex.id]
    )
    origin = post_message(nova, dm, 'On it.<dm target="Rex">check the dates</dm>')
    thread = Conversation.objects.get(kind="thread", parent_message=origin)
    url = f"/w/{team_a.id}/c/{thread.id}/"
    client.force_login(alice)  # owns both agents; not in the DM
    page = client.get(url).content.decode()
    assert "a conversation you are not in" in page and "salary talk" not in page
    assert f"/c/{dm.id}/" not in page
    client.force_login(bob)  # in the DM
    page = client.get(url).content.decode()
    assert "salary talk" in page and f"/c/{dm.id}/#msg-{origin.id}" in page
