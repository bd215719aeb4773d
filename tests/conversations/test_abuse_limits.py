"""Bounds on what one actor can make others store, see or be woken by: the loop guard holds
only so many of the agents' posts (probe F6), edits and reactions are rate-limited (F1), and a
deleted or re-edited text does not live on in edit notices or inboxes (F7). Alice and Bob share
team A's #general with Nova."""

import pytest
from asgiref.sync import async_to_sync
from django.test import override_settings
from django.utils import timezone

from agntchat.core.exceptions import AppError
from conversations import actions, caps, live, turns
from conversations.models import Conversation, Delivery, Message
from tests.conftest import agent_session, client_for
from tests.socket_helpers import agent_communicator, drain, next_frame
from workspaces.models import Notification

pytestmark = pytest.mark.django_db


@pytest.fixture
def published(monkeypatch):
    """Live events the actions send: (topics, event type, data)."""
    sent = []

    def record(topics, event_type, **data):
        sent.append((topics, event_type, data))

    monkeypatch.setattr(live, "publish_live", record)
    monkeypatch.setattr(turns, "publish_live", record)
    return sent


def held(conversation) -> int:
    return Message.objects.filter(conversation=conversation, held_at__isnull=False).count()


def answered_question(alice, channel, nova) -> Message:
    """Alice's question, which Nova was given and answered: Nova hears of its edits."""
    question = actions.post_message(alice, channel, "What is my PIN again?")
    Delivery.objects.filter(message=question, agent=nova).update(acked_at=timezone.now())
    actions.post_message(nova, channel, "I do not know it.", reply_to=question)
    return question


def edit_notices(question) -> list[str]:
    return list(
        Message.objects.filter(payload__edit_of=str(question.id))
        .order_by("created_at")
        .values_list("body", flat=True)
    )


# ---- the loop guard holds a bounded number of posts (F6) ------------------------------------


def test_past_max_held_an_agents_post_is_refused_and_nothing_is_stored(channel, nova):
    for i in range(caps.GROUP_CAP):
        actions.post_message(nova, channel, f"chatter {i}")
    for i in range(turns.MAX_HELD):
        assert actions.post_message(nova, channel, f"held {i}").held_at is not None
    with pytest.raises(AppError) as refused:
        actions.post_message(nova, channel, "one too many")
    assert (refused.value.code, refused.value.status) == ("loop_guard_held", 409)
    assert "wait for a person" in refused.value.message
    assert held(channel) == turns.MAX_HELD
    assert not Message.objects.filter(body="one too many").exists()


@pytest.mark.django_db(transaction=True)  # the socket reads the session on its own connection
def test_the_agent_socket_answers_a_post_past_max_held_with_an_error_frame(channel, nova):
    Conversation.objects.filter(pk=channel.pk).update(agent_streak=caps.GROUP_CAP)
    for i in range(turns.MAX_HELD):
        actions.post_message(nova, channel, f"held {i}")
    token = agent_session(nova)

    async def run():
        comm = agent_communicator(token)
        assert (await comm.connect())[0]
        assert (await next_frame(comm))["type"] == "hello"
        await comm.send_json_to(
            {"type": "post", "conversationId": str(channel.id), "body": "more", "ref": "p1"}
        )
        frames = await drain(comm, quiet=0.5)
        await comm.disconnect()
        return frames

    errors = [f for f in async_to_sync(run)() if f["type"] == "error"]
    assert [(e["code"], e.get("ref")) for e in errors] == [("loop_guard_held", "p1")]
    assert held(channel) == turns.MAX_HELD and not Message.objects.filter(body="more").exists()


def test_a_persons_post_releases_the_held_posts_and_the_agent_may_post_again(
    alice, channel, nova, published
):
    for i in range(caps.GROUP_CAP + turns.MAX_HELD):
        actions.post_message(nova, channel, f"chatter {i}")
    published.clear()
    actions.post_message(alice, channel, "ok, carry on")
    created = [data["message"]["body"] for _, kind, data in published if kind == "message.created"]
    assert created == [f"chatter {i}" for i in range(6, 26)] + ["ok, carry on"]
    assert held(channel) == 0
    assert actions.post_message(nova, channel, "thanks").held_at is None


def test_a_persons_post_releases_at_most_max_held_oldest_first(alice, channel, nova):
    # Held posts left from before the bound: each person's post lets through a bounded batch.
    Conversation.objects.filter(pk=channel.pk).update(agent_streak=caps.GROUP_CAP)
    Message.objects.bulk_create(
        Message(
            conversation=channel,
            author_agent=nova,
            body=f"old {i:02}",
            held_at=timezone.now(),
            created_at=timezone.now(),
        )
        for i in range(turns.MAX_HELD + 5)
    )
    actions.post_message(alice, channel, "first")
    assert held(channel) == 5
    assert not Message.objects.filter(body="old 00", held_at__isnull=False).exists()
    actions.post_message(alice, channel, "second")
    assert held(channel) == 0


def test_capped_is_announced_once_when_the_cap_is_reached_not_per_held_post(
    channel, nova, published
):
    for i in range(caps.GROUP_CAP + 10):
        actions.post_message(nova, channel, f"chatter {i}")
    capped = [data for _, kind, data in published if kind == "conversation.capped"]
    assert capped == [
        {"conversation_id": channel.id, "streak": caps.GROUP_CAP, "cap": caps.GROUP_CAP}
    ]
    assert held(channel) == 10


# ---- edits and reactions are rate-limited (F1) ----------------------------------------------


@override_settings(PERSON_POSTS_PER_MINUTE=60, PERSON_POSTS_BURST=3)
def test_an_edit_counts_against_the_post_rate(alice, channel, nova):
    question = answered_question(alice, channel, nova)  # Alice's first post
    client = client_for(alice)
    url = f"/api/v1/messages/{question.id}/"
    assert client.patch(url, {"body": "edit one"}, format="json").status_code == 200
    assert client.patch(url, {"body": "edit two"}, format="json").status_code == 200
    refused = client.patch(url, {"body": "edit three"}, format="json")
    assert refused.status_code == 429
    assert refused.json()["error"]["code"] == "rate_limited"
    assert refused["Retry-After"] == "1"
    question.refresh_from_db()
    assert question.body == "edit two"
    assert edit_notices(question) == [
        "alice edited their message.",
        "alice edited their message: edit two",
    ]


@override_settings(REACTIONS_PER_MINUTE=60, REACTIONS_BURST=2)
def test_reactions_over_their_rate_get_429_and_change_nothing(alice, bob, channel):
    said = actions.post_message(alice, channel, "Lunch?")
    client = client_for(bob)
    url = f"/api/v1/messages/{said.id}/reactions/"
    assert client.post(url, {"emoji": "👍"}, format="json").status_code == 200
    assert client.delete(f"{url}?emoji=👍").status_code == 200
    refused = client.post(url, {"emoji": "👍"}, format="json")
    assert refused.status_code == 429
    assert refused.json()["error"] == {
        "code": "rate_limited",
        "message": "Too many reactions: try again in 1 second.",
    }
    assert refused["Retry-After"] == "1"
    said.refresh_from_db()
    assert said.reactions == {}
    # Per person: Alice still reacts.
    assert client_for(alice).post(url, {"emoji": "👍"}, format="json").status_code == 200


# ---- deleted and re-edited text does not live on (F7) ---------------------------------------


def test_a_new_edit_clears_the_text_of_the_earlier_edit_notice(alice, channel, nova, published):
    question = answered_question(alice, channel, nova)
    actions.edit_message(alice, question, "My PIN is 4821")
    first = Message.objects.get(payload__edit_of=str(question.id))
    published.clear()
    actions.edit_message(alice, question, "What is the plan?")
    assert edit_notices(question) == [
        "alice edited their message.",
        "alice edited their message: What is the plan?",
    ]
    updated = [data["message"] for _, kind, data in published if kind == "message.updated"]
    assert {"id": first.id, "body": "alice edited their message."}.items() <= updated[-1].items()
    # Nova was told of each edit; the latest notice has the text it needs.
    latest = Message.objects.filter(payload__edit_of=str(question.id)).latest("created_at")
    assert list(Delivery.objects.filter(message=latest).values_list("agent_id", flat=True)) == [
        nova.id
    ]


def test_deleting_a_message_clears_its_edit_notices_from_history_and_search(
    alice, bob, channel, nova
):
    question = answered_question(alice, channel, nova)
    actions.edit_message(alice, question, "OOPS my bank PIN 4821")
    actions.delete_message(alice, question)
    assert edit_notices(question) == ["alice edited their message."]
    history = client_for(bob).get(f"/api/v1/conversations/{channel.id}/messages/").json()
    assert not [m for m in history["results"] if "4821" in m["body"]]
    found = client_for(bob).get("/api/v1/search/", {"q": "4821"})
    assert found.status_code == 200 and found.json()["results"] == []


def test_deleting_a_message_redacts_the_notifications_quoting_it(alice, bob, channel):
    said = actions.post_message(alice, channel, "@bob my PIN is 9931, keep it safe")
    other = actions.post_message(alice, channel, "@bob see you at noon")
    actions.delete_message(alice, said)
    texts = {
        n["messageId"]: n["text"]
        for n in client_for(bob).get("/api/v1/notifications/").json()["results"]
    }
    assert texts == {
        str(said.id): "alice deleted this message.",
        str(other.id): "alice mentioned you in #general: @bob see you at noon",
    }
    assert Notification.objects.filter(text__contains="9931").count() == 0
