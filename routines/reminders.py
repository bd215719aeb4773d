"""Reminders (PRO-4): set by an agent (its reminder tools) or over REST, at a time read in the
owner's time zone; fired by a django-q2 sweep every minute; delivered only in the direct
conversation of the agent and its owner, in the workspace where it was set."""

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

from django.db import transaction
from django.utils import timezone

from agents.access import agent_appears_in, owner_belongs_to
from agents.exceptions import AgentNotFound
from agents.models import Agent
from agntchat.core.exceptions import AppError
from agntchat.core.sweeps import sweep
from conversations.actions import open_direct, post_message
from conversations.mentions import where
from routines.models import Reminder
from workspaces.models import Notification
from workspaces.notifications import conversation_link, notify_person

MAX_TEXT = 1000
MAX_AHEAD = timedelta(days=366 * 2)
MAX_PENDING_PER_AGENT = 100  # in one workspace
# Past this, a reminder posted after the worker was down says when it was due (the sweep runs
# every minute).
LATE_AFTER = timedelta(minutes=5)


class ReminderInvalid(AppError):
    code = "reminder_invalid"


def when(at: str, owner, field: str = "at", refusal: type[AppError] = ReminderInvalid) -> datetime:
    """AT (ISO 8601: ``2026-12-04T09:00``, with or without an offset) as an aware time in UTC;
    without an offset it is read in OWNER's time zone. FIELD names it in a REFUSAL."""
    try:
        moment = datetime.fromisoformat(at.strip().replace("Z", "+00:00"))
        if moment.tzinfo is None:
            moment = moment.replace(tzinfo=ZoneInfo(owner.timezone))
        # In UTC, as PostgreSQL keeps it: 9999-12-31T23:59-12:00 would be stored in year 10000,
        # which no later read of the row could turn back into a Python datetime.
        return moment.astimezone(UTC)
    except (ValueError, AttributeError, OverflowError):
        raise refusal(
            f"{at!r} is not a date and time; write it as 2026-12-04T09:00 (read in "
            f"{owner.timezone}) or with an offset, 2026-12-04T09:00+01:00.",
            fields={field: "Not an ISO 8601 date and time."},
        ) from None


def set_reminder(
    agent: Agent, workspace, text: str, due_at: datetime, *, user=None, source=None, now=None
) -> Reminder:
    """A reminder of AGENT, in WORKSPACE (where it appears), for DUE_AT (in the future)."""
    now = now or timezone.now()
    text = (text or "").strip()
    if not 1 <= len(text) <= MAX_TEXT:
        raise ReminderInvalid(
            f"A reminder's text is 1 to {MAX_TEXT} characters.", fields={"text": "Empty or long."}
        )
    if due_at <= now:
        raise ReminderInvalid(
            f"{due_at.isoformat()} has passed (it is {now.isoformat(timespec='minutes')} now).",
            fields={"at": "In the past."},
        )
    if due_at > now + MAX_AHEAD:
        raise ReminderInvalid("A reminder is at most two years ahead.", fields={"at": "Too far."})
    if not agent_appears_in(agent, workspace.id):
        raise AgentNotFound()
    with transaction.atomic():
        Agent.objects.select_for_update().filter(pk=agent.pk).first()
        # Counted per workspace: whoever asks the agent for reminders in one workspace (another
        # person's there) cannot use up those its owner sets in the others.
        pending = Reminder.objects.filter(
            agent=agent, workspace=workspace, status=Reminder.Status.PENDING
        )
        if pending.count() >= MAX_PENDING_PER_AGENT:
            raise ReminderInvalid(
                f"{agent.name} has {MAX_PENDING_PER_AGENT} reminders waiting in {workspace.name} "
                "already; cancel some first."
            )
        # Always the owner's DM with the agent in this workspace, never where it was asked.
        dm, _ = open_direct(agent.owner, workspace, agent_ids=[agent.id])
        return Reminder.objects.create(
            agent=agent,
            workspace=workspace,
            conversation=dm,
            text=text,
            due_at=due_at.astimezone(UTC),
            created_by=user,
            source_conversation=source,
        )


def cancel_reminder(reminder: Reminder) -> Reminder:
    with transaction.atomic():
        updated = Reminder.objects.filter(pk=reminder.pk, status=Reminder.Status.PENDING).update(
            status=Reminder.Status.CANCELLED, updated_at=timezone.now()
        )
        reminder.refresh_from_db()
    if not updated and reminder.status == Reminder.Status.SENT:
        raise AppError("That reminder was sent already.", code="reminder_sent", status=409)
    return reminder


def fire_due_reminders(now=None) -> int:
    """Post every reminder due by NOW in its DM, once (SKIP LOCKED: several sweeps may run),
    while its agent's owner is a member of its workspace; how many were sent."""
    now = now or timezone.now()

    def fire(reminder) -> int:
        # Its owner left the workspace since (routines.owner_left cancels the rest; this one
        # was set at that moment): nothing is posted there for them any more.
        if not owner_belongs_to(reminder.agent, reminder.workspace_id):
            reminder.status = Reminder.Status.CANCELLED
            reminder.save(update_fields=["status", "updated_at"])
            return 0
        body = f"⏰ Reminder: {reminder.text}"
        # Whoever talks to the agent may have it set one: the owner reads where it came from.
        source = reminder.source_conversation
        if source is not None and source.pk != reminder.conversation_id:
            body += f"\n\n(Set in {where(source)}.)"
        if now - reminder.due_at > LATE_AFTER:
            due = reminder.due_at.astimezone(ZoneInfo(reminder.agent.owner.timezone))
            body += f"\n\n(Due {due:%a} {due.day} {due:%b, %H:%M}; sent late.)"
        reminder.message = post_message(reminder.agent, reminder.conversation, body, wake=[])
        reminder.status, reminder.sent_at = Reminder.Status.SENT, now
        reminder.save(update_fields=["message", "status", "sent_at", "updated_at"])
        # ---- inbox: the reminder's person finds it there too ----
        notify_person(
            reminder.agent.owner,
            reminder.workspace_id,
            Notification.Kind.REMINDER,
            f"Reminder from {reminder.agent.name}: {reminder.text}",
            conversation_link(reminder.workspace_id, reminder.conversation_id, reminder.message.pk),
            conversation_id=reminder.conversation_id,
            message_id=reminder.message.pk,
            target_id=reminder.pk,
        )
        return 1

    due = (
        Reminder.objects.select_related("agent__owner", "conversation", "source_conversation")
        .filter(status=Reminder.Status.PENDING, due_at__lte=now)
        .order_by("due_at")
    )
    return sweep(due, fire, "reminder")
