"""The claim statement's executed plan, however long the history (core.claims): a claim reads
what it takes, not the table."""

import pytest
from django.db import connection
from django.utils import timezone

from agents import actions as agent_actions
from agntchat.core import claims
from conversations import actions
from conversations.models import Delivery, Message
from tests.conftest import built_once, make_cast
from tests.plans import (
    add_short_conversations,
    executed_plan,
    set_plan_cache_mode,
    table_rows_read,
)
from work import gateway

# Each test in a transaction rolled back around the history, built once for the module (on
# one xdist worker: `make test` hands out whole modules).
pytestmark = pytest.mark.django_db


@pytest.fixture(scope="module")
def long_history(django_db_setup, django_db_blocker):
    """One workspace where another agent has a deep open queue, and Nova a long acked history.
    Statistics were taken while the history was still open: they mislead the planner (as after
    any burst)."""

    def build():
        cast = make_cast()
        alice, channel, nova = cast.alice, cast.channel, cast.nova
        cast.other = agent_actions.create_agent(alice, name="Other", backend="scripted")
        messages = Message.objects.bulk_create(
            Message(conversation=channel, author_user=alice, body=str(i)) for i in range(3000)
        )
        Delivery.objects.bulk_create(
            Delivery(agent=agent, workspace_id=channel.workspace_id, message=m)
            for agent, batch in ((cast.other, messages[:1500]), (nova, messages[1500:]))
            for m in batch
        )
        # Newer than all of those, other conversations' messages: the channel's history window
        # must not walk past them.
        others = [
            actions.create_conversation(alice, channel.workspace, kind="channel", title=f"c{i}")
            for i in range(10)
        ]
        Message.objects.bulk_create(
            Message(conversation=others[i % 10], author_user=alice, body=str(i))
            for i in range(1000)
        )
        # And, as in any real workspace, many short conversations: PostgreSQL's estimate of a
        # conversation's length is their average, a few messages, yet the window must not read
        # the whole busy channel to find its newest 21.
        add_short_conversations(alice, channel.workspace, 600)
        with connection.cursor() as cursor:
            cursor.execute("ANALYZE conversations_delivery")
            cursor.execute("ANALYZE conversations_message")  # current, as autovacuum keeps them
        Delivery.objects.filter(agent=nova).update(acked_at=timezone.now())
        return cast

    yield from built_once(django_db_blocker, build)


def _claim_plan(agent_id, limit: int, read=None) -> dict:
    """The claim statement (with READ, as claims.claim takes it): its executed plan."""
    sql, params = claims.claim_statement(Delivery, agent_id, "c", limit, timezone.now(), 60, read)
    return executed_plan(sql, params)


@pytest.mark.parametrize("plan_cache_mode", ["auto", "force_generic_plan"])
def test_a_claim_reads_no_other_rows_however_long_the_history(long_history, plan_cache_mode):
    # The claim must go straight to what it takes, not walk the table.
    alice, channel, nova, other = (
        long_history.alice,
        long_history.channel,
        long_history.nova,
        long_history.other,
    )
    set_plan_cache_mode(plan_cache_mode)
    try:
        # A handful of index probes per workspace, plus the rows taken: never the history.
        assert table_rows_read(_claim_plan(nova.id, 8)) <= 10  # nothing queued
        actions.post_message(alice, channel, "new")
        plan = _claim_plan(nova.id, 8)
        assert plan["Actual Rows"] == 1
        assert table_rows_read(plan) <= 10
        assert table_rows_read(_claim_plan(other.id, 8)) <= 10 + 3 * 8  # a deep queue
        # With the work payload read in the same statement: the rows taken, what they join
        # (message, conversation, workspace, author, turn) and the history window's 21 messages
        # with their authors.
        read = gateway.message_read()
        plan = _claim_plan(nova.id, 8, (read.sql, read.params({})))
        assert plan["Actual Rows"] == 1
        assert table_rows_read(plan) <= 10 + 5 + 2 * 21
    finally:
        set_plan_cache_mode(None)


@pytest.mark.parametrize("plan_cache_mode", ["auto", "force_generic_plan"])
def test_a_heartbeats_look_for_waiting_work_reads_no_history(long_history, plan_cache_mode):
    # Asked at every heartbeat of every agent: an index probe, whatever the history or the queue.
    nova, other = long_history.nova, long_history.other
    set_plan_cache_mode(plan_cache_mode)
    try:
        for agent_id, waits in ((nova.id, False), (other.id, True)):  # all acked; a deep queue
            plan = executed_plan(*claims.waiting_statement([Delivery], agent_id, timezone.now()))
            assert table_rows_read(plan) <= 1
            assert claims.waiting([Delivery], agent_id, timezone.now()) == [waits]
    finally:
        set_plan_cache_mode(None)
