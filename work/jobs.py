"""Scheduled jobs of the work agents do (django-q2). Idempotent; safe to run at any time. NOW,
where a job takes it, is the time it acts at (the schedule leaves it out: the present)."""

from agents.models import Agent, Host, HostRestart
from work import hosting, memory
from work.approvals import expire_permission_requests


def expire_permissions() -> int:
    """Permission requests nobody decided in time expire; their agents are told."""
    return expire_permission_requests()


def summarise_conversations(now=None) -> int:
    """Long conversations get a fresh summary (MEM-3)."""
    return memory.summarise_conversations(now)


def decay_memories(now=None) -> int:
    """Unused memories fade; the faded are archived."""
    return memory.decay(now)


def consolidate_family_memory(now=None) -> int:
    """Each workspace's shared memory: near-duplicates merged, kept under its cap."""
    return memory.consolidate_family(now)


def provision_hosted_agent(agent_id) -> None:
    """A newly placed agent is set up on its host (its directory, user and token)."""
    agent = Agent.objects.select_related("host").filter(pk=agent_id, host__isnull=False).first()
    if agent is not None:
        hosting.provision_agent(agent)


def forget_hosted_agent(host_id, agent_id) -> None:
    """An agent moved off a host: its directory (and system user) there go."""
    host = Host.objects.filter(pk=host_id).first()
    if host is not None and not Agent.objects.filter(pk=agent_id, host_id=host_id).exists():
        hosting.forget_agent(host, agent_id)


def provision_host(host_id) -> None:
    """A host's provisioning; none when the host was deleted since it was queued."""
    host = Host.objects.filter(pk=host_id).first()
    if host is not None:
        hosting.provision_host(host)


def restart_host(restart_id) -> None:
    """A rolling restart requested in the admin or the API (AGT-6), or its next part; none
    when it is gone with its host."""
    restart = HostRestart.objects.select_related("host").filter(pk=restart_id).first()
    if restart is not None:
        hosting.restart_host_bridges(restart)
