"""Scheduled jobs of the work agents do (django-q2). Idempotent; safe to run at any time."""

from work import memory
from work.approvals import expire_permission_requests


def expire_permissions() -> int:
    """Permission requests nobody decided in time expire; their agents are told."""
    return expire_permission_requests()


def summarise_conversations() -> int:
    """Long conversations get a fresh summary (MEM-3)."""
    return memory.summarise_conversations()


def decay_memories() -> int:
    """Unused memories fade; the faded are archived."""
    return memory.decay()


def consolidate_family_memory() -> int:
    """Each workspace's shared memory: near-duplicates merged, kept under its cap."""
    return memory.consolidate_family()
