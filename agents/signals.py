"""What the agents app tells the apps above it, which it cannot call: they import it (the same
way the workspaces app tells this one, ``workspaces.actions.workspace_closing``)."""

from django.db.models import QuerySet
from django.dispatch import Signal

from agents.models import Agent
from workspaces.models import Membership

# Sent in the changing transaction once AGENT no longer appears in WORKSPACE_IDS (AGT-1): its
# pins changed, or its owner left a workspace or was removed from it (OWNER_LEFT), or it is
# being DELETED (a keyword only then). The apps above drop the work it still had queued there
# (conversations.apps).
agent_left_workspaces = Signal()

# Sent in the changing transaction once AGENT was taken off the host HOST_ID without its owner
# asking (they stopped managing the host's workspace; the host or its workspace going): the
# apps above have the host forget it, as when its owner makes it local (work.apps).
agent_evicted = Signal()


def owner_left(sender, instance: Membership, origin=None, **kwargs) -> None:
    """post_delete of a membership: its person's agents no longer appear in that workspace. Not
    when the membership goes with its workspace or its person (a cascade from deleting either):
    their agents' queues there go in the same delete."""
    deleted = origin.model if isinstance(origin, QuerySet) else type(origin)
    if deleted is not Membership:
        return
    for agent in Agent.objects.filter(owner_id=instance.user_id):
        agent_left_workspaces.send(
            sender=Agent, agent=agent, workspace_ids={instance.workspace_id}, owner_left=True
        )
