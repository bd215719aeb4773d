"""REST for conversations and messages. People and agents post through the same action."""

from django.conf import settings
from django.db.models import F, Field, Func, Value
from django.urls import path
from rest_framework import serializers
from rest_framework.parsers import MultiPartParser
from rest_framework.response import Response
from rest_framework.views import APIView

from agents.access import access_agent
from agntchat.core.api import StrictSerializer, validated
from agntchat.core.compiled import compiled_objects
from conversations import actions, files, threads
from conversations.access import (
    access_attachment,
    access_conversation,
    access_message,
    conversations_visible_to,
    reply_thread_of,
)
from conversations.exceptions import MessageNotFound
from conversations.models import Conversation, Delivery, Message
from conversations.payloads import (
    AUTHOR_UNSHOWN,
    conversation_data,
    message_data,
    with_thread_cards,
)
from workspaces.access import IsPerson, access_workspace


class ParticipantInput(StrictSerializer):
    type = serializers.ChoiceField(choices=["person", "agent"])
    id = serializers.UUIDField()


class ConversationInput(StrictSerializer):
    workspace = serializers.UUIDField()
    kind = serializers.ChoiceField(choices=[Conversation.Kind.CHANNEL, Conversation.Kind.DIRECT])
    title = serializers.CharField(max_length=200, required=False, allow_blank=True, default="")
    participants = ParticipantInput(many=True, required=False, default=list)


class ConversationChange(StrictSerializer):
    min_fields = 1
    title = serializers.CharField(max_length=200, required=False)
    archived = serializers.BooleanField(required=False)


class MessageInput(StrictSerializer):
    # Blank only beside attachments (validate): files alone make a message.
    body = serializers.CharField(
        max_length=actions.MAX_BODY, trim_whitespace=True, required=False, allow_blank=True
    )
    reply_to = serializers.UUIDField(required=False, allow_null=True, default=None)
    # The client's own id for this post, so a retry after a lost response is not a second message.
    ref = serializers.CharField(max_length=64, required=False, allow_blank=True, default="")
    # Ids of the poster's own uploads to this conversation (POST …/files/), not posted yet.
    attachments = serializers.ListField(
        child=serializers.UUIDField(),
        max_length=actions.MAX_ATTACHMENTS,
        required=False,
        default=list,
    )

    def validate(self, data):
        if not data.get("body") and not data["attachments"]:
            message = (
                "This field may not be blank." if "body" in data else "This field is required."
            )
            raise serializers.ValidationError({"body": message})
        data.setdefault("body", "")
        return data


class HistoryQuery(serializers.Serializer):
    """Query parameters: text by nature, so not a StrictSerializer."""

    after = serializers.UUIDField(required=False)
    before = serializers.UUIDField(required=False)
    limit = serializers.IntegerField(min_value=1, max_value=200, required=False, default=50)


def _person_only(request, view, what: str) -> None:
    if not IsPerson().has_permission(request, view):
        view.permission_denied(request, f"Only people {what}.")


class ConversationListView(APIView):
    """POST opens a channel (201), or the direct conversation of exactly its participants: 200
    when it existed, 201 when created."""

    inputs = {"post": ConversationInput}
    statuses = {"post": (200, 201)}

    def get(self, request):
        conversations = conversations_visible_to(request.user)
        if request.query_params.get("workspace"):
            conversations = conversations.filter(
                workspace=access_workspace(request.user, request.query_params["workspace"])
            )
        conversations = conversations.order_by("-last_message_at", "-created_at")[:200]
        return Response({"results": [conversation_data(c) for c in conversations]})

    def post(self, request):
        _person_only(request, self, "open conversations through this endpoint")
        data = validated(ConversationInput, request.data)
        workspace = access_workspace(request.user, data["workspace"])
        people = [p["id"] for p in data["participants"] if p["type"] == "person"]
        agents = [p["id"] for p in data["participants"] if p["type"] == "agent"]
        if data["kind"] == Conversation.Kind.DIRECT:
            # One direct conversation per set of people and agents: asked again, the same one.
            conversation, created = actions.open_direct(
                request.user, workspace, title=data["title"], user_ids=people, agent_ids=agents
            )
        else:
            conversation = actions.create_conversation(
                request.user,
                workspace,
                kind=data["kind"],
                title=data["title"],
                user_ids=people,
                agent_ids=agents,
            )
            created = True
        return Response(conversation_data(conversation), status=201 if created else 200)


def with_participants(conversation) -> dict:
    out = conversation_data(conversation)
    out["participants"] = [
        {"type": "agent", "id": p.agent_id} if p.agent_id else {"type": "person", "id": p.user_id}
        for p in conversation.participants.order_by("created_at", "id")
    ]
    return out


class ConversationDetailView(APIView):
    inputs = {"patch": ConversationChange}

    def get(self, request, conversation_id):
        return Response(with_participants(access_conversation(request.user, conversation_id)))

    def patch(self, request, conversation_id):
        """Rename a channel, or archive or unarchive it."""
        _person_only(request, self, "rename or archive channels")
        conversation = access_conversation(request.user, conversation_id)
        data = validated(ConversationChange, request.data)
        conversation = actions.update_channel(
            request.user, conversation, title=data.get("title"), archived=data.get("archived")
        )
        return Response(conversation_data(conversation))


class ChannelAgentInput(StrictSerializer):
    agent = serializers.UUIDField()


class ConversationAgentsView(APIView):
    """POST: a person brings an agent that appears in the workspace into a channel (200 with the
    conversation and its participants; again, the same)."""

    inputs = {"post": ChannelAgentInput}
    statuses = {"post": (200,)}

    def post(self, request, conversation_id):
        _person_only(request, self, "add agents to channels")
        conversation = access_conversation(request.user, conversation_id)
        data = validated(ChannelAgentInput, request.data)
        actions.add_agent_to_conversation(
            request.user, conversation, access_agent(request.user, data["agent"])
        )
        return Response(with_participants(conversation))


class ConversationAgentView(APIView):
    """DELETE: the channel's creator, a workspace admin or the agent's owner takes the agent out
    (204); what it was still to answer there is dropped."""

    def delete(self, request, conversation_id, agent_id):
        _person_only(request, self, "remove agents from channels")
        conversation = access_conversation(request.user, conversation_id)
        actions.remove_agent_from_conversation(request.user, conversation, agent_id)
        return Response(status=204)


# A message's place in its conversation's history, as one row value: ``(created_at, id) < (…)``
# is a bound the message_history index walk starts from, where the same test spelled as an OR
# of two cases is only a filter (a page deep in a busy channel read every newer message).
def history_key(created_at, message_id) -> Func:
    return Func(created_at, message_id, function="ROW", output_field=Field())


HISTORY_KEY = history_key(F("created_at"), F("id"))


def history_page(direction: str, limit: int):
    """The query of one kind of history page (DIRECTION: the newest messages, or those after or
    before an anchor given by its created_at and id), for ``compiled_objects``: every opened
    conversation and every "load more" runs it."""

    def build(conversation_id, anchor_at=None, anchor_id=None):
        messages = (
            Message.objects.filter(conversation_id=conversation_id, held_at__isnull=True)
            .select_related("author_user", "author_agent")
            .defer("updated_at", *AUTHOR_UNSHOWN)
        )
        if direction == "newest":
            return messages.order_by("-created_at", "-id")[:limit]
        if direction == "oldest":
            return messages.order_by("created_at", "id")[:limit]
        anchor = history_key(Value(anchor_at), Value(anchor_id))
        messages = messages.alias(key=HISTORY_KEY)
        if direction == "after":
            return messages.filter(key__gt=anchor).order_by("created_at", "id")[:limit]
        return messages.filter(key__lt=anchor).order_by("-created_at", "-id")[:limit]

    return build


def history(request, conversation_id, *, start: str = "newest") -> dict:
    """One page of a conversation's history, shown oldest first: the messages after or before
    an anchor message of it (``?after=`` / ``?before=``), else those at its START (the newest,
    or the oldest), and whether more lie beyond (``has_more``)."""
    query = validated(HistoryQuery, request.query_params.dict())
    direction = "after" if query.get("after") else "before" if query.get("before") else start
    values = {"conversation_id": conversation_id}
    if direction in ("after", "before"):
        anchor = access_message(request.user, query[direction])
        if anchor.conversation_id != conversation_id:
            raise MessageNotFound("That message is not in this conversation.")
        values.update(anchor_at=anchor.created_at, anchor_id=anchor.id)
    limit = query["limit"]
    page = compiled_objects(("history", direction, limit), history_page(direction, limit), **values)
    if direction in ("newest", "before"):
        page.reverse()  # read newest first, shown oldest first
    return {
        "results": [message_data(m) for m in with_thread_cards(page)],
        "has_more": len(page) == limit,
    }


class MessageListView(APIView):
    inputs = {"post": MessageInput}
    queries = {"get": HistoryQuery}

    def get(self, request, conversation_id):
        conversation = access_conversation(request.user, conversation_id)
        return Response(history(request, conversation.id))

    def post(self, request, conversation_id):
        conversation = access_conversation(request.user, conversation_id)
        data = validated(MessageInput, request.data)
        reply_to = access_message(request.user, data["reply_to"]) if data["reply_to"] else None
        message = actions.post_message(
            request.user,
            conversation,
            data["body"],
            reply_to=reply_to,
            client_ref=data["ref"],
            attachments=data["attachments"],
        )
        return Response(message_data(message), status=201)


def upload_data(attachment) -> dict:
    return {
        "id": attachment.id,
        "conversation_id": attachment.conversation_id,
        "message_id": attachment.message_id,
        "name": attachment.name,
        "content_type": attachment.content_type,
        "size": attachment.size,
        "sha256": attachment.sha256,
    }


class FileInput(serializers.Serializer):
    """The upload's form, for the schema: the view reads the file itself (actions checks it)."""

    file = serializers.FileField()


class FileUploadView(APIView):
    """A file into a conversation (multipart, field ``file``), by a person or an agent: 201 with
    its id, to be named in ``attachments`` of the uploader's next post there. Over the size limit
    413, a type not allowed 415; either way nothing is stored."""

    parser_classes = [MultiPartParser]
    inputs = {"post": FileInput}

    def post(self, request, conversation_id):
        conversation = access_conversation(request.user, conversation_id)
        # A body far past the limit is refused before it is parsed into a temporary file.
        declared = int(request.META.get("CONTENT_LENGTH") or 0)
        if declared > settings.FILE_UPLOAD_MAX_SIZE + 64 * 1024:
            raise files.too_large()
        attachment = actions.upload_attachment(
            request.user, conversation, request.FILES.get("file")
        )
        return Response(upload_data(attachment), status=201)


class FileDetailView(APIView):
    """A file one may read (its message's, or one's own upload not posted yet), with a fresh
    signed download link; another workspace's, or a conversation one cannot read: 404."""

    def get(self, request, attachment_id):
        attachment = access_attachment(request.user, attachment_id)
        out = upload_data(attachment)
        out.update(files.attachment_data(files.ref_data(attachment)))
        return Response(out)


class RulebookInput(StrictSerializer):
    reply_style = serializers.CharField(max_length=500, required=False, allow_blank=True)
    reply_length = serializers.CharField(max_length=200, required=False, allow_blank=True)
    when_not_to_chime_in = serializers.CharField(max_length=1000, required=False, allow_blank=True)


class LoopGuardInput(StrictSerializer):
    # null clears a cap back to the default (update_settings drops None values).
    group_cap = serializers.IntegerField(
        min_value=1, max_value=100, required=False, allow_null=True
    )
    direct_cap = serializers.IntegerField(
        min_value=1, max_value=100, required=False, allow_null=True
    )


class SideThreadsInput(StrictSerializer):
    enabled = serializers.BooleanField(required=False)
    wording = serializers.CharField(max_length=1000, required=False, allow_blank=True)
    idle_minutes = serializers.IntegerField(min_value=1, max_value=60 * 24 * 30, required=False)


class SettingsInput(StrictSerializer):
    min_fields = 1
    rulebook = RulebookInput(required=False)
    loop_guard = LoopGuardInput(required=False)
    side_threads = SideThreadsInput(required=False)
    fallback_order = serializers.ListField(
        child=serializers.UUIDField(), max_length=50, required=False
    )

    def validate_fallback_order(self, value):
        return [str(v) for v in value]


class ResolveInput(StrictSerializer):
    summary = serializers.CharField(max_length=4000)


class ResolveView(APIView):
    """Any participant of a side thread resolves it with a summary (THR-4)."""

    statuses = {"post": (200,)}

    inputs = {"post": ResolveInput}

    def post(self, request, conversation_id):
        thread = access_conversation(request.user, conversation_id)
        data = validated(ResolveInput, request.data)
        thread = threads.resolve_thread(request.user, thread, data["summary"])
        return Response(conversation_data(thread))


class TurnListView(APIView):
    """Each turn decision of a conversation: who was asked, in what order, and why (TURN-1)."""

    def get(self, request, conversation_id):
        conversation = access_conversation(request.user, conversation_id)
        decisions = list(conversation.turns.order_by("-created_at")[:100])
        # The work item of each open turn's holder, still running: what the page's Stop stops
        # (actions.stop_turn) before any text is written. Open turns are few.
        open_ids = [d.message_id for d in decisions if d.finished_at is None]
        running = {
            (str(message_id), str(agent_id)): work_id
            for message_id, agent_id, work_id in Delivery.objects.filter(
                message_id__in=open_ids, acked_at__isnull=True
            ).values_list("message_id", "agent_id", "id")
        }

        def holder(d):
            return d.queue[d.position]["agent_id"] if d.position < len(d.queue) else None

        return Response(
            {
                "results": [
                    {
                        "id": d.id,
                        "message_id": d.message_id,
                        "rule": d.rule,
                        "queue": d.queue,
                        "position": d.position,
                        "work": running.get((str(d.message_id), holder(d))),
                        "explanation": d.explanation,
                        "finished_at": d.finished_at,
                        "created_at": d.created_at,
                    }
                    for d in decisions
                ]
            }
        )


class SettingsView(APIView):
    inputs = {"patch": SettingsInput}

    def patch(self, request, conversation_id):
        _person_only(request, self, "change conversation settings")
        conversation = access_conversation(request.user, conversation_id)
        data = validated(SettingsInput, request.data)
        conversation = actions.update_settings(request.user, conversation, data)
        return Response(conversation_data(conversation))


urlpatterns = [
    path("conversations/<uuid:conversation_id>/resolve/", ResolveView.as_view()),
    path("conversations/<uuid:conversation_id>/turns/", TurnListView.as_view()),
    path("conversations/<uuid:conversation_id>/settings/", SettingsView.as_view()),
    path("conversations/", ConversationListView.as_view()),
    path("conversations/<uuid:conversation_id>/", ConversationDetailView.as_view()),
    path("conversations/<uuid:conversation_id>/messages/", MessageListView.as_view()),
    path("conversations/<uuid:conversation_id>/agents/", ConversationAgentsView.as_view()),
    path(
        "conversations/<uuid:conversation_id>/agents/<uuid:agent_id>/",
        ConversationAgentView.as_view(),
    ),
    path("conversations/<uuid:conversation_id>/files/", FileUploadView.as_view()),
    path("files/<uuid:attachment_id>/", FileDetailView.as_view()),
]


# ---- edits, deletions, reactions and reply threads (issue 28) -------------------------------


class MessageChange(StrictSerializer):
    body = serializers.CharField(max_length=actions.MAX_BODY, trim_whitespace=True)


class ReactionInput(StrictSerializer):
    emoji = serializers.ChoiceField(choices=actions.REACTIONS)


class ReactionQuery(serializers.Serializer):
    """Query parameters: text by nature, so not a StrictSerializer."""

    emoji = serializers.ChoiceField(choices=actions.REACTIONS)


class ReplyInput(MessageInput):
    reply_to = None  # a reply's place is its thread


class MessageDetailView(APIView):
    """PATCH: a person edits the text of their own message ("(edited)"); DELETE: deletes it,
    leaving a placeholder (200 with the placeholder). Another's message: 403; one that cannot
    be read: 404."""

    inputs = {"patch": MessageChange}
    statuses = {"delete": (200,)}

    def get(self, request, message_id):
        message = access_message(request.user, message_id)
        return Response(message_data(message))

    def patch(self, request, message_id):
        _person_only(request, self, "edit messages here")
        message = access_message(request.user, message_id)
        data = validated(MessageChange, request.data)
        return Response(message_data(actions.edit_message(request.user, message, data["body"])))

    def delete(self, request, message_id):
        _person_only(request, self, "delete messages here")
        message = access_message(request.user, message_id)
        return Response(message_data(actions.delete_message(request.user, message)))


class ReactionView(APIView):
    """POST adds the person's reaction (one of the offered emoji), DELETE ``?emoji=`` takes it
    back; both answer the message with its reactions, and are no-ops when already so."""

    inputs = {"post": ReactionInput}
    queries = {"delete": ReactionQuery}
    statuses = {"post": (200,), "delete": (200,)}

    def post(self, request, message_id):
        _person_only(request, self, "react to messages")
        message = access_message(request.user, message_id)
        data = validated(ReactionInput, request.data)
        return Response(message_data(actions.react_message(request.user, message, data["emoji"])))

    def delete(self, request, message_id):
        _person_only(request, self, "react to messages")
        message = access_message(request.user, message_id)
        data = validated(ReactionQuery, request.query_params.dict())
        message = actions.react_message(request.user, message, data["emoji"], on=False)
        return Response(message_data(message))


class ReplyListView(APIView):
    """GET: the replies in a message's reply thread, oldest first, a page at a time (``after`` /
    ``before`` a reply; ``thread`` is null before the first); POST: a person replies there (201), opening the thread with the first reply."""

    inputs = {"post": ReplyInput}
    queries = {"get": HistoryQuery}

    def get(self, request, message_id):
        message, thread = reply_thread_of(request.user, message_id)
        page = {"results": [], "has_more": False}
        if thread is not None:
            page = history(request, thread.id, start="oldest")
        else:
            validated(HistoryQuery, request.query_params.dict())  # bad input is a 400 still
        return Response({"message_id": message.id, "thread": thread.id if thread else None, **page})

    def post(self, request, message_id):
        _person_only(request, self, "reply in threads here")
        message = access_message(request.user, message_id)
        data = validated(ReplyInput, request.data)
        reply = actions.reply_in_thread(
            request.user,
            message,
            data["body"],
            client_ref=data["ref"],
            attachments=data["attachments"],
        )
        return Response(message_data(reply), status=201)


urlpatterns += [
    path("messages/<uuid:message_id>/", MessageDetailView.as_view()),
    path("messages/<uuid:message_id>/reactions/", ReactionView.as_view()),
    path("messages/<uuid:message_id>/replies/", ReplyListView.as_view()),
]
