"""An edited message's notifications quote its new text (probe F5): the old one lives on in no
inbox and no email digest, as a deleted message's does not. Alice (or Dora, whose long name
fills the inbox line) writes; Bob is notified."""

import pytest
from django.core import mail
from django.utils import timezone

from conversations import actions
from tests.conftest import make_person
from workspaces import actions as workspace_actions
from workspaces import notifications
from workspaces.jobs import send_digests
from workspaces.models import Notification

pytestmark = pytest.mark.django_db


def inbox_texts(api, person) -> list[str]:
    return [n["text"] for n in api(person).get("/api/v1/notifications/").json()["results"]]


def test_editing_a_direct_message_changes_the_text_in_the_inbox(alice, bob, team_a, api):
    dm, _ = actions.open_direct(alice, team_a, user_ids=[bob.id])
    said = actions.post_message(alice, dm, "oops the db password is hunter2-7")
    actions.edit_message(alice, said, "(removed)")
    assert inbox_texts(api, bob) == ["alice wrote in a direct message: (removed)"]
    assert not Notification.objects.filter(text__contains="hunter2").exists()


def test_each_edit_of_a_mention_is_quoted_in_turn_and_other_messages_keep_theirs(
    alice, bob, channel, api
):
    said = actions.post_message(alice, channel, "@bob the key is 4471")
    other = actions.post_message(alice, channel, "@bob see you at noon")
    actions.edit_message(alice, said, "@bob the key is in the vault")
    actions.edit_message(alice, said, "@bob   ask me for the key")
    texts = {n.message_id: n.text for n in Notification.objects.filter(user=bob)}
    assert texts == {
        said.id: "alice mentioned you in #general: @bob ask me for the key",
        other.id: "alice mentioned you in #general: @bob see you at noon",
    }
    item = Notification.objects.get(message_id=said.id)
    assert item.read_at is None and item.link.endswith(f"#msg-{said.id}")


def test_a_notification_whose_quote_was_cut_short_says_the_message_was_edited(alice, bob, team_a):
    """A long name leaves the quote cut by the inbox's length limit: no whole quote at its end
    to swap, so it says what happened and keeps nothing of the old text."""
    dora = make_person("dora-" + "x" * 140)
    _, token = workspace_actions.create_invitation(team_a.memberships.get(user=alice))
    workspace_actions.accept_invitation(dora, token)
    dm, _ = actions.open_direct(dora, team_a, user_ids=[bob.id])
    said = actions.post_message(dora, dm, "the staging password is s3cr3t-51 " + "and more " * 20)
    cut = Notification.objects.get(user=bob).text
    assert len(cut) == notifications.MAX_TEXT and "s3cr3t-51" in cut
    actions.edit_message(dora, said, "ask me for it")
    assert Notification.objects.get(user=bob).text == f"{dora.label} edited this message."


def test_the_digest_after_an_edit_mails_the_new_text_only(alice, bob, team_a):
    dm, _ = actions.open_direct(alice, team_a, user_ids=[bob.id])
    said = actions.post_message(alice, dm, "my PIN is 9931")
    actions.edit_message(alice, said, "never mind")
    assert send_digests(timezone.now()) == 1
    (email,) = mail.outbox
    assert "alice wrote in a direct message: never mind" in email.body
    assert "9931" not in email.body and "9931" not in email.alternatives[0][0]
