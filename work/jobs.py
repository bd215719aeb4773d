"""Scheduled jobs of the work agents do (django-q2). Idempotent; safe to run at any time."""

from work.approvals import expire_permission_requests


def expire_permissions() -> int:
    """Permission requests nobody decided in time expire; their agents are told."""
    return expire_permission_requests()
