"""Routines (PRO-2): standing instructions an agent carries out on a schedule, each run a real
task for it, delivered in the workspace the routine belongs to."""

from django.db import models
from django.db.models import Q

from agents.models import Agent
from agntchat.core.models import BaseModel
from conversations.models import Conversation, Task
from workspaces.models import User, Workspace


class Routine(BaseModel):
    """Every INTERVAL_MINUTES, or at the times of a CRON expression read in TIMEZONE. Its runs
    are tasks for AGENT in WORKSPACE, whose results come back in CONVERSATION there (by default
    the direct conversation of the agent and the person who set it up).

    A *pulse* (PRO-1) is the same schedule with a CHECKLIST: its run walks the list and files a
    structured report (``PulseReport``, through the ``pulse_report`` tool) instead of a chat
    message; what it flags reaches the owner in that direct conversation. One per agent."""

    class Kind(models.TextChoices):
        ROUTINE = "routine"
        PULSE = "pulse"

    agent = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="routines")
    workspace = models.ForeignKey(Workspace, on_delete=models.CASCADE, related_name="routines")
    conversation = models.ForeignKey(Conversation, on_delete=models.CASCADE, related_name="+")
    created_by = models.ForeignKey(User, null=True, on_delete=models.SET_NULL, related_name="+")
    kind = models.CharField(max_length=8, choices=Kind.choices, default=Kind.ROUTINE)
    name = models.CharField(max_length=120)
    instructions = models.TextField(blank=True)
    checklist = models.JSONField(default=list, blank=True)
    interval_minutes = models.PositiveIntegerField(null=True, blank=True)
    cron = models.CharField(max_length=120, blank=True)
    timezone = models.CharField(max_length=64, default="UTC")
    enabled = models.BooleanField(default=True)
    # Why the platform paused it (its agent's owner left the workspace); gone once it runs again.
    paused_reason = models.CharField(max_length=200, blank=True)
    # Where an interval counts from: when it was set up, or last given a new schedule.
    starts_at = models.DateTimeField()
    # The next slot it is due at (none while disabled): the scheduler reads only due rows.
    next_run_at = models.DateTimeField(null=True, blank=True)
    last_run_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            models.CheckConstraint(
                condition=(Q(interval_minutes__isnull=False) & Q(cron=""))
                | (Q(interval_minutes__isnull=True) & ~Q(cron="")),
                name="routine_has_one_schedule",
            ),
            models.UniqueConstraint(
                fields=["agent"], condition=Q(kind="pulse"), name="one_pulse_per_agent"
            ),
        ]
        indexes = [
            models.Index(fields=["next_run_at"], condition=Q(enabled=True), name="routines_due")
        ]

    def save(self, *args, **kwargs):
        # A reason to be paused lasts as long as the pause, whoever enables it again.
        if self.enabled and self.paused_reason:
            self.paused_reason = ""
            if kwargs.get("update_fields") is not None:
                kwargs["update_fields"] = {*kwargs["update_fields"], "paused_reason"}
        super().save(*args, **kwargs)


class RoutineRun(BaseModel):
    """One slot of a routine that ran: the task it became, and the slots missed before it
    (after downtime one catch-up run stands for them; they are recorded, not replayed)."""

    routine = models.ForeignKey(Routine, on_delete=models.CASCADE, related_name="runs")
    slot = models.DateTimeField()
    task = models.ForeignKey(Task, null=True, on_delete=models.SET_NULL, related_name="+")
    skipped_slots = models.JSONField(default=list)
    skipped_count = models.PositiveIntegerField(default=0)
    # Why no task came of it (the agent was removed from the workspace, …), if none did.
    error = models.TextField(blank=True)

    class Meta:
        constraints = [
            # A slot runs once, however many schedulers look at it at the same time.
            models.UniqueConstraint(fields=["routine", "slot"], name="one_run_per_slot")
        ]


class PulseReport(BaseModel):
    """What one pulse run found (PRO-1): each checklist item checked, its finding, and whether
    it is flagged for the owner."""

    pulse = models.ForeignKey(Routine, on_delete=models.CASCADE, related_name="reports")
    task = models.OneToOneField(Task, null=True, on_delete=models.SET_NULL, related_name="+")
    # [{"item", "status": "ok" | "flagged" | "skipped", "finding"}], in checklist order.
    items = models.JSONField(default=list)
    summary = models.TextField(blank=True)
    flagged = models.PositiveIntegerField(default=0)
    # The proactive message to the owner, when something was flagged.
    message = models.ForeignKey(
        "conversations.Message", null=True, on_delete=models.SET_NULL, related_name="+"
    )


class Reminder(BaseModel):
    """Something an agent is to bring up at a time (PRO-4), because it noticed a date or was
    asked. It is delivered only in the direct conversation of the agent and its owner, in the
    workspace where it was set."""

    class Status(models.TextChoices):
        PENDING = "pending"
        SENT = "sent"
        CANCELLED = "cancelled"

    agent = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="reminders")
    workspace = models.ForeignKey(Workspace, on_delete=models.CASCADE, related_name="+")
    conversation = models.ForeignKey(Conversation, on_delete=models.CASCADE, related_name="+")
    text = models.TextField()
    due_at = models.DateTimeField()
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.PENDING)
    # Who set it: a person over REST, or the agent in a conversation.
    created_by = models.ForeignKey(User, null=True, on_delete=models.SET_NULL, related_name="+")
    source_conversation = models.ForeignKey(
        Conversation, null=True, on_delete=models.SET_NULL, related_name="+"
    )
    sent_at = models.DateTimeField(null=True, blank=True)
    message = models.ForeignKey(
        "conversations.Message", null=True, on_delete=models.SET_NULL, related_name="+"
    )

    class Meta:
        indexes = [
            models.Index(fields=["due_at"], condition=Q(status="pending"), name="reminders_due")
        ]


class Loop(BaseModel):
    """A goal an agent keeps working at (PRO-3), one task per iteration, continuously or every
    INTERVAL_MINUTES, until it reports the goal complete or itself blocked, or a guardrail
    stops it: MAX_ITERATIONS, TOKEN_BUDGET (from recorded usage), DEADLINE, or NO_PROGRESS_LIMIT
    iterations in a row without a new progress signal (or with the same output). The server
    decides whether it goes on, and records why it stopped."""

    class Status(models.TextChoices):
        RUNNING = "running"
        PAUSED = "paused"
        COMPLETE = "complete"
        BLOCKED = "blocked"
        STOPPED = "stopped"

    agent = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="loops")
    workspace = models.ForeignKey(Workspace, on_delete=models.CASCADE, related_name="+")
    # Where the owner hears how it ended (their direct conversation with the agent).
    conversation = models.ForeignKey(Conversation, on_delete=models.CASCADE, related_name="+")
    created_by = models.ForeignKey(User, null=True, on_delete=models.SET_NULL, related_name="+")
    goal = models.TextField()
    interval_minutes = models.PositiveIntegerField(null=True, blank=True)  # none: continuous
    max_iterations = models.PositiveIntegerField(default=10)
    token_budget = models.PositiveIntegerField(null=True, blank=True)
    deadline = models.DateTimeField(null=True, blank=True)
    no_progress_limit = models.PositiveIntegerField(default=3)
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.RUNNING)
    stop_reason = models.TextField(blank=True)
    tokens_used = models.PositiveIntegerField(default=0)
    # When the next iteration may start (none while one runs, or when not running).
    next_run_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        indexes = [
            models.Index(fields=["next_run_at"], condition=Q(status="running"), name="loops_due")
        ]


class LoopIteration(BaseModel):
    """One iteration of a loop: its task, what the agent reported (``loop_report``), what it
    cost, and whether the server has weighed it yet."""

    class Outcome(models.TextChoices):
        NONE = ""  # not reported
        CONTINUE = "continue"
        COMPLETE = "complete"
        BLOCKED = "blocked"

    loop = models.ForeignKey(Loop, on_delete=models.CASCADE, related_name="iterations")
    number = models.PositiveIntegerField()
    task = models.OneToOneField(Task, null=True, on_delete=models.SET_NULL, related_name="+")
    outcome = models.CharField(max_length=8, choices=Outcome.choices, blank=True, default="")
    reason = models.TextField(blank=True)
    progress = models.TextField(blank=True)
    output_hash = models.CharField(max_length=64, blank=True)
    tokens = models.PositiveIntegerField(default=0)
    evaluated_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["loop", "number"], name="one_iteration_number")
        ]
