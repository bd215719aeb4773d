"""THE claim: one implementation of the work queue for every kind of agent work (MSG-3, MSG-6, MSG-7).

A queue row (a subclass of ``Claimable``) belongs to one agent and one workspace. A connection
claims rows with ``FOR UPDATE SKIP LOCKED`` so two connections never take the same row; a claim
carries a lease, and a row whose lease ran out is claimable again. Acks are idempotent. Claims
rotate across workspaces: the workspace served least recently goes first, so a quiet workspace is
never stuck behind a busy one's backlog.

Claim, ack and release are each one statement, run in autocommit with ``synchronous_commit =
off`` set inside the statement itself (one round trip, no WAL flush wait): losing one on a crash
only causes a redelivery, which the idempotent ack absorbs. Inserts of the work stay durable.
"""

from datetime import datetime, timedelta

from django.db import connection, models
from django.db.models import Q

from agntchat.core.exceptions import AppError


class NotHeld(AppError):
    """An ack or extend for an item this connection does not hold."""

    code = "not_held"
    status = 409
    default_message = "This connection does not hold that item (its lease may have expired)."


class Claimable(models.Model):
    """Columns every claimable queue row carries. Subclasses add what the work is, and list
    this class before BaseModel, so that its ``created_at`` (no lone index) is the one they get
    (``makemigrations --check`` in CI catches the other order)."""

    # Neither column gets a lone index. Both would tempt the planner into walking the history
    # of every agent in time or workspace order, filtering as it goes (a claim that reads the
    # whole table when the queue is empty); the two indexes below lead with the agent.
    created_at = models.DateTimeField(auto_now_add=True)
    agent = models.ForeignKey(
        "agents.Agent", on_delete=models.CASCADE, related_name="+", db_index=False
    )
    workspace = models.ForeignKey(
        "workspaces.Workspace", on_delete=models.CASCADE, related_name="+"
    )
    claimed_by = models.CharField(max_length=64, null=True, blank=True)
    claimed_at = models.DateTimeField(null=True, blank=True)
    lease_expires_at = models.DateTimeField(null=True, blank=True)
    acked_at = models.DateTimeField(null=True, blank=True)
    attempts = models.PositiveIntegerField(default=0)

    # A condition (SQL on the row as ``q``) a row must also meet to be claimable, for a kind
    # whose rows wait for something first (a permission request, until a person decides).
    claim_ready_sql = ""

    class Meta:
        abstract = True
        indexes = [
            # The claim predicate: only unacked rows, per agent, per workspace, oldest first.
            models.Index(
                fields=["agent", "workspace", "created_at"],
                condition=Q(acked_at__isnull=True),
                name="%(app_label)s_%(class)s_open",
            ),
            # "Served least recently" per agent and workspace.
            models.Index(
                fields=["agent", "workspace", "claimed_at"], name="%(app_label)s_%(class)s_served"
            ),
        ]


# The agent's workspaces are found by a skip scan of the "served" index (exact index conditions,
# no filter: its cost does not depend on how much of the history is acked; the ORDER BY is the
# index's own, which no other index gives, so the planner cannot prefer walking the workspace
# index and filtering every other agent's rows out), then ordered by when
# each was last served. ``picked`` walks them in that order and, in each, the open rows oldest
# first straight off the open-rows index: rows are pulled (and locked) lazily, so a claim touches
# about LIMIT rows plus one probe per workspace, however deep the queue or long the history is,
# and no row beyond LIMIT is locked. The rows are updated by key as an array: pooled connections
# may run this statement with a generic plan, which cannot know how small LIMIT is and would join
# ``picked`` to the table by reading all of it. The rows taken, as updated, are ``claimed``; the
# final SELECT reads them (parameters in order: agent ×4, now, limit ×2, connection, now, lease).
CLAIM_SQL = """
WITH RECURSIVE ws AS (
    (SELECT workspace_id FROM {t} WHERE agent_id = %s
     ORDER BY agent_id, workspace_id, claimed_at LIMIT 1)
    UNION ALL
    SELECT (SELECT workspace_id FROM {t} WHERE agent_id = %s
            AND workspace_id > ws.workspace_id ORDER BY agent_id, workspace_id, claimed_at
            LIMIT 1)
    FROM ws WHERE ws.workspace_id IS NOT NULL
),
turns AS MATERIALIZED (
    SELECT ws.workspace_id,
           (SELECT max(claimed_at) FROM {t} s
             WHERE s.agent_id = %s AND s.workspace_id = ws.workspace_id) AS served
    FROM ws WHERE ws.workspace_id IS NOT NULL
    ORDER BY served ASC NULLS FIRST, ws.workspace_id
),
picked AS (
    SELECT c.id FROM turns CROSS JOIN LATERAL (
        SELECT q.id FROM {t} q
         WHERE q.agent_id = %s AND q.workspace_id = turns.workspace_id
           AND {claimable}
         ORDER BY q.created_at
         LIMIT %s
           FOR UPDATE OF q SKIP LOCKED
    ) c
    LIMIT %s
),
claimed AS (
UPDATE {t} q
   SET claimed_by = %s, claimed_at = %s, lease_expires_at = %s, attempts = q.attempts + 1
 WHERE q.id = ANY(ARRAY(SELECT id FROM picked)){relaxed}
RETURNING q.*
)
{read}
"""

# What a claim may take, on the row as ``q`` (parameter: now): open, and nobody's or its lease
# ran out; a kind may add a condition of its own (``claim_ready_sql``).
CLAIMABLE = "q.acked_at IS NULL AND (q.claimed_by IS NULL OR q.lease_expires_at < %s){ready}"

# Whether an agent has any such row (parameters: agent, now): true, or NULL for none. A probe of
# the open-rows index, in that index's own order: stale statistics (after a burst, every row
# still open) would otherwise have the planner scan the whole table for an agent whose history
# is all acked, and an EXISTS would drop the ORDER BY that prevents it.
WAITING_SQL = """(SELECT true FROM {t} q WHERE q.agent_id = %s AND {claimable}
  ORDER BY q.agent_id, q.workspace_id, q.created_at LIMIT 1)"""

ACK_SQL = """
WITH acked AS (
UPDATE {t} q SET acked_at = %(now)s
 WHERE q.id = ANY(%(ids)s) AND q.claimed_by = %(conn)s AND q.acked_at IS NULL{relaxed}
RETURNING {returning}
)
{then}
"""

# By agent as well: the open-rows index then holds just that agent's open rows to look through.
RELEASE_SQL = """
UPDATE {t} q SET claimed_by = NULL, lease_expires_at = NULL
 WHERE q.agent_id = %(agent)s AND q.claimed_by = %(conn)s AND q.acked_at IS NULL{relaxed}
"""


CLAIMED_IDS = "SELECT id FROM claimed ORDER BY created_at, id"

RELAXED = " AND set_config('synchronous_commit', 'off', true) IS NOT NULL"


def _statement(model, sql: str, **parts) -> str:
    """SQL, a claim-family statement, for MODEL's table. Outside a transaction it relaxes its own
    commit; inside a caller's transaction it leaves that transaction's durability alone."""
    # Evaluated for each row the statement changes, so it is set before the implicit commit.
    relaxed = "" if connection.in_atomic_block else RELAXED
    ready = f" AND {model.claim_ready_sql}" if model.claim_ready_sql else ""
    table = connection.ops.quote_name(model._meta.db_table)
    claimable = CLAIMABLE.format(ready=ready)
    return sql.format(t=table, relaxed=relaxed, claimable=claimable, **parts)


def _execute(sql: str, params, *, named: bool = False):
    """Run a claim-family statement: its rows (NAMED: as dicts by column), or, for a statement
    that returns none, the count of rows it changed. Column names are read only when asked for:
    psycopg builds them anew on each access, which costs a wide claim's read more than its
    rows."""
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        if not named:
            return cursor.fetchall() if cursor.pgresult.nfields else cursor.rowcount
        names = [column.name for column in cursor.description]
        return [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]


def claim_statement(
    model, agent_id, connection_id: str, limit: int, now: datetime, lease_seconds: int, read=None
) -> tuple[str, list]:
    """The statement ``claim`` runs, with its parameters."""
    lease = now + timedelta(seconds=lease_seconds)
    params = [agent_id] * 4 + [now, limit, limit, connection_id, now, lease]
    if read is None:
        return _statement(model, CLAIM_SQL, read=CLAIMED_IDS), params
    sql, read_params = read
    table = connection.ops.quote_name(model._meta.db_table)
    if sql.count(f" FROM {table} ") != 1:
        raise ValueError(f"a claim's read selects from {table} once, then joins or orders")
    sql = sql.replace(f" FROM {table} ", f" FROM claimed AS {table} ")
    return _statement(model, CLAIM_SQL, read=sql), params + list(read_params)


def claim(
    model,
    agent_id,
    connection_id: str,
    limit: int,
    now: datetime,
    lease_seconds: int,
    read: tuple[str, list] | None = None,
) -> list:
    """Claim up to LIMIT items of MODEL for one connection; return their ids, oldest first.

    READ, when given, is a SELECT from MODEL's table with its parameters (``%s`` style; a
    ``core.compiled.compiled_read``, ordered oldest first): the same statement runs it on the
    rows taken, as updated, in place of the table, and its rows are returned instead. A claim
    and everything its work payload shows are then one round trip."""
    if limit <= 0:
        return []
    rows = _execute(
        *claim_statement(model, agent_id, connection_id, limit, now, lease_seconds, read)
    )
    return rows if read is not None else [row[0] for row in rows]


def waiting_statement(models_, agent_id, now: datetime) -> tuple[str, list]:
    """The statement ``waiting`` runs, with its parameters."""
    sql = "SELECT " + ", ".join(_statement(model, WAITING_SQL) for model in models_)
    return sql, [agent_id, now] * len(models_)


def waiting(models_, agent_id, now: datetime) -> list[bool]:
    """For each of MODELS_, whether AGENT_ID has an item a claim would take at NOW: one
    statement for them all, far cheaper than a claim that finds nothing."""
    return [bool(found) for found in _execute(*waiting_statement(models_, agent_id, now))[0]]


def ack_many(model, ids, connection_id: str, now: datetime, returning=("id",), then=None):
    """Acknowledge items held by CONNECTION_ID, in one statement. Idempotent. Returns the
    RETURNING columns of each row newly acked, and the ids (as given) this connection does not
    hold: another connection's (its lease ran out), or nobody's.

    THEN, when given, is what else the same statement does with the acked rows (the CTE
    ``acked``): more CTEs (starting with a comma) and the final SELECT, whose rows (with the
    ``id`` of each acked row) are returned instead. It may use the parameter ``now``."""
    given = {model._meta.pk.to_python(item_id): item_id for item_id in ids}
    columns = ("id", *(c for c in returning if c != "id"))
    acked = _execute(
        _statement(
            model,
            ACK_SQL,
            returning=", ".join(f"q.{connection.ops.quote_name(c)}" for c in columns),
            then=then or "SELECT * FROM acked",
        ),
        {"ids": list(given), "conn": connection_id, "now": now},
        named=True,
    )
    missing = set(given) - {row["id"] for row in acked}
    if missing:
        missing -= set(
            model.objects.filter(
                id__in=missing, claimed_by=connection_id, acked_at__isnull=False
            ).values_list("id", flat=True)
        )
    return acked, {given[item_id] for item_id in missing}


def ack(
    model, item_id, connection_id: str, now: datetime, returning=("id",), then=None
) -> dict | None:
    """Acknowledge one item held by CONNECTION_ID. Idempotent: the RETURNING columns of the row
    (or THEN's, as in ``ack_many``) if newly acked, None if it already was. Raises NotHeld
    when the item is another connection's (or nobody's)."""
    acked, not_held = ack_many(model, [item_id], connection_id, now, returning, then)
    if not_held:
        raise NotHeld()
    return acked[0] if acked else None


def extend(model, item_id, connection_id: str, now: datetime, lease_seconds: int) -> datetime:
    """Push back the lease of an item this connection still holds; return the new expiry."""
    expires = now + timedelta(seconds=lease_seconds)
    updated = model.objects.filter(
        id=item_id, claimed_by=connection_id, acked_at__isnull=True
    ).update(lease_expires_at=expires)
    if not updated:
        raise NotHeld()
    return expires


def release(model, agent_id, connection_id: str) -> int:
    """Give back every unacked item a closing connection of AGENT_ID held, at once (not after
    the lease)."""
    return _execute(_statement(model, RELEASE_SQL), {"agent": agent_id, "conn": connection_id})


def open_counts(model, agent_ids) -> dict:
    """Items queued or in flight per agent (their current load), for several agents at once;
    agents with none are left out."""
    rows = (
        model.objects.filter(agent_id__in=agent_ids, acked_at__isnull=True)
        .values_list("agent_id")
        .annotate(count=models.Count("*"))
        .order_by()
    )
    return dict(rows)
