"""seed_demo: the demo's two scripted agents and a finished example of each thing they do, made
once (a second run adds nothing) and through the actions, as their tool calls would."""

import json
from io import StringIO

import pytest
from django.core.management import call_command

from agents.models import Agent, AgentKey
from agntchat.ui import demo
from artifacts.models import Artifact
from conversations.models import Conversation, Delivery, Message, Task, TurnDecision

pytestmark = pytest.mark.django_db


def counts():
    return {
        model.__name__: model.objects.count()
        for model in (Agent, AgentKey, Conversation, Message, Artifact, Task, Delivery)
    }


@pytest.fixture
def seeded(tmp_path, settings):
    settings.VAR_DIR = tmp_path  # the password, keys and scripted tables
    call_command("seed_demo", stdout=StringIO())
    return tmp_path


def test_a_second_run_adds_nothing(seeded):
    before = counts()
    call_command("seed_demo", stdout=StringIO())
    assert counts() == before
    general = Conversation.objects.get(title="general", workspace__name="Demo team")
    assert general.messages.filter(body=demo.INTRO).count() == 1


def test_the_sample_is_there_finished_and_made_by_the_agents(seeded):
    general = Conversation.objects.get(title="general", workspace__name="Demo team")
    scout, nova = Agent.objects.get(handle="scout"), Agent.objects.get(handle="nova")
    assert set(general.participants.values_list("agent_id", flat=True)) - {None} == {
        scout.id,
        nova.id,
    }
    # A resolved side thread between the two, hanging off Scout's message.
    thread = Conversation.objects.get(kind="thread", parent_message__conversation=general)
    assert thread.thread_status == "resolved" and thread.summary == demo.THREAD_SUMMARY
    assert thread.parent_message.author_agent == scout and "<dm" not in thread.parent_message.body
    assert list(thread.messages.order_by("created_at").values_list("author_agent", "body")) == [
        (scout.id, demo.THREAD_QUESTION),
        (nova.id, demo.THREAD_ANSWER),
    ]
    # A card with buttons, "Book" pressed once, and Scout's answer to the press.
    card = general.messages.get(payload__card__template="hotels")
    assert card.author_agent == scout
    assert [a["id"] for a in card.payload["card"]["items"][0]["actions"]] == ["book", "details"]
    assert card.payload["card_outcomes"]["0:book"]["label"] == "Book ✓"
    click = general.messages.get(kind=Message.Kind.ACTION)
    assert general.messages.get(reply_to=click).body == demo.BOOKED
    # An artifact at v2.
    note = Artifact.objects.get(conversation=general)
    assert note.title == demo.NOTE_TITLE and note.current_version == 2
    assert list(note.versions.order_by("number").values_list("content", flat=True)) == [
        demo.NOTE_V1,
        demo.NOTE_V2,
    ]
    # A completed /task with its progress events and its result relayed into #general.
    task = Task.objects.get(conversation=general)
    assert (task.agent, task.status, task.instructions) == (
        nova,
        "completed",
        demo.TASK_INSTRUCTIONS,
    )
    assert [e.data["message"] for e in task.events.order_by("seq")] == demo.TASK_STEPS
    assert general.messages.filter(author_agent=nova, body=demo.TASK_RESULT).exists()
    # The intro is the last message; no agent is left with work to redo from the sample.
    assert general.messages.order_by("-created_at").first().body == demo.INTRO
    assert not Delivery.objects.filter(acked_at__isnull=True).exists()
    assert not Task.objects.exclude(status="completed").exists()
    assert not TurnDecision.objects.filter(finished_at__isnull=True).exists()


def test_each_demo_bridge_finds_its_key_and_table(seeded):
    from agntchat.ui.management.commands.seed_demo import KEY_FILES

    for spec in demo.AGENTS:
        assert (seeded / KEY_FILES[spec["handle"]]).read_text().startswith("agk_")
        assert json.loads((seeded / f"demo_{spec['handle']}.json").read_text()) == json.loads(
            json.dumps(spec["options"])
        )
