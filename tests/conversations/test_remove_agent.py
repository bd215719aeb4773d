"""Taking an agent out of a channel (conversations.actions.remove_agent_from_conversation, the
API's DELETE …/agents/<id>/ and the page's form): who may, what the agent loses at once, and
that a turn it held or waited for moves on instead of stalling the channel (TURN-1)."""

import threading
import time

import pytest
from django.db import transaction

from agents import actions as agent_actions
from conversations.access import access_conversation
from conversations.actions import (
    create_conversation,
    post_message,
    remove_agent_from_conversation,
)
from conversations.exceptions import ConversationNotFound, ConversationRule
from conversations.models import Delivery, Participant, TurnDecision
from tests.concurrency import run_together
from tests.conftest import agent_session
from work.gateway import ack_work
from workspaces.exceptions import NotAllowed

pytestmark = pytest.mark.django_db


def agents_in(conversation) -> set[str]:
    return set(
        conversation.participants.filter(agent__isnull=False).values_list("agent__name", flat=True)
    )


def test_a_turn_held_by_the_removed_agent_passes_on(alice, budget_room):
    conversation, rex, gus = budget_room
    asked = post_message(alice, conversation, "Please review the budget numbers")
    assert [e["name"] for e in TurnDecision.objects.get(message=asked).queue] == ["Rex", "Gus"]
    remove_agent_from_conversation(alice, conversation, rex.id)
    assert agents_in(conversation) == {"Gus"}
    # Rex's delivery is dropped, and Gus has the turn now instead of waiting for Rex's ack.
    assert Delivery.objects.get(message=asked, agent=rex).acked_at is not None
    assert Delivery.objects.get(message=asked, agent=gus, acked_at__isnull=True).holds_turn
    assert TurnDecision.objects.get(message=asked).position == 1
    # Rex no longer reads the channel, so cannot post there, and is not woken by what follows.
    with pytest.raises(ConversationNotFound):
        access_conversation(rex, conversation.id)
    later = post_message(alice, conversation, "Another budget question")
    assert not Delivery.objects.filter(message=later, agent=rex).exists()


def test_a_removed_agent_waiting_for_its_turn_is_skipped(alice, budget_room):
    conversation, rex, gus = budget_room
    asked = post_message(alice, conversation, "Please review the budget numbers")
    remove_agent_from_conversation(alice, conversation, gus.id)
    held = Delivery.objects.get(message=asked, agent=rex)
    Delivery.objects.filter(pk=held.pk).update(claimed_by="c1")
    ack_work(held.id, "c1")
    # Rex was last of those still here: the queue is finished, Gus never woken.
    assert TurnDecision.objects.get(message=asked).finished_at is not None
    assert not Delivery.objects.filter(message=asked, agent=gus).exists()


def test_who_may_take_an_agent_out(alice, bob, team_a, budget_room):
    conversation, rex, gus = budget_room
    # Bob neither made #room nor manages team A: not Alice's agent...
    with pytest.raises(NotAllowed):
        remove_agent_from_conversation(bob, conversation, gus.id)
    assert agents_in(conversation) == {"Gus", "Rex"}
    # ...but his own, yes.
    remove_agent_from_conversation(bob, conversation, rex.id)
    assert agents_in(conversation) == {"Gus"}
    # An agent not taking part (any more) is not found; a direct conversation keeps its agents.
    from agents.exceptions import AgentNotFound

    with pytest.raises(AgentNotFound):
        remove_agent_from_conversation(alice, conversation, rex.id)
    dm = create_conversation(alice, team_a, kind="direct", agent_ids=[gus.id])
    with pytest.raises(ConversationRule, match="channels only"):
        remove_agent_from_conversation(alice, dm, gus.id)


def test_the_api_adds_and_removes(alice, bob, charlie, team_a, team_b, budget_room, api):
    conversation, rex, gus = budget_room
    base = f"/api/v1/conversations/{conversation.id}/agents/"
    removed = api(alice).delete(f"{base}{rex.id}/")
    assert removed.status_code == 204, removed.content
    added = api(bob).post(base, {"agent": str(rex.id)}, format="json")
    assert added.status_code == 200, added.content
    assert {"type": "agent", "id": str(rex.id)} in added.json()["participants"]
    # Again: the same, no second participant.
    assert api(bob).post(base, {"agent": str(rex.id)}, format="json").status_code == 200
    assert Participant.objects.filter(conversation=conversation, agent=rex).count() == 1
    # Bob may not take Alice's agent out: 403 and nothing changes.
    refused = api(bob).delete(f"{base}{gus.id}/")
    assert refused.status_code == 403 and refused.json()["error"]["code"] == "not_allowed"
    assert agents_in(conversation) == {"Gus", "Rex"}


def test_the_api_refuses_outsiders_agents_and_bad_input(alice, charlie, team_b, budget_room, api):
    conversation, rex, gus = budget_room
    base = f"/api/v1/conversations/{conversation.id}/agents/"
    # Another workspace's person: the channel does not exist for them, either way.
    assert api(charlie).delete(f"{base}{gus.id}/").status_code == 404
    spy = agent_actions.create_agent(charlie, name="Spy", backend="scripted")
    assert api(charlie).post(base, {"agent": str(spy.id)}, format="json").status_code == 404
    # Alice naming an agent she cannot see: not found; malformed bodies: 400.
    assert api(alice).post(base, {"agent": str(spy.id)}, format="json").status_code == 404
    assert api(alice).post(base, {"agent": "nope"}, format="json").status_code == 400
    assert api(alice).post(base, {"agent": str(gus.id), "x": 1}, format="json").status_code == 400
    # An agent's own token does not manage participants.
    from rest_framework.test import APIClient

    as_gus = APIClient()
    as_gus.credentials(HTTP_AUTHORIZATION=f"Bearer {agent_session(gus)}")
    assert as_gus.delete(f"{base}{rex.id}/").status_code == 403
    assert agents_in(conversation) == {"Gus", "Rex"}
    assert not Participant.objects.filter(agent=spy).exists()


def test_the_page_offers_removal_to_who_may(client, alice, bob, team_a, budget_room):
    conversation, rex, gus = budget_room
    url = f"/w/{team_a.id}/c/{conversation.id}/"
    client.force_login(bob)
    page = client.get(url).content.decode()
    # Bob may take out only his own agent: the menu lists Rex, not Gus.
    menu = page.split('id="remove-agent"')[1].split("</select>")[0]
    assert "Rex" in menu and "Gus" not in menu
    response = client.post(f"{url}agents/remove/", {"agent": gus.id}, follow=True)
    assert "the agent&#x27;s owner can remove it" in response.content.decode()
    response = client.post(f"{url}agents/remove/", {"agent": rex.id}, follow=True)
    assert "Rex no longer takes part in this conversation." in response.content.decode()
    assert agents_in(conversation) == {"Gus"}
    assert client.post(f"{url}agents/remove/", {"agent": "nope"}).status_code == 404


@pytest.mark.django_db(transaction=True)
def test_a_turn_handed_on_while_its_next_agent_is_removed_skips_it(alice, budget_room):
    """Rex acks (the turn goes on to Gus) while Gus is being taken out: the hand-on must not
    read Gus as still here and give him the turn after his removal dropped what he had."""
    conversation, rex, gus = budget_room
    asked = post_message(alice, conversation, "Please review the budget numbers")
    held = Delivery.objects.get(message=asked, agent=rex)
    Delivery.objects.filter(pk=held.pk).update(claimed_by="c1")
    removing = threading.Event()

    def remove():
        with transaction.atomic():
            remove_agent_from_conversation(alice, conversation, gus.id)
            removing.set()
            time.sleep(1)  # the removal's transaction is still open when Rex acks

    def ack():
        assert removing.wait(10)
        ack_work(held.id, "c1")

    run_together(lambda step: step(), [(remove,), (ack,)])
    assert not Delivery.objects.filter(message=asked, agent=gus, acked_at__isnull=True).exists()
    assert TurnDecision.objects.get(message=asked).finished_at is not None
