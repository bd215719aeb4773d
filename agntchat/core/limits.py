"""Caps on what one actor may pile up (workspaces, agents, memories, links, tasks): counted
under a lock of what is counted, so two writers at once cannot both take the last place.

An advisory lock, not a row lock: ``FOR UPDATE`` on the person, agent or workspace row would
also hold up every insert that references that row (a message, a delivery) until commit."""

from django.db import connection

from agntchat.core.exceptions import AppError


class LimitReached(AppError):
    """One more would pass what a person, agent or workspace may pile up (settings)."""

    code = "limit_reached"
    status = 409


def hold(key: str) -> None:
    """Lock KEY until the current transaction ends (callers are inside one)."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))", [key])


def count_held(key: str, items) -> int:
    """How many ITEMS (a queryset) there are, counted under ``hold(KEY)``: a writer that counts
    under the same KEY waits until this transaction has written, or not."""
    hold(key)
    return items.count()
