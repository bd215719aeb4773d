"""Side threads (THR-1…4): the <dm> tag opens or reuses a thread, the card shows its state,
resolve and abandon change the card and not the message list."""

from datetime import timedelta

import pytest
from asgiref.sync import sync_to_async
from django.utils import timezone

from agents import actions as agent_actions
from agntchat.core.exceptions import AppError
from conversations import threads
from conversations.actions import create_conversation, post_message
from conversations.models import Conversation, Delivery, Message, Participant
from tests.conftest import agent_session, directives_for
from tests.socket_helpers import agent_communicator, next_frame

pytestmark = pytest.mark.django_db


@pytest.fixture
def room(alice, bob, team_a):
    nova = agent_actions.create_agent(
        alice, name="Nova", capabilities=["research"], backend="scripted"
    )
    rex = agent_actions.create_agent(
        bob, name="Rex", handle="rex", capabilities=["finance"], backend="scripted"
    )
    conversation = create_conversation(
        alice, team_a, kind="channel", title="room", agent_ids=[nova.id, rex.id]
    )
    return conversation, nova, rex


def test_a_tag_opens_exactly_one_thread_and_wakes_the_target(room, api, alice):
    conversation, nova, rex = room
    message = post_message(
        nova, conversation, 'Here is my take.\n<dm target="Rex">Can you check the costs?</dm>'
    )
    assert message.body == "Here is my take."
    thread = Conversation.objects.get(kind="thread")
    assert thread.parent_message == message and thread.thread_status == "in_progress"
    assert set(thread.participants.values_list("agent_id", flat=True)) == {nova.id, rex.id}
    first = thread.messages.get()
    assert (first.body, first.author_agent) == ("Can you check the costs?", nova)
    assert list(Delivery.objects.filter(message=first).values_list("agent_id", flat=True)) == [
        rex.id
    ]
    # The card is part of the message API.
    listed = api(alice).get(f"/api/v1/conversations/{conversation.id}/messages/").json()["results"]
    card = next(m for m in listed if m["id"] == str(message.id))["threads"][0]
    assert card["status"] == "in_progress" and sorted(card["participants"]) == ["Nova", "Rex"]
    assert card["summary"] is None


def test_a_tag_for_two_targets_wakes_both_with_the_message(room, alice):
    conversation, nova, rex = room
    vega = agent_actions.create_agent(alice, name="Vega", handle="vega", backend="scripted")
    Participant.objects.create(conversation=conversation, agent=vega)
    post_message(nova, conversation, 'Over to you.\n<dm target="Rex, Vega">Split the costs?</dm>')
    first = Conversation.objects.get(kind="thread").messages.get()
    # Both deliveries are written in the statement that stores the message.
    woken = set(Delivery.objects.filter(message=first).values_list("agent_id", flat=True))
    assert woken == {rex.id, vega.id}


def test_a_second_tag_for_the_same_target_reuses_the_thread(room):
    conversation, nova, rex = room
    message = post_message(
        nova, conversation, '<dm target="rex">one</dm> and <dm target="Rex">two</dm> done'
    )
    assert message.body == "and  done"
    thread = Conversation.objects.get(kind="thread")
    assert list(thread.messages.order_by("created_at").values_list("body", flat=True)) == [
        "one",
        "two",
    ]


def test_an_unknown_target_keeps_the_text_and_tells_the_author(room):
    conversation, nova, _ = room
    body = 'Look <dm target="Zed">secret</dm>'
    message = post_message(nova, conversation, body)
    assert message.body == body
    assert not Conversation.objects.filter(kind="thread").exists()
    notice = Message.objects.get(conversation=conversation, kind="notice")
    assert "No agent called “Zed”" in notice.body and "Nova" in notice.body


@pytest.mark.parametrize(
    "body",
    [
        '<dm target="Rex">unclosed',
        '<dm to="Rex">x</dm>',
        '<dm target="">x</dm>',
        '<dm target="Rex">   </dm>',
    ],
)
def test_malformed_tags_create_nothing(room, body):
    conversation, nova, _ = room
    message = post_message(nova, conversation, body)
    assert message.body == body and message.payload["dm_error"]
    assert not Conversation.objects.filter(kind="thread").exists()


def test_people_tags_are_just_text(room, alice):
    conversation, _, _ = room
    message = post_message(alice, conversation, 'I type <dm target="Rex">x</dm> literally')
    assert "<dm" in message.body and not Conversation.objects.filter(kind="thread").exists()


def test_resolve_posts_the_summary_into_the_card_not_the_list(room, api, alice, charlie, team_b):
    conversation, nova, rex = room
    origin = post_message(nova, conversation, '<dm target="Rex">costs?</dm>Thinking.')
    thread = Conversation.objects.get(kind="thread")
    count = conversation.messages.count()
    # Charlie cannot even see the thread (404); Alice reads it from the channel it hangs off.
    resolve = f"/api/v1/conversations/{thread.id}/resolve/"
    assert api(charlie).post(resolve, {"summary": "x"}, format="json").status_code == 404
    assert api(charlie).get(f"/api/v1/conversations/{thread.id}/messages/").status_code == 404
    thread_messages = api(alice).get(f"/api/v1/conversations/{thread.id}/messages/").json()
    assert thread_messages["results"][0]["body"] == "costs?"
    threads.resolve_thread(rex, thread, "Costs are 12% under plan.")
    thread.refresh_from_db()
    assert thread.thread_status == "resolved" and thread.summary == "Costs are 12% under plan."
    assert conversation.messages.count() == count
    card = api(alice).get(f"/api/v1/conversations/{conversation.id}/messages/").json()["results"]
    card = next(m for m in card if m["id"] == str(origin.id))["threads"][0]
    assert card["status"] == "resolved" and card["summary"] == "Costs are 12% under plan."
    with pytest.raises(AppError, match="already resolved"):
        threads.resolve_thread(nova, thread, "again")


def test_a_person_taking_part_resolves_over_rest(room, alice, api):
    conversation, nova, rex = room
    post_message(nova, conversation, '<dm target="Rex">costs?</dm>')
    thread = Conversation.objects.get(kind="thread")
    thread.participants.create(user=alice)
    bad = api(alice).post(
        f"/api/v1/conversations/{thread.id}/resolve/", {"summary": ""}, format="json"
    )
    assert bad.status_code == 400
    ok = api(alice).post(
        f"/api/v1/conversations/{thread.id}/resolve/", {"summary": "Done."}, format="json"
    )
    assert ok.status_code == 200 and ok.json()["threadStatus"] == "resolved"


def test_silence_never_resolves_an_idle_thread_is_abandoned(room):
    conversation, nova, _ = room
    post_message(nova, conversation, '<dm target="Rex">costs?</dm>')
    thread = Conversation.objects.get(kind="thread")
    count = conversation.messages.count()
    assert threads.abandon_idle_threads(timezone.now() + timedelta(minutes=119)) == 0
    assert threads.abandon_idle_threads(timezone.now() + timedelta(minutes=121)) == 1
    thread.refresh_from_db()
    assert thread.thread_status == "abandoned" and conversation.messages.count() == count


def test_the_wording_setting_controls_what_agents_are_told(room, alice):
    from conversations.actions import update_settings

    conversation, nova, _ = room
    message = post_message(alice, conversation, "hello")
    assert "<dm target=" in directives_for(nova, message)["volatile"]
    update_settings(
        alice, conversation, {"side_threads": {"wording": "Use private threads sparingly."}}
    )
    conversation.refresh_from_db()
    message.refresh_from_db()
    assert (
        "Use private threads sparingly."
        in directives_for(nova, Message.objects.get(pk=message.pk))["volatile"]
    )
    update_settings(alice, conversation, {"side_threads": {"enabled": False}})
    assert (
        "Side threads" not in directives_for(nova, Message.objects.get(pk=message.pk))["volatile"]
    )


@pytest.mark.django_db(transaction=True)
async def test_an_agent_opens_and_resolves_a_thread_over_the_socket(room):
    conversation, nova, rex = room
    nova_socket = agent_communicator(await sync_to_async(agent_session)(nova))
    rex_socket = agent_communicator(await sync_to_async(agent_session)(rex))
    for comm in (nova_socket, rex_socket):
        assert (await comm.connect())[0]
        assert (await next_frame(comm))["type"] == "hello"
    await nova_socket.send_json_to(
        {
            "type": "post",
            "conversationId": str(conversation.id),
            "ref": "a",
            "body": 'Summary soon.<dm target="Rex">Numbers for Q3?</dm>',
        }
    )
    assert (await next_frame(nova_socket))["type"] == "posted"
    work = await next_frame(rex_socket)
    assert work["payload"]["message"]["body"] == "Numbers for Q3?"
    thread_id = work["payload"]["conversation"]["id"]
    assert work["payload"]["conversation"]["kind"] == "thread"
    await rex_socket.send_json_to(
        {"type": "thread.resolve", "conversationId": thread_id, "summary": "Q3 is fine."}
    )
    assert (await next_frame(rex_socket)) == {
        "type": "thread.resolved",
        "conversationId": thread_id,
    }
    await nova_socket.send_json_to(
        {
            "type": "post",
            "conversationId": str(conversation.id),
            "ref": "b",
            "body": 'again <dm target="Ghost">x</dm>',
        }
    )
    posted = await next_frame(nova_socket)
    assert posted["warnings"][0]["code"] == "side_thread_invalid"
    for comm in (nova_socket, rex_socket):
        await comm.disconnect()


def test_an_agent_outside_the_thread_cannot_resolve_it(room, alice, team_a):
    conversation, nova, rex = room
    gus = agent_actions.create_agent(alice, name="Gus", backend="scripted")
    post_message(nova, conversation, '<dm target="Rex">costs?</dm>')
    thread = Conversation.objects.get(kind="thread")
    with pytest.raises(AppError):
        threads.resolve_thread(gus, thread, "not mine")
    thread.refresh_from_db()
    assert thread.thread_status == "in_progress"


def test_an_agents_owner_reads_its_threads_and_nobody_else_new_does(alice, bob, team_a, api):
    """Alice owns Nova and Rex; their side thread hangs off Bob's direct conversation with
    them, which she is not in. She reads the thread (and it opens inline for her); Carol, a
    member of the workspace who owns neither agent, gets 404 as before."""
    from tests.conftest import make_person
    from workspaces import actions as workspace_actions

    carol = make_person("carol")
    _, token = workspace_actions.create_invitation(team_a.memberships.get(user=alice))
    workspace_actions.accept_invitation(carol, token)
    nova = agent_actions.create_agent(alice, name="Nova", handle="nova", backend="scripted")
    rex = agent_actions.create_agent(alice, name="Rex", handle="rex", backend="scripted")
    dm = create_conversation(bob, team_a, kind="direct", agent_ids=[nova.id, rex.id])
    origin = post_message(nova, dm, 'On it.<dm target="Rex">check the dates</dm>')
    thread = Conversation.objects.get(kind="thread", parent_message=origin)
    url = f"/api/v1/conversations/{thread.id}/messages/"
    assert api(alice).get(url).json()["results"][0]["body"] == "check the dates"
    assert api(carol).get(url).status_code == 404
    assert api(carol).get(f"/api/v1/conversations/{dm.id}/messages/").status_code == 404


def test_the_thread_card_opens_for_the_owner_of_its_agents(client, room, alice):
    conversation, nova, rex = room
    post_message(nova, conversation, '<dm target="Rex">costs?</dm>Thinking.')
    thread = Conversation.objects.get(kind="thread")
    client.force_login(alice)
    page = client.get(f"/w/{conversation.workspace_id}/c/{conversation.id}/").content.decode()
    assert f'data-thread-id="{thread.id}" data-can-open="1"' in page
