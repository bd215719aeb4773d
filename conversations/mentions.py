"""Whose inbox a post reaches (workspaces.notifications): the people it @mentions who may read
its conversation, and in a direct conversation the other people in it. Never its author."""

from django.db.models.functions import Lower

from conversations.access import conversations_visible_to
from conversations.models import Conversation, Message
from conversations.turns import MENTION
from workspaces.models import Notification, User
from workspaces.notifications import conversation_link, notify_person, snippet


def where(conversation: Conversation) -> str:
    """CONVERSATION as a notice names it: #general, a side thread, a direct message."""
    if conversation.kind == Conversation.Kind.CHANNEL:
        return f"#{conversation.title or 'untitled'}"
    if conversation.kind == Conversation.Kind.THREAD:
        return "a side thread"
    if conversation.kind == Conversation.Kind.DIRECT:
        return "a direct message"
    return conversation.title or "a conversation"


# People one post notifies by mention at most: each costs its own reads and writes, and a long
# post naming every member of a big workspace took seconds (thousands of queries).
MAX_MENTIONED = 50


def _mentioned(message: Message, conversation: Conversation) -> list[User]:
    """People of the workspace named by @username, who may read the conversation: the first
    MAX_MENTIONED named, in the order they are named."""
    handles = list(dict.fromkeys(t.lower().rstrip(".-") for t in MENTION.findall(message.body)))
    if not handles:
        return []
    members = User.objects.annotate(handle=Lower("username")).filter(
        handle__in=handles, memberships__workspace_id=conversation.workspace_id
    )
    by_handle = {}  # usernames may differ in case only: @bob names Bob and bob
    for user in members:
        by_handle.setdefault(user.handle, []).append(user)
    named = [user for h in handles for user in by_handle.get(h, ())][:MAX_MENTIONED]
    if conversation.kind == Conversation.Kind.CHANNEL:
        return named  # every member of its workspace reads a channel
    return [u for u in named if conversations_visible_to(u).filter(pk=conversation.pk).exists()]


def notify_post(message: Message) -> None:
    """Put a conversational post in the inbox of those it needs. Cheap for most posts: a channel
    message that names nobody asks nothing of the database."""
    author = message.author_user or message.author_agent
    if author is None:
        return
    conversation = message.conversation
    recipients = {u.pk: (u, Notification.Kind.MENTION) for u in _mentioned(message, conversation)}
    if conversation.kind == Conversation.Kind.DIRECT:
        others = User.objects.filter(
            participations__conversation=conversation,
            memberships__workspace_id=conversation.workspace_id,
        )
        for user in others:
            recipients.setdefault(user.pk, (user, Notification.Kind.DIRECT))
    recipients.pop(message.author_user_id, None)
    name = author.label if isinstance(author, User) else author.name
    for user, kind in recipients.values():
        said = "mentioned you in" if kind == Notification.Kind.MENTION else "wrote in"
        notify_person(
            user,
            conversation.workspace_id,
            kind,
            f"{name} {said} {where(conversation)}: {snippet(message.body)}",
            conversation_link(conversation.workspace_id, conversation.pk, message.pk),
            actor=author,
            conversation_id=conversation.pk,
            message_id=message.pk,
        )
