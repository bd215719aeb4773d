"""The one way a scheduled job works through due rows: each in its own transaction, so one row
that fails never holds up the rows after it."""

import logging

from django.db import transaction

log = logging.getLogger(__name__)


def sweep(due, handle, what: str, limit: int = 1000) -> int:
    """Run HANDLE(row) on each row of the queryset DUE (in its order, at most LIMIT; the rest wait
    for the next sweep); the sum of what HANDLE returns.

    Each row is taken in its own transaction, locked (a sweep running at the same time elsewhere
    skips it: SKIP LOCKED) and read again under DUE's conditions, so a row another sweep has
    just handled is passed over. A row whose handling raises is rolled back and logged as WHAT,
    and the sweep goes on; the next sweep tries it again."""
    done = 0
    for pk in list(due.values_list("pk", flat=True)[:limit]):
        try:
            with transaction.atomic():
                # Only the row itself: rows it shares with others (an agent, a workspace) stay
                # free for the sweeps taking those others.
                locked = due.select_for_update(skip_locked=True, of=("self",))
                row = locked.filter(pk=pk).first()
                if row is not None:
                    done += handle(row)
        except Exception:
            log.exception("%s %s failed; the sweep goes on without it", what, pk)
    return done
