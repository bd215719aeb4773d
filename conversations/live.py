"""What browsers hear: every live event about conversations and messages is built here and
sent to the topics of the people who may read it."""

from agntchat.core.events import publish_live
from conversations.access import audience_user_ids
from conversations.models import Conversation, Message
from conversations.payloads import conversation_data, message_data


def announce_message(message: Message, event_type: str) -> None:
    """Send a message event to every browser that may read its conversation. With the
    conversation's kind: a side thread reaches everyone who may read its origin, but a sidebar
    lists only the threads one takes part in."""
    publish_live(
        audience_topics(message.conversation),
        event_type,
        message=message_data(message),
        conversation_kind=message.conversation.kind,
    )


def audience_topics(conversation: Conversation) -> list[str]:
    """Live topics of every browser that may read CONVERSATION."""
    if conversation.kind == Conversation.Kind.THREAD and conversation.parent_message_id:
        return audience_topics(conversation.parent_message.conversation)
    if conversation.kind == Conversation.Kind.CHANNEL:
        return [f"workspace.{conversation.workspace_id}"]
    return [f"user.{u}" for u in audience_user_ids(conversation)]


def announce_conversation(conversation: Conversation, event_type: str) -> None:
    publish_live(
        audience_topics(conversation), event_type, conversation=conversation_data(conversation)
    )
