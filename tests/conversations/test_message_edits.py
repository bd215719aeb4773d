"""Issue 28: people edit and delete their own messages, react with emoji and reply in threads;
agents hear of an edit to what they answered. Alice and Bob share team A and #general with Nova;
Charlie, in team B, must see and change nothing."""

import pytest
from asgiref.sync import sync_to_async
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client
from django.utils import timezone

from agntchat.core.exceptions import AppError
from conversations import actions
from conversations.access import access_message
from conversations.models import Conversation, Delivery, Message, Participant
from tests.concurrency import run_together
from tests.conftest import directives_for, make_person
from tests.socket_helpers import frames_until, live_socket_for
from workspaces.models import Membership

pytestmark = pytest.mark.django_db


@pytest.fixture
def said(alice, channel):
    return actions.post_message(alice, channel, "The launch is on Tuesday")


def fresh(message) -> Message:
    return Message.objects.get(pk=message.pk)


# ---- edit -----------------------------------------------------------------------------------


def test_it_edits_ones_own_message_and_marks_it_edited(alice, said, api):
    response = api(alice).patch(
        f"/api/v1/messages/{said.id}/", {"body": "The launch is on Wednesday"}, format="json"
    )
    assert response.status_code == 200, response.content
    data = response.json()
    assert data["body"] == "The launch is on Wednesday" and data["editedAt"] is not None
    assert fresh(said).body == "The launch is on Wednesday"


def test_an_unchanged_edit_is_not_marked_edited(alice, said):
    assert actions.edit_message(alice, said, "  The launch is on Tuesday ").edited_at is None


def test_it_refuses_to_edit_someone_elses_message_and_changes_nothing(bob, said, api):
    response = api(bob).patch(f"/api/v1/messages/{said.id}/", {"body": "mine now"}, format="json")
    assert response.status_code == 403
    assert response.json()["error"]["code"] == "not_your_message"
    assert fresh(said).body == "The launch is on Tuesday" and fresh(said).edited_at is None


def test_people_cannot_edit_an_agents_message(alice, channel, nova, api):
    reply = actions.post_message(nova, channel, "Noted.")
    response = api(alice).patch(f"/api/v1/messages/{reply.id}/", {"body": "x"}, format="json")
    assert response.status_code == 403 and fresh(reply).body == "Noted."


@pytest.mark.parametrize(
    "body", [{"body": ""}, {"body": "   "}, {}, {"body": "x" * 20_001}, {"body": "ok", "extra": 1}]
)
def test_it_rejects_a_bad_edit_and_changes_nothing(alice, said, api, body):
    response = api(alice).patch(f"/api/v1/messages/{said.id}/", body, format="json")
    assert response.status_code == 400
    assert fresh(said).body == "The launch is on Tuesday" and fresh(said).edited_at is None


def test_an_agent_that_answered_is_told_of_the_edit_and_its_history_has_the_new_text(
    alice, channel, nova
):
    question = actions.post_message(alice, channel, "What is 2+2?")
    delivery = Delivery.objects.get(message=question, agent=nova)
    Delivery.objects.filter(pk=delivery.pk).update(acked_at=timezone.now())
    answer = actions.post_message(nova, channel, "4", reply_to=question)
    actions.edit_message(alice, question, "What is 3+3?")
    notice = Message.objects.get(payload__edit_of=str(question.id))
    assert notice.kind == "notice" and notice.body == "alice edited their message: What is 3+3?"
    assert list(Delivery.objects.filter(message=notice).values_list("agent_id", flat=True)) == [
        nova.id
    ]
    # A later turn's history carries the edited text, not the original.
    later = actions.post_message(alice, channel, "And then?")
    texts = [h["text"] for h in directives_for(nova, later)["history"]]
    assert texts[-2:] == ["What is 3+3?", answer.body]


def test_an_edit_before_any_agent_answered_queues_no_notice(alice, said):
    actions.edit_message(alice, said, "changed")
    assert not Message.objects.filter(kind="notice").exists()


# ---- delete ---------------------------------------------------------------------------------


def test_it_deletes_ones_own_message_leaving_a_placeholder(alice, said, api):
    response = api(alice).delete(f"/api/v1/messages/{said.id}/")
    assert response.status_code == 200
    assert response.json()["deleted"] is True and response.json()["body"] == ""
    message = fresh(said)
    assert message.deleted_at is not None and message.body == ""
    # Still in the history, as the placeholder.
    listed = api(alice).get(f"/api/v1/conversations/{said.conversation_id}/messages/").json()
    assert [m["deleted"] for m in listed["results"] if m["id"] == str(said.id)] == [True]
    # Once deleted, it can be neither edited nor deleted again.
    again = api(alice).patch(f"/api/v1/messages/{said.id}/", {"body": "back"}, format="json")
    assert again.status_code == 409 and fresh(said).body == ""


def test_a_deleted_messages_files_are_no_longer_shown_or_served(
    alice, bob, channel, api, settings, tmp_path
):
    settings.MEDIA_ROOT = tmp_path / "media"
    sent = api(alice).post(
        f"/api/v1/conversations/{channel.id}/files/",
        {"file": SimpleUploadedFile("tides.csv", b"date,high\n", content_type="text/csv")},
        format="multipart",
    )
    file_id = sent.json()["id"]
    message = actions.post_message(alice, channel, "the table", attachments=[file_id])
    shown = api(bob).get(f"/api/v1/files/{file_id}/")
    assert shown.status_code == 200
    link = shown.json()["url"]
    assert Client().get(link).status_code == 200
    deleted = api(alice).delete(f"/api/v1/messages/{message.id}/").json()
    assert deleted["attachments"] == []
    assert api(bob).get(f"/api/v1/files/{file_id}/").status_code == 404
    assert Client().get(link).status_code == 404  # a link given out before goes too


def test_it_refuses_to_delete_someone_elses_message(bob, said, api):
    assert api(bob).delete(f"/api/v1/messages/{said.id}/").status_code == 403
    assert fresh(said).deleted_at is None


def test_a_deleted_messages_agents_no_longer_read_it(alice, channel, nova, said):
    actions.delete_message(alice, said)
    later = actions.post_message(alice, channel, "Anything else?")
    assert "" not in [h["text"] for h in directives_for(nova, later)["history"]]
    assert said.body not in [h["text"] for h in directives_for(nova, later)["history"]]


def test_deleting_a_message_keeps_its_reply_thread(alice, bob, said):
    actions.reply_in_thread(bob, said, "Tuesday works")
    actions.delete_message(alice, said)
    thread = Conversation.objects.get(parent_message=said)
    assert thread.messages.get().body == "Tuesday works" and fresh(said).reply_count == 1


def test_deleting_a_reply_takes_it_off_its_threads_count(alice, bob, said):
    first = actions.reply_in_thread(bob, said, "Tuesday works")
    actions.reply_in_thread(alice, said, "Great")
    assert fresh(said).reply_count == 2
    actions.delete_message(bob, first)
    assert fresh(said).reply_count == 1


# ---- reactions ------------------------------------------------------------------------------


def test_reactions_count_each_person_once_and_toggle_off(alice, bob, said, api):
    for who in (alice, bob, alice):
        response = api(who).post(
            f"/api/v1/messages/{said.id}/reactions/", {"emoji": "👍"}, format="json"
        )
        assert response.status_code == 200
    assert response.json()["reactions"] == [
        {
            "emoji": "👍",
            "count": 2,
            "people": [{"id": str(alice.id), "name": "alice"}, {"id": str(bob.id), "name": "bob"}],
        }
    ]
    off = api(alice).delete(f"/api/v1/messages/{said.id}/reactions/?emoji=👍")
    assert off.status_code == 200
    assert fresh(said).reactions == {"👍": [{"id": str(bob.id), "name": "bob"}]}


@pytest.mark.parametrize("emoji", ["💩", "", "👍👍"])
def test_it_rejects_an_emoji_not_offered(alice, said, api, emoji):
    response = api(alice).post(
        f"/api/v1/messages/{said.id}/reactions/", {"emoji": emoji}, format="json"
    )
    assert response.status_code == 400 and fresh(said).reactions == {}


def test_agents_cannot_react(nova, said):
    with pytest.raises(AppError) as refused:
        actions.react_message(nova, said, "👍")
    assert refused.value.status == 403 and fresh(said).reactions == {}


# ---- reply threads --------------------------------------------------------------------------


def test_a_reply_opens_one_thread_and_counts_on_the_message(alice, bob, said, api):
    first = api(bob).post(
        f"/api/v1/messages/{said.id}/replies/", {"body": "Tuesday works"}, format="json"
    )
    assert first.status_code == 201, first.content
    api(alice).post(f"/api/v1/messages/{said.id}/replies/", {"body": "Great"}, format="json")
    thread = Conversation.objects.get(parent_message=said)
    assert thread.kind == "thread" and thread.thread_status == "" and thread.is_reply_thread
    listed = api(alice).get(f"/api/v1/messages/{said.id}/replies/").json()
    assert listed["thread"] == str(thread.id)
    assert [m["body"] for m in listed["results"]] == ["Tuesday works", "Great"]
    origin = api(alice).get(f"/api/v1/messages/{said.id}/").json()
    assert origin["replyCount"] == 2 and origin["threads"] == []  # not shown as a side thread


def test_replies_come_a_page_at_a_time(alice, bob, said, api):
    """?limit, then ?after= the last reply seen (and ?before= the first), as the history of a
    conversation pages: a long thread is no longer cut at its first page."""
    for n in range(5):
        api(bob).post(f"/api/v1/messages/{said.id}/replies/", {"body": f"r{n}"}, format="json")
    url = f"/api/v1/messages/{said.id}/replies/"
    first = api(alice).get(url, {"limit": 2}).json()
    assert [m["body"] for m in first["results"]] == ["r0", "r1"] and first["hasMore"]
    after = api(alice).get(url, {"limit": 2, "after": first["results"][-1]["id"]}).json()
    assert [m["body"] for m in after["results"]] == ["r2", "r3"]
    last = api(alice).get(url, {"limit": 2, "after": after["results"][-1]["id"]}).json()
    assert [m["body"] for m in last["results"]] == ["r4"] and not last["hasMore"]
    before = api(alice).get(url, {"limit": 2, "before": last["results"][0]["id"]}).json()
    assert [m["body"] for m in before["results"]] == ["r2", "r3"]
    # An anchor from another conversation is not a place in this thread.
    elsewhere = api(alice).get(url, {"after": str(said.id)})
    assert elsewhere.status_code == 404, elsewhere.content
    assert api(alice).get(url, {"after": "nope"}).status_code == 400


def test_before_any_reply_the_thread_is_empty(alice, said, api):
    assert api(alice).get(f"/api/v1/messages/{said.id}/replies/").json() == {
        "messageId": str(said.id),
        "thread": None,
        "results": [],
        "hasMore": False,
    }


def test_an_agent_answers_in_a_thread_only_when_named(alice, bob, said, nova):
    quiet = actions.reply_in_thread(bob, said, "Tuesday works")
    assert not Delivery.objects.filter(message=quiet).exists()
    named = actions.reply_in_thread(bob, said, "@nova can you confirm?")
    assert list(Delivery.objects.filter(message=named).values_list("agent_id", flat=True)) == [
        nova.id
    ]
    thread = named.conversation
    assert Participant.objects.filter(conversation=thread, agent=nova).exists()
    # Nova's turn knows what the thread is about: the message it hangs off.
    assert (
        "This is a reply thread under alice's message:\nThe launch is on Tuesday"
        in directives_for(nova, named)["volatile"]
    )
    # Nova answers there through the same pipeline: the count goes up by one more.
    actions.post_message(nova, thread, "Confirmed.", reply_to=named)
    assert fresh(said).reply_count == 3


def test_a_reply_in_a_thread_has_no_thread_of_its_own(alice, bob, said, api):
    reply = actions.reply_in_thread(bob, said, "Tuesday works")
    response = api(alice).post(
        f"/api/v1/messages/{reply.id}/replies/", {"body": "nested"}, format="json"
    )
    assert response.status_code == 409 and fresh(reply).reply_count == 0


@pytest.mark.parametrize("body", [{"body": " "}, {}, {"body": "hi", "replyTo": None}])
def test_a_bad_reply_is_refused_and_opens_no_thread(bob, said, api, body):
    response = api(bob).post(f"/api/v1/messages/{said.id}/replies/", body, format="json")
    assert response.status_code == 400
    assert not Conversation.objects.filter(parent_message=said).exists()


# ---- tenancy --------------------------------------------------------------------------------


def test_another_workspaces_user_gets_404_everywhere_and_changes_nothing(
    charlie, team_b, said, api
):
    client = api(charlie)
    base = f"/api/v1/messages/{said.id}"
    answers = [
        client.get(f"{base}/"),
        client.patch(f"{base}/", {"body": "hacked"}, format="json"),
        client.delete(f"{base}/"),
        client.post(f"{base}/reactions/", {"emoji": "👍"}, format="json"),
        client.delete(f"{base}/reactions/?emoji=👍"),
        client.get(f"{base}/replies/"),
        client.post(f"{base}/replies/", {"body": "hi"}, format="json"),
    ]
    assert [a.status_code for a in answers] == [404] * 7
    message = fresh(said)
    assert (message.body, message.deleted_at, message.reactions, message.reply_count) == (
        "The launch is on Tuesday",
        None,
        {},
        0,
    )
    assert not Conversation.objects.filter(parent_message=said).exists()


# ---- live -----------------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
async def test_an_edit_a_reaction_and_a_reply_reach_the_channels_readers_live(
    alice, bob, charlie, team_a, team_b, nova
):
    channel = await sync_to_async(actions.create_conversation)(
        alice, team_a, kind="channel", title="general"
    )
    said = await sync_to_async(actions.post_message)(alice, channel, "v1")
    bob_live, charlie_live = await live_socket_for(bob), await live_socket_for(charlie)
    await sync_to_async(actions.edit_message)(alice, said, "v2")
    seen = await frames_until(bob_live, lambda f: f.get("type") == "message.updated")
    assert (seen[-1]["message"]["body"], seen[-1]["message"]["editedAt"] is not None) == (
        "v2",
        True,
    )
    await sync_to_async(actions.react_message)(bob, said, "🎉")
    seen = await frames_until(bob_live, lambda f: f.get("type") == "message.updated")
    assert seen[-1]["message"]["reactions"][0]["count"] == 1
    await sync_to_async(actions.reply_in_thread)(bob, said, "in a thread")
    seen = await frames_until(
        bob_live,
        lambda f: f.get("type") == "message.updated" and f["message"]["replyCount"] == 1,
    )
    assert seen[-1]["message"]["id"] == str(said.id)
    assert await charlie_live.receive_nothing(timeout=0.3)
    for comm in (bob_live, charlie_live):
        await comm.disconnect()


# ---- at once --------------------------------------------------------------------------------


def at_once(calls):
    """Run each of CALLS on its own thread and database connection, released together: the
    exceptions they raised."""
    outcomes = run_together(lambda call: call(), [(call,) for call in calls], catching=Exception)
    return [outcome for outcome in outcomes if isinstance(outcome, Exception)]


@pytest.mark.django_db(transaction=True)
def test_people_reacting_at_once_are_all_counted(alice, bob, team_a, channel):
    said = actions.post_message(alice, channel, "Vote!")
    people = [alice, bob] + [make_member(team_a, f"voter{i}") for i in range(4)]
    errors = at_once(
        [
            lambda who=who: actions.react_message(who, access_message(who, said.id), "✅")
            for who in people
        ]
    )
    assert errors == []
    assert sorted(p["id"] for p in fresh(said).reactions["✅"]) == sorted(str(p.id) for p in people)


@pytest.mark.django_db(transaction=True)
def test_first_replies_at_once_open_one_thread(alice, bob, team_a, channel):
    said = actions.post_message(alice, channel, "Thoughts?")
    people = [alice, bob] + [make_member(team_a, f"replier{i}") for i in range(3)]
    errors = at_once(
        [
            lambda who=who: actions.reply_in_thread(who, access_message(who, said.id), "me first")
            for who in people
        ]
    )
    assert errors == []
    thread = Conversation.objects.get(parent_message=said)
    assert thread.messages.count() == 5 and fresh(said).reply_count == 5


def make_member(workspace, username):
    user = make_person(username)
    Membership.objects.create(workspace=workspace, user=user, role="member")
    return user


def test_a_reply_thread_under_a_direct_message_stays_with_its_readers(alice, bob, team_a, nova):
    """Naming an agent in a reply thread under a DM brings the agent in, not its owner: owners
    read their agents' side threads, not people's reply threads they could not read anyway."""
    from agntchat.core.exceptions import NotFound
    from conversations.access import access_conversation

    dora = make_person("dora")  # Nova's owner here: in the workspace, not in the DM
    Membership.objects.create(workspace=team_a, user=dora)
    nova.owner = dora
    nova.save(update_fields=["owner"])
    dm = actions.create_conversation(
        alice, team_a, kind="direct", user_ids=[bob.id], agent_ids=[nova.id]
    )
    secret = actions.post_message(alice, dm, "the offer is 120k")
    reply = actions.reply_in_thread(bob, secret, "@nova what do you think?")
    thread = reply.conversation
    assert Participant.objects.filter(conversation=thread, agent=nova).exists()
    for where in (dm.id, thread.id):
        with pytest.raises(NotFound):
            access_conversation(dora, where)
    assert access_conversation(bob, thread.id) == thread


def test_a_reply_thread_follows_its_channels_settings(alice, bob, said, api):
    """The first to reply does not set the rules of the thread (its creator): the channel's
    settings hold there, now and after they change, and the thread has none of its own."""
    channel = said.conversation
    changed = api(alice).patch(
        f"/api/v1/conversations/{channel.id}/settings/",
        {"loopGuard": {"groupCap": 2}},
        format="json",
    )
    assert changed.status_code == 200, changed.content
    api(bob).post(f"/api/v1/messages/{said.id}/replies/", {"body": "first!"}, format="json")
    thread = Conversation.objects.get(parent_message=said)
    assert thread.settings["loop_guard"] == {"group_cap": 2}
    refused = api(bob).patch(
        f"/api/v1/conversations/{thread.id}/settings/",
        {"loopGuard": {"groupCap": 50}},
        format="json",
    )
    assert (
        refused.status_code == 400 and "follows the settings" in refused.json()["error"]["message"]
    )
    api(alice).patch(
        f"/api/v1/conversations/{channel.id}/settings/",
        {"loopGuard": {"groupCap": 4}},
        format="json",
    )
    thread.refresh_from_db()
    assert thread.settings["loop_guard"] == {"group_cap": 4}
