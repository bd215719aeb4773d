"""Memory (MEM-1…3): remember, recall ranked, forget; what a turn is given, under a time
budget; never recalled where someone present could not see where it was learned; upkeep."""

import time
from datetime import timedelta

import pytest
from django.utils import timezone

from agents import actions as agent_actions
from agntchat.core import presence
from artifacts import actions as artifact_actions
from conversations import tasks
from conversations.actions import create_conversation, post_message
from conversations.models import Message, Task
from tests.conftest import directives_for
from tests.work.tooling import claimed, held_message
from work import memory
from work.models import ConversationSummary, MemoryItem

pytestmark = pytest.mark.django_db


@pytest.fixture
def dm(alice, team_a, nova):
    """Alice and Nova alone: Bob, in #general, cannot see it."""
    return create_conversation(alice, team_a, kind="direct", agent_ids=[nova.id])


def test_remember_recall_ranked_and_forget(alice, channel, nova):
    held = held_message(nova, channel, alice)
    one = held.output("memory_remember", {"content": "Alice prefers the Lisbon office on Fridays"})
    held.output("memory_remember", {"content": "The Lisbon budget is due in March"})
    held.output("memory_remember", {"content": "Bob likes short status updates"})
    found = held.output("memory_recall", {"query": "Which office does Alice prefer in Lisbon?"})
    texts = [m["content"] for m in found["memories"]]
    assert texts == [
        "Alice prefers the Lisbon office on Fridays",
        "The Lisbon budget is due in March",
    ]
    item = MemoryItem.objects.get(pk=one["id"])
    assert (item.source_conversation, item.agent, item.scope) == (channel, nova, "agent")
    assert item.source_message.body == "Over to you."

    assert held.output("memory_forget", {"memory_id": one["id"]}) == {"forgotten": one["id"]}
    item.refresh_from_db()
    assert item.archived_at is not None and item.archived_reason == "forgotten"  # kept, not deleted
    again = held.output("memory_recall", {"query": "Alice office Lisbon"})["memories"]
    assert [m["content"] for m in again] == ["The Lisbon budget is due in March"]


def test_another_agents_memory_cannot_be_forgotten(alice, channel, nova):
    rex = agent_actions.create_agent(alice, name="Rex", backend="scripted")
    theirs = memory.remember(rex, channel.workspace_id, "Rex's secret plan")
    held = held_message(nova, channel, alice)
    assert held.error("memory_forget", {"memory_id": str(theirs.id)})["code"] == "memory_not_found"
    assert MemoryItem.objects.get(pk=theirs.pk).archived_at is None


def test_what_was_learned_in_private_never_reaches_a_channel(alice, bob, channel, dm, nova):
    private = memory.remember(
        nova, dm.workspace_id, "Alice is interviewing at Globex", conversation=dm
    )
    public = memory.remember(
        nova, dm.workspace_id, "The team ships on Globex cloud", conversation=channel
    )
    # In #general (Bob can read it, not the DM): only what was learned in public.
    in_channel = memory.recall(nova, "Globex", channel, channel.workspace_id)
    assert [i.id for i in in_channel] == [public.id]
    turn = directives_for(nova, post_message(bob, channel, "@nova what about Globex?"))
    assert "interviewing" not in turn["volatile"] and "Globex cloud" in turn["volatile"]
    assert turn["context"]["memories"] == [str(public.id)]
    # In the DM itself, and in another conversation Alice alone shares with Nova: both.
    in_dm = {i.id for i in memory.recall(nova, "Globex", dm, dm.workspace_id)}
    assert in_dm == {private.id, public.id}
    # Another workspace never sees either.
    personal = alice.owned_workspaces.get(kind="personal")
    assert memory.recall(nova, "Globex", None, personal.id) == []


def test_a_turn_loads_own_memory_minus_what_the_summary_covers(alice, bob, channel, nova):
    kept = memory.remember(nova, channel.workspace_id, "Bob reviews pull requests on Mondays")
    covered = memory.remember(nova, channel.workspace_id, "The launch moved to the ninth of June")
    pinned = memory.remember(nova, channel.workspace_id, "Always answer in English", pinned=True)
    ConversationSummary.objects.create(
        conversation=channel,
        text="- Alice: the launch moved to the ninth of June after the review.",
        through=timezone.now(),
        message_count=80,
    )
    turn = directives_for(nova, post_message(bob, channel, "@nova status?"))
    assert turn["context"]["memories"] == [str(pinned.id), str(kept.id)]
    assert str(covered.id) not in turn["context"]["memories"]
    assert "# Earlier in this conversation (summary)" in turn["volatile"]
    assert "Bob reviews pull requests" in turn["volatile"]
    assert "Bob reviews" not in turn["stable"]  # the cached block does not move


@pytest.mark.django_db(transaction=True)
def test_family_and_knowledge_come_in_the_background_within_the_budget(
    alice, bob, channel, nova, monkeypatch, settings
):
    rex = agent_actions.create_agent(alice, name="Rex", backend="scripted")
    memory.remember(rex, channel.workspace_id, "The staging database restarts at noon", family=True)
    artifact_actions.publish_artifact(
        alice,
        channel,
        "Runbook",
        "markdown",
        "# Runbook\n\nRestart the staging database with care.",
    )
    message = post_message(bob, channel, "@nova can I restart the staging database?")
    turn = directives_for(nova, message)
    assert turn["context"]["skipped"] == []
    assert "(Rex) The staging database restarts at noon" in turn["volatile"]
    assert "“Runbook”" in turn["volatile"]

    # A deliberately slow source misses the budget: skipped, said so, and the turn goes on.
    settings.MEMORY_BUDGET_MS = 200

    def slow(*args):
        time.sleep(1.5)
        return ["- too late"]

    monkeypatch.setitem(memory.BACKGROUND, "knowledge", slow)
    started = time.monotonic()
    turn = directives_for(nova, message)
    assert time.monotonic() - started < 1.2
    assert turn["context"]["skipped"] == ["knowledge"]
    assert "too late" not in turn["volatile"] and "(Rex)" in turn["volatile"]


def test_decay_archives_what_fades_and_spares_the_pinned(alice, channel, nova):
    now = timezone.now()
    fresh = memory.remember(nova, channel.workspace_id, "fresh")
    month = memory.remember(nova, channel.workspace_id, "a month old")
    old = memory.remember(nova, channel.workspace_id, "half a year old")
    pinned = memory.remember(nova, channel.workspace_id, "pinned and old", pinned=True)
    MemoryItem.objects.filter(pk=month.pk).update(last_used_at=now - timedelta(days=30))
    MemoryItem.objects.filter(pk__in=[old.pk, pinned.pk]).update(
        last_used_at=now - timedelta(days=180)
    )
    assert memory.decay(now) == 1
    rows = {i.pk: i for i in MemoryItem.objects.all()}
    assert rows[fresh.pk].strength == pytest.approx(1.0, abs=1e-3)
    assert (
        rows[month.pk].strength == pytest.approx(0.5, abs=1e-3)
        and rows[month.pk].archived_at is None
    )
    assert rows[old.pk].archived_at == now and rows[old.pk].archived_reason == "decayed"
    assert rows[pinned.pk].archived_at is None and rows[pinned.pk].strength == 1.0
    # Using an item restores it.
    memory.recall(nova, "month old", None, channel.workspace_id)
    assert MemoryItem.objects.get(pk=month.pk).strength == 1.0


def test_consolidation_merges_near_duplicates_and_keeps_a_cap(alice, channel, nova, monkeypatch):
    ws = channel.workspace_id
    strong = memory.remember(nova, ws, "Deploys happen every Tuesday afternoon", family=True)
    weak = memory.remember(nova, ws, "deploys happen every tuesday afternoon!", family=True)
    MemoryItem.objects.filter(pk=weak.pk).update(strength=0.4)
    monkeypatch.setattr(memory, "FAMILY_CAP", 2)
    others = [
        memory.remember(nova, ws, f"Fact number {n} about project {n}", family=True)
        for n in range(3)
    ]
    MemoryItem.objects.filter(pk=others[2].pk).update(strength=0.2)
    assert memory.consolidate_family() == 3  # one merged, two over the cap of 2
    live = set(MemoryItem.objects.filter(archived_at__isnull=True).values_list("pk", flat=True))
    assert strong.pk in live and weak.pk not in live and len(live) == 2
    assert MemoryItem.objects.get(pk=weak.pk).archived_reason == "merged"


def test_long_conversations_get_an_extractive_summary(alice, bob, channel):
    for n in range(memory.SUMMARY_AFTER):
        post_message(
            alice if n % 2 else bob,
            channel,
            f"Point {n}: the migration plan needs a rollback step.",
        )
    post_message(alice, channel, "Lunch?")
    assert memory.summarise_conversations() == 1
    summary = ConversationSummary.objects.get(conversation=channel)
    assert summary.message_count == memory.SUMMARY_AFTER + 1
    assert "migration plan needs a rollback step" in summary.text and "Lunch" not in summary.text
    assert (
        summary.through
        == Message.objects.filter(conversation=channel).latest("created_at").created_at
    )
    assert memory.summarise_conversations() == 0  # nothing new since


def long_channel(alice, bob, channel):
    for n in range(memory.SUMMARY_AFTER):
        post_message(alice if n % 2 else bob, channel, f"Point {n}: ship the rollback step first.")


def test_an_online_agent_writes_the_summary_through_its_own_backend(alice, bob, channel, nova):
    long_channel(alice, bob, channel)
    presence.beat(nova.id, "conn-summary")
    try:
        assert memory.summarise_conversations() == 0  # asked, not written yet
        task = Task.objects.get(agent=nova)
        assert "Point 59: ship the rollback step first." in task.instructions
        assert task.conversation is None  # its result is not posted anywhere
        assert memory.summarise_conversations() == 0  # still waiting: not asked twice
        assert Task.objects.filter(agent=nova).count() == 1
        held = claimed(nova, "task")
        post_message(alice, channel, "A message after the task was asked.")
        tasks.record_result(
            held.item_id,
            "completed",
            connection_id=held.connection_id,
            result={"text": "- Bob and Alice agreed: rollback step first."},
        )
        assert memory.summarise_conversations() == 1
    finally:
        presence.leave(nova.id, "conn-summary")
    summary = ConversationSummary.objects.get(conversation=channel)
    assert summary.text == "- Bob and Alice agreed: rollback step first."
    assert (summary.message_count, summary.task) == (memory.SUMMARY_AFTER, None)
    turn = directives_for(nova, post_message(alice, channel, "Where are we?"))
    assert "agreed: rollback step first" in turn["volatile"]


def test_a_failed_or_late_summary_task_falls_back_to_an_extractive_one(alice, bob, channel, nova):
    long_channel(alice, bob, channel)
    presence.beat(nova.id, "conn-summary")
    try:
        memory.summarise_conversations()
    finally:
        presence.leave(nova.id, "conn-summary")
    task = Task.objects.get(agent=nova)
    # Nobody ran it: past SUMMARY_WAIT the summary is written here, and nothing asked again.
    later = timezone.now() + memory.SUMMARY_WAIT + timedelta(minutes=1)
    assert memory.summarise_conversations(now=later) == 1
    summary = ConversationSummary.objects.get(conversation=channel)
    assert "rollback step first" in summary.text and summary.task is None
    assert Task.objects.filter(agent=nova).count() == 1 and task.status == "queued"
