"""REST for routines (PRO-2): an agent's owner sets them up, changes, pauses and removes them,
and reads what each run became."""

from django.db.models import Count
from django.urls import path
from rest_framework import serializers
from rest_framework.response import Response
from rest_framework.views import APIView

from agents.access import access_own_agent
from agntchat.core.api import StrictSerializer, validated, zone_field
from conversations.access import access_conversation
from routines import actions, loops, reminders, schedules
from routines.access import (
    access_loop,
    access_reminder,
    access_routine,
    loops_visible_to,
    reminders_visible_to,
    routines_visible_to,
)
from routines.models import PulseReport, Reminder, Routine
from workspaces.access import IsPerson, access_workspace

MAX_RUNS_LISTED = 50
MAX_REMINDERS_LISTED = 200


def routine_out(routine: Routine) -> dict:
    return {
        "id": routine.id,
        "agent_id": routine.agent_id,
        "workspace_id": routine.workspace_id,
        "conversation_id": routine.conversation_id,
        "kind": routine.kind,
        "name": routine.name,
        "instructions": routine.instructions,
        "checklist": routine.checklist,
        "interval_minutes": routine.interval_minutes,
        "cron": routine.cron or None,
        "timezone": routine.timezone,
        "schedule": schedules.describe(routine),
        "enabled": routine.enabled,
        "paused_reason": routine.paused_reason or None,
        "next_run_at": routine.next_run_at,
        "last_run_at": routine.last_run_at,
        "created_at": routine.created_at,
    }


def run_out(run) -> dict:
    return {
        "id": run.id,
        "slot": run.slot,
        "task_id": run.task_id,
        "task_status": run.task.status if run.task_id else None,
        "skipped_count": run.skipped_count,
        "skipped_slots": run.skipped_slots,
        "error": run.error or None,
        "created_at": run.created_at,
    }


class ScheduleFields(StrictSerializer):
    name = serializers.CharField(max_length=120, required=False, allow_blank=True)
    interval_minutes = serializers.IntegerField(
        required=False,
        min_value=schedules.MIN_INTERVAL_MINUTES,
        max_value=schedules.MAX_INTERVAL_MINUTES,
    )
    cron = serializers.CharField(max_length=120, required=False)
    timezone = zone_field(required=False)
    enabled = serializers.BooleanField(required=False)


class RoutineInput(ScheduleFields):
    """A routine; with a checklist, the agent's pulse (its instructions then optional)."""

    agent = serializers.UUIDField()
    workspace = serializers.UUIDField()
    instructions = serializers.CharField(max_length=10_000, required=False, allow_blank=True)
    checklist = serializers.ListField(
        child=serializers.CharField(max_length=300), max_length=30, required=False
    )
    conversation = serializers.UUIDField(
        required=False,
        help_text="Where results come back; by default (and for a pulse) your DM with the agent.",
    )


class RoutineChange(ScheduleFields):
    min_fields = 1
    instructions = serializers.CharField(max_length=10_000, required=False, allow_blank=True)
    checklist = serializers.ListField(
        child=serializers.CharField(max_length=300), max_length=30, required=False
    )


class RoutineQuery(serializers.Serializer):
    agent = serializers.UUIDField(required=False)


class RoutineListView(APIView):
    """The routines of the person's agents."""

    inputs = {"post": RoutineInput}
    queries = {"get": RoutineQuery}
    permission_classes = [IsPerson]

    def get(self, request):
        query = validated(RoutineQuery, request.query_params.dict())
        rows = routines_visible_to(request.user).order_by("agent__name", "created_at")
        if "agent" in query:
            rows = rows.filter(agent=access_own_agent(request.user, query["agent"]))
        return Response({"results": [routine_out(r) for r in rows]})

    def post(self, request):
        data = validated(RoutineInput, request.data)
        agent = access_own_agent(request.user, data["agent"])
        workspace = access_workspace(request.user, data["workspace"])
        conversation = (
            access_conversation(request.user, data["conversation"])
            if "conversation" in data
            else None
        )
        routine = actions.create_routine(
            request.user,
            agent,
            workspace,
            name=data.get("name", ""),
            instructions=data.get("instructions", ""),
            checklist=data.get("checklist"),
            interval_minutes=data.get("interval_minutes"),
            cron=data.get("cron", ""),
            timezone_name=data.get("timezone", "UTC"),
            conversation=conversation,
            enabled=data.get("enabled", True),
        )
        return Response(routine_out(routine), status=201)


class RoutineDetailView(APIView):
    inputs = {"patch": RoutineChange}
    permission_classes = [IsPerson]

    def get(self, request, routine_id):
        return Response(routine_out(access_routine(request.user, routine_id)))

    def patch(self, request, routine_id):
        routine = access_routine(request.user, routine_id)
        data = validated(RoutineChange, request.data)
        if "timezone" in data:
            data["timezone_name"] = data.pop("timezone")
        return Response(routine_out(actions.update_routine(request.user, routine, **data)))

    def delete(self, request, routine_id):
        actions.delete_routine(request.user, access_routine(request.user, routine_id))
        return Response(status=204)


class RoutineRunsView(APIView):
    """What the routine's runs became, newest first."""

    permission_classes = [IsPerson]

    def get(self, request, routine_id):
        routine = access_routine(request.user, routine_id)
        runs = routine.runs.select_related("task").order_by("-slot")[:MAX_RUNS_LISTED]
        return Response({"results": [run_out(r) for r in runs]})


def reminder_out(reminder) -> dict:
    return {
        "id": reminder.id,
        "agent_id": reminder.agent_id,
        "workspace_id": reminder.workspace_id,
        "conversation_id": reminder.conversation_id,
        "text": reminder.text,
        "due_at": reminder.due_at,
        "status": reminder.status,
        "sent_at": reminder.sent_at,
        "message_id": reminder.message_id,
        "created_at": reminder.created_at,
    }


class ReminderInput(StrictSerializer):
    agent = serializers.UUIDField()
    workspace = serializers.UUIDField()
    text = serializers.CharField(max_length=reminders.MAX_TEXT)
    at = serializers.CharField(
        max_length=40, help_text="ISO 8601; without an offset, read in your time zone."
    )


class ReminderListView(APIView):
    """The reminders of the person's agents: those pending soonest first, then the rest newest
    first (MAX_REMINDERS_LISTED in all); set one for an agent of theirs."""

    inputs = {"post": ReminderInput}
    permission_classes = [IsPerson]

    def get(self, request):
        # Pending first: past the cap, a long history of sent ones would hide what is coming.
        mine = reminders_visible_to(request.user)
        pending = mine.filter(status=Reminder.Status.PENDING)
        rows = list(pending.order_by("due_at")[:MAX_REMINDERS_LISTED])
        rest = mine.exclude(status=Reminder.Status.PENDING).order_by("-due_at")
        rows += rest[: MAX_REMINDERS_LISTED - len(rows)]
        return Response({"results": [reminder_out(r) for r in rows]})

    def post(self, request):
        data = validated(ReminderInput, request.data)
        agent = access_own_agent(request.user, data["agent"])
        workspace = access_workspace(request.user, data["workspace"])
        due = reminders.when(data["at"], request.user)
        made = reminders.set_reminder(agent, workspace, data["text"], due, user=request.user)
        return Response(reminder_out(made), status=201)


class ReminderDetailView(APIView):
    statuses = {"delete": (200,)}  # answers with the cancelled reminder
    permission_classes = [IsPerson]

    def get(self, request, reminder_id):
        return Response(reminder_out(access_reminder(request.user, reminder_id)))

    def delete(self, request, reminder_id):
        """Cancel it (a sent one stays sent: 409)."""
        found = access_reminder(request.user, reminder_id)
        return Response(reminder_out(reminders.cancel_reminder(found)))


def report_out(report) -> dict:
    return {
        "id": report.id,
        "pulse_id": report.pulse_id,
        "task_id": report.task_id,
        "items": report.items,
        "summary": report.summary,
        "flagged": report.flagged,
        "message_id": report.message_id,
        "created_at": report.created_at,
    }


class PulseReportsView(APIView):
    """An agent's pulse reports, newest first: its owner only."""

    permission_classes = [IsPerson]

    def get(self, request, agent_id):
        agent = access_own_agent(request.user, agent_id)
        rows = PulseReport.objects.filter(pulse__agent=agent).order_by("-created_at")[:100]
        return Response({"results": [report_out(r) for r in rows]})


def _iteration_count(loop) -> int:
    """Counted in the list's own read when it was (``iteration_count``), else here."""
    counted = getattr(loop, "iteration_count", None)
    return loop.iterations.count() if counted is None else counted


def loop_out(loop) -> dict:
    return {
        "id": loop.id,
        "agent_id": loop.agent_id,
        "workspace_id": loop.workspace_id,
        "conversation_id": loop.conversation_id,
        "goal": loop.goal,
        "interval_minutes": loop.interval_minutes,
        "max_iterations": loop.max_iterations,
        "token_budget": loop.token_budget,
        "deadline": loop.deadline,
        "no_progress_limit": loop.no_progress_limit,
        "status": loop.status,
        "stop_reason": loop.stop_reason or None,
        "tokens_used": loop.tokens_used,
        "iterations": _iteration_count(loop),
        "next_run_at": loop.next_run_at,
        "created_at": loop.created_at,
    }


def iteration_out(iteration) -> dict:
    return {
        "number": iteration.number,
        "task_id": iteration.task_id,
        "outcome": iteration.outcome or None,
        "reason": iteration.reason,
        "progress": iteration.progress,
        "tokens": iteration.tokens,
        "evaluated_at": iteration.evaluated_at,
        "created_at": iteration.created_at,
    }


class LoopInput(StrictSerializer):
    agent = serializers.UUIDField()
    workspace = serializers.UUIDField()
    goal = serializers.CharField(max_length=5000)
    interval_minutes = serializers.IntegerField(
        required=False, min_value=1, max_value=60 * 24 * 31, help_text="Leave out: continuous."
    )
    max_iterations = serializers.IntegerField(required=False, min_value=1, max_value=100)
    token_budget = serializers.IntegerField(required=False, min_value=1, max_value=10**9)
    deadline = serializers.CharField(
        max_length=40, required=False, help_text="ISO 8601; without an offset, in your time zone."
    )
    no_progress_limit = serializers.IntegerField(required=False, min_value=1, max_value=20)


class LoopChange(StrictSerializer):
    status = serializers.ChoiceField(choices=["running", "paused", "stopped"])


class LoopListView(APIView):
    """The goal loops of the person's agents, newest first."""

    inputs = {"post": LoopInput}
    permission_classes = [IsPerson]

    def get(self, request):
        rows = (
            loops_visible_to(request.user)
            .annotate(iteration_count=Count("iterations"))
            .order_by("-created_at")[:100]
        )
        return Response({"results": [loop_out(r) for r in rows]})

    def post(self, request):
        data = validated(LoopInput, request.data)
        agent = access_own_agent(request.user, data.pop("agent"))
        workspace = access_workspace(request.user, data.pop("workspace"))
        if "deadline" in data:  # read as a reminder's time is: in the person's time zone
            data["deadline"] = reminders.when(
                data["deadline"], request.user, "deadline", loops.LoopInvalid
            )
        loop = loops.start_loop(request.user, agent, workspace, data.pop("goal"), **data)
        return Response(loop_out(loop), status=201)


class LoopDetailView(APIView):
    inputs = {"patch": LoopChange}
    permission_classes = [IsPerson]

    def get(self, request, loop_id):
        return Response(loop_out(access_loop(request.user, loop_id)))

    def patch(self, request, loop_id):
        """Pause, resume or stop it."""
        loop = access_loop(request.user, loop_id)
        data = validated(LoopChange, request.data)
        return Response(loop_out(loops.set_loop_status(request.user, loop, data["status"])))


class LoopIterationsView(APIView):
    permission_classes = [IsPerson]

    def get(self, request, loop_id):
        loop = access_loop(request.user, loop_id)
        rows = loop.iterations.order_by("-number")[:200]
        return Response({"results": [iteration_out(i) for i in rows]})


urlpatterns = [
    path("loops/", LoopListView.as_view()),
    path("loops/<uuid:loop_id>/", LoopDetailView.as_view()),
    path("loops/<uuid:loop_id>/iterations/", LoopIterationsView.as_view()),
    path("agents/<uuid:agent_id>/pulse-reports/", PulseReportsView.as_view()),
    path("reminders/", ReminderListView.as_view()),
    path("reminders/<uuid:reminder_id>/", ReminderDetailView.as_view()),
    path("routines/", RoutineListView.as_view()),
    path("routines/<uuid:routine_id>/", RoutineDetailView.as_view()),
    path("routines/<uuid:routine_id>/runs/", RoutineRunsView.as_view()),
]
