"""Executed plans of our own statements, as pooled connections run them: prepared, under the
session's ``plan_cache_mode`` (tests force each mode: after a few runs PostgreSQL may settle on a
generic plan, which knows no parameter value, not even a LIMIT), with EXPLAIN ANALYZE inside a
transaction that is rolled back, so whatever the statement changes is undone."""

from django.db import connection, transaction
from psycopg import sql as psql

# Tables that grow with a conversation's history.
LONG_TABLES = ("conversations_message", "conversations_turndecision", "conversations_delivery")


def executed_plan(sql: str, params) -> dict:
    """The root node of SQL's executed plan (``%s`` placeholders, PARAMS as the query takes
    them)."""
    with transaction.atomic(), connection.cursor() as cursor:
        numbered = tuple(f"${i}" for i in range(1, len(params) + 1))
        cursor.execute("PREPARE plan_under_test AS " + sql % numbered)
        # EXECUTE's arguments as literals: a utility statement takes no bound parameters.
        arguments = psql.SQL(", ").join(psql.Literal(value) for value in params)
        cursor.execute(
            "EXPLAIN (ANALYZE, FORMAT JSON) EXECUTE plan_under_test"
            f"({arguments.as_string(cursor.connection)})"
        )
        (plan,) = cursor.fetchone()[0]
        cursor.execute("DEALLOCATE plan_under_test")
        transaction.set_rollback(True)
    return plan["Plan"]


def table_rows_read(plan: dict, table: str | None = None) -> int:
    """Rows the plan's scans of tables (or of TABLE only) read, kept or filtered out, over all
    loops. A bitmap heap scan counts the index entries its bitmap was built from, if more: the
    bitmap is built whole before the first row, so a LIMIT above it stops only the heap reads."""
    read = 0
    if "Relation Name" in plan and table in (None, plan["Relation Name"]):
        seen = plan["Actual Rows"] + plan.get("Rows Removed by Filter", 0)
        read = seen * plan.get("Actual Loops", 1)
        if plan["Node Type"] == "Bitmap Heap Scan":
            read = max(read, _bitmap_entries(plan))
    return read + sum(table_rows_read(p, table) for p in plan.get("Plans", []))


def _bitmap_entries(plan: dict) -> int:
    """Index entries read by the bitmap index scans under PLAN, over all loops."""
    if plan["Node Type"] == "Bitmap Index Scan":
        return plan["Actual Rows"] * plan.get("Actual Loops", 1)
    return sum(_bitmap_entries(p) for p in plan.get("Plans", []) if "Relation Name" not in p)


def selects_run_by(request):
    """What REQUEST (a callable) returns, and the SELECTs it runs, with their params."""
    statements = []

    def record(execute, sql, params, many, context):
        if sql.lstrip().startswith("SELECT"):
            statements.append((sql, params))
        return execute(sql, params, many, context)

    with connection.execute_wrapper(record):
        return request(), statements


def set_plan_cache_mode(mode: str | None) -> None:
    with connection.cursor() as cursor:
        cursor.execute(f"SET plan_cache_mode = {mode}" if mode else "RESET plan_cache_mode")


def fill_long_history(person, channel, agent, messages: int, short: int) -> None:
    """CHANNEL gets MESSAGES messages by PERSON, each answered by AGENT (its turn finished, its
    delivery acked); SHORT direct conversations get 3 messages each, newer, each with a turn
    decision; then ANALYZE (all tables), as autovacuum keeps a live database. A busy channel in a workspace
    of many short conversations: PostgreSQL takes a conversation for their average length.
    (Also used by bench/history.py.)"""
    from django.utils import timezone

    from conversations.models import Delivery, Message, TurnDecision

    busy = Message.objects.bulk_create(
        Message(conversation=channel, author_user=person, body=f"busy {i}") for i in range(messages)
    )
    now = timezone.now()
    queue = [{"agent_id": str(agent.id), "reason": "mention"}]
    TurnDecision.objects.bulk_create(
        TurnDecision(conversation=channel, message=m, rule="mention", queue=queue, finished_at=now)
        for m in busy
    )
    Delivery.objects.bulk_create(
        Delivery(agent=agent, workspace_id=channel.workspace_id, message=m, acked_at=now)
        for m in busy
    )
    chatter = add_short_conversations(person, channel.workspace, short)
    TurnDecision.objects.bulk_create(
        TurnDecision(conversation=m.conversation, message=m, rule="none", finished_at=now)
        for m in chatter
    )
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE")


def add_short_conversations(person, workspace, count: int) -> list:
    """COUNT direct conversations of PERSON's with 3 messages each, as in any real workspace;
    returns the messages."""
    from conversations.models import Conversation, Message

    conversations = Conversation.objects.bulk_create(
        Conversation(workspace=workspace, kind="direct", created_by=person) for _ in range(count)
    )
    return Message.objects.bulk_create(
        Message(conversation=c, author_user=person, body="hi")
        for c in conversations
        for _ in range(3)
    )
