"""Scheduled jobs of the workspaces app (django-q2). Idempotent; safe to run from several
clusters at once. NOW, where given, is the time a job acts at (the schedule leaves it out)."""

from workspaces import notifications


def send_digests(now=None) -> int:
    """Each person's unread notifications, emailed at most once per their chosen period."""
    return notifications.send_digests(now)
