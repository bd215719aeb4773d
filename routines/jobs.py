"""Scheduled jobs of the routines app (django-q2). Idempotent; safe to run from several
clusters at once. NOW, where given, is the time a job acts at (the schedule leaves it out)."""

from routines import actions, loops, reminders


def run_due_routines(now=None) -> int:
    """Every due routine becomes a task for its agent (PRO-2)."""
    return actions.run_due_routines(now)


def fire_reminders(now=None) -> int:
    """Reminders that are due are posted in their direct conversation (PRO-4)."""
    return reminders.fire_due_reminders(now)


def advance_loops(now=None) -> int:
    """Goal loops: finished iterations weighed, due ones started (PRO-3)."""
    return loops.advance_loops(now)
