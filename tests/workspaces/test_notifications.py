"""The inbox: a mention, a DM, an approval and a reminder each put exactly one item in the right
person's inbox (never their own doing, never someone who cannot read where it happened); each
is announced on that person's topic only; REST lists and marks read, and another person's
notification is not found. Alice owns Team A and Nova; Bob is a member; Charlie is an outsider."""

from datetime import timedelta

import pytest
from django.db import transaction
from django.utils import timezone

from conversations import actions
from routines import reminders
from tests.socket_helpers import TopicInbox
from work import approvals
from work.models import ToolCall
from workspaces import actions as workspace_actions
from workspaces import notifications
from workspaces.models import Notification

pytestmark = pytest.mark.django_db(transaction=True)


def inbox(user) -> list[tuple[str, str]]:
    return list(
        Notification.objects.filter(user=user).order_by("created_at").values_list("kind", "text")
    )


# ---- what writes into an inbox --------------------------------------------------------------


def test_a_mention_puts_one_item_in_the_mentioned_persons_inbox(alice, bob, channel):
    message = actions.post_message(alice, channel, "@bob can you look at the draft?")
    assert inbox(bob) == [
        ("mention", "alice mentioned you in #general: @bob can you look at the draft?")
    ]
    assert inbox(alice) == []
    item = Notification.objects.get(user=bob)
    assert item.workspace_id == channel.workspace_id
    assert (item.conversation_id, item.message_id) == (channel.id, message.id)
    assert item.link == f"/w/{channel.workspace_id}/c/{channel.id}/#msg-{message.id}"
    assert item.read_at is None and item.emailed_at is None


def test_mentions_are_matched_by_username_in_any_case_and_counted_once(alice, bob, channel):
    actions.post_message(alice, channel, "@Bob and again @BOB, and @nobody")
    assert len(inbox(bob)) == 1


def test_nobody_is_notified_of_their_own_message(alice, bob, channel):
    actions.post_message(bob, channel, "note to self, @bob: water the plants")
    dm, _ = actions.open_direct(bob, channel.workspace, user_ids=[alice.id])
    actions.post_message(bob, dm, "@bob @alice hello")
    assert inbox(bob) == []
    assert [kind for kind, _ in inbox(alice)] == ["mention"]


def test_people_who_cannot_read_the_conversation_are_not_notified(
    alice, bob, charlie, team_a, team_b, nova
):
    # Charlie is in another workspace; Bob is not in Alice's DM with Nova.
    dm, _ = actions.open_direct(alice, team_a, agent_ids=[nova.id])
    actions.post_message(alice, dm, "@bob @charlie should not hear of this")
    general = actions.create_conversation(alice, team_a, kind="channel", title="plans")
    actions.post_message(alice, general, "@charlie are you there?")
    assert inbox(bob) == [] and inbox(charlie) == []


def test_a_direct_message_notifies_the_other_people_in_it_once(alice, bob, team_a, nova):
    dm, _ = actions.open_direct(alice, team_a, user_ids=[bob.id])
    actions.post_message(alice, dm, "lunch?")
    actions.post_message(alice, dm, "@bob lunch, really")
    assert inbox(bob) == [
        ("direct", "alice wrote in a direct message: lunch?"),
        ("mention", "alice mentioned you in a direct message: @bob lunch, really"),
    ]
    # An agent's reply in a person's DM with it is a message to that person.
    with_nova, _ = actions.open_direct(bob, team_a, agent_ids=[nova.id])
    actions.post_message(nova, with_nova, "Here is what I found.")
    assert inbox(bob)[-1] == ("direct", "Nova wrote in a direct message: Here is what I found.")
    assert inbox(alice) == []


def test_reading_the_conversation_reads_what_it_brought(alice, bob, team_a):
    dm, _ = actions.open_direct(alice, team_a, user_ids=[bob.id])
    actions.post_message(alice, dm, "one")
    actions.post_message(alice, dm, "two")
    assert notifications.unread_count(bob) == 2
    actions.mark_read(bob, dm)
    assert notifications.unread_count(bob) == 0


def waiting_call(nova, channel) -> ToolCall:
    with transaction.atomic():
        call = ToolCall.objects.create(
            agent=nova,
            workspace=channel.workspace,
            conversation=channel,
            call_id="c-1",
            tool="send_email",
            arguments={},
            arguments_hash="x",
            risk="external",
            status=ToolCall.Status.WAITING,
        )
        request = approvals.request_permission(call)
    return request


def test_an_approval_waits_in_each_deciders_inbox_until_someone_decides(alice, bob, channel, nova):
    request = waiting_call(nova, channel)
    # Alice owns Nova and the workspace; Bob is a member, who may not decide.
    assert inbox(alice) == [("approval", "Nova asks to use send_email: approve or deny")]
    assert inbox(bob) == []
    item = Notification.objects.get(user=alice)
    assert item.target_id == request.id
    assert item.link == f"/w/{channel.workspace_id}/c/{channel.id}/"
    # Reading the conversation decides nothing: it still waits.
    actions.mark_read(alice, channel)
    assert notifications.unread_count(alice) == 1
    approvals.decide_permission(alice, request, approve=True)
    assert notifications.unread_count(alice) == 0


def test_a_fired_reminder_reaches_its_person_once(alice, bob, team_a, nova):
    due = timezone.now() + timedelta(hours=1)
    reminder = reminders.set_reminder(nova, team_a, "Call the bank", due, user=alice)
    assert reminders.fire_due_reminders(now=due + timedelta(seconds=1)) == 1
    # One item, the reminder's (its post in the DM is not counted again as a DM).
    assert inbox(alice) == [("reminder", "Reminder from Nova: Call the bank")]
    item = Notification.objects.get(user=alice)
    assert item.target_id == reminder.id
    reminder.refresh_from_db()
    assert item.message_id == reminder.message_id
    assert inbox(bob) == []


def test_each_change_is_announced_on_the_persons_own_topic_only(alice, bob, channel):
    bobs, alices = TopicInbox(f"user.{bob.id}"), TopicInbox(f"user.{alice.id}")
    actions.post_message(alice, channel, "@bob ping")
    created = bobs.next()["event"]
    assert created["type"] == "notification.created" and created["unreadCount"] == 1
    assert created["notification"]["text"] == "alice mentioned you in #general: @bob ping"
    notifications.mark_all_notifications_read(bob)
    read = bobs.next()["event"]
    assert read["type"] == "notification.read" and read["unreadCount"] == 0
    assert read["notificationIds"] == [created["notification"]["id"]]
    assert [m for m in alices.all(quiet=0.5) if m.get("type") == "live.event"] == []


def test_a_person_removed_from_the_workspace_no_longer_sees_its_items(alice, bob, channel):
    actions.post_message(alice, channel, "@bob one")
    owner = channel.workspace.memberships.get(user=alice)
    workspace_actions.remove_member(owner, channel.workspace.memberships.get(user=bob))
    assert notifications.unread_count(bob) == 0
    actions.post_message(alice, channel, "@bob two")  # no longer a member: nothing new
    assert Notification.objects.filter(user=bob).count() == 1


# ---- REST -------------------------------------------------------------------------------------


def test_the_api_lists_newest_first_and_filters_unread(alice, bob, channel, api):
    first = actions.post_message(alice, channel, "@bob first")
    actions.post_message(alice, channel, "@bob second")
    client = api(bob)
    body = client.get("/api/v1/notifications/").json()
    assert [n["text"][-6:] for n in body["results"]] == ["second", " first"]
    assert body["unreadCount"] == 2 and body["hasMore"] is False
    assert set(body["results"][0]) == {
        "id",
        "workspaceId",
        "kind",
        "text",
        "link",
        "conversationId",
        "messageId",
        "targetId",
        "createdAt",
        "readAt",
    }
    older = Notification.objects.get(message_id=first.id)
    marked = client.post(f"/api/v1/notifications/{older.id}/read/")
    assert marked.status_code == 200 and marked.json()["readAt"] is not None
    unread = client.get("/api/v1/notifications/?unread=true").json()
    assert [n["text"][-6:] for n in unread["results"]] == ["second"]
    assert unread["unreadCount"] == 1
    page = client.get("/api/v1/notifications/?limit=1").json()
    assert page["hasMore"] is True
    after = client.get(f"/api/v1/notifications/?before={page['results'][0]['id']}").json()
    assert [n["id"] for n in after["results"]] == [str(older.id)]

    done = client.post("/api/v1/notifications/read-all/")
    assert done.status_code == 200 and done.json() == {"marked": 1, "unreadCount": 0}
    assert client.get("/api/v1/notifications/?unread=true").json()["results"] == []


def test_the_api_refuses_bad_input_and_changes_nothing(alice, bob, channel, api):
    actions.post_message(alice, channel, "@bob hi")
    client = api(bob)
    for query in ("limit=0", "limit=abc", "unread=perhaps", "before=not-an-id"):
        response = client.get(f"/api/v1/notifications/?{query}")
        assert response.status_code == 400, query
        assert response.json()["error"]["code"] == "invalid"
    item = Notification.objects.get(user=bob)
    for url in (f"/api/v1/notifications/{item.id}/read/", "/api/v1/notifications/read-all/"):
        for body in ([None], {"all": True}):
            response = client.post(url, body, format="json")
            assert response.status_code == 400, (url, body)
    missing = client.get("/api/v1/notifications/?before=00000000-0000-0000-0000-000000000000")
    assert missing.status_code == 404
    for body in ({}, {"digest": "weekly"}, {"digest": "daily", "extra": 1}, {"digest": 1}):
        response = client.patch("/api/v1/notifications/settings/", body, format="json")
        assert response.status_code == 400, body
    bob.refresh_from_db()
    assert bob.digest == "daily" and notifications.unread_count(bob) == 1


def test_another_persons_notification_is_not_found(alice, bob, charlie, team_b, channel, api):
    actions.post_message(alice, channel, "@bob for you")
    item = Notification.objects.get(user=bob)
    for user in (charlie, alice):
        response = api(user).post(f"/api/v1/notifications/{item.id}/read/")
        assert response.status_code == 404
        assert response.json()["error"]["code"] == "notification_not_found"
        assert api(user).get("/api/v1/notifications/").json()["results"] == []
    assert api(charlie).post("/api/v1/notifications/read-all/").json()["marked"] == 0
    item.refresh_from_db()
    assert item.read_at is None


def test_the_digest_setting_is_read_and_changed_over_the_api(bob, api):
    client = api(bob)
    assert client.get("/api/v1/notifications/settings/").json() == {"digest": "daily"}
    changed = client.patch("/api/v1/notifications/settings/", {"digest": "hourly"}, format="json")
    assert changed.status_code == 200 and changed.json() == {"digest": "hourly"}
    bob.refresh_from_db()
    assert bob.digest == "hourly"
