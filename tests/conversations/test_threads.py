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


def test_tags_for_the_same_target_are_joined_into_one_message(room):
    conversation, nova, rex = room
    message = post_message(
        nova, conversation, '<dm target="rex">one</dm> and <dm target="Rex">two</dm> done'
    )
    assert message.body == "and  done"
    thread = Conversation.objects.get(kind="thread")
    assert list(thread.messages.values_list("body", flat=True)) == ["one\n\ntwo"]
    # One message: Rex is woken once, not once per tag.
    assert Delivery.objects.filter(agent=rex, message__conversation=thread).count() == 1


def test_hundreds_of_tags_wake_the_target_once(room):
    conversation, nova, rex = room
    body = "".join(f'<dm target="Rex">q{i}</dm>' for i in range(300))
    post_message(nova, conversation, body)
    thread = Conversation.objects.get(kind="thread")
    first = thread.messages.get()
    assert first.body == "\n\n".join(f"q{i}" for i in range(300))
    assert list(Delivery.objects.filter(agent=rex).values_list("message", flat=True)) == [first.pk]


def test_a_post_opens_at_most_a_few_side_threads(room, alice):
    conversation, nova, rex = room
    others = [
        agent_actions.create_agent(alice, name=f"Aide{i}", handle=f"aide{i}", backend="scripted")
        for i in range(threads.MAX_SIDE_THREADS_PER_POST)
    ]
    names = ["Rex", *(a.name for a in others)]  # one more target set than allowed
    body = "Hi." + "".join(f'<dm target="{name}">x</dm>' for name in names)
    message = post_message(nova, conversation, body)
    assert message.body == body
    assert (
        f"at most {threads.MAX_SIDE_THREADS_PER_POST} side threads" in message.payload["dm_error"]
    )
    assert not Conversation.objects.filter(kind="thread").exists()
    assert not Delivery.objects.filter(agent__in=[rex, *others]).exists()
    # As many as allowed still open, one each.
    post_message(nova, conversation, "".join(f'<dm target="{n}">x</dm>' for n in names[1:]))
    assert Conversation.objects.filter(kind="thread").count() == threads.MAX_SIDE_THREADS_PER_POST


def test_a_thread_pulls_aside_a_group_not_the_whole_workspace(room, alice):
    conversation, nova, rex = room
    others = [
        agent_actions.create_agent(alice, name=f"Aide{i}", handle=f"aide{i}", backend="scripted")
        for i in range(threads.MAX_THREAD_TARGETS)
    ]
    names = ["Rex", *(a.name for a in others)]  # one more target than a thread takes
    message = post_message(nova, conversation, f'Hi.<dm target="{", ".join(names)}">x</dm>')
    assert f"at most {threads.MAX_THREAD_TARGETS} agents" in message.payload["dm_error"]
    assert not Conversation.objects.filter(kind="thread").exists()
    assert not Delivery.objects.filter(agent__in=[rex, *others]).exists()
    post_message(nova, conversation, f'<dm target="{", ".join(names[1:])}">x</dm>')
    (thread,) = Conversation.objects.filter(kind="thread")
    assert thread.participants.filter(agent__isnull=False).count() == threads.MAX_THREAD_TARGETS + 1


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


def _answer_every_delivery_with_a_tag(nova, rex, rounds: int) -> int:
    """Nova and Rex answer each message delivered to them, in its conversation, by pulling the
    other aside with a <dm> tag (as a model told about side threads might). Returns the posts
    made before nothing was left to answer (or ROUNDS, if they never stop)."""
    other = {nova.id: rex, rex.id: nova}
    for posts in range(rounds):
        delivery = (
            Delivery.objects.filter(acked_at=None, agent__in=[nova, rex])
            .select_related("agent", "message__conversation")
            .order_by("created_at")
            .first()
        )
        if delivery is None:
            return posts
        target = other[delivery.agent_id]
        post_message(
            delivery.agent,
            delivery.message.conversation,
            f'<dm target="{target.name}">ping {posts}</dm>',
        )
        Delivery.objects.filter(pk=delivery.pk).update(acked_at=timezone.now())
    return rounds


def test_a_tag_inside_a_side_thread_opens_no_nested_thread(room):
    conversation, nova, rex = room
    post_message(nova, conversation, '<dm target="Rex">costs?</dm>')
    thread = Conversation.objects.get(kind="thread")
    answer = post_message(rex, thread, '<dm target="Nova">and yours?</dm>')
    # Refused: the text stays visible in the thread, which says why, and Nova is not woken.
    assert answer.body == '<dm target="Nova">and yours?</dm>'
    assert "do not nest" in answer.payload["dm_error"] and "@handle" in answer.payload["dm_error"]
    assert list(Conversation.objects.filter(kind="thread")) == [thread]
    assert not Delivery.objects.filter(agent=nova).exists()
    notice = thread.messages.get(kind="notice")
    assert "Rex's side thread was not opened" in notice.body


def test_agents_answering_side_threads_with_tags_stop(room, alice):
    """Each answer used to open a nested thread with a fresh loop guard: endless turns."""
    conversation, nova, rex = room
    post_message(alice, conversation, "@Nova start a chat with Rex")
    posts = _answer_every_delivery_with_a_tag(nova, rex, rounds=30)
    assert posts == 2  # Nova opens a thread in the channel; Rex's tag in it is refused
    assert Conversation.objects.filter(kind="thread").count() == 1


def test_a_tag_in_a_peoples_reply_thread_opens_nothing(room, alice):
    from conversations.actions import reply_in_thread

    conversation, nova, _ = room
    origin = post_message(alice, conversation, "plans?")
    reply_thread = reply_in_thread(alice, origin, "@Nova thoughts?").conversation
    answer = post_message(nova, reply_thread, '<dm target="Rex">psst</dm>')
    assert "do not nest" in answer.payload["dm_error"]
    assert list(Conversation.objects.filter(kind="thread")) == [reply_thread]


def test_the_channels_loop_guard_bounds_the_threads_an_agent_opens(room):
    """Opening messages (woken explicitly) are not counted, but the channel post carrying the
    tag is: past the channel's cap its posts are held and open no thread."""
    from conversations import caps

    conversation, nova, rex = room
    cap = caps.cap_for(conversation)
    for i in range(cap + 3):
        post_message(nova, conversation, f'<dm target="Rex">q{i}</dm>')
    assert Conversation.objects.filter(kind="thread").count() == cap
    assert Delivery.objects.filter(agent=rex).count() == cap
    assert conversation.messages.filter(held_at__isnull=False).count() == 3


def test_a_held_posts_side_threads_open_when_a_person_lets_it_through(room, alice):
    """Held past the cap, the post's tagged text was gone: released, it showed without its
    threads. They wait with it and open on release, as when posted."""
    from conversations import caps

    conversation, nova, rex = room
    cap = caps.cap_for(conversation)
    for i in range(cap + 2):
        post_message(nova, conversation, f'<dm target="Rex">q{i}</dm> Asked Rex.')
    held = list(conversation.messages.filter(held_at__isnull=False).order_by("created_at"))
    assert len(held) == 2 and all(m.body == "Asked Rex." for m in held)
    post_message(alice, conversation, "Go on.")
    threads_of_held = Conversation.objects.filter(kind="thread", parent_message__in=held)
    assert sorted(t.messages.get().body for t in threads_of_held) == [f"q{cap}", f"q{cap + 1}"]
    for message in held:
        message.refresh_from_db()
        assert message.held_at is None and "held_threads" not in message.payload
    assert Delivery.objects.filter(agent=rex).count() == cap + 2


def test_a_member_not_in_the_thread_cannot_resolve_it(room, api, alice, team_a):
    """Carol reads the channel but neither takes part in the thread nor owns an agent in it."""
    from tests.conftest import make_person
    from workspaces import actions as workspace_actions

    conversation, nova, _ = room
    carol = make_person("carol")
    _, token = workspace_actions.create_invitation(team_a.memberships.get(user=alice))
    workspace_actions.accept_invitation(carol, token)
    post_message(nova, conversation, '<dm target="Rex">costs?</dm>')
    thread = Conversation.objects.get(kind="thread")
    resolve = f"/api/v1/conversations/{thread.id}/resolve/"
    assert api(carol).get(f"/api/v1/conversations/{thread.id}/messages/").status_code == 200
    denied = api(carol).post(resolve, {"summary": "resolved by bystander"}, format="json")
    assert denied.status_code == 403
    thread.refresh_from_db()
    assert (thread.thread_status, thread.summary) == ("in_progress", "")
    # Alice owns Nova, who is in it: she speaks for her agent.
    assert api(alice).post(resolve, {"summary": "Done."}, format="json").status_code == 200


def test_a_peoples_reply_thread_cannot_be_resolved(room, api, alice):
    from conversations.actions import reply_in_thread

    conversation, _, _ = room
    origin = post_message(alice, conversation, "plans?")
    reply_thread = reply_in_thread(alice, origin, "mine").conversation
    answer = api(alice).post(
        f"/api/v1/conversations/{reply_thread.id}/resolve/", {"summary": "x"}, format="json"
    )
    assert answer.status_code == 409
    assert answer.json()["error"] == {
        "code": "not_a_thread",
        "message": "Only a side thread can be resolved.",
    }
    reply_thread.refresh_from_db()
    assert (reply_thread.thread_status, reply_thread.summary) == ("", "")
