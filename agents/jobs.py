"""Scheduled jobs of agents (django-q2). Idempotent; safe to run at any time."""

from agents.tasks import settle_cancellations


def settle_cancel_requests() -> int:
    """Cancel requests unanswered past the deadline end with outcome unknown."""
    return settle_cancellations()
