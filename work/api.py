"""REST for agents: create and configure, keys, the key → session exchange, presence."""

from django.db import transaction
from django.db.models import Avg, Count, Sum
from django.urls import path
from rest_framework import serializers
from rest_framework.permissions import AllowAny
from rest_framework.response import Response
from rest_framework.views import APIView

from agents import actions
from agents.access import (
    access_agent,
    access_agent_key,
    access_credential_grant,
    access_own_agent,
    access_placement_host,
    agents_visible_in,
    agents_visible_to,
)
from agents.auth import bearer_secret
from agents.exceptions import AgentNotFound, AgentRule
from agents.exchange import exchange_secret
from agents.models import DEFAULT_TURN_TIME_LIMIT, Agent, AgentKey, CredentialGrant
from agntchat.core import presence
from agntchat.core.api import StrictSerializer, error_body, validated
from agntchat.core.exceptions import AppError
from conversations import scoring, tasks
from conversations.access import access_conversation
from work import directory
from work import hosting as work_hosting
from work.tools.registry import tool_reach
from workspaces.access import IsPerson, access_credential, access_membership, access_workspace
from workspaces.login import client_address

# An agent's handle as a person reads its refusal (not Django's "slug" wording).
HANDLE_ERRORS = {"invalid": "Use letters, digits, - and _ only."}


class AgentInput(StrictSerializer):
    name = serializers.CharField(max_length=80)
    handle = serializers.SlugField(max_length=40, required=False, error_messages=HANDLE_ERRORS)
    role = serializers.CharField(max_length=200, required=False, allow_blank=True, default="")
    capabilities = serializers.ListField(
        child=serializers.CharField(max_length=60), max_length=50, required=False, default=list
    )
    backend = serializers.ChoiceField(
        choices=Agent.Backend.choices, required=False, default=Agent.Backend.CLAUDE_CLI
    )
    model = serializers.CharField(max_length=100, required=False, allow_blank=True, default="")
    base_url = serializers.URLField(max_length=200, required=False, allow_blank=True, default="")
    runtime = serializers.ChoiceField(
        choices=Agent.Runtime.choices, required=False, default=Agent.Runtime.LOCAL
    )
    # Hosted: the host to run on (one of the agent's allowed hosts); none, the one with most room.
    host = serializers.UUIDField(required=False, allow_null=True, default=None)
    # How long one turn may run before the bridge stops it: a second to a day.
    turn_time_limit_seconds = serializers.IntegerField(
        min_value=1, max_value=24 * 60 * 60, required=False, default=DEFAULT_TURN_TIME_LIMIT
    )
    pinned_workspaces = serializers.ListField(
        child=serializers.UUIDField(), required=False, allow_null=True, default=None
    )


class AgentUpdate(AgentInput):
    min_fields = 1
    handle = None  # how others address the agent: fixed once it is created

    def __init__(self, *args, **kwargs):
        super().__init__(*args, partial=True, **kwargs)


class KeyInput(StrictSerializer):
    name = serializers.CharField(max_length=80, required=False, allow_blank=True, default="")


def agent_out(agent: Agent, viewer, online: bool | None = None) -> dict:
    """AGENT as VIEWER (a person, or the agent itself) reads it: its model's base URL, which may
    carry a credential (https://user:key@host/v1), only for its owner and itself."""
    if online is None:
        online = presence.is_online(agent.id)
    out = {
        "id": agent.id,
        "name": agent.name,
        "handle": agent.handle,
        "role": agent.role,
        "capabilities": agent.capabilities,
        "backend": agent.backend,
        "model": agent.model,
        "runtime": agent.runtime,
        "host_id": agent.host_id,
        "turn_time_limit_seconds": agent.turn_time_limit_seconds,
        "owner_id": agent.owner_id,
        "visibility": agent.visibility,
        "pinned_workspaces": [str(p.workspace_id) for p in agent.pins.all()],
        "online": online,
        "created_at": agent.created_at,
    }
    if viewer == agent or getattr(viewer, "pk", None) == agent.owner_id:
        out["base_url"] = agent.base_url
    return out


class AgentListView(APIView):
    inputs = {"post": AgentInput}
    permission_classes = [IsPerson]

    def get(self, request):
        workspace_id = request.query_params.get("workspace")
        if workspace_id:
            agents = agents_visible_in(access_workspace(request.user, workspace_id).id)
        else:
            agents = agents_visible_to(request.user)
        agents = list(agents.prefetch_related("pins").order_by("name", "created_at"))
        online = presence.online([a.id for a in agents])
        return Response({"results": [agent_out(a, request.user, online[a.id]) for a in agents]})

    def post(self, request):
        data = validated(AgentInput, request.data)
        pinned = data.pop("pinned_workspaces")
        runtime, host_id = data.pop("runtime"), data.pop("host")
        with transaction.atomic():  # a hosted agent with no host to run on is not created
            agent = actions.create_agent(request.user, pinned_workspace_ids=pinned, **data)
            if runtime == Agent.Runtime.HOSTED or host_id is not None:
                agent = place(agent, runtime, host_id)
        return Response(agent_out(agent, request.user, False), status=201)


class AgentDetailView(APIView):
    inputs = {"patch": AgentUpdate}
    permission_classes = [IsPerson]

    def get(self, request, agent_id):
        agent = access_agent(request.user, agent_id)
        out = agent_out(agent, request.user)
        out["load"] = scoring.agent_loads([agent.id])[agent.id]
        return Response(out)

    def delete(self, request, agent_id):
        agent = access_own_agent(request.user, agent_id)
        with transaction.atomic():
            if agent.host_id is not None:
                agent = work_hosting.set_runtime(agent, Agent.Runtime.LOCAL)  # its host forgets it
            actions.delete_agent(agent)
        return Response(status=204)

    def patch(self, request, agent_id):
        agent = access_own_agent(request.user, agent_id)
        data = validated(AgentUpdate, request.data)
        runtime, host_id = data.pop("runtime", None), data.pop("host", None)
        with transaction.atomic():  # a refused part leaves every other part unchanged too
            if "pinned_workspaces" in data:
                # Through the directory's check: a published agent is not pinned to a team (AGT-7).
                directory.set_pins(agent, data.pop("pinned_workspaces"))
            if runtime is not None or host_id is not None:
                moved = (runtime or agent.runtime) != agent.runtime or (
                    host_id is not None and host_id != agent.host_id
                )
                if moved:
                    agent = place(agent, runtime or agent.runtime, host_id)
            agent = actions.update_agent(agent, **data)
        return Response(agent_out(agent, request.user))


def place(agent: Agent, runtime: str, host_id) -> Agent:
    """Where AGENT runs, through the one path (work.hosting.set_runtime): local clears its host,
    hosted places it on HOST_ID (an allowed host) or the one with most room."""
    if runtime == Agent.Runtime.LOCAL:
        if host_id is not None:
            raise AppError(
                "A local agent runs on its owner's machine, not on a host.",
                code="invalid",
                fields={"host": "Only for a hosted agent."},
            )
        return work_hosting.set_runtime(agent, runtime)
    host = access_placement_host(agent, host_id) if host_id is not None else None
    return work_hosting.set_runtime(agent, runtime, host)


class KeyListView(APIView):
    inputs = {"post": KeyInput}
    permission_classes = [IsPerson]

    def get(self, request, agent_id):
        agent = access_own_agent(request.user, agent_id)
        keys = AgentKey.objects.filter(agent=agent).order_by("-created_at")
        return Response({"results": [_key_out(k) for k in keys]})

    def post(self, request, agent_id):
        agent = access_own_agent(request.user, agent_id)
        data = validated(KeyInput, request.data)
        key, secret = actions.create_agent_key(agent, data["name"])
        out = _key_out(key)
        out["key"] = secret
        return Response(out, status=201)


class KeyDetailView(APIView):
    permission_classes = [IsPerson]

    def delete(self, request, agent_id, key_id):
        agent = access_own_agent(request.user, agent_id)
        actions.revoke_agent_key(access_agent_key(agent, key_id))
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
    """POST with ``Authorization: Bearer agk_…`` (or a host's placement token ``aht_…``): the
    only place either is accepted."""

    statuses = {"post": (200,)}

    permission_classes = [AllowAny]
    authentication_classes = []

    def post(self, request):
        secret = bearer_secret(request.headers.get("Authorization", "")) or ""
        # A host's placement token (WS-4) too: only here, only for its agent, while placed.
        opened = exchange_secret(secret, client_address(request))
        if opened is None:
            return Response(
                error_body(
                    "invalid_agent_key",
                    "Invalid or revoked agent key (or host placement token).",
                ),
                status=401,
                headers={"WWW-Authenticate": 'Bearer realm="agntchat"'},
            )
        session, token = opened
        return Response(
            {"token": token, "expires_at": session.expires_at, "agent_id": session.agent_id}
        )


class AgentSelfView(APIView):
    """GET with a session token: the agent's own configuration (the bridge reads it at start)."""

    is_collection = False  # one record at a path that reads like a list

    def get(self, request):
        if not isinstance(request.user, Agent):
            raise AgentNotFound()
        return Response(agent_out(request.user, request.user))


urlpatterns = [
    path("agents/", AgentListView.as_view()),
    path("agents/<uuid:agent_id>/", AgentDetailView.as_view()),
    path("agents/<uuid:agent_id>/keys/", KeyListView.as_view()),
    path("agents/<uuid:agent_id>/keys/<uuid:key_id>/", KeyDetailView.as_view()),
    path("agent/session/", AgentSessionView.as_view()),
    path("agent/me/", AgentSelfView.as_view()),
]


class TaskInput(StrictSerializer):
    # No agent: the owner is chosen by score (TASK-2).
    agent = serializers.UUIDField(required=False, allow_null=True, default=None)
    workspace = serializers.UUIDField()
    instructions = serializers.CharField(max_length=tasks.MAX_INSTRUCTIONS)
    conversation = serializers.UUIDField(required=False, allow_null=True, default=None)
    # The tools the work needs: with no agent, those that have them score higher. A name no
    # agent has (a connection's tool not set up yet) is kept; it scores for nobody.
    tools = serializers.ListField(
        child=serializers.CharField(max_length=64), required=False, default=list, max_length=50
    )


class GrantInput(StrictSerializer):
    agent = serializers.UUIDField()


def grant_out(grant: CredentialGrant) -> dict:
    return {
        "agent_id": grant.agent_id,
        "agent_name": grant.agent.name,
        "granted_by_id": grant.granted_by_id,
        "created_at": grant.created_at,
    }


class CredentialGrantListView(APIView):
    """Which agents may be handed a workspace credential with their work: managers only."""

    inputs = {"post": GrantInput}
    permission_classes = [IsPerson]

    def get(self, request, workspace_id, credential_id):
        credential = access_credential(access_membership(request.user, workspace_id), credential_id)
        grants = credential.grants.select_related("agent").order_by("created_at")
        return Response({"results": [grant_out(g) for g in grants]})

    def post(self, request, workspace_id, credential_id):
        membership = access_membership(request.user, workspace_id)
        credential = access_credential(membership, credential_id)
        data = validated(GrantInput, request.data)
        agent = access_agent(request.user, data["agent"])
        grant, created = actions.grant_credential(membership, credential, agent)
        return Response(grant_out(grant), status=201 if created else 200)


class CredentialGrantDetailView(APIView):
    permission_classes = [IsPerson]

    def delete(self, request, workspace_id, credential_id, agent_id):
        membership = access_membership(request.user, workspace_id)
        credential = access_credential(membership, credential_id)
        grant = access_credential_grant(credential, agent_id)
        actions.revoke_credential_grant(membership, grant)
        return Response(status=204)


class PersonalityInput(StrictSerializer):
    text = serializers.CharField(
        max_length=actions.PERSONALITY_MAX, allow_blank=True, trim_whitespace=False
    )
    force = serializers.BooleanField(required=False, default=False)


EVENTS_SHOWN = 200


def task_out(task, with_events=False) -> dict:
    out = tasks.task_data(task)
    if with_events:
        # The latest EVENTS_SHOWN, oldest first (a task keeps up to 5,000, each up to 16 KB);
        # ``eventCount`` says how many there were.
        latest = task.events.order_by("-seq")[:EVENTS_SHOWN]
        out["events"] = [
            {"seq": e.seq, "data": e.data, "created_at": e.created_at} for e in list(latest)[::-1]
        ]
        out["usage"] = [_usage_out(u) for u in task.usage.order_by("created_at")]
    return out


def _usage_out(usage) -> dict:
    return {
        "id": usage.id,
        "backend": usage.backend,
        "model": usage.model,
        "input_tokens": usage.input_tokens,
        "output_tokens": usage.output_tokens,
        "cache_read_tokens": usage.cache_read_tokens,
        "cache_write_tokens": usage.cache_write_tokens,
        "cost_usd": float(usage.cost_usd) if usage.cost_usd is not None else None,
        "latency_ms": usage.latency_ms,
        "conversation_id": usage.conversation_id,
        "task_id": usage.task_id,
        "created_at": usage.created_at,
    }


class TaskListView(APIView):
    inputs = {"post": TaskInput}
    permission_classes = [IsPerson]

    def get(self, request):
        found = tasks.tasks_visible_to(request.user)
        if request.query_params.get("workspace"):
            found = found.filter(
                workspace=access_workspace(request.user, request.query_params["workspace"])
            )
        return Response({"results": [task_out(t) for t in found.order_by("-created_at")[:200]]})

    def post(self, request):
        data = validated(TaskInput, request.data)
        workspace = access_workspace(request.user, data["workspace"])
        agent = access_agent(request.user, data["agent"]) if data["agent"] else None
        conversation = (
            access_conversation(request.user, data["conversation"])
            if data["conversation"]
            else None
        )
        if conversation is not None and conversation.workspace_id != workspace.id:
            raise AgentRule(
                "The conversation is not in that workspace.",
                fields={"conversation": "Wrong workspace."},
            )
        task = tasks.create_task(
            request.user,
            workspace,
            agent,
            data["instructions"],
            conversation=conversation,
            tools=data["tools"],
            tool_reach=tool_reach,
        )
        return Response(task_out(task), status=201)


class TaskDetailView(APIView):
    permission_classes = [IsPerson]

    def get(self, request, task_id):
        return Response(task_out(tasks.access_task(request.user, task_id), with_events=True))


class TaskCancelView(APIView):
    statuses = {"post": (200, 202)}
    permission_classes = [IsPerson]

    def post(self, request, task_id):
        task = tasks.access_task(request.user, task_id)
        if refusal := tasks.cancel_refusal(request.user, task):
            raise refusal
        task = tasks.request_cancel(task)
        return Response(task_out(task), status=202 if task.cancel_state == "requested" else 200)


class PersonalityView(APIView):
    is_collection = False  # one record at a path that reads like a list
    inputs = {"put": PersonalityInput}
    permission_classes = [IsPerson]

    def get(self, request, agent_id):
        agent = access_own_agent(request.user, agent_id)
        return Response({"text": agent.personality})

    def put(self, request, agent_id):
        agent = access_own_agent(request.user, agent_id)
        data = validated(PersonalityInput, request.data)
        revision = actions.set_personality(
            agent, data["text"], author=request.user, force=data["force"]
        )
        return Response({"text": revision.text, "revision_id": revision.id})


class PersonalityRevisionsView(APIView):
    permission_classes = [IsPerson]

    def get(self, request, agent_id):
        agent = access_own_agent(request.user, agent_id)
        revisions = agent.personality_revisions.select_related(
            "author_user", "author_agent"
        ).order_by("-created_at")
        return Response(
            {
                "results": [
                    {
                        "id": r.id,
                        "text": r.text,
                        "forced": r.forced,
                        "created_at": r.created_at,
                        "author": {"type": "agent", "id": r.author_agent_id}
                        if r.author_agent_id
                        else {"type": "person", "id": r.author_user_id},
                    }
                    for r in revisions[:100]
                ]
            }
        )


class UsageView(APIView):
    permission_classes = [IsPerson]

    def get(self, request, agent_id):
        agent = access_own_agent(request.user, agent_id)
        rows = list(agent.usage.order_by("-created_at")[:100])
        totals = agent.usage.aggregate(
            input_tokens=Sum("input_tokens"),
            output_tokens=Sum("output_tokens"),
            cache_read_tokens=Sum("cache_read_tokens"),
            cache_write_tokens=Sum("cache_write_tokens"),
            cost_usd=Sum("cost_usd"),
            turns=Count("id"),
            latency_ms=Avg("latency_ms"),
        )
        totals["cost_usd"] = float(totals["cost_usd"]) if totals["cost_usd"] is not None else None
        return Response({"totals": totals, "results": [_usage_out(u) for u in rows]})


urlpatterns += [
    path("agents/<uuid:agent_id>/personality/", PersonalityView.as_view()),
    path("agents/<uuid:agent_id>/personality/revisions/", PersonalityRevisionsView.as_view()),
    path("agents/<uuid:agent_id>/usage/", UsageView.as_view()),
    path("tasks/", TaskListView.as_view()),
    path("tasks/<uuid:task_id>/", TaskDetailView.as_view()),
    path("tasks/<uuid:task_id>/cancel/", TaskCancelView.as_view()),
    path(
        "workspaces/<uuid:workspace_id>/credentials/<uuid:credential_id>/grants/",
        CredentialGrantListView.as_view(),
    ),
    path(
        "workspaces/<uuid:workspace_id>/credentials/<uuid:credential_id>/grants/<uuid:agent_id>/",
        CredentialGrantDetailView.as_view(),
    ),
]
