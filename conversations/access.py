"""Permission-checked fetches of conversations and messages, for people and for agents."""

from django.db.models import BooleanField, Exists, ExpressionWrapper, OuterRef, Q, Subquery

from agents.access import workspaces_of_agent
from agents.models import Agent
from agntchat.core.compiled import compiled_first
from agntchat.core.ids import as_uuid
from conversations.exceptions import AttachmentNotFound, ConversationNotFound, MessageNotFound
from conversations.models import Attachment, Conversation, Message, Participant
from workspaces.models import Membership, User


def conversations_visible_to(actor):
    """People see channels of their workspaces and conversations they take part in; agents see
    conversations they take part in, in workspaces where they appear."""
    if isinstance(actor, Agent):
        taking_part = Participant.objects.filter(conversation_id=OuterRef("pk"), agent=actor)
        return Conversation.objects.filter(
            Exists(taking_part), workspace__in=workspaces_of_agent(actor)
        )
    member = Membership.objects.filter(workspace_id=OuterRef("workspace_id"), user=actor)
    taking_part = Participant.objects.filter(conversation_id=OuterRef("pk"), user=actor)
    # A side thread is readable by whoever can read the conversation it hangs off (THR-2): its
    # origin is looked up by key for each thread. (As an EXISTS, PostgreSQL may hash every
    # message of the database to answer it; a scalar subquery runs per row.)
    in_origin = Participant.objects.filter(conversation_id=OuterRef("conversation_id"), user=actor)
    origin_readable = (
        Message.objects.filter(pk=OuterRef("parent_message_id"))
        .annotate(
            readable=ExpressionWrapper(
                Q(conversation__kind=Conversation.Kind.CHANNEL) | Exists(in_origin),
                output_field=BooleanField(),
            )
        )
        .values("readable")[:1]
    )
    # An agent's owner reads the side threads their agents take part in, wherever they hang; not
    # people's reply threads (no thread status), which are for whoever reads their message.
    owns_a_participant = Participant.objects.filter(
        conversation_id=OuterRef("pk"), agent__owner=actor
    )
    return (
        Conversation.objects.alias(origin_readable=Subquery(origin_readable))
        .filter(Exists(member))
        .filter(
            Q(kind=Conversation.Kind.CHANNEL)
            | Exists(taking_part)
            | Q(kind=Conversation.Kind.THREAD, origin_readable=True)
            | (Q(Exists(owns_a_participant), kind=Conversation.Kind.THREAD) & ~Q(thread_status=""))
        )
    )


def _readable(actor, conversation_id):
    """The conversation ACTOR may read, with ``takes_part`` (ACTOR is one of its participants)."""
    takes_part = Participant.objects.filter(
        conversation_id=OuterRef("pk"),
        **{"agent" if isinstance(actor, Agent) else "user": actor},
    )
    return (
        conversations_visible_to(actor)
        .annotate(takes_part=Exists(takes_part))
        .filter(pk=conversation_id)
    )


def _compiled_actor(actor):
    """ACTOR as a compiled read takes it (core.compiled): the part of the SQL's shape it sets,
    the values it binds, and how to rebuild a stand-in actor from those values."""
    if isinstance(actor, Agent):
        return (
            ("agent",),
            {"actor_id": actor.pk, "owner_id": actor.owner_id},
            lambda actor_id, owner_id: Agent(pk=actor_id, owner_id=owner_id),
        )
    return ("person",), {"actor_id": actor.pk}, lambda actor_id: User(pk=actor_id)


def access_conversation(actor, conversation_id) -> Conversation:
    """The conversation if ACTOR may read it (else ConversationNotFound), with ``takes_part``.
    On every message, so its SQL is compiled once per shape of actor (core.compiled)."""
    conversation_id = as_uuid(conversation_id)
    if conversation_id is None:
        raise ConversationNotFound()
    shape, values, rebuild = _compiled_actor(actor)
    conversation = compiled_first(
        ("access_conversation", *shape),
        lambda conversation_id, **who: _readable(rebuild(**who), conversation_id),
        conversation_id=conversation_id,
        **values,
    )
    if conversation is None:
        raise ConversationNotFound()
    return conversation


def may_configure(membership: Membership, conversation: Conversation) -> bool:
    """Who may change a conversation's settings, rename or archive it: its creator or a manager
    of its workspace (of a reply thread, nobody) (MEMBERSHIP is the person's there; the caller has checked they may read
    it). The actions refuse by it and the pages show their controls by it."""
    if membership.workspace_id != conversation.workspace_id or conversation.is_reply_thread:
        return False  # a reply thread follows its conversation's settings (update_settings)
    return membership.is_manager or conversation.created_by_id == membership.user_id


def messages_visible_to(actor):
    """Messages of the conversations ACTOR may read, less those the loop guard holds back."""
    return Message.objects.filter(
        conversation__in=conversations_visible_to(actor), held_at__isnull=True
    )


def access_message(actor, message_id) -> Message:
    """The message if ACTOR may read it (else MessageNotFound), with its conversation. Every
    agent reply names the message it answers, so compiled as access_conversation is."""
    message_id = as_uuid(message_id)
    if message_id is None:
        raise MessageNotFound()
    shape, values, rebuild = _compiled_actor(actor)
    message = compiled_first(
        ("access_message", *shape),
        lambda message_id, **who: (
            messages_visible_to(rebuild(**who)).select_related("conversation").filter(pk=message_id)
        ),
        message_id=message_id,
        **values,
    )
    if message is None:
        raise MessageNotFound()
    return message


def _uploaded_by(actor) -> Q:
    return Q(uploaded_by_agent=actor) if isinstance(actor, Agent) else Q(uploaded_by_user=actor)


def attachments_visible_to(actor):
    """Files of the messages ACTOR may read, and ACTOR's own uploads not posted yet."""
    return Attachment.objects.filter(conversation__in=conversations_visible_to(actor)).filter(
        # A deleted message's files go with its text (actions.delete_message).
        Q(message__isnull=False, message__held_at__isnull=True, message__deleted_at__isnull=True)
        | Q(message__isnull=True) & _uploaded_by(actor)
    )


def access_attachment(actor, attachment_id) -> Attachment:
    attachment = attachments_visible_to(actor).filter(pk=as_uuid(attachment_id)).first()
    if attachment is None:
        raise AttachmentNotFound()
    return attachment


def own_uploads(actor, conversation: Conversation, attachment_ids):
    """ACTOR's uploads in CONVERSATION among ATTACHMENT_IDS, not yet part of any message: the
    only files a post may attach."""
    return Attachment.objects.filter(
        _uploaded_by(actor),
        conversation=conversation,
        message__isnull=True,
        pk__in=[as_uuid(i) for i in attachment_ids],
    )


def audience_user_ids(conversation: Conversation) -> list:
    """People who can read a conversation: for live events and unread counts. (A side thread's
    readers are its origin conversation's; see audience_topics.)"""
    if conversation.kind == Conversation.Kind.CHANNEL:
        return list(
            Membership.objects.filter(workspace_id=conversation.workspace_id).values_list(
                "user_id", flat=True
            )
        )
    return list(
        Participant.objects.filter(
            conversation=conversation,
            user__isnull=False,
            user__memberships__workspace_id=conversation.workspace_id,
        ).values_list("user_id", flat=True)
    )


def reply_thread_of(actor, message_id) -> tuple[Message, Conversation | None]:
    """The message ACTOR may read (else MessageNotFound) and its reply thread, if it has one
    yet (readable by whoever reads the message: conversations_visible_to)."""
    message = access_message(actor, message_id)
    thread = Conversation.objects.filter(
        parent_message=message, kind=Conversation.Kind.THREAD, thread_status=""
    ).first()
    return message, thread
