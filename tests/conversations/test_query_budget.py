"""The message path's database round trips, counted: a regression here costs every message.

Budgets, for a person's post in a channel with one agent: the post itself (auth, access, the
insert transaction), the claim of its delivery with the work payload, and the ack."""

import threading

import pytest
from django.db import OperationalError, connection, transaction
from django.test.utils import CaptureQueriesContext

from conversations import actions, deliveries
from conversations.models import Conversation, Delivery, Participant, TurnDecision
from work import gateway
from work.directives import tools_and_skills

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_post_its_claim_and_its_ack_stay_within_their_query_budgets(alice, channel, nova, api):
    client = api(alice)
    url = f"/api/v1/conversations/{channel.id}/messages/"
    assert client.post(url, {"body": "warm-up"}, format="json").status_code == 201
    gateway.claim_work(nova, "c0", {"message": 1})  # and take it out of the queue
    Delivery.objects.update(acked_at="2026-01-01T00:00:00Z")

    with CaptureQueriesContext(connection) as post:
        response = client.post(url, {"body": "hello there"}, format="json")
    assert response.status_code == 201
    # token, access, participants, then one statement, its own transaction, that stores the
    # message, its turn decision and its delivery and settles the conversation
    assert len(post.captured_queries) == 4, [q["sql"][:80] for q in post.captured_queries]

    with CaptureQueriesContext(connection) as claim:
        frames = gateway.claim_work(nova, "c1", {"message": 8})
    assert [f["payload"]["message"]["body"] for f in frames] == ["hello there"]
    # one statement: the claim, the payload's rows and the history window; then the turn's
    # memory (MEM-1): the conversation's summary and the agent's own items (its family layer
    # and knowledge are read on other connections). To fold into the claim statement.
    assert len(claim.captured_queries) == 3, [q["sql"][:80] for q in claim.captured_queries]

    with CaptureQueriesContext(connection) as ack:
        assert gateway.ack_work(frames[0]["id"], "c1") is True
    # the ack, finishing the (one-agent) turn queue in the same statement
    assert len(ack.captured_queries) == 1, [q["sql"][:80] for q in ack.captured_queries]
    decision = TurnDecision.objects.get(message_id=response.json()["id"])
    assert decision.finished_at is not None

    with CaptureQueriesContext(connection) as empty:
        assert gateway.claim_work(nova, "c1", {"message": 8}) == []
    assert len(empty.captured_queries) == 1


def test_an_agents_message_reaches_another_agent_within_the_claim_budget(alice, channel, nova):
    from agents import actions as agent_actions
    from conversations import actions

    vega = agent_actions.create_agent(alice, name="Vega", handle="vega", backend="scripted")
    Participant.objects.create(conversation=channel, agent=vega)
    actions.post_message(nova, channel, "@vega over to you")
    tools_and_skills(vega)  # as the agent socket does when it connects: claims read no grants
    with CaptureQueriesContext(connection) as claim:
        frames = gateway.claim_work(vega, "c1", {"message": 8})
    assert [f["payload"]["message"]["author"]["name"] for f in frames] == ["Nova"]
    # the claim with the payload's rows and the history window, its side threads (none), the
    # loop guard's head count, the turn's memory (summary, own items): no column the payload
    # shows is left out of its read
    assert len(claim.captured_queries) <= 5, [q["sql"][:80] for q in claim.captured_queries]


def test_a_persons_post_locks_the_conversation_row_only_while_its_write_runs(
    alice, channel, nova, api, monkeypatch
):
    """Every post stamps its conversation's row, so posts to one channel take turns at its lock.
    Held until COMMIT, the lock also covered the time the posting thread waited for the GIL to
    send it: posts queued behind each other, and a second web process added nothing. A plain
    post is one statement on its own."""
    probes = []
    wake = deliveries.wake_agents

    def probe_then_wake(deliveries):
        # Right after the post's write, before anything else: may another connection lock the row?
        def try_lock():
            try:
                with transaction.atomic():
                    Conversation.objects.select_for_update(nowait=True).get(pk=channel.pk)
                probes.append("free")
            except OperationalError:
                probes.append("locked")
            finally:
                connection.close()

        prober = threading.Thread(target=try_lock)
        prober.start()
        prober.join()
        wake(deliveries)

    monkeypatch.setattr(deliveries, "wake_agents", probe_then_wake)
    client = api(alice)
    url = f"/api/v1/conversations/{channel.id}/messages/"
    assert client.post(url, {"body": "one"}, format="json").status_code == 201
    with transaction.atomic():  # the caller's own transaction: the lock lasts as long as it
        assert client.post(url, {"body": "two"}, format="json").status_code == 201
    actions.post_message(nova, channel, "three")  # an agent's reply, counted by the loop guard
    assert probes == ["free", "locked", "free"]
    assert Delivery.objects.filter(agent=nova).count() == 2
    channel.refresh_from_db()
    assert channel.agent_streak == 1


def test_a_conversation_with_an_agent_stays_within_its_query_budgets(alice, channel, nova, api):
    client, url = api(alice), f"/api/v1/conversations/{channel.id}/messages/"
    assert client.post(url, {"body": "warm-up"}, format="json").status_code == 201
    actions.post_message(nova, channel, "warm-up")
    with CaptureQueriesContext(connection) as reply:
        actions.post_message(nova, channel, "hello back")
    # The loop guard's cap (a head count) and its count, the turn queues it must not wake
    # again, participants, then the one write: no transaction.
    assert len(reply.captured_queries) == 5, [q["sql"][:60] for q in reply.captured_queries]

    with CaptureQueriesContext(connection) as answer:
        assert client.post(url, {"body": "thanks"}, format="json").status_code == 201
    # A person after an agent: a post's 4, and the release of what the loop guard held (none)
    assert len(answer.captured_queries) == 5, [q["sql"][:60] for q in answer.captured_queries]
