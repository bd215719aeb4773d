"""An agent's scheduled work where its owner is no longer a member (agents.signals): what was
set up there (PRO-2: it runs there while its owner belongs) stops, saying why, and its rows stay
for the owner to see. A routine or pulse is paused, keeping its settings for a return; a loop,
which runs towards an end, is stopped; a pending reminder is cancelled."""

from django.utils import timezone

from agents.models import Agent
from routines.models import Loop, Reminder, Routine


def stop_scheduled_work(sender, agent: Agent, workspace_ids, owner_left: bool, **kwargs) -> None:
    """agents.signals.agent_left_workspaces, in the changing transaction. Only when its OWNER
    LEFT: an agent pinned elsewhere still runs what was set up in WORKSPACE_IDS (PRO-2)."""
    if not owner_left:
        return
    now = timezone.now()
    reason = f"The owner of {agent.name} left this workspace."
    there = {"agent": agent, "workspace_id__in": workspace_ids}
    Routine.objects.filter(enabled=True, **there).update(
        enabled=False, next_run_at=None, paused_reason=reason, updated_at=now
    )
    Loop.objects.filter(status__in=(Loop.Status.RUNNING, Loop.Status.PAUSED), **there).update(
        status=Loop.Status.STOPPED,
        stop_reason=reason,
        next_run_at=None,
        updated_at=now,
    )
    Reminder.objects.filter(status=Reminder.Status.PENDING, **there).update(
        status=Reminder.Status.CANCELLED, updated_at=now
    )
