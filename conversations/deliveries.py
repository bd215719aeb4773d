"""Deliveries: a message queued for agents, one row per agent, and their wake-up on commit."""

from agents.access import agents_visible_in
from agntchat.core.compiled import compiled_insert
from agntchat.core.events import wake_agent
from conversations.models import Delivery, Message


def queue_for_agents(
    message: Message, agent_ids, *, holds_turn: bool = False, visible: bool = False
) -> list[Delivery]:
    """One delivery per agent that appears in the workspace (VISIBLE: the caller checked),
    announced on commit (MSG-2). HOLDS_TURN: each delivery is a turn with others waiting after
    it (TURN-1)."""
    deliveries = new_deliveries(message, agent_ids, holds_turn=holds_turn, visible=visible)
    if deliveries:
        compiled_insert(*deliveries, ignore_conflicts=True)
        wake_agents(deliveries)
    return deliveries


def new_deliveries(
    message: Message, agent_ids, *, holds_turn: bool = False, visible: bool = False
) -> list[Delivery]:
    """queue_for_agents' deliveries, not yet stored."""
    if not agent_ids:
        return []
    conversation = message.conversation
    allowed = (
        set(agent_ids)
        if visible
        else set(
            agents_visible_in(conversation.workspace_id)
            .filter(pk__in=list(agent_ids))
            .values_list("id", flat=True)
        )
    )
    return [
        Delivery(
            agent_id=a,
            workspace_id=conversation.workspace_id,
            message=message,
            holds_turn=holds_turn,
        )
        for a in allowed
    ]


def wake_agents(deliveries) -> None:
    """Wake the agents of DELIVERIES once they are stored: on commit, or now when the statement
    that stored them was its own transaction."""
    for delivery in deliveries:
        wake_agent(delivery.agent_id, "message")
