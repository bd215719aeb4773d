"""Pages of an agent's scheduled side, for its owner: its routines and what each run became, its
pulse (a checklist on a schedule) and the reports it filed, its reminders, and its goal loops
with their iterations. They only read: the page script sets up, changes, pauses, removes and
cancels through the REST API (routines/api.py, PATCH /me/ for the person's time zone), whose
actions check every rule."""

import functools
import zoneinfo
from datetime import datetime

from django.db.models import Count, Q
from django.http import Http404
from django.shortcuts import render
from django.utils import timezone

from agents.access import access_agent, agent_appears_in, is_agent_owner
from agntchat.ui.shell import conversation_label, shell, workspace_page
from conversations.access import conversations_visible_to
from routines import actions, loops, reminders, schedules
from routines.access import (
    access_loop,
    access_routine,
    loops_visible_to,
    reminders_visible_to,
    routines_visible_to,
)
from routines.models import Loop, LoopIteration, Reminder, Routine
from workspaces.access import workspaces_visible_to

MAX_RUNS_LISTED = 100
MAX_REPORTS_LISTED = 100
MAX_REMINDERS_LISTED = 100
MAX_LOOPS_LISTED = 50
MAX_ITERATIONS_LISTED = 200


@functools.cache
def time_zones() -> list[str]:
    """Every IANA zone name, for the time zone fields' suggestions."""
    return sorted(zoneinfo.available_timezones())


def _limits() -> dict:
    return {
        "max_routines": actions.MAX_PER_AGENT,
        "max_checklist": actions.MAX_CHECKLIST,
        "min_interval": schedules.MIN_INTERVAL_MINUTES,
        "max_interval": schedules.MAX_INTERVAL_MINUTES,
        "max_reminder_text": reminders.MAX_TEXT,
        "time_zones": time_zones(),
    }


def _delivered_in(user, routines) -> dict:
    """{routine id: (conversation, label)} where USER may read the conversation its results
    come back in; others are left out (the page then names no place)."""
    ids = {r.conversation_id for r in routines}
    readable = (
        conversations_visible_to(user)
        .filter(pk__in=ids)
        .prefetch_related("participants__user", "participants__agent")
    )
    found = {c.id: c for c in readable}
    return {
        r.id: (found[r.conversation_id], conversation_label(found[r.conversation_id], user))
        for r in routines
        if r.conversation_id in found
    }


def _routine_rows(user, routines) -> list[dict]:
    places = _delivered_in(user, routines)
    return [
        {
            "routine": r,
            "prefix": f"routine-{r.id}",
            "schedule": schedules.describe(r),
            "place": places.get(r.id, (None, ""))[0],
            "place_label": places.get(r.id, (None, ""))[1],
        }
        for r in routines
    ]


def _loops_of(user, agent, workspace):
    """USER's loops of AGENT in WORKSPACE with how many iterations each began and finished."""
    return (
        loops_visible_to(user)
        .filter(agent=agent, workspace=workspace)
        .annotate(
            begun=Count("iterations"),
            weighed=Count("iterations", filter=Q(iterations__evaluated_at__isnull=False)),
        )
    )


def _percent(used: int, budget: int | None) -> int:
    return min(100, round(100 * used / budget)) if budget else 0


def _loop_row(loop) -> dict:
    return {
        "loop": loop,
        "active": loop.status in (Loop.Status.RUNNING, Loop.Status.PAUSED),
        "under_way": loop.begun > loop.weighed,
        "token_percent": _percent(loop.tokens_used, loop.token_budget),
    }


def loop_extras(user, agent, workspace) -> dict:
    """The Goal loops section of the agent's page: its loops here, newest first, and the
    limits of the form that starts one."""
    here = _loops_of(user, agent, workspace).order_by("-created_at")[:MAX_LOOPS_LISTED]
    return {
        "loop_rows": [_loop_row(loop) for loop in here],
        "loops_elsewhere": loops_visible_to(user)
        .filter(agent=agent)
        .exclude(workspace=workspace)
        .count(),
        "max_loop_iterations": loops.MAX_ITERATIONS,
        "min_loop_interval": loops.MIN_INTERVAL_MINUTES,
    }


def owner_extras(user, agent, membership) -> dict:
    """The Routines, Pulse and Reminders sections of the agent's page, for its owner: what is
    set up for it in this workspace (times in the person's own time zone)."""
    workspace = membership.workspace
    mine = routines_visible_to(user).filter(agent=agent)
    here = list(mine.filter(kind=Routine.Kind.ROUTINE, workspace=workspace).order_by("created_at"))
    pulse = mine.filter(kind=Routine.Kind.PULSE).select_related("workspace").first()
    pulse_here = pulse if pulse is not None and pulse.workspace_id == workspace.id else None
    pulse_elsewhere = None
    if pulse is not None and pulse_here is None:
        # Named (and linked) only where the person is still a member.
        pulse_elsewhere = workspaces_visible_to(user).filter(pk=pulse.workspace_id).first()
    pending = (
        reminders_visible_to(user)
        .filter(agent=agent, workspace=workspace, status=Reminder.Status.PENDING)
        .select_related("created_by")
        .order_by("due_at")[:MAX_REMINDERS_LISTED]
    )
    return {
        "routine_rows": _routine_rows(user, here),
        "routines_elsewhere": mine.filter(kind=Routine.Kind.ROUTINE)
        .exclude(workspace=workspace)
        .count(),
        "routines_total": mine.filter(kind=Routine.Kind.ROUTINE).count(),
        "pulse": pulse_here,
        "pulse_schedule": schedules.describe(pulse_here) if pulse_here else "",
        "pulse_has_other_home": pulse is not None and pulse_here is None,
        "pulse_elsewhere": pulse_elsewhere,
        "pending_reminders": list(pending),
        "zone": user.timezone,
        "now": timezone.now(),
        "can_schedule": agent_appears_in(agent, workspace.id),
        **_limits(),
        **loop_extras(user, agent, workspace),
    }


def _owned_agent(user, agent_id):
    """USER's own agent, or 404 (for every other person these pages do not exist)."""
    agent = access_agent(user, agent_id)
    if not is_agent_owner(user, agent):
        raise Http404
    return agent


def _slots(stored) -> list[datetime]:
    """The missed slots as recorded with a run (ISO 8601 strings)."""
    out = []
    for value in stored or []:
        try:
            out.append(datetime.fromisoformat(value))
        except (TypeError, ValueError):
            continue
    return out


@workspace_page
def routine_detail(request, membership, agent_id, routine_id):
    """One routine of the person's agent in this workspace: its schedule and its runs, newest
    first, each with the task it became, the slots missed before it and any error."""
    agent = _owned_agent(request.user, agent_id)
    routine = access_routine(request.user, routine_id)
    if routine.agent_id != agent.id or routine.workspace_id != membership.workspace_id:
        raise Http404
    runs = routine.runs.select_related("task").order_by("-slot")[:MAX_RUNS_LISTED]
    (row,) = _routine_rows(request.user, [routine])
    context = shell(
        request,
        membership,
        section="agents",
        agent=agent,
        row=row,
        routine=routine,
        runs=[{"run": r, "skipped": _slots(r.skipped_slots)} for r in runs],
        zone=request.user.timezone,
        **_limits(),
    )
    return render(request, "routines/routine.html", context)


@workspace_page
def pulse_reports(request, membership, agent_id):
    """The reports of the agent's pulse in this workspace, newest first: each checklist item
    with its outcome (ok, flagged, skipped) and what the agent found."""
    agent = _owned_agent(request.user, agent_id)
    pulse = (
        routines_visible_to(request.user)
        .filter(agent=agent, kind=Routine.Kind.PULSE, workspace=membership.workspace)
        .first()
    )
    reports = (
        list(pulse.reports.select_related("task").order_by("-created_at")[:MAX_REPORTS_LISTED])
        if pulse
        else []
    )
    context = shell(
        request,
        membership,
        section="agents",
        agent=agent,
        pulse=pulse,
        pulse_schedule=schedules.describe(pulse) if pulse else "",
        reports=reports,
        zone=request.user.timezone,
    )
    return render(request, "routines/pulse.html", context)


@workspace_page
def loop_detail(request, membership, agent_id, loop_id):
    """One goal loop of the person's agent in this workspace: its guardrails and how near each
    is, why it stopped, and its iterations newest first, each with its task and what the agent
    reported."""
    agent = _owned_agent(request.user, agent_id)
    loop = access_loop(request.user, loop_id)
    if loop.agent_id != agent.id or loop.workspace_id != membership.workspace_id:
        raise Http404
    iterations = list(
        loop.iterations.select_related("task").order_by("-number")[:MAX_ITERATIONS_LISTED]
    )
    loop.begun = loop.iterations.count()
    loop.weighed = loop.iterations.filter(evaluated_at__isnull=False).count()
    context = shell(
        request,
        membership,
        section="agents",
        agent=agent,
        row=_loop_row(loop),
        loop=loop,
        iterations=iterations,
        without_progress=loops.without_progress(iterations),
        not_reported=LoopIteration.Outcome.NONE,
        zone=request.user.timezone,
    )
    return render(request, "routines/loop.html", context)
