"""An item its bridge fails on every time (a crash on what it says, a reply the server keeps
refusing) is given up after WORK_MAX_ATTEMPTS claims, saying so: before, it came back after
every lease and the model ran on it again, for ever. Up to that many claims, it is handed out.

The cast: Alice's team A with Bob; #room there with Bob's finance agent Rex and Alice's
generalist Gus, where a budget question queues Rex, then Gus."""

import pytest
from django.conf import settings

from conversations.actions import post_message
from conversations.models import Delivery, Message
from conversations.tasks import create_task
from work.gateway import claim_work

pytestmark = pytest.mark.django_db

BUDGET = "Please review the budget numbers"


def tried(item, times: int) -> None:
    type(item).objects.filter(pk=item.pk).update(attempts=times)


def test_a_message_tried_too_often_is_given_up_and_its_turn_passes_on(budget_room, alice):
    conversation, rex, gus = budget_room
    asked = post_message(alice, conversation, BUDGET)
    tried(Delivery.objects.get(message=asked, agent=rex), settings.WORK_MAX_ATTEMPTS)

    assert claim_work(rex, "conn-rex", {"message": 5}) == []

    assert Delivery.objects.get(message=asked, agent=rex).acked_at is not None
    notice = Message.objects.get(conversation=conversation, kind="notice")
    assert notice.body.startswith(
        f"Rex could not answer a message: its bridge failed on it "
        f"{settings.WORK_MAX_ATTEMPTS} times."
    )
    assert Delivery.objects.get(message=asked, agent=gus, acked_at__isnull=True).holds_turn


def test_a_message_is_handed_out_up_to_the_last_attempt(budget_room, alice):
    conversation, rex, _ = budget_room
    asked = post_message(alice, conversation, BUDGET)
    tried(Delivery.objects.get(message=asked, agent=rex), settings.WORK_MAX_ATTEMPTS - 1)

    (work,) = claim_work(rex, "conn-rex", {"message": 5})

    assert work["payload"]["attempt"] == settings.WORK_MAX_ATTEMPTS
    assert not Message.objects.filter(conversation=conversation, kind="notice").exists()


def test_a_task_tried_too_often_fails_saying_why(alice, team_a, nova):
    task = create_task(alice, team_a, nova, "Summarise the quarter")
    tried(task, settings.WORK_MAX_ATTEMPTS)

    assert claim_work(nova, "conn-nova", {"task": 5}) == []

    task.refresh_from_db()
    assert task.status == "failed" and task.acked_at is not None
    assert task.error == f"Given up: its bridge failed on it {settings.WORK_MAX_ATTEMPTS} times."
