"""The real django-q2 worker (ORM broker on PostgreSQL) runs our jobs with our settings, and
stops cleanly when a process manager stops it."""

from datetime import timedelta

import pytest
from django.utils import timezone

from agents import actions as agent_actions
from conversations.actions import create_conversation, post_message
from conversations.models import Conversation
from tests.worker_process import run_job, running_worker
from work import memory
from work.models import MemoryItem

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


def test_the_worker_abandons_an_idle_thread(alice, team_a):
    nova = agent_actions.create_agent(alice, name="Nova", backend="scripted")
    rex = agent_actions.create_agent(alice, name="Rex", backend="scripted")
    room = create_conversation(
        alice, team_a, kind="channel", title="room", agent_ids=[nova.id, rex.id]
    )
    post_message(nova, room, '<dm target="Rex">costs?</dm>')
    Conversation.objects.filter(kind="thread").update(
        last_message_at=timezone.now() - timedelta(days=1)
    )
    with running_worker():
        assert run_job("conversations.jobs.abandon_threads") == 1
        assert Conversation.objects.get(kind="thread").thread_status == "abandoned"


def test_a_worker_keeps_what_it_inherited_out_of_the_collectors_reach():
    """Its collections then leave the pages it shares with its cluster unwritten."""
    with running_worker():
        assert run_job("gc.get_freeze_count") > 10_000


def test_the_worker_decays_and_consolidates_memory_at_the_time_it_is_given(alice, team_a, nova):
    faded = memory.remember(nova, team_a.id, "The old printer code is 4471")
    pinned = memory.remember(nova, team_a.id, "Always answer in English", pinned=True)
    first = memory.remember(nova, team_a.id, "Standup is at nine every weekday", family=True)
    memory.remember(nova, team_a.id, "Standup is at nine, every weekday", family=True)
    later = timezone.now() + 8 * memory.HALF_LIFE  # strength 0.5**8, under the floor
    with running_worker():
        assert run_job("work.jobs.decay_memories") == 0  # today: nothing has faded yet
        assert run_job("work.jobs.consolidate_family_memory", now=later) == 1
        assert run_job("work.jobs.decay_memories", now=later) == 2  # the item and the family one
    archived = dict(
        MemoryItem.objects.filter(archived_at__isnull=False).values_list("pk", "archived_reason")
    )
    assert archived[faded.pk] == "decayed" and pinned.pk not in archived
    assert list(archived.values()).count("merged") == 1 and first.pk in archived
