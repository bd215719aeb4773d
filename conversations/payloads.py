"""The shapes of conversations and messages on the wire (REST, browser events, agent work)."""

from django.db.models import prefetch_related_objects

from conversations import caps, files
from conversations.models import Conversation, no_threads

# Author columns no message shape shows (``author_data``), left out of reads of messages with
# their authors: each would cost every message read (a timestamp is parsed in Python).
AUTHOR_UNSHOWN = (
    *(
        f"author_user__{name}"
        for name in (
            "password",
            "last_login",
            "date_joined",
            "created_at",
            "updated_at",
            "is_superuser",
            "is_staff",
            "is_active",
            "first_name",
            "last_name",
            "email",
        )
    ),
    *(
        f"author_agent__{name}"
        for name in (
            "created_at",
            "updated_at",
            "owner",
            "role",
            "capabilities",
            "backend",
            "model",
            "base_url",
            "visibility",
            "personality",
            "runtime",
        )
    ),
)


def author_data(message) -> dict | None:
    if message.author_agent_id:
        agent = message.author_agent
        return {"type": "agent", "id": agent.id, "name": agent.name, "handle": agent.handle}
    if message.author_user_id:
        user = message.author_user
        return {"type": "person", "id": user.id, "name": user.label, "username": user.username}
    return None


def thread_card(thread: Conversation) -> dict:
    """What the origin message shows for a thread: participants, last activity, status."""
    names = [p.agent.name if p.agent_id else p.user.label for p in thread.participants.all()]
    return {
        "id": thread.id,
        "title": thread.title,
        "status": thread.thread_status,
        "participants": names,
        "last_activity_at": thread.last_message_at or thread.created_at,
        "summary": thread.summary or None,
        "resolved_at": thread.resolved_at,
    }


def with_thread_cards(messages) -> list:
    """MESSAGES (a list) ready for ``message_data``: the side threads of the agents' messages
    read for the whole list at once. Only an agent's message opens side threads; the others are
    marked as having none, which spares Django's prefetch its per-message work."""
    empty = no_threads()
    for message in messages:
        if message.author_agent_id is None:
            message.has_no_threads(empty)
    prefetch_related_objects(
        [m for m in messages if m.author_agent_id is not None],
        "threads__participants__agent",
        "threads__participants__user",
    )
    return messages


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
        # Side threads opened by this message, as cards (THR-2); its reply thread is not one.
        "threads": [thread_card(t) for t in message.threads.all() if t.thread_status],
        # Edits, deletion, reactions and reply threads (issue 28).
        "edited_at": message.edited_at,
        "deleted": message.deleted_at is not None,
        "reactions": [
            {"emoji": emoji, "count": len(people), "people": people}
            for emoji, people in (message.reactions or {}).items()
        ],
        "reply_count": message.reply_count,
    }
    payload = message.payload or {}
    # Its files (INT-4), each with a fresh signed link, from what the post stored: no query.
    data["attachments"] = [files.attachment_data(ref) for ref in payload.get("attachments", ())]
    if "card_html" in payload:
        # Rendered once when the card was sealed or changed, so every client shows the same
        # card (CARD-2); sent beside the payload, not twice.
        data["card_html"] = payload["card_html"]
    if "card_html" in payload or "attachments" in payload:
        data["payload"] = {
            k: v for k, v in payload.items() if k not in ("card_html", "attachments")
        }
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
        "capped": caps.is_capped(conversation),
        "archived_at": conversation.archived_at,
    }
