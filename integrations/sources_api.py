"""REST for a workspace's outside tool sources (issue 24): its admins add, change, re-import and
remove MCP servers and HTTP APIs, and grant their functions to agents. A credential is named by
id; its value never leaves the server."""

from django.urls import path
from rest_framework import serializers
from rest_framework.response import Response
from rest_framework.views import APIView

from agntchat.core.api import StrictSerializer, validated
from agntchat.core.events import Verbatim
from integrations import sources
from integrations.models import SourceGrant, ToolSource
from workspaces.access import IsPerson, access_credential, access_membership, require_manager


def source_out(source: ToolSource) -> dict:
    return {
        "id": source.id,
        "workspace_id": source.workspace_id,
        "kind": source.kind,
        "name": source.name,
        "description": source.description,
        "url": source.url,
        "credential": (
            {"id": source.credential.id, "name": source.credential.name}
            if source.credential
            else None
        ),
        "auth_header": source.auth_header,
        "auth_scheme": source.auth_scheme,
        "methods": source.methods,
        "paths": source.paths,
        "timeout_seconds": source.timeout_seconds,
        "functions": [
            {
                "name": f["name"],
                "tool": f["tool"],
                "description": f["description"],
                "risk": f["risk"],
                "input_schema": Verbatim(f["input_schema"]),
            }
            for f in source.functions
        ],
        "imported_at": source.imported_at,
        "problem": source.problem or None,
        "created_at": source.created_at,
    }


def grant_out(grant: SourceGrant) -> dict:
    return {
        "agent_id": grant.agent_id,
        "agent_name": grant.agent.name,
        "function": grant.function,
        "created_at": grant.created_at,
    }


NAME_HELP = "Lowercase letters, digits and _, starting with a letter: its tools' prefix."


class SourceFields(StrictSerializer):
    description = serializers.CharField(
        max_length=sources.MAX_DESCRIPTION, required=False, allow_blank=True
    )
    credential = serializers.UUIDField(
        required=False, allow_null=True, help_text="A credential of the workspace, or null."
    )
    auth_header = serializers.RegexField(sources.HEADER_NAME, required=False)
    auth_scheme = serializers.RegexField(
        r"^[A-Za-z0-9._-]{0,32}$", required=False, allow_blank=True
    )
    methods = serializers.ListField(
        child=serializers.ChoiceField(choices=sources.METHODS), max_length=6, required=False
    )
    paths = serializers.ListField(
        child=serializers.CharField(max_length=200), max_length=sources.MAX_PATTERNS, required=False
    )
    timeout_seconds = serializers.IntegerField(
        min_value=sources.MIN_TIMEOUT, max_value=sources.MAX_TIMEOUT, required=False
    )


class SourceInput(SourceFields):
    kind = serializers.ChoiceField(choices=ToolSource.Kind.values)
    name = serializers.RegexField(sources.NAME, help_text=NAME_HELP)
    url = serializers.URLField(max_length=500)


class SourceChange(SourceFields):
    min_fields = 1
    name = serializers.RegexField(sources.NAME, required=False, help_text=NAME_HELP)
    url = serializers.URLField(max_length=500, required=False)


class SourceGrantInput(StrictSerializer):
    agent = serializers.UUIDField()
    function = serializers.CharField(max_length=128)


def _settings(membership, data: dict) -> dict:
    """The validated DATA as the actions take it: the credential looked up in the workspace."""
    if data.get("credential") is not None:
        data["credential"] = access_credential(membership, data["credential"])
    return data


class SourceListView(APIView):
    """The workspace's tool sources; add one (an MCP server's tools are imported at once)."""

    inputs = {"post": SourceInput}
    permission_classes = [IsPerson]

    def get(self, request, workspace_id):
        membership = access_membership(request.user, workspace_id)
        require_manager(membership)
        rows = sources.sources_of(membership).order_by("name")
        return Response({"results": [source_out(s) for s in rows]})

    def post(self, request, workspace_id):
        membership = access_membership(request.user, workspace_id)
        require_manager(membership)
        data = _settings(membership, dict(validated(SourceInput, request.data)))
        source = sources.add_source(membership, **data)
        if source.kind == ToolSource.Kind.MCP:
            source = sources.import_tools(membership, source)
        return Response(source_out(source), status=201)


class SourceDetailView(APIView):
    inputs = {"patch": SourceChange}
    permission_classes = [IsPerson]

    def get(self, request, source_id):
        membership, source = sources.access_source(request.user, source_id)
        require_manager(membership)
        return Response(source_out(source))

    def patch(self, request, source_id):
        membership, source = sources.access_source(request.user, source_id)
        require_manager(membership)
        data = _settings(membership, dict(validated(SourceChange, request.data)))
        source = sources.change_source(membership, source, **data)
        if source.kind == ToolSource.Kind.MCP and sources.needs_import(data):
            source = sources.import_tools(membership, source)
        return Response(source_out(source))

    def delete(self, request, source_id):
        membership, source = sources.access_source(request.user, source_id)
        sources.remove_source(membership, source)
        return Response(status=204)


class SourceImportView(APIView):
    """Read the MCP server's tools again; ``problem`` says when it could not."""

    permission_classes = [IsPerson]

    def post(self, request, source_id):
        membership, source = sources.access_source(request.user, source_id)
        return Response(source_out(sources.import_tools(membership, source)))


class SourceGrantQuery(StrictSerializer):
    agent = serializers.UUIDField()
    function = serializers.CharField(max_length=128)


class SourceGrantsView(APIView):
    """Which agents may call which functions of the source. DELETE takes ``agent`` and
    ``function`` as query parameters (admins, or the agent's owner for its own)."""

    inputs = {"post": SourceGrantInput}
    queries = {"delete": SourceGrantQuery}
    permission_classes = [IsPerson]

    def get(self, request, source_id):
        membership, source = sources.access_source(request.user, source_id)
        require_manager(membership)
        grants = source.grants.select_related("agent").order_by("agent__name", "function")
        return Response({"results": [grant_out(g) for g in grants]})

    def post(self, request, source_id):
        membership, source = sources.access_source(request.user, source_id)
        require_manager(membership)
        data = validated(SourceGrantInput, request.data)
        agent = sources.source_agent(source, data["agent"])
        grant = sources.grant_function(membership, source, agent, data["function"])
        return Response(grant_out(grant), status=201)

    def delete(self, request, source_id):
        membership, source = sources.access_source(request.user, source_id)
        query = validated(SourceGrantQuery, request.query_params.dict())
        agent = sources.granted_agent(source, query["agent"])
        sources.take_away_function(membership, source, agent, query["function"])
        return Response(status=204)


urlpatterns = [
    path("workspaces/<uuid:workspace_id>/tool-sources/", SourceListView.as_view()),
    path("tool-sources/<uuid:source_id>/", SourceDetailView.as_view()),
    path("tool-sources/<uuid:source_id>/import/", SourceImportView.as_view()),
    path("tool-sources/<uuid:source_id>/grants/", SourceGrantsView.as_view()),
]
