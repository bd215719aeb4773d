"""REST for agents: create and configure, keys, the key → session exchange, presence."""

from django.urls import path
from rest_framework import serializers
from rest_framework.permissions import AllowAny
from rest_framework.response import Response
from rest_framework.views import APIView

from agents import actions, gateway
from agents.access import access_agent, access_own_agent, agents_visible_in, agents_visible_to
from agents.exceptions import AgentNotFound
from agents.models import Agent, AgentKey
from agntchat.core import presence
from agntchat.core.api import IsPerson, StrictSerializer, error_body
from agntchat.core.auth import bearer_secret
from workspaces.access import access_workspace


class AgentInput(StrictSerializer):
    name = serializers.CharField(max_length=80)
    handle = serializers.SlugField(max_length=40, required=False)
    role = serializers.CharField(max_length=200, required=False, allow_blank=True, default="")
    capabilities = serializers.ListField(
        child=serializers.CharField(max_length=60), max_length=50, required=False, default=list
    )
    backend = serializers.ChoiceField(
        choices=Agent.Backend.choices, required=False, default=Agent.Backend.CLAUDE_CLI
    )
    model = serializers.CharField(max_length=100, required=False, allow_blank=True, default="")
    base_url = serializers.URLField(required=False, allow_blank=True, default="")
    pinned_workspaces = serializers.ListField(
        child=serializers.UUIDField(), required=False, allow_null=True, default=None
    )


class AgentUpdate(AgentInput):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, partial=True, **kwargs)


class KeyInput(StrictSerializer):
    name = serializers.CharField(max_length=80, required=False, allow_blank=True, default="")


def agent_out(agent: Agent, online: bool | None = None) -> dict:
    if online is None:
        online = presence.is_online(agent.id)
    return {
        "id": agent.id,
        "name": agent.name,
        "handle": agent.handle,
        "role": agent.role,
        "capabilities": agent.capabilities,
        "backend": agent.backend,
        "model": agent.model,
        "base_url": agent.base_url,
        "owner_id": agent.owner_id,
        "visibility": agent.visibility,
        "pinned_workspaces": [str(p.workspace_id) for p in agent.pins.all()],
        "online": online,
        "created_at": agent.created_at,
    }


def _valid(serializer_class, request):
    serializer = serializer_class(data=request.data)
    serializer.is_valid(raise_exception=True)
    return serializer.validated_data


class AgentListView(APIView):
    permission_classes = [IsPerson]

    def get(self, request):
        workspace_id = request.query_params.get("workspace")
        if workspace_id:
            agents = agents_visible_in(access_workspace(request.user, workspace_id).id)
        else:
            agents = agents_visible_to(request.user)
        agents = list(agents.prefetch_related("pins").order_by("name", "created_at"))
        online = presence.online([a.id for a in agents])
        return Response({"results": [agent_out(a, online[a.id]) for a in agents]})

    def post(self, request):
        data = _valid(AgentInput, request)
        pinned = data.pop("pinned_workspaces")
        agent = actions.create_agent(request.user, pinned_workspace_ids=pinned, **data)
        return Response(agent_out(agent, False), status=201)


class AgentDetailView(APIView):
    permission_classes = [IsPerson]

    def get(self, request, agent_id):
        agent = access_agent(request.user, agent_id)
        out = agent_out(agent)
        out["load"] = gateway.agent_load(agent.id)
        return Response(out)

    def patch(self, request, agent_id):
        agent = access_own_agent(request.user, agent_id)
        data = _valid(AgentUpdate, request)
        if "pinned_workspaces" in data:
            actions.set_agent_pins(agent, data.pop("pinned_workspaces"))
        data.pop("handle", None)  # the handle is how others address it: fixed after creation
        agent = actions.update_agent(agent, **data)
        return Response(agent_out(agent))


class KeyListView(APIView):
    permission_classes = [IsPerson]

    def get(self, request, agent_id):
        agent = access_own_agent(request.user, agent_id)
        keys = AgentKey.objects.filter(agent=agent).order_by("-created_at")
        return Response({"results": [_key_out(k) for k in keys]})

    def post(self, request, agent_id):
        agent = access_own_agent(request.user, agent_id)
        data = _valid(KeyInput, request)
        key, secret = actions.create_agent_key(agent, data["name"])
        out = _key_out(key)
        out["key"] = secret
        return Response(out, status=201)


class KeyDetailView(APIView):
    permission_classes = [IsPerson]

    def delete(self, request, agent_id, key_id):
        agent = access_own_agent(request.user, agent_id)
        key = AgentKey.objects.filter(agent=agent, id=key_id).first()
        if key is None:
            raise AgentNotFound("Key not found.")
        actions.revoke_agent_key(key)
        return Response(status=204)


def _key_out(key: AgentKey) -> dict:
    return {
        "id": key.id,
        "name": key.name,
        "prefix": key.prefix,
        "created_at": key.created_at,
        "last_used_at": key.last_used_at,
        "revoked_at": key.revoked_at,
    }


class AgentSessionView(APIView):
    """POST with ``Authorization: Bearer agk_…``: the only place an agent key is accepted."""

    permission_classes = [AllowAny]
    authentication_classes = []

    def post(self, request):
        secret = bearer_secret(request.headers.get("Authorization", ""))
        opened = (
            actions.open_agent_session(secret) if secret and secret.startswith("agk_") else None
        )
        if opened is None:
            return Response(
                error_body("invalid_agent_key", "Invalid or revoked agent key."),
                status=401,
                headers={"WWW-Authenticate": 'Bearer realm="agntchat"'},
            )
        session, token = opened
        return Response(
            {"token": token, "expires_at": session.expires_at, "agent_id": session.agent_id}
        )


class AgentSelfView(APIView):
    """GET with a session token: the agent's own configuration (the bridge reads it at start)."""

    def get(self, request):
        if not isinstance(request.user, Agent):
            raise AgentNotFound()
        return Response(agent_out(request.user))


urlpatterns = [
    path("agents/", AgentListView.as_view()),
    path("agents/<uuid:agent_id>/", AgentDetailView.as_view()),
    path("agents/<uuid:agent_id>/keys/", KeyListView.as_view()),
    path("agents/<uuid:agent_id>/keys/<uuid:key_id>/", KeyDetailView.as_view()),
    path("agent/session/", AgentSessionView.as_view()),
    path("agent/me/", AgentSelfView.as_view()),
]
