"""REST for what agents remember (MEM-1…3): people see, teach, edit, pin and forget it. An
owner sees all their agents remember; members see a workspace's family layer where learned
somewhere they may read."""

from django.urls import path
from rest_framework import serializers
from rest_framework.response import Response
from rest_framework.views import APIView

from agents.access import access_own_agent, agent_appears_in
from agents.exceptions import AgentNotFound
from agntchat.core.api import StrictSerializer, page_of, validated
from work import memory
from work.access import access_memory, memories_visible_to
from work.models import MemoryItem
from workspaces.access import IsPerson, access_workspace

MAX_LISTED = 200  # a page at most
MAX_PAGE = 10_000


def memory_out(item: MemoryItem) -> dict:
    return {
        "id": item.id,
        "agent_id": item.agent_id,
        "workspace_id": item.workspace_id,
        "scope": item.scope,
        "content": item.content,
        "source_conversation_id": item.source_conversation_id,
        "source_message_id": item.source_message_id,
        "strength": round(item.strength, 4),
        "pinned": item.pinned,
        "last_used_at": item.last_used_at,
        "archived_at": item.archived_at,
        "archived_reason": item.archived_reason or None,
        "created_at": item.created_at,
    }


class MemoryQuery(serializers.Serializer):
    """Query parameters: text by nature, so not a StrictSerializer."""

    workspace = serializers.UUIDField(required=False)
    agent = serializers.UUIDField(required=False)
    scope = serializers.ChoiceField(choices=MemoryItem.Scope.choices, required=False)
    q = serializers.CharField(max_length=500, required=False)
    archived = serializers.BooleanField(required=False, default=False)
    page = serializers.IntegerField(min_value=1, max_value=MAX_PAGE, default=1)
    limit = serializers.IntegerField(min_value=1, max_value=MAX_LISTED, default=MAX_LISTED)


class MemoryInput(StrictSerializer):
    agent = serializers.UUIDField()
    workspace = serializers.UUIDField()
    content = serializers.CharField(max_length=memory.MAX_CONTENT)
    shared = serializers.BooleanField(required=False, default=False)
    pinned = serializers.BooleanField(required=False, default=False)


class MemoryChange(StrictSerializer):
    min_fields = 1
    content = serializers.CharField(max_length=memory.MAX_CONTENT, required=False)
    pinned = serializers.BooleanField(required=False)


class MemoryListView(APIView):
    inputs = {"post": MemoryInput}
    queries = {"get": MemoryQuery}
    permission_classes = [IsPerson]

    def get(self, request):
        query = validated(MemoryQuery, request.query_params.dict())
        found = memories_visible_to(request.user).filter(archived_at__isnull=not query["archived"])
        if "workspace" in query:
            found = found.filter(workspace=access_workspace(request.user, query["workspace"]))
        if "agent" in query:
            found = found.filter(agent_id=query["agent"])
        if "scope" in query:
            found = found.filter(scope=query["scope"])
        found = memory.listed(found, query.get("q", ""))
        page, has_more = page_of(found, query["page"], query["limit"])
        return Response(
            {"results": [memory_out(i) for i in page], "page": query["page"], "has_more": has_more}
        )

    def post(self, request):
        """The owner teaches an agent something, in a workspace where it appears."""
        data = validated(MemoryInput, request.data)
        agent = access_own_agent(request.user, data["agent"])
        workspace = access_workspace(request.user, data["workspace"])
        if not agent_appears_in(agent, workspace.id):
            raise AgentNotFound()
        item = memory.remember(
            agent,
            workspace.id,
            data["content"],
            family=data["shared"],
            pinned=data["pinned"],
            user=request.user,
        )
        return Response(memory_out(item), status=201)


class MemoryDetailView(APIView):
    inputs = {"patch": MemoryChange}
    statuses = {"delete": (200,)}  # answers with the archived item
    permission_classes = [IsPerson]

    def get(self, request, memory_id):
        return Response(memory_out(access_memory(request.user, memory_id)))

    def patch(self, request, memory_id):
        item = access_memory(request.user, memory_id, edit=True)
        data = validated(MemoryChange, request.data)
        memory.update_item(item, content=data.get("content"), pinned=data.get("pinned"))
        return Response(memory_out(item))

    def delete(self, request, memory_id):
        """Forget: archived, no longer recalled, still listed with archived=true."""
        item = access_memory(request.user, memory_id, edit=True)
        return Response(memory_out(memory.forget(item)))


urlpatterns = [
    path("memory/", MemoryListView.as_view()),
    path("memory/<uuid:memory_id>/", MemoryDetailView.as_view()),
]
