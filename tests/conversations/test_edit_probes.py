"""Probes of what people do to messages after posting them, and of streaming replies (issue 28):
regenerating, deleting, replying in threads. Alice and Bob share team A and #general with Nova
(Alice's agent); Charlie, in team B, must see and change nothing."""

import json
import time

import pytest
from django.conf import settings
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import override_settings
from django.utils import timezone

from agntchat.core.exceptions import AppError
from agntchat.core.presence import client as redis
from conversations import actions, drafts
from conversations.models import Conversation, Delivery, Message, TurnDecision
from tests.concurrency import run_together
from tests.conftest import client_for
from work.gateway import claim_work

pytestmark = pytest.mark.django_db


def answered(alice, channel, nova, text="What is 2+2?") -> tuple[Message, Message]:
    """Alice asks, Nova's delivery is acked and Nova answers: (question, answer)."""
    question = actions.post_message(alice, channel, text)
    Delivery.objects.filter(message=question, agent=nova).update(acked_at=timezone.now())
    return question, actions.post_message(nova, channel, "4", reply_to=question)


def regenerate(user, reply):
    return client_for(user).post(f"/api/v1/messages/{reply.id}/regenerate/", format="json")


# ---- regenerate is bounded -------------------------------------------------------------------


def test_a_regenerated_turn_counts_its_attempts_afresh(alice, channel, nova):
    question, answer = answered(alice, channel, nova)
    # Every claim of the delivery counts an attempt: regenerated often enough, past
    # WORK_MAX_ATTEMPTS a claim gave the message up saying its bridge failed, which it did not,
    # and every further regenerate posted that notice again.
    Delivery.objects.filter(message=question, agent=nova).update(
        attempts=settings.WORK_MAX_ATTEMPTS
    )
    assert regenerate(alice, answer).status_code == 202
    (work,) = claim_work(nova, "conn-nova", {"message": 5})
    assert work["payload"]["attempt"] == 1
    assert not Message.objects.filter(kind="notice").exists()


@override_settings(PERSON_POSTS_PER_MINUTE=60, PERSON_POSTS_BURST=2)
def test_regenerating_counts_against_the_post_rate(alice, channel, nova):
    question, answer = answered(alice, channel, nova)  # Alice's first post
    assert regenerate(alice, answer).status_code == 202
    Delivery.objects.filter(message=question, agent=nova).update(acked_at=timezone.now())
    again = actions.post_message(nova, channel, "four", reply_to=question)
    refused = regenerate(alice, again)
    assert refused.status_code == 429, refused.content
    assert refused.json()["error"]["code"] == "rate_limited"
    again.refresh_from_db()
    assert not again.payload.get("superseded")
    assert Delivery.objects.get(message=question, agent=nova).acked_at is not None


# ---- a deleted message is not answered -------------------------------------------------------


def test_a_message_deleted_before_its_agent_took_it_is_not_answered(alice, channel, nova):
    asked = actions.post_message(alice, channel, "@Nova what is in the secret plan?")
    assert Delivery.objects.filter(message=asked, agent=nova, acked_at__isnull=True).exists()
    actions.delete_message(alice, asked)
    assert claim_work(nova, "conn-nova", {"message": 5}) == []
    assert Delivery.objects.get(message=asked, agent=nova).acked_at is not None


def test_a_reply_to_a_deleted_message_cannot_be_regenerated(alice, channel, nova):
    question, answer = answered(alice, channel, nova)
    actions.delete_message(alice, question)
    response = regenerate(alice, answer)
    assert response.status_code == 409, response.content
    assert Delivery.objects.get(message=question, agent=nova).acked_at is not None
    assert claim_work(nova, "conn-nova", {"message": 5}) == []


def test_a_deleted_messages_turn_queue_ends_with_it(budget_room, alice):
    conversation, rex, gus = budget_room
    asked = actions.post_message(alice, conversation, "Please review the budget numbers")
    assert Delivery.objects.get(message=asked, agent=rex).holds_turn
    actions.delete_message(alice, asked)
    assert claim_work(rex, "conn-rex", {"message": 5}) == []
    assert claim_work(gus, "conn-gus", {"message": 5}) == []
    assert not Delivery.objects.filter(message=asked, agent=gus).exists()
    assert TurnDecision.objects.get(message=asked).finished_at is not None


# ---- regenerate only an agent still in the conversation --------------------------------------


def test_the_reply_of_an_agent_taken_out_cannot_be_regenerated(alice, channel, nova):
    question, answer = answered(alice, channel, nova)
    actions.remove_agent_from_conversation(alice, channel, nova.id)
    response = regenerate(alice, answer)
    assert response.status_code == 409, response.content
    assert Delivery.objects.get(message=question, agent=nova).acked_at is not None
    assert claim_work(nova, "conn-nova", {"message": 5}) == []


# ---- an edit wakes only the agents still in the conversation ---------------------------------


def test_an_edit_does_not_wake_an_agent_taken_out_since_it_answered(alice, channel, nova):
    question, _ = answered(alice, channel, nova)
    actions.remove_agent_from_conversation(alice, channel, nova.id)
    actions.edit_message(alice, question, "What is 3+3?")
    # It would be handed the conversation's history with the notice.
    assert claim_work(nova, "conn-nova", {"message": 5}) == []
    assert not Delivery.objects.filter(agent=nova, acked_at__isnull=True).exists()


def test_an_agent_is_handed_only_the_latest_edit_of_what_it_answered(alice, channel, nova):
    question, _ = answered(alice, channel, nova)
    for n in (3, 4, 5):
        actions.edit_message(alice, question, f"What is 2+{n}?")
    # The earlier notices no longer quote a text: a turn on each would be spent on nothing.
    (work,) = claim_work(nova, "conn-nova", {"message": 5})
    assert work["payload"]["message"]["body"] == "alice edited their message: What is 2+5?"
    assert claim_work(nova, "conn-nova", {"message": 5}) == []


def test_an_agent_answering_the_old_text_is_told_of_the_edit(alice, channel, nova):
    question = actions.post_message(alice, channel, "What is 2+2?")
    (work,) = claim_work(nova, "conn-nova", {"message": 5})  # its turn read "2+2"
    actions.edit_message(alice, question, "What is 3+3?")
    notice = Message.objects.get(payload__edit_of=str(question.id))
    assert notice.body == "alice edited their message: What is 3+3?"
    assert Delivery.objects.filter(message=notice, agent=nova, acked_at__isnull=True).exists()


# ---- reply threads of deleted messages -------------------------------------------------------


def test_a_deleted_message_gets_no_new_reply_thread_but_keeps_the_one_it_had(
    alice, bob, channel, api
):
    gone = actions.post_message(alice, channel, "Lunch at noon?")
    kept = actions.post_message(alice, channel, "Dinner at eight?")
    actions.reply_in_thread(bob, kept, "Yes")
    actions.delete_message(alice, gone)
    actions.delete_message(alice, kept)
    refused = api(bob).post(f"/api/v1/messages/{gone.id}/replies/", {"body": "?"}, format="json")
    assert refused.status_code == 409, refused.content
    assert not Conversation.objects.filter(parent_message=gone).exists()
    gone.refresh_from_db()
    assert gone.reply_count == 0
    again = api(bob).post(
        f"/api/v1/messages/{kept.id}/replies/", {"body": "Still on"}, format="json"
    )
    assert again.status_code == 201, again.content


def test_a_resent_reply_with_a_file_is_the_same_reply(alice, bob, channel, api, settings, tmp_path):
    settings.MEDIA_ROOT = tmp_path / "media"
    said = actions.post_message(alice, channel, "The figures?")
    sent = api(bob).post(
        f"/api/v1/conversations/{channel.id}/files/",
        {"file": SimpleUploadedFile("q3.csv", b"q,total\n3,10\n", content_type="text/csv")},
        format="multipart",
    )
    reply = {"body": "Here", "ref": "reply-1", "attachments": [sent.json()["id"]]}
    url = f"/api/v1/messages/{said.id}/replies/"
    first = api(bob).post(url, reply, format="json")
    assert first.status_code == 201, first.content
    # A browser resending after a lost answer gets the reply it made, not a 400.
    again = api(bob).post(url, reply, format="json")
    assert again.status_code == 201, again.content
    assert again.json()["id"] == first.json()["id"]
    said.refresh_from_db()
    assert said.reply_count == 1


# ---- races --------------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_an_edit_racing_a_deletion_leaves_no_text_and_no_work(alice, channel, nova):
    question, _ = answered(alice, channel, nova)
    run_together(
        lambda act: act(),
        [
            (lambda: actions.edit_message(alice, question, "What is 3+3, secretly?"),),
            (lambda: actions.delete_message(alice, question),),
        ],
        catching=(AppError,),
    )
    question.refresh_from_db()
    assert question.deleted_at is not None and question.body == ""
    assert not Message.objects.filter(body__contains="secretly").exists()
    assert claim_work(nova, "conn-nova", {"message": 5}) == []


@pytest.mark.django_db(transaction=True)
def test_regenerates_at_once_queue_one_new_turn(alice, bob, channel, nova):
    question, answer = answered(alice, channel, nova)
    results = run_together(
        actions.regenerate_reply,
        [(who, answer) for who in (alice, bob, alice, bob)],
        catching=(AppError,),
    )
    assert sum(r is None for r in results) == 1
    assert len(claim_work(nova, "conn-nova", {"message": 5})) == 1


# ---- another workspace ---------------------------------------------------------------------


def test_another_workspaces_user_can_neither_stop_nor_regenerate(alice, charlie, channel, nova):
    question = actions.post_message(alice, channel, "What is 2+2?")
    work = Delivery.objects.get(message=question, agent=nova)
    client = client_for(charlie)
    stop = client.post(
        f"/api/v1/conversations/{channel.id}/stop/", {"work": str(work.id)}, format="json"
    )
    assert stop.status_code == 404
    Delivery.objects.filter(pk=work.pk).update(acked_at=timezone.now())
    answer = actions.post_message(nova, channel, "4", reply_to=question)
    assert regenerate(charlie, answer).status_code == 404
    assert not actions.turn_stopped(nova.id, question.id)
    answer.refresh_from_db()
    assert not answer.payload.get("superseded")
    assert Delivery.objects.get(pk=work.pk).acked_at is not None


# ---- kept drafts -------------------------------------------------------------------------


def test_a_dead_turns_kept_draft_is_forgotten_once_read_past_its_age(channel):
    # A turn whose node died unannounced never drops its draft; the conversation's hash lives on
    # with each new draft, so it was kept (and read on every page load) for as long as others
    # streamed there. Read past its age, it goes.
    key = drafts._key(channel.id)
    dead = {"at": time.time() - drafts.DRAFT_TTL_SECONDS - 1, "event": {"text": "x" * 20_000}}
    redis().hset(key, "dead-turn", json.dumps(dead))
    drafts.keep_draft(channel.id, "live-turn", {"type": "message.draft", "text": "Once"})
    assert [d["text"] for d in drafts.drafts_in(channel.id)] == ["Once"]
    assert redis().hkeys(key) == [b"live-turn"]
