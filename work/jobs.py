"""Scheduled jobs of the work agents do (django-q2). Idempotent; safe to run at any time. NOW,
where a job takes it, is the time it acts at (the schedule leaves it out: the present)."""

from work import memory
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
