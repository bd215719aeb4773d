"""Two people click the same `once` button at the same moment: exactly one piece of work reaches
the agent. Real threads, each on its own database connection."""

import threading

import pytest
from django.db import connection, transaction

from artifacts import actions, frames
from artifacts.exceptions import ActionUsed
from conversations.models import Delivery, Message
from tests.concurrency import sessions_waiting_on_me
from tests.waiting import wait_until

pytestmark = pytest.mark.django_db(transaction=True)

BOOKABLE = {
    "type": "hotels",
    "items": [
        {"title": "Memmo Alfama", "actions": [{"id": "book", "label": "Book", "once": True}]}
    ],
}


# Two Sends on an email card at once: tests/integrations/test_google_tools.py (one email).
def test_two_concurrent_clicks_make_exactly_one_work_item(alice, bob, channel, nova):
    card, action_id = BOOKABLE, "book"
    actions.seed_card_templates()
    reply = frames.post_card(
        nova, {"type": "card.post", "conversationId": str(channel.id), "card": card}
    )
    message = Message.objects.get(pk=reply["messageId"])
    results = []

    def click(user):
        try:
            actions.use_card_action(user, message, 0, action_id)
            results.append("done")
        except ActionUsed:
            results.append("used")
        finally:
            connection.close()

    clickers = [threading.Thread(target=click, args=(user,)) for user in (alice, bob)]
    # Hold the card's row so that both clicks are in flight before either can look at it: without
    # the action's own lock both would read "unused" and both would send work.
    with transaction.atomic():
        Message.objects.select_for_update().get(pk=message.pk)
        for thread in clickers:
            thread.start()
        wait_until(
            lambda: len(sessions_waiting_on_me()) >= 2, what="both clicks waiting on the lock"
        )
        assert len(sessions_waiting_on_me()) == 2
    for thread in clickers:
        thread.join(timeout=20)
    assert sorted(results) == ["done", "used"]
    assert Delivery.objects.filter(message__kind=Message.Kind.ACTION, agent=nova).count() == 1
    message.refresh_from_db()
    assert list(message.payload["card_outcomes"]) == [f"0:{action_id}"]
