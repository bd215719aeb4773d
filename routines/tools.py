"""The agent's tools of the scheduled side: reminders (PRO-4: set one, list its own, cancel one;
a reminder always reaches the agent's owner in their direct conversation in this workspace),
and the report of a pulse run (PRO-1)."""

from datetime import timedelta

from django.utils import timezone

from agntchat.core.exceptions import AppError
from routines import actions, loops, reminders
from routines.access import access_agents_reminder
from routines.models import LoopIteration, Reminder, Routine, RoutineRun
from work.models import Risk
from work.tools.registry import ToolContext, tool


def reminder_out(reminder: Reminder) -> dict:
    return {
        "id": str(reminder.id),
        "text": reminder.text,
        "at": reminder.due_at.isoformat(),
        "status": reminder.status,
    }


@tool(
    "reminder_set",
    description=(
        "Set a reminder for your owner: at a time (ISO 8601; without an offset it is read in "
        "your owner's time zone) or in some minutes. It arrives in your direct conversation "
        "with your owner in this workspace, whoever asked. Set one when a date or a promise "
        "comes up that should not be forgotten, or when asked to."
    ),
    risk=Risk.WRITE,
    input_schema={
        "type": "object",
        "properties": {
            "text": {"type": "string", "minLength": 1, "maxLength": reminders.MAX_TEXT},
            "at": {"type": "string", "maxLength": 40, "description": "e.g. 2026-12-04T09:00"},
            "in_minutes": {"type": "integer", "minimum": 1, "maximum": 60 * 24 * 731},
        },
        "required": ["text"],
        "additionalProperties": False,
    },
)
def reminder_set(context: ToolContext, arguments: dict):
    if ("at" in arguments) == ("in_minutes" in arguments):
        raise reminders.ReminderInvalid("Give either at or in_minutes.")
    if "at" in arguments:
        due = reminders.when(arguments["at"], context.agent.owner)
    else:
        due = timezone.now() + timedelta(minutes=arguments["in_minutes"])
    made = reminders.set_reminder(
        context.agent, context.workspace, arguments["text"], due, source=context.conversation
    )
    return reminder_out(made)


@tool(
    "reminder_list",
    description="Your reminders in this workspace that have not been sent yet, soonest first.",
    risk=Risk.READ,
)
def reminder_list(context: ToolContext, arguments: dict):
    waiting = Reminder.objects.filter(
        agent=context.agent, workspace=context.workspace, status=Reminder.Status.PENDING
    ).order_by("due_at")[:100]
    return {"reminders": [reminder_out(r) for r in waiting]}


@tool(
    "reminder_cancel",
    description="Cancel one of your reminders in this workspace not sent yet, by its id.",
    risk=Risk.WRITE,
    input_schema={
        "type": "object",
        "properties": {"reminder_id": {"type": "string", "format": "uuid"}},
        "required": ["reminder_id"],
        "additionalProperties": False,
    },
)
def reminder_cancel(context: ToolContext, arguments: dict):
    found = access_agents_reminder(context.agent, context.workspace, arguments["reminder_id"])
    return reminder_out(reminders.cancel_reminder(found))


@tool(
    "pulse_report",
    description=(
        "File the report of your pulse check (only in a pulse run): every checklist item with "
        "its status — ok, flagged (your owner should look at it) or skipped — and what you "
        "found. Flagged items are sent to your owner; the rest is kept for them to browse."
    ),
    risk=Risk.WRITE,
    # Given to an agent with its pulse (routines.actions.create_routine), to no one else.
    platform=False,
    input_schema={
        "type": "object",
        "properties": {
            "items": {
                "type": "array",
                "minItems": 1,
                "maxItems": 30,
                "items": {
                    "type": "object",
                    "properties": {
                        "item": {"type": "string", "minLength": 1, "maxLength": 300},
                        "status": {"enum": ["ok", "flagged", "skipped"]},
                        "finding": {"type": "string", "maxLength": 2000},
                    },
                    "required": ["item", "status"],
                    "additionalProperties": False,
                },
            },
            "summary": {"type": "string", "maxLength": 2000},
        },
        "required": ["items"],
        "additionalProperties": False,
    },
)
def pulse_report(context: ToolContext, arguments: dict):
    run = (
        RoutineRun.objects.select_related("routine__agent", "routine__conversation")
        .filter(task=context.task, routine__kind=Routine.Kind.PULSE)
        .first()
        if context.task is not None
        else None
    )
    if run is None:
        raise AppError("pulse_report files a pulse run's report; this work is not one.",
                       code="not_a_pulse")  # fmt: skip
    report = actions.file_pulse_report(
        run.routine, context.task, arguments["items"], arguments.get("summary", "")
    )
    return {"report_id": str(report.id), "flagged": report.flagged}


@tool(
    "loop_report",
    description=(
        "End an iteration of your goal loop (only in a loop's task): continue (say what "
        "progress you made), complete (the goal is met) or blocked (you cannot go on without "
        "help), with the reason. The server decides whether another iteration follows."
    ),
    risk=Risk.WRITE,
    platform=False,  # given with a loop (routines.loops.start_loop)
    input_schema={
        "type": "object",
        "properties": {
            "outcome": {"enum": ["continue", "complete", "blocked"]},
            "reason": {"type": "string", "minLength": 1, "maxLength": 2000},
            "progress": {"type": "string", "maxLength": 2000},
        },
        "required": ["outcome", "reason"],
        "additionalProperties": False,
    },
)
def loop_report(context: ToolContext, arguments: dict):
    iteration = (
        LoopIteration.objects.filter(task=context.task).first()
        if context.task is not None
        else None
    )
    if iteration is None:
        raise AppError("loop_report ends a loop's iteration; this work is not one.",
                       code="not_a_loop")  # fmt: skip
    loops.report(
        iteration, arguments["outcome"], arguments["reason"], arguments.get("progress", "")
    )
    return {"iteration": iteration.number, "outcome": iteration.outcome}
