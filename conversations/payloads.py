"""The shapes of conversations and messages on the wire (REST, browser events, agent work)."""

from conversations.threads import thread_card
from conversations.turns import is_capped


def author_data(message) -> dict | None:
    if message.author_agent_id:
        agent = message.author_agent
        return {"type": "agent", "id": agent.id, "name": agent.name, "handle": agent.handle}
    if message.author_user_id:
        user = message.author_user
        return {"type": "person", "id": user.id, "name": user.label, "username": user.username}
    return None


def message_data(message) -> dict:
    data = {
        "id": message.id,
        "conversation_id": message.conversation_id,
        "author": author_data(message),
        "kind": message.kind,
        "body": message.body,
        "payload": message.payload,
        "reply_to": message.reply_to_id,
        "ref": message.client_ref or None,
        "held": message.held_at is not None,
        "created_at": message.created_at,
        # Side threads opened by this message, as cards (THR-2).
        "threads": [thread_card(t) for t in message.threads.all()],
    }
    payload = message.payload or {}
    if "card" in payload:
        # Rendered here from the sealed layout, so every client shows the same card (CARD-2).
        from artifacts.cards_store import card_html

        data["card_html"] = card_html(payload)
    if "artifact_id" in payload:
        # The compact reference stored when the artifact was published: no query.
        data["artifact"] = payload.get("artifact")
    return data


def conversation_data(conversation) -> dict:
    return {
        "id": conversation.id,
        "workspace_id": conversation.workspace_id,
        "kind": conversation.kind,
        "title": conversation.title,
        "settings": conversation.settings,
        "last_message_at": conversation.last_message_at,
        "created_at": conversation.created_at,
        "parent_message_id": conversation.parent_message_id,
        "thread_status": conversation.thread_status or None,
        "summary": conversation.summary or None,
        "agent_streak": conversation.agent_streak,
        "capped": is_capped(conversation),
    }
