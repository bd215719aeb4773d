"""State changes of routines (PRO-2): set up, changed, removed by the agent's owner; run by the
scheduler (``run_due_routines``), each due routine becoming a real task for its agent."""

import logging

from django.db import IntegrityError, transaction
from django.utils import timezone

from agents.access import agent_appears_in, is_agent_owner, owner_belongs_to
from agents.exceptions import AgentNotFound, NotAgentOwner
from agents.models import Agent
from agntchat.core.exceptions import AppError, Conflict
from agntchat.core.sweeps import sweep
from agntchat.core.text import clipped
from conversations.actions import MAX_BODY, open_direct, post_message
from conversations.models import Participant, Task
from conversations.tasks import cancel_for_good, create_task
from routines import schedules
from routines.access import RoutineNotFound
from routines.models import PulseReport, Routine, RoutineRun
from work.actions import set_tool_grant
from work.tools.registry import REGISTRY, granted_tool

log = logging.getLogger(__name__)

MAX_PER_AGENT = 10
PULSE_INSTRUCTIONS = (
    "Pulse check: nobody asked; this is your own scheduled look around. Check each item of "
    "this checklist with the tools you have, then call pulse_report once with every item's "
    "outcome (ok, flagged — something your owner should look at —, or skipped, with what you "
    "found). Your owner hears only about flagged items.\n\n"
)


class RoutineLimit(AppError):
    code = "routine_limit"
    status = 409


def create_routine(
    user,
    agent: Agent,
    workspace,
    *,
    name: str,
    instructions: str,
    interval_minutes: int | None = None,
    cron: str = "",
    timezone_name: str = "UTC",
    conversation=None,
    enabled: bool = True,
    checklist=None,
    now=None,
) -> Routine:
    """A routine for USER's AGENT in WORKSPACE (where the agent appears now). Its results come
    back in CONVERSATION (one the agent takes part in there), by default the direct conversation
    of USER and the agent. The eleventh routine of an agent is refused. With a CHECKLIST it is
    the agent's pulse (one per agent, not counted among its routines), which reports in that
    direct conversation only."""
    kind = Routine.Kind.PULSE if checklist is not None else Routine.Kind.ROUTINE
    checklist = _checked_list(checklist) if checklist is not None else []
    if kind == Routine.Kind.ROUTINE:
        _check_instructions(instructions)
    if not is_agent_owner(user, agent):
        raise NotAgentOwner()
    if not agent_appears_in(agent, workspace.id):
        raise AgentNotFound()
    schedules.check(interval_minutes, cron, timezone_name)
    if kind == Routine.Kind.PULSE and conversation is not None:
        # What it flags is for its owner (PRO-1), never posted where others read it.
        raise AppError(
            f"A pulse reports to you in your direct conversation with {agent.name}; leave "
            "conversation out.",
            code="invalid",
            fields={"conversation": "A pulse has no conversation to choose."},
        )
    if conversation is not None and not (
        conversation.workspace_id == workspace.id
        and Participant.objects.filter(conversation=conversation, agent=agent).exists()
    ):
        raise AppError(
            f"{agent.name} does not take part in that conversation of {workspace.name}.",
            code="invalid",
            fields={"conversation": "Not a conversation of this agent in this workspace."},
        )
    with transaction.atomic():
        # Counted under the agent's row lock: two requests at once cannot both be the tenth.
        Agent.objects.select_for_update().filter(pk=agent.pk).first()
        mine = Routine.objects.filter(agent=agent, kind=kind)
        if kind == Routine.Kind.PULSE and mine.exists():
            raise Conflict(
                f"{agent.name} has a pulse already: change its checklist or schedule instead.",
                code="pulse_exists",
            )
        if kind == Routine.Kind.ROUTINE and mine.count() >= MAX_PER_AGENT:
            raise RoutineLimit(
                f"{agent.name} has {MAX_PER_AGENT} routines already, the most an agent may "
                "have. Remove or change one of them instead."
            )
        if conversation is None:
            conversation, _ = open_direct(user, workspace, agent_ids=[agent.id])
        if kind == Routine.Kind.PULSE and granted_tool(agent, "pulse_report") is None:
            set_tool_grant(user, agent, REGISTRY["pulse_report"], True)
        routine = Routine(
            agent=agent,
            workspace=workspace,
            conversation=conversation,
            created_by=user,
            kind=kind,
            checklist=checklist,
            name=name.strip() or ("Pulse" if checklist else instructions.strip()[:60]),
            instructions=instructions.strip(),
            interval_minutes=interval_minutes,
            cron=cron.strip(),
            timezone=timezone_name,
            enabled=enabled,
        )
        routine.starts_at = now or timezone.now()
        _plan(routine, routine.starts_at)
        routine.save(force_insert=True)
    return routine


MAX_CHECKLIST = 30


def _check_instructions(instructions: str) -> None:
    """A routine (not a pulse) is its instructions: without them its runs ask for nothing."""
    if not instructions.strip():
        raise AppError(
            "A routine needs instructions.", code="invalid", fields={"instructions": "Empty."}
        )


def _checked_list(items) -> list[str]:
    items = [" ".join(str(i).split()) for i in items if str(i).strip()]
    if not 1 <= len(items) <= MAX_CHECKLIST or any(len(i) > 300 for i in items):
        raise AppError(
            f"A pulse's checklist has 1 to {MAX_CHECKLIST} items of at most 300 characters.",
            code="invalid",
            fields={"checklist": "Empty, too long, or an item too long."},
        )
    return items


def _plan(routine: Routine, now) -> None:
    """Its next slot after NOW, or none while it is disabled."""
    routine.next_run_at = schedules.next_slot(routine, now) if routine.enabled else None


def update_routine(user, routine: Routine, *, now=None, **changes) -> Routine:
    """Change any of name, instructions, interval_minutes or cron (one replaces the other),
    timezone_name, enabled. A new schedule, or enabling it again, counts from NOW: what was
    missed meanwhile is not run. A run under way is waited for, and ROUTINE read again as it
    left it."""
    if not is_agent_owner(user, routine.agent):
        raise NotAgentOwner()
    now = now or timezone.now()
    if "checklist" in changes:
        if routine.kind != Routine.Kind.PULSE:
            raise AppError("Only a pulse has a checklist.", code="invalid")
        changes["checklist"] = _checked_list(changes["checklist"])
    if "instructions" in changes and routine.kind == Routine.Kind.ROUTINE:
        _check_instructions(changes["instructions"])
    with transaction.atomic():
        _lock(routine)
        interval, cron = routine.interval_minutes, routine.cron
        if changes.get("cron"):
            interval, cron = None, changes.pop("cron").strip()
        elif changes.get("interval_minutes") is not None:
            interval, cron = changes.pop("interval_minutes"), ""
        changes.pop("cron", None)
        changes.pop("interval_minutes", None)
        zone_name = changes.pop("timezone_name", routine.timezone)
        schedules.check(interval, cron, zone_name)
        rescheduled = (interval, cron, zone_name) != (
            routine.interval_minutes,
            routine.cron,
            routine.timezone,
        ) or changes.get("enabled", routine.enabled) != routine.enabled
        if changes.get("enabled") and not routine.enabled:
            _check_can_run(routine)
        for field, value in changes.items():
            setattr(routine, field, value.strip() if isinstance(value, str) else value)
        routine.interval_minutes, routine.cron, routine.timezone = interval, cron, zone_name
        if rescheduled:
            routine.starts_at = now
            _plan(routine, now)
        routine.save()
        if not routine.enabled:
            _cancel_waiting_runs(routine, f"The routine “{routine.name}” was paused.")
    return routine


def _why_it_cannot_run(routine: Routine) -> tuple[str, bool] | None:
    """Why ROUTINE's runs could only record that they did not run, and whether that pauses it;
    or None. Its agent's owner is not a member of its workspace (routines.owner_left pauses
    it), or its agent was taken out of the conversation it reports to (by that channel's admins:
    it posts there no more, and the run pauses it)."""
    agent = routine.agent
    if not owner_belongs_to(agent, routine.workspace_id):
        return f"The owner of {agent.name} is not a member of {routine.workspace.name}.", False
    if not Participant.objects.filter(
        conversation=routine.conversation_id, agent=agent.pk
    ).exists():
        reason = f"{agent.name} no longer takes part in the conversation this routine reports to."
        return reason, True
    return None


def _check_can_run(routine: Routine) -> None:
    """Enabled again, ROUTINE would run: refused, saying why, where its runs could only record
    that they did not (``_why_it_cannot_run``)."""
    why = _why_it_cannot_run(routine)
    if why is not None:
        reason, pauses = why
        advice = " Add it back there first." if pauses else ""
        raise Conflict(f"This routine cannot run. {reason}{advice}", code="routine_cannot_run")


def delete_routine(user, routine: Routine) -> None:
    if not is_agent_owner(user, routine.agent):
        raise NotAgentOwner()
    with transaction.atomic():
        _lock(routine)
        _cancel_waiting_runs(routine, f"The routine “{routine.name}” was deleted.")
        routine.delete()


def _lock(routine: Routine) -> None:
    """Hold ROUTINE's row (in the caller's transaction) and read it again. A scheduler running
    it holds that row until its run's task is made (``run_due_routines``): a change waits for
    it, then sees the run, its task and the slot it moved to, rather than writing back what it
    read before."""
    if not Routine.objects.select_for_update(of=("self",)).filter(pk=routine.pk).exists():
        raise RoutineNotFound()
    routine.refresh_from_db()


def run_due_routines(now=None) -> int:
    """Hand each due routine to its agent as a task (PRO-2); how many ran. After downtime a
    routine runs once for all the slots it missed, which are recorded with the run. Several
    schedulers may run this at once: each routine is taken by one (SKIP LOCKED) and a slot
    runs once (a unique constraint)."""
    now = now or timezone.now()
    due = (
        Routine.objects.select_related("agent", "workspace", "conversation")
        .filter(enabled=True, next_run_at__lte=now)
        .order_by("next_run_at")
    )
    return sweep(due, lambda routine: _run(routine, now), "routine")


def _run(routine: Routine, now) -> int:
    slot, skipped, skipped_count = schedules.due_slots(routine, now)
    routine.next_run_at = schedules.next_slot(routine, now)
    routine.last_run_at = slot
    routine.save(update_fields=["next_run_at", "last_run_at", "updated_at"])
    try:
        with transaction.atomic():
            run = RoutineRun.objects.create(
                routine=routine,
                slot=slot,
                skipped_slots=[s.isoformat() for s in skipped],
                skipped_count=skipped_count,
            )
    except IntegrityError:  # another scheduler ran this slot
        return 0
    why = _why_it_cannot_run(routine)
    if why is not None:
        # Should it run all the same, that is said plainly, not queued.
        run.error, pauses = why
        if pauses:
            routine.enabled, routine.next_run_at, routine.paused_reason = False, None, run.error
            routine.save(update_fields=["enabled", "next_run_at", "paused_reason", "updated_at"])
        run.save(update_fields=["error"])
        return 1
    if routine.kind == Routine.Kind.PULSE:
        instructions = PULSE_INSTRUCTIONS + "\n".join(f"- {item}" for item in routine.checklist)
        if routine.instructions:
            instructions += f"\n\nAlso: {routine.instructions}"
    else:
        instructions = f"Routine “{routine.name}” ({schedules.describe(routine)}):\n\n"
        instructions += routine.instructions
    if skipped_count:
        many = " or more" if skipped_count >= schedules.MAX_SKIPPED_COUNTED else ""
        instructions += (
            f"\n\n({skipped_count}{many} earlier run{'s were' if skipped_count > 1 else ' was'} "
            "missed while the scheduler was down; this run stands for them.)"
        )
    try:
        run.task = create_task(
            None,
            routine.workspace,
            routine.agent,
            instructions,
            # A pulse reports through its tool, not as a chat message.
            conversation=routine.conversation if routine.kind == Routine.Kind.ROUTINE else None,
            where_set_up=True,
        )
    except AppError as exc:  # recorded with the run; the routine goes on
        log.warning("routine %s could not run: %s", routine.id, exc.message)
        run.error = exc.message
    run.save(update_fields=["task", "error"])
    if run.task is not None:
        # RUN stands for an earlier one still waiting: an agent back after days finds one run,
        # not one per slot.
        at = run.slot.astimezone(schedules.zone(routine.timezone))
        reason = (
            f"Not picked up before the routine's next run ({at:%Y-%m-%d %H:%M} "
            f"{routine.timezone}), which stands for it."
        )
        _cancel_waiting_runs(routine, reason, keep=run)
    return 1


def _cancel_waiting_runs(routine: Routine, reason: str, keep: RoutineRun | None = None) -> None:
    """ROUTINE's runs still waiting for its agent to pick them up (offline), but KEEP, are
    cancelled with REASON: the agent, back, does not do work nobody wants any more."""
    runs = routine.runs.exclude(task=None)
    if keep is not None:
        runs = runs.exclude(pk=keep.pk)
    waiting = Task.objects.select_for_update(skip_locked=True).filter(
        pk__in=runs.values("task"),
        status=Task.Status.QUEUED,
        claimed_by__isnull=True,  # and locked: no claim takes it meanwhile
    )
    for task_id in waiting.values_list("pk", flat=True):
        cancel_for_good(task_id, reason)


def file_pulse_report(pulse: Routine, task, items: list[dict], summary: str = "") -> PulseReport:
    """The report of one pulse run (filed again, it replaces the first). Flagged items reach
    the owner as a message in the pulse's direct conversation, once."""
    items = [
        {"item": i["item"].strip(), "status": i["status"], "finding": i.get("finding", "").strip()}
        for i in items
    ]
    flagged = [i for i in items if i["status"] == "flagged"]
    with transaction.atomic():
        report, _ = PulseReport.objects.update_or_create(
            task=task,
            defaults={"pulse": pulse, "items": items, "summary": summary, "flagged": len(flagged)},
        )
        if flagged and report.message_id is None:
            # Every flagged item has a line, its finding cut to fit one message (thirty items
            # with findings of 2,000 characters would not); the report keeps them whole.
            room = (MAX_BODY - 200) // len(flagged)
            lines = [
                clipped(f"- **{i['item']}**" + (f": {i['finding']}" if i["finding"] else ""), room)
                for i in flagged
            ]
            noun = "thing" if len(flagged) == 1 else "things"
            body = f"🔎 My pulse check found {len(flagged)} {noun} to look at:\n" + "\n".join(lines)
            if any(line.endswith("…") for line in lines):
                body += "\n\n(Findings shortened here; the whole report is kept with the pulse.)"
            report.message = post_message(pulse.agent, pulse.conversation, body, wake=[])
            report.save(update_fields=["message"])
    return report
