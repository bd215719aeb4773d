"""Reminders (PRO-4): set by the agent's tools or over REST, at a time read in the owner's time
zone, fired once at the right time by the sweep, and delivered only in the DM between the agent
and its owner in the workspace where it was set — never in the channel it was asked in."""

from datetime import datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from django.utils import timezone

from conversations.models import Message
from routines import reminders
from routines.models import Reminder
from tests.work.tooling import held_message
from workspaces.actions import update_profile

pytestmark = pytest.mark.django_db


def test_the_agent_sets_one_in_a_channel_and_it_arrives_in_the_owners_dm(
    alice, bob, team_a, channel, nova
):
    update_profile(alice, zone_name="America/New_York")
    held = held_message(nova, channel, bob, "The review is on Friday at nine.")
    day = (timezone.now() + timedelta(days=2)).date()
    made = held.output("reminder_set", {"text": "Prepare the review", "at": f"{day}T09:00"})
    # Read in Alice's time zone.
    due = datetime(day.year, day.month, day.day, 9, tzinfo=ZoneInfo("America/New_York"))
    reminder = Reminder.objects.get(pk=made["id"])
    assert reminder.due_at == due and due.utcoffset() != timedelta(0)
    dm = reminder.conversation
    assert dm.kind == "direct" and dm.workspace == team_a
    assert sorted(str(p.user_id or p.agent_id) for p in dm.participants.all()) == sorted(
        [str(alice.id), str(nova.id)]
    )
    listed = held.output("reminder_list", {})["reminders"]
    assert [r["text"] for r in listed] == ["Prepare the review"]

    assert reminders.fire_due_reminders(now=due - timedelta(minutes=1)) == 0
    at = due + timedelta(seconds=30)
    assert reminders.fire_due_reminders(now=at) == 1
    assert reminders.fire_due_reminders(now=at) == 0  # once
    (sent,) = Message.objects.filter(body__startswith="⏰")
    # Set by Bob's message in the channel: the owner reads where it came from.
    assert sent.body == f"⏰ Reminder: Prepare the review\n\n(Set in #{channel.title}.)"
    assert (sent.conversation, sent.author_agent) == (dm, nova)
    assert not Message.objects.filter(conversation=channel, body__startswith="⏰").exists()


def test_bad_times_and_texts_are_refused_and_nothing_is_set(alice, channel, nova):
    held = held_message(nova, channel, alice)
    for arguments, says in (
        ({"text": "x", "at": "next friday"}, "not a date and time"),
        ({"text": "x", "at": "2020-01-01T09:00"}, "has passed"),
        ({"text": "x", "at": "2099-12-04T09:00"}, "at most two years ahead"),
        ({"text": "x", "at": "2027-12-04T09:00", "in_minutes": 5}, "either at or in_minutes"),
        ({"text": "x"}, "either at or in_minutes"),
    ):
        assert says in held.error("reminder_set", arguments)["message"], arguments
    assert not Reminder.objects.exists()
    soon = held.output("reminder_set", {"text": "Stretch", "in_minutes": 30})
    due = datetime.fromisoformat(soon["at"])
    assert timedelta(minutes=29) < due - timezone.now() <= timedelta(minutes=30)
    cancelled = held.output("reminder_cancel", {"reminder_id": soon["id"]})
    assert cancelled["status"] == "cancelled"
    assert reminders.fire_due_reminders(now=due + timedelta(minutes=1)) == 0


def test_rest_sets_lists_and_cancels_for_the_owner_only(alice, bob, charlie, team_a, nova, api):
    owner = api(alice)
    body = {
        "agent": str(nova.id),
        "workspace": str(team_a.id),
        "text": "Send the invoice",
        "at": f"{timezone.now().year + 1}-01-02T10:00+01:00",
    }
    made = owner.post("/api/v1/reminders/", body, format="json")
    assert made.status_code == 201, made.json()
    due = datetime.fromisoformat(made.json()["dueAt"].replace("Z", "+00:00"))
    assert due == datetime(timezone.now().year + 1, 1, 2, 9, tzinfo=ZoneInfo("UTC"))
    url = f"/api/v1/reminders/{made.json()['id']}/"
    for who in (bob, charlie):
        assert api(who).get(url).status_code == 404
        assert api(who).delete(url).status_code == 404
        assert api(who).get("/api/v1/reminders/").json()["results"] == []
        assert api(who).post("/api/v1/reminders/", body, format="json").status_code in (403, 404)
    assert (
        owner.post("/api/v1/reminders/", {**body, "at": "soon"}, format="json").status_code == 400
    )
    assert owner.delete(url).json()["status"] == "cancelled"
    assert Reminder.objects.count() == 1
    assert (
        owner.patch("/api/v1/me/", {"timezone": "Nowhere/Else"}, format="json").status_code == 400
    )
    assert (
        owner.patch("/api/v1/me/", {"timezone": "Europe/Lisbon"}, format="json").json()["timezone"]
        == "Europe/Lisbon"
    )


def test_a_reminder_that_cannot_be_sent_holds_up_none_of_the_others(alice, team_a, nova, caplog):
    """The sweep takes each due reminder in its own transaction (agntchat.core.sweeps): the
    first due, whose conversation refuses the post, is logged and left pending; the next is
    still sent, by this sweep and not a minute later."""
    from conversations.models import Conversation
    from workspaces.models import Workspace

    now = timezone.now()
    personal = Workspace.objects.get(owner=alice, kind="personal")
    stuck = reminders.set_reminder(nova, team_a, "First", now + timedelta(minutes=1), user=alice)
    later = reminders.set_reminder(nova, personal, "Second", now + timedelta(minutes=2), user=alice)
    assert stuck.conversation_id != later.conversation_id
    Conversation.objects.filter(pk=stuck.conversation_id).update(archived_at=now)
    at = now + timedelta(minutes=3)
    assert reminders.fire_due_reminders(now=at) == 1
    stuck.refresh_from_db()
    later.refresh_from_db()
    assert (stuck.status, later.status) == ("pending", "sent")
    assert f"reminder {stuck.id} failed" in caplog.text
    assert not Message.objects.filter(conversation_id=stuck.conversation_id).exists()
    # Once its conversation takes posts again, the next sweep sends it.
    Conversation.objects.filter(pk=stuck.conversation_id).update(archived_at=None)
    assert reminders.fire_due_reminders(now=at) == 1
    stuck.refresh_from_db()
    assert stuck.status == "sent"
