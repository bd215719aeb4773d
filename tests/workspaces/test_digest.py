"""The email digest (workspaces.notifications.send_digests, a django-q2 schedule): each person's
unread notifications not yet emailed, in one email with plain text and HTML and links, at most
once per their chosen period; never for someone who turned it off. Django's locmem backend
keeps what was sent (pytest-django sets it)."""

import threading
from datetime import timedelta

import pytest
from django.core import mail
from django.core.mail.backends import locmem
from django.db import connection
from django.utils import timezone

from conversations import actions
from workspaces import notifications
from workspaces.jobs import send_digests

pytestmark = pytest.mark.django_db


def test_a_digest_is_sent_once_with_text_html_and_links(alice, bob, channel, settings):
    settings.AGNTCHAT_URL = "https://chat.example.com"
    message = actions.post_message(alice, channel, "@bob the draft is ready")
    now = timezone.now()
    assert send_digests(now) == 1
    assert len(mail.outbox) == 1
    email = mail.outbox[0]
    assert email.to == ["bob@example.com"]
    assert email.subject == "agntchat: 1 unread notification"
    link = f"https://chat.example.com/w/{channel.workspace_id}/c/{channel.id}/#msg-{message.id}"
    assert "alice mentioned you in #general: @bob the draft is ready" in email.body
    assert link in email.body
    html, kind = email.alternatives[0]
    assert kind == "text/html" and f'<a href="{link}">' in html
    assert f"https://chat.example.com/w/{channel.workspace_id}/inbox/" in html

    # Sent: not again, not even when the period has passed, until something new is waiting.
    assert send_digests(now + timedelta(days=2)) == 0
    assert len(mail.outbox) == 1


def test_the_period_is_respected(alice, bob, channel):
    notifications.set_digest(bob, "hourly")
    now = timezone.now()
    actions.post_message(alice, channel, "@bob one")
    assert send_digests(now) == 1
    actions.post_message(alice, channel, "@bob two")
    assert send_digests(now + timedelta(minutes=59)) == 0  # within the hour
    assert send_digests(now + timedelta(minutes=61)) == 1
    assert ["@bob one" in mail.outbox[0].body, "@bob two" in mail.outbox[1].body] == [True, True]
    assert "@bob one" not in mail.outbox[1].body  # each notification is emailed once

    notifications.set_digest(bob, "daily")
    actions.post_message(alice, channel, "@bob three")
    assert send_digests(now + timedelta(hours=24)) == 0  # a day from the last (at 1:01)
    assert send_digests(now + timedelta(hours=25, minutes=2)) == 1


def test_nothing_is_sent_when_off_read_or_without_an_address(alice, bob, charlie, channel):
    notifications.set_digest(bob, "off")
    actions.post_message(alice, channel, "@bob quiet")
    assert send_digests(timezone.now()) == 0
    notifications.set_digest(bob, "daily")
    notifications.mark_all_notifications_read(bob)
    assert send_digests(timezone.now()) == 0
    actions.post_message(alice, channel, "@bob loud")
    bob.email = ""
    bob.save(update_fields=["email"])
    assert send_digests(timezone.now()) == 0
    assert mail.outbox == []


class HeldBackend(locmem.EmailBackend):
    """Django's locmem backend that holds each send until the test lets it go."""

    sending = threading.Event()
    release = threading.Event()

    def send_messages(self, messages):
        HeldBackend.sending.set()
        assert HeldBackend.release.wait(10)
        return super().send_messages(messages)


@pytest.mark.django_db(transaction=True)
def test_two_workers_at_once_send_one_digest(alice, bob, channel, settings):
    settings.EMAIL_BACKEND = "tests.workspaces.test_digest.HeldBackend"
    HeldBackend.sending.clear()
    HeldBackend.release.clear()
    actions.post_message(alice, channel, "@bob just once")
    now = timezone.now()
    first = []

    def worker():
        try:
            first.append(send_digests(now))
        finally:
            connection.close()

    thread = threading.Thread(target=worker)
    thread.start()
    try:
        assert HeldBackend.sending.wait(10)  # the first worker is sending, holding Bob's row
        assert send_digests(now) == 0  # the second skips it rather than send it twice
    finally:
        HeldBackend.release.set()
        thread.join(10)
    assert first == [1]
    assert len(mail.outbox) == 1
    assert send_digests(now) == 0


def test_people_whose_only_waiting_items_are_of_workspaces_they_left_are_not_swept(
    alice, bob, channel, team_a
):
    """Unread items of a workspace someone left are not theirs to see, nor to be emailed: such a
    person is not due. Else each would be locked and read again at every run, for nothing, and
    a sweep takes at most 1000 people: enough of them would crowd out those really due."""
    from django.test.utils import CaptureQueriesContext

    from workspaces.models import Notification, User

    gone = [
        User(
            username=f"gone{i}", email=f"gone{i}@example.com", verified_email=f"gone{i}@example.com"
        )
        for i in range(3)
    ]
    Notification.objects.bulk_create(
        Notification(user=user, workspace=team_a, kind="mention", text="old", link="/")
        for user in User.objects.bulk_create(gone)
    )
    actions.post_message(alice, channel, "@bob still here")
    with CaptureQueriesContext(connection) as run:
        assert send_digests(timezone.now()) == 1
    assert [email.to for email in mail.outbox] == [["bob@example.com"]]
    assert len([q for q in run.captured_queries if "FOR UPDATE" in q["sql"]]) == 1  # Bob's
