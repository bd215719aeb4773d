"""Scheduled jobs of conversations (django-q2). Idempotent; safe to run at any time."""

from django.utils import timezone

from conversations import files
from conversations.tasks import settle_cancellations
from conversations.threads import abandon_idle_threads


def abandon_threads() -> int:
    """Idle side threads become abandoned: their cards change, no message is added."""
    return abandon_idle_threads()


def settle_cancel_requests() -> int:
    """Cancel requests unanswered past the deadline end with outcome unknown."""
    return settle_cancellations()


def delete_unposted_files() -> int:
    """Uploads never posted with a message, past their hours, are deleted with their bytes."""
    return files.delete_unposted(timezone.now())
