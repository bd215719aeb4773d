"""A conversation's reads stay bounded however long it is, in a workspace of many short ones.

PostgreSQL estimates one conversation's length as the average over all conversations: a few
messages, where most conversations are direct messages and side threads. Under that estimate, a
page of history is cheapest read by fetching the whole conversation and sorting it, which for a
busy channel is every message it ever had, on every read. These tests run the statements the
endpoints run, as pooled connections run them (prepared, with custom plans and with the generic
plan PostgreSQL may settle on), and count the rows their plans read."""

import json

import pytest

from conversations.models import Conversation, Message, Participant
from tests.conftest import built_once, make_cast
from tests.plans import (
    LONG_TABLES,
    executed_plan,
    fill_long_history,
    selects_run_by,
    set_plan_cache_mode,
    table_rows_read,
)

# Each test in a transaction rolled back around the history, built once for the module (on
# one xdist worker: `make test` hands out whole modules).
pytestmark = pytest.mark.django_db


@pytest.fixture(scope="module")
def busy(django_db_setup, django_db_blocker):
    """The cast, with #general holding 3,000 messages, each answered by Nova, among 600 short
    conversations."""

    def build():
        cast = make_cast()
        fill_long_history(cast.alice, cast.channel, cast.nova, messages=3000, short=600)
        return cast

    yield from built_once(django_db_blocker, build)


def _is_page_read(sql: str) -> bool:
    """An ordered read of a table that grows with the history."""
    table = sql.partition(" FROM ")[2].partition(" ")[0].strip('"')
    return table in LONG_TABLES and "ORDER BY" in sql


@pytest.mark.parametrize("plan_cache_mode", ["auto", "force_generic_plan"])
def test_a_page_of_a_busy_channel_reads_about_a_page(api, client, busy, plan_cache_mode):
    alice, channel = busy.alice, busy.channel
    url = f"/api/v1/conversations/{channel.id}/messages/"
    middle = Message.objects.get(conversation=channel, body="busy 1500")
    api_client = api(alice)
    client.force_login(alice)
    pages = {  # name: (client, path, messages shown)
        "newest": (api_client, url + "?limit=20", 20),
        "before": (api_client, url + f"?limit=20&before={middle.id}", 20),
        "after": (api_client, url + f"?limit=20&after={middle.id}", 20),
        "the conversation page": (client, f"/w/{channel.workspace_id}/c/{channel.id}/", None),
        "turn decisions": (api_client, f"/api/v1/conversations/{channel.id}/turns/", 100),
    }
    set_plan_cache_mode(plan_cache_mode)
    try:
        for name, (http, page, shown) in pages.items():
            response, statements = selects_run_by(lambda http=http, page=page: http.get(page))
            assert response.status_code == 200, name
            if shown:
                assert len(response.json()["results"]) == shown
            page_reads = [(sql, params) for sql, params in statements if _is_page_read(sql)]
            assert page_reads, name
            for sql, params in page_reads:
                # A page (the API's 20, the page's 50, the last 100 turns) and the anchor: not
                # the channel's 3,000.
                plan = executed_plan(sql, params)
                for table in LONG_TABLES:
                    read = table_rows_read(plan, table)
                    assert read <= (shown or 50) + 2, (name, table, json.dumps(plan))
    finally:
        set_plan_cache_mode(None)


@pytest.mark.parametrize("plan_cache_mode", ["auto", "force_generic_plan"])
def test_a_post_in_a_busy_channel_reads_none_of_its_history(api, busy, plan_cache_mode):
    # After an agent's answer, so the person's post also ends the agents' streak (and releases
    # whatever the loop guard held back: here nothing).
    from conversations import actions

    alice, nova, channel = busy.alice, busy.nova, busy.channel
    client = api(alice)
    url = f"/api/v1/conversations/{channel.id}/messages/"

    def answer_then_thanks():
        # A bridge's answer carries its client ref, so a retried post is not a second one.
        actions.post_message(nova, channel, "an answer", client_ref="turn-1")
        return client.post(url, {"body": "thanks"}, format="json")

    set_plan_cache_mode(plan_cache_mode)
    try:
        response, statements = selects_run_by(answer_then_thanks)
        assert response.status_code == 201
        assert statements
        for sql, params in statements:
            plan = executed_plan(sql, params)
            for table in LONG_TABLES:
                assert table_rows_read(plan, table) <= 2, (table, sql, json.dumps(plan))
    finally:
        set_plan_cache_mode(None)


@pytest.mark.parametrize("plan_cache_mode", ["auto", "force_generic_plan"])
def test_the_sidebar_reads_what_it_lists(client, busy, plan_cache_mode):
    """Channels, and what Bob takes part in: not every conversation of the workspace (600
    others' direct messages here, and side threads that collect by the thousand), and a long
    unread history counted only up to its cap."""
    from agents.actions import create_agent
    from agntchat.ui.shell import UNREAD_CAP
    from conversations import actions

    alice, bob, nova = busy.alice, busy.bob, busy.nova
    channel = busy.channel  # 3,000 messages Bob has never read
    rex = create_agent(alice, name="Rex", handle="rex", backend="scripted")
    Participant.objects.create(conversation=channel, agent=rex)
    actions.post_message(nova, channel, 'Mine.\n<dm target="Rex">Check the costs?</dm>')
    agents_thread = Conversation.objects.get(kind="thread")
    bobs_dm = actions.create_conversation(
        bob, channel.workspace, kind="direct", agent_ids=[nova.id]
    )
    bobs_thread = Conversation.objects.create(
        workspace=channel.workspace,
        kind="thread",
        title="Bob's side thread",
        # As threads.open_threads opens them: a thread without a status is a reply thread.
        thread_status="in_progress",
    )
    Participant.objects.create(conversation=bobs_thread, user=bob)
    client.force_login(bob)
    set_plan_cache_mode(plan_cache_mode)
    try:
        response, statements = selects_run_by(
            lambda: client.get(f"/app/w/{channel.workspace_id}/sidebar/")
        )
        assert response.status_code == 200
        page = response.content.decode()
        assert "<span data-unread-count>99+</span>" in page
        listed = {c for c in (channel, bobs_dm, bobs_thread, agents_thread) if str(c.id) in page}
        assert listed == {channel, bobs_dm, bobs_thread}
        plans = [executed_plan(sql, params) for sql, params in statements]
        assert sum(table_rows_read(p, "conversations_message") for p in plans) <= UNREAD_CAP + 10
        # The three listed, each found by an index and then read by key: not the 600 others.
        read = max(table_rows_read(p, "conversations_conversation") for p in plans)
        assert read <= 10, [json.dumps(p) for p in plans]
    finally:
        set_plan_cache_mode(None)


@pytest.mark.parametrize("plan_cache_mode", ["auto", "force_generic_plan"])
def test_the_conversation_list_reads_no_history(api, busy, plan_cache_mode):
    """Which side threads Bob may read depends on where each hangs off: looked up per thread,
    not by joining every message of the database to find out."""
    from agents.actions import create_agent
    from conversations import actions

    alice, bob, nova, channel = busy.alice, busy.bob, busy.nova, busy.channel
    rex = create_agent(alice, name="Rex", handle="rex", backend="scripted")
    Participant.objects.create(conversation=channel, agent=rex)
    actions.post_message(nova, channel, 'Mine.\n<dm target="Rex">Check the costs?</dm>')
    off_channel = Conversation.objects.get(kind="thread")
    dm = actions.create_conversation(
        alice, channel.workspace, kind="direct", agent_ids=[nova.id, rex.id]
    )
    actions.post_message(nova, dm, '<dm target="Rex">Between us.</dm>')
    off_dm = Conversation.objects.exclude(pk=off_channel.pk).get(kind="thread")
    client = api(bob)
    set_plan_cache_mode(plan_cache_mode)
    try:
        response, statements = selects_run_by(lambda: client.get("/api/v1/conversations/"))
        assert response.status_code == 200
        listed = {c["id"] for c in response.json()["results"]}
        assert str(channel.id) in listed and str(off_channel.id) in listed
        assert str(dm.id) not in listed and str(off_dm.id) not in listed
        for sql, params in statements:
            plan = executed_plan(sql, params)
            # The two threads' origins, by key: not the 3,000 messages of the channel.
            assert table_rows_read(plan, "conversations_message") <= 4, json.dumps(plan)
    finally:
        set_plan_cache_mode(None)
