"""REST for tools: an agent's tools and standing permissions (its owner), a workspace's
standing permissions (its admins), the calls agents made, and deciding permission requests."""

from django.urls import path
from drf_spectacular.utils import PolymorphicProxySerializer
from rest_framework import serializers
from rest_framework.response import Response
from rest_framework.views import APIView

from agents.access import access_own_agent
from agntchat.core.api import StrictSerializer, validated
from conversations.access import access_conversation
from work import actions, approvals
from work.access import (
    access_permission_request,
    access_tool,
    access_tool_call,
    access_workspace_permission,
    workspace_permissions,
)
from work.live import tool_call_data
from work.models import Decision, Risk, ToolGrant, ToolPermission
from work.permissions import DEFAULTS
from work.tools.registry import REGISTRY
from workspaces.access import IsPerson, access_membership


def tool_out(tool, grants: dict, permissions: dict) -> dict:
    own = permissions.get(tool.name)
    return {
        "name": tool.name,
        "description": tool.description,
        "risk": tool.risk,
        "connection": tool.connection,
        "platform": tool.platform,
        "granted": grants.get(tool.name, tool.platform),
        # The owner's own setting (null: the risk level's default, given beside it).
        "permission": own,
        "default_permission": DEFAULTS[tool.risk],
    }


def agent_tools_out(agent) -> list[dict]:
    """Every tool of the registry as AGENT's owner sees it (``tool_out``), in name order."""
    grants = dict(ToolGrant.objects.filter(agent=agent).values_list("tool", "granted"))
    permissions = dict(
        ToolPermission.objects.filter(agent=agent, workspace__isnull=True, risk="").values_list(
            "tool", "decision"
        )
    )
    return [tool_out(t, grants, permissions) for _, t in sorted(REGISTRY.items())]


class AgentToolListView(APIView):
    """Every tool of the registry, and whether this agent may use it: its owner only."""

    permission_classes = [IsPerson]

    def get(self, request, agent_id):
        agent = access_own_agent(request.user, agent_id)
        return Response({"results": agent_tools_out(agent)})


class AgentToolInput(StrictSerializer):
    min_fields = 1
    granted = serializers.BooleanField(required=False)
    # null: back to the default of the tool's risk level.
    permission = serializers.ChoiceField(choices=Decision.choices, required=False, allow_null=True)


class AgentToolDetailView(APIView):
    inputs = {"patch": AgentToolInput}
    permission_classes = [IsPerson]

    def patch(self, request, agent_id, name):
        agent = access_own_agent(request.user, agent_id)
        tool = access_tool(name)
        data = validated(AgentToolInput, request.data)
        if "granted" in data:
            actions.set_tool_grant(request.user, agent, tool, data["granted"])
        if "permission" in data:
            actions.set_agent_permission(request.user, agent, tool, data["permission"])
        grants = dict(ToolGrant.objects.filter(agent=agent).values_list("tool", "granted"))
        own = ToolPermission.objects.filter(
            agent=agent, workspace__isnull=True, tool=tool.name
        ).values_list("decision", flat=True)
        return Response(tool_out(tool, grants, {tool.name: next(iter(own), None)}))


def workspace_permission_out(permission: ToolPermission) -> dict:
    return {
        "id": permission.id,
        "tool": permission.tool,
        "risk": permission.risk,
        "decision": permission.decision,
        "set_by_id": permission.set_by_id,
        "updated_at": permission.updated_at,
    }


class ToolPermissionInput(StrictSerializer):
    """A standing permission for one tool."""

    tool = serializers.ChoiceField(choices=[])
    decision = serializers.ChoiceField(choices=Decision.choices)

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["tool"].choices = sorted(REGISTRY)  # registered once the apps are ready


class RiskPermissionInput(StrictSerializer):
    """A standing permission for every tool of one risk level."""

    risk = serializers.ChoiceField(choices=Risk.choices)
    decision = serializers.ChoiceField(choices=Decision.choices)


# A tool or a risk level, never both: the schema says so (oneOf two closed objects).
WorkspacePermissionInput = PolymorphicProxySerializer(
    component_name="WorkspacePermissionInput",
    serializers=[ToolPermissionInput, RiskPermissionInput],
    resource_type_field_name=None,
)


class WorkspacePermissionListView(APIView):
    """Standing permissions for every agent working in a workspace. Members read them; admins
    and the owner set them (a ``deny`` here wins over any agent's own setting)."""

    inputs = {"post": WorkspacePermissionInput}
    permission_classes = [IsPerson]

    def get(self, request, workspace_id):
        membership = access_membership(request.user, workspace_id)
        rows = workspace_permissions(membership).order_by("tool", "risk")
        return Response({"results": [workspace_permission_out(p) for p in rows]})

    def post(self, request, workspace_id):
        membership = access_membership(request.user, workspace_id)
        by_risk = isinstance(request.data, dict) and "tool" not in request.data
        data = validated(RiskPermissionInput if by_risk else ToolPermissionInput, request.data)
        permission = actions.set_workspace_permission(
            membership,
            tool=data.get("tool", ""),
            risk=data.get("risk", ""),
            decision=data["decision"],
        )
        return Response(workspace_permission_out(permission), status=201)


class WorkspacePermissionDetailView(APIView):
    permission_classes = [IsPerson]

    def delete(self, request, workspace_id, permission_id):
        membership = access_membership(request.user, workspace_id)
        permission = access_workspace_permission(membership, permission_id)
        actions.set_workspace_permission(
            membership, tool=permission.tool, risk=permission.risk, decision=None
        )
        return Response(status=204)


class ConversationToolCallsView(APIView):
    """The tool calls agents made in a conversation, oldest first (the newest 200)."""

    permission_classes = [IsPerson]

    def get(self, request, conversation_id):
        conversation = access_conversation(request.user, conversation_id)
        calls = conversation.tool_calls.select_related("request__decided_by").order_by(
            "-created_at"
        )[:200]
        return Response({"results": [tool_call_data(c) for c in reversed(calls)]})


class ToolCallDetailView(APIView):
    permission_classes = [IsPerson]

    def get(self, request, call_id):
        call = access_tool_call(request.user, call_id)
        return Response(tool_call_data(call, full_output=True))


class DecisionInput(StrictSerializer):
    decision = serializers.ChoiceField(choices=["approve", "deny"])
    # With an approval: also allow this agent this tool in this workspace from now on.
    always = serializers.BooleanField(required=False, default=False)


class PermissionDecisionView(APIView):
    """Approve or deny a tool call waiting for a person: the agent's owner, or an admin of the
    workspace it was made in. Answers the call as it now stands."""

    inputs = {"post": DecisionInput}
    permission_classes = [IsPerson]

    def post(self, request, request_id):
        permission_request = access_permission_request(request.user, request_id)
        data = validated(DecisionInput, request.data)
        approvals.decide_permission(
            request.user, permission_request, data["decision"] == "approve", data["always"]
        )
        return Response(tool_call_data(access_tool_call(request.user, permission_request.call_id)))


urlpatterns = [
    path("agents/<uuid:agent_id>/tools/", AgentToolListView.as_view()),
    path("agents/<uuid:agent_id>/tools/<str:name>/", AgentToolDetailView.as_view()),
    path(
        "workspaces/<uuid:workspace_id>/tool-permissions/",
        WorkspacePermissionListView.as_view(),
    ),
    path(
        "workspaces/<uuid:workspace_id>/tool-permissions/<uuid:permission_id>/",
        WorkspacePermissionDetailView.as_view(),
    ),
    path("conversations/<uuid:conversation_id>/tool-calls/", ConversationToolCallsView.as_view()),
    path("tool-calls/<uuid:call_id>/", ToolCallDetailView.as_view()),
    path("permission-requests/<uuid:request_id>/decision/", PermissionDecisionView.as_view()),
]
