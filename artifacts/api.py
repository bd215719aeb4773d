"""REST for artifacts (people and agents of the conversation) and for result cards."""

from django.db import transaction
from django.urls import path
from rest_framework import serializers
from rest_framework.response import Response
from rest_framework.views import APIView

from agntchat.core.api import StrictSerializer, page_of, validated
from agntchat.core.exceptions import NotFound
from artifacts import actions
from artifacts.access import access_artifact, access_comment, access_version, comments_of
from artifacts.cards_store import card_html, card_json
from artifacts.exceptions import CardNotFound
from artifacts.models import Artifact, ArtifactComment, ArtifactVersion, CardTemplate
from artifacts.rendering import diff_versions
from conversations.access import access_conversation, access_message
from conversations.payloads import author_data, message_data
from workspaces.access import IsPerson


class WholeNumber(serializers.IntegerField):
    """An integer in a JSON body: "2" or true is a wrong type, not a number."""

    def to_internal_value(self, data):
        if isinstance(data, bool) or not isinstance(data, int):
            self.fail("invalid")
        return super().to_internal_value(data)


class ArtifactInput(StrictSerializer):
    title = serializers.CharField(max_length=actions.MAX_TITLE)
    kind = serializers.ChoiceField(choices=Artifact.Kind.choices)
    # Not trimmed: indentation and trailing newlines are part of a document or a program.
    content = serializers.CharField(trim_whitespace=False)
    language = serializers.RegexField(
        actions.LANGUAGE_RE, max_length=40, required=False, allow_blank=True, default=""
    )


class VersionInput(StrictSerializer):
    content = serializers.CharField(trim_whitespace=False)
    note = serializers.CharField(
        max_length=actions.MAX_NOTE, required=False, allow_blank=True, default=""
    )


class CommentQuery(serializers.Serializer):
    """A page of an artifact's comments, oldest first."""

    page = serializers.IntegerField(min_value=1, max_value=10_000, default=1)
    limit = serializers.IntegerField(min_value=1, max_value=1000, default=1000)


class ArtifactQuery(serializers.Serializer):
    """A page of a conversation's artifacts, newest first."""

    page = serializers.IntegerField(min_value=1, max_value=10_000, default=1)
    limit = serializers.IntegerField(min_value=1, max_value=200, default=200)


class CommentInput(StrictSerializer):
    body = serializers.CharField(max_length=actions.MAX_COMMENT)
    version = WholeNumber(min_value=1, required=False, allow_null=True, default=None)
    parent = serializers.UUIDField(required=False, allow_null=True, default=None)

    def _row(self, lookup, name, value):
        # An id that names nothing of this artifact is a 404, like any id naming nothing visible;
        # the field says which one.
        if value is None:
            return None
        try:
            return lookup(self.context["artifact"], value)
        except NotFound as exc:
            raise type(exc)(fields={name: exc.message}) from None

    def validate_version(self, value):
        return self._row(access_version, "version", value)

    def validate_parent(self, value):
        return self._row(access_comment, "parent", value)


class DiffQuery(serializers.Serializer):
    """Query parameters: text by nature, so not a StrictSerializer."""

    to = serializers.IntegerField(min_value=1)

    def get_fields(self):
        fields = super().get_fields()
        # "from" is a Python keyword, so it cannot be declared as a class attribute.
        fields["from"] = serializers.IntegerField(min_value=1)
        return fields


class CardActionInput(StrictSerializer):
    item_index = WholeNumber(min_value=0)
    action_id = serializers.CharField(max_length=40)


def _creator(artifact: Artifact) -> dict | None:
    if artifact.created_by_agent_id:
        agent = artifact.created_by_agent
        return {"type": "agent", "id": agent.id, "name": agent.name, "handle": agent.handle}
    if artifact.created_by_user_id:
        user = artifact.created_by_user
        return {"type": "person", "id": user.id, "name": user.label, "username": user.username}
    return None


def artifact_data(artifact: Artifact) -> dict:
    return {
        "id": artifact.id,
        "conversation_id": artifact.conversation_id,
        "title": artifact.title,
        "kind": artifact.kind,
        "language": artifact.language or None,
        "current_version": artifact.current_version,
        "created_by": _creator(artifact),
        "message_id": artifact.message_id,
        "created_at": artifact.created_at,
        "updated_at": artifact.updated_at,
    }


def version_data(version: ArtifactVersion, artifact: Artifact, *, full: bool = False) -> dict:
    """A version's history entry; FULL adds its source and its safe rendering."""
    out = {
        "number": version.number,
        "author": author_data(version),
        "note": version.note,
        "created_at": version.created_at,
    }
    if full:
        is_page = artifact.kind == Artifact.Kind.HTML
        out |= {
            "content": version.content,
            # Rendered when stored. Pages are never shown inline: `srcdoc` is for an <iframe
            # sandbox> (no scripts, no same origin), on top of the sanitiser. Everything else is
            # safe to place in the page.
            "html": None if is_page else version.rendered,
            "srcdoc": version.rendered if is_page else None,
        }
    return out


def comment_data(comment: ArtifactComment) -> dict:
    return {
        "id": comment.id,
        "artifact_id": comment.artifact_id,
        "version": comment.version.number if comment.version_id else None,
        "parent_id": comment.parent_id,
        "author": author_data(comment),
        "body": comment.body,
        "created_at": comment.created_at,
    }


def template_data(template: CardTemplate) -> dict:
    return {
        "name": template.name,
        "result_type": template.result_type,
        "version": template.version,
        "description": template.description,
        "layout": template.layout,
        "default_actions": template.default_actions,
        "sample": template.sample,
    }


def _detail(artifact: Artifact) -> dict:
    current = access_version(artifact, artifact.current_version)
    return artifact_data(artifact) | {"version": version_data(current, artifact, full=True)}


class ConversationArtifactsView(APIView):
    inputs = {"post": ArtifactInput}
    queries = {"get": ArtifactQuery}

    def get(self, request, conversation_id):
        conversation = access_conversation(request.user, conversation_id)
        query = validated(ArtifactQuery, request.query_params.dict())
        artifacts = conversation.artifacts.select_related("created_by_user", "created_by_agent")
        page, has_more = page_of(
            artifacts.order_by("-created_at", "-id"), query["page"], query["limit"]
        )
        return Response(
            {
                "results": [artifact_data(a) for a in page],
                "page": query["page"],
                "has_more": has_more,
            }
        )

    def post(self, request, conversation_id):
        conversation = access_conversation(request.user, conversation_id)
        data = validated(ArtifactInput, request.data)
        # Stored and answered in one transaction: a request that fails leaves nothing behind.
        with transaction.atomic():
            artifact = actions.publish_artifact(
                request.user,
                conversation,
                data["title"],
                data["kind"],
                data["content"],
                language=data["language"],
            )
            body = _detail(access_artifact(request.user, artifact.id))
        return Response(body, status=201)


class ArtifactDetailView(APIView):
    def get(self, request, artifact_id):
        return Response(_detail(access_artifact(request.user, artifact_id)))


class VersionListView(APIView):
    inputs = {"post": VersionInput}

    def get(self, request, artifact_id):
        artifact = access_artifact(request.user, artifact_id)
        # Each version's text (up to 500 KB, twice): a long history read whole would not fit.
        versions = artifact.versions.defer("content", "rendered").select_related(
            "author_user", "author_agent"
        )
        return Response({"results": [version_data(v, artifact) for v in versions]})

    def post(self, request, artifact_id):
        artifact = access_artifact(request.user, artifact_id)
        data = validated(VersionInput, request.data)
        with transaction.atomic():
            version = actions.update_artifact(request.user, artifact, data["content"], data["note"])
            body = version_data(version, artifact, full=True)
        return Response(body, status=201)


class VersionDetailView(APIView):
    def get(self, request, artifact_id, number):
        artifact = access_artifact(request.user, artifact_id)
        version = access_version(artifact, number)
        return Response(version_data(version, artifact, full=True))


class DiffView(APIView):
    is_collection = False  # one record at a path that reads like a list
    queries = {"get": DiffQuery}

    def get(self, request, artifact_id):
        artifact = access_artifact(request.user, artifact_id)
        query = validated(DiffQuery, request.query_params.dict())
        old = access_version(artifact, query["from"])
        new = access_version(artifact, query["to"])
        diff = diff_versions(old.content, new.content, f"v{old.number}", f"v{new.number}")
        return Response({"from": old.number, "to": new.number, **diff})


class CommentListView(APIView):
    inputs = {"post": CommentInput}
    queries = {"get": CommentQuery}

    def get(self, request, artifact_id):
        artifact = access_artifact(request.user, artifact_id)
        query = validated(CommentQuery, request.query_params.dict())
        page, has_more = page_of(
            comments_of(artifact).order_by("created_at", "id"), query["page"], query["limit"]
        )
        return Response(
            {
                "results": [comment_data(c) for c in page],
                "page": query["page"],
                "has_more": has_more,
            }
        )

    def post(self, request, artifact_id):
        artifact = access_artifact(request.user, artifact_id)
        data = validated(CommentInput, request.data, artifact=artifact)
        comment = actions.comment_on_artifact(
            request.user, artifact, data["body"], version=data["version"], parent=data["parent"]
        )
        return Response(comment_data(comment), status=201)


class CardActionView(APIView):
    statuses = {"post": (200,)}
    inputs = {"post": CardActionInput}
    permission_classes = [IsPerson]

    def post(self, request, message_id):
        message = access_message(request.user, message_id)
        data = validated(CardActionInput, request.data)
        used = actions.use_card_action(request.user, message, data["item_index"], data["action_id"])
        return Response(
            {
                "outcome": used["outcome"],
                "work": used["work"],
                "message": message_data(used["message"]),
            }
        )


class CardView(APIView):
    is_collection = False  # one record at a path that reads like a list

    def get(self, request, message_id):
        message = access_message(request.user, message_id)
        if "card" not in (message.payload or {}):
            raise CardNotFound()
        return Response({"html": card_html(message.payload), "json": card_json(message.payload)})


class CardTemplateListView(APIView):
    def get(self, request):
        templates = CardTemplate.objects.filter(is_active=True).order_by("name")
        return Response({"results": [template_data(t) for t in templates]})


urlpatterns = [
    path("conversations/<uuid:conversation_id>/artifacts/", ConversationArtifactsView.as_view()),
    path("artifacts/<uuid:artifact_id>/", ArtifactDetailView.as_view()),
    path("artifacts/<uuid:artifact_id>/versions/", VersionListView.as_view()),
    path("artifacts/<uuid:artifact_id>/versions/<int:number>/", VersionDetailView.as_view()),
    path("artifacts/<uuid:artifact_id>/diff/", DiffView.as_view()),
    path("artifacts/<uuid:artifact_id>/comments/", CommentListView.as_view()),
    path("messages/<uuid:message_id>/card-actions/", CardActionView.as_view()),
    path("messages/<uuid:message_id>/card/", CardView.as_view()),
    path("card-templates/", CardTemplateListView.as_view()),
]
