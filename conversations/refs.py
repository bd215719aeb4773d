"""Client refs: a client (a bridge retrying a frame, a browser resending a post) names what it
sends, and the same author sending the same ref again in a conversation gets what the first
send made instead of a second copy."""

from agents.models import Agent
from agntchat.core.compiled import compiled_first
from conversations.models import Conversation, Message


def posted_under_ref(actor, conversation: Conversation, client_ref: str) -> Message | None:
    """The message ACTOR (a person, an agent, or None: the system) already posted in
    CONVERSATION under CLIENT_REF, if any."""
    agent = actor if isinstance(actor, Agent) else None
    author = {
        "author_agent_id": agent.id if agent else None,
        "author_user_id": None if agent or actor is None else actor.id,
    }
    known = {name: value for name, value in author.items() if value is not None}
    return compiled_first(  # every bridge reply carries a ref: compiled once
        ("post_by_ref", *known),
        lambda conversation_id, ref, **ids: Message.objects.filter(
            conversation_id=conversation_id, client_ref=ref, **{k: ids.get(k) for k in author}
        ),
        conversation_id=conversation.id,
        ref=client_ref,
        **known,
    )
