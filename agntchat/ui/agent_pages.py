"""Pages of agents and tasks. They only read: the page script changes things through the REST
API (agents, keys, personality, tasks, cancel), whose actions check every rule."""

import os
import shlex
import shutil
import sys
from pathlib import Path

from django.db.models import JSONField, OuterRef, Subquery
from django.http import Http404
from django.shortcuts import render
from django.utils.safestring import mark_safe

from agents.access import access_agent, agent_appears_in, agents_visible_in, is_agent_owner
from agents.models import Agent
from agntchat.ui import directory_pages, routine_pages
from agntchat.ui.shell import agent_presence, shell, workspace_page
from agntchat.ui.skill_pages import add_skill_limits
from agntchat.ui.tool_calls import tool_calls_of_task
from artifacts.rendering import render_markdown
from conversations import scoring
from conversations.models import TaskEvent
from conversations.scoring import DEFAULT_WEIGHTS
from conversations.tasks import access_task, cancel_refusal, task_data, tasks_visible_to
from work import skills
from work.access import memories_visible_to
from work.models import Decision
from work.tools.api import agent_tools_out
from workspaces.access import workspaces_visible_to


def bridge_program() -> str:
    """How a fresh shell on this machine runs the bridge: the full path of the agntchat-bridge
    installed with this server (a virtualenv's bin is on PATH only while it is activated), else
    one on PATH, else the bare name (installed elsewhere with ``pip install``)."""
    beside = Path(sys.executable).with_name("agntchat-bridge")  # the venv's bin, unresolved
    found = str(beside) if os.access(beside, os.X_OK) else shutil.which("agntchat-bridge")
    return shlex.quote(found) if found else "agntchat-bridge"


def _rows(agents, user):
    online = agent_presence(agents)
    loads = scoring.agent_loads([a.id for a in agents])
    return [
        {
            "agent": a,
            "online": online[a.id],
            "load": loads[a.id],
            "mine": is_agent_owner(user, a),
        }
        for a in agents
    ]


@workspace_page
def directory(request, membership):
    """The agents in this workspace, and the person's own agents that do not appear here."""
    here = list(agents_visible_in(membership.workspace_id).select_related("owner").order_by("name"))
    elsewhere = list(
        Agent.objects.filter(owner=request.user)
        .exclude(pk__in=[a.id for a in here])
        .prefetch_related("pins__workspace")
        .order_by("name")
    )
    context = shell(
        request,
        membership,
        section="agents",
        here=_rows(here, request.user),
        elsewhere=_rows(elsewhere, request.user),
    )
    return render(request, "agents/directory.html", context)


def _form_choices(request):
    return {
        "backends": Agent.Backend.choices,
        "runtimes": Agent.Runtime.choices,
        "my_workspaces": list(workspaces_visible_to(request.user)),
    }


@workspace_page
def new_agent(request, membership):
    context = shell(request, membership, section="agents", **_form_choices(request))
    return render(request, "agents/new.html", context)


def owner_extras(user, agent, membership) -> dict:
    """What only the agent's owner sees on its page: its skills as it has them, the limits of
    the add-a-skill form, and how much it remembers here."""
    return {
        "agent_skills": [
            {"resolved": r, "summary": skills.summary(r.skill.description)}
            for r in skills.resolve(agent)
        ],
        **add_skill_limits(),
        "memory_count": memories_visible_to(user)
        .filter(agent=agent, workspace=membership.workspace, archived_at__isnull=True)
        .count(),
    }


@workspace_page
def agent_detail(request, membership, agent_id):
    agent = access_agent(request.user, agent_id)
    is_owner = is_agent_owner(request.user, agent)
    online = agent_presence([agent])[agent.id]
    context = shell(
        request,
        membership,
        section="agents",
        agent=agent,
        is_agent_owner=is_owner,
        online=online,
        load=scoring.agent_loads([agent.id])[agent.id],
        appears_here=agent_appears_in(agent, membership.workspace_id),
        pinned_ids={str(p.workspace_id) for p in agent.pins.all()},
        keys=agent.keys.order_by("-created_at") if is_owner else [],
        revisions=(
            agent.personality_revisions.select_related("author_user", "author_agent").order_by(
                "-created_at"
            )[:50]
            if is_owner
            else []
        ),
        tools=agent_tools_out(agent) if is_owner else [],
        **(owner_extras(request.user, agent, membership) if is_owner else {}),
        **(routine_pages.owner_extras(request.user, agent, membership) if is_owner else {}),
        **(directory_pages.owner_extras(agent) if is_owner else {}),
        decisions=Decision.choices,
        recent_tasks=tasks_visible_to(request.user)
        .filter(agent=agent, workspace=membership.workspace)
        .order_by("-created_at")[:10],
        server_url=request.build_absolute_uri("/").rstrip("/"),
        bridge_program=bridge_program(),
        **_form_choices(request),
    )
    return render(request, "agents/detail.html", context)


@workspace_page
def task_list(request, membership):
    # Each task's latest progress event in the same statement, not one query per task.
    last_event = TaskEvent.objects.filter(task=OuterRef("pk")).order_by("-seq").values("data")
    tasks = (
        tasks_visible_to(request.user)
        .filter(workspace=membership.workspace)
        .select_related("agent", "created_by_user", "created_by_agent")
        .annotate(last_event=Subquery(last_event[:1], output_field=JSONField()))
        .order_by("-created_at")[:100]
    )
    context = shell(
        request,
        membership,
        section="tasks",
        rows=[{"task": task, "last_event": task.last_event} for task in tasks],
        agents=agents_visible_in(membership.workspace_id).order_by("name"),
    )
    return render(request, "agents/tasks.html", context)


@workspace_page
def task_detail(request, membership, task_id):
    task = access_task(request.user, task_id)
    if task.workspace_id != membership.workspace_id:
        raise Http404
    result_text = (task.result or {}).get("text") or ""
    scores = task.owner_scores or {}
    # Stored as JSON (whose key order is not kept): show the parts in the scorer's own order.
    stored = scores.get("weights", {})
    order = [p for p in DEFAULT_WEIGHTS if p in stored] + sorted(set(stored) - set(DEFAULT_WEIGHTS))
    weights = {p: stored[p] for p in order}
    context = shell(
        request,
        membership,
        section="tasks",
        task=task,
        may_cancel=cancel_refusal(request.user, task, membership) is None,
        data=task_data(task),
        events=task.events.order_by("-seq")[:200],
        result_html=mark_safe(render_markdown(result_text)) if result_text else "",
        score_parts=list(weights),
        weights=weights,
        candidates=scores.get("candidates", []),
        winner=scores.get("winner"),
        usage=task.usage.order_by("created_at"),
        agent_online=agent_presence([task.agent])[task.agent_id],
        tool_calls=tool_calls_of_task(task, request.user),
    )
    return render(request, "agents/task.html", context)
