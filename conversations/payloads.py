"""The shapes of conversations and messages on the wire (REST, browser events, agent work)."""


def author_data(message) -> dict | None:
    if message.author_agent_id:
        agent = message.author_agent
        return {"type": "agent", "id": agent.id, "name": agent.name, "handle": agent.handle}
    if message.author_user_id:
        user = message.author_user
        return {"type": "person", "id": user.id, "name": user.label, "username": user.username}
    return None


def message_data(message) -> dict:
    return {
        "id": message.id,
        "conversation_id": message.conversation_id,
        "author": author_data(message),
        "kind": message.kind,
        "body": message.body,
        "payload": message.payload,
        "reply_to": message.reply_to_id,
        "ref": message.client_ref or None,
        "created_at": message.created_at,
    }


def conversation_data(conversation) -> dict:
    return {
        "id": conversation.id,
        "workspace_id": conversation.workspace_id,
        "kind": conversation.kind,
        "title": conversation.title,
        "settings": conversation.settings,
        "last_message_at": conversation.last_message_at,
        "created_at": conversation.created_at,
    }
