"""Probes of the conversation spine: refs, mentions, side threads, turns under races."""

import time

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from agents import actions as agent_actions
from agntchat.core.exceptions import AppError
from conversations import mentions
from conversations.actions import create_conversation, post_message
from conversations.models import Conversation, Delivery, Message, Task, TurnDecision
from tests.concurrency import run_together
from workspaces.models import Membership, Notification, User

pytestmark = pytest.mark.django_db


def woken(message):
    return list(Delivery.objects.filter(message=message).values_list("agent_id", flat=True))


@pytest.mark.django_db(transaction=True)
def test_the_same_ref_from_two_connections_at_once_is_one_message(alice, team_a):
    room = create_conversation(alice, team_a, kind="channel", title="refs")

    def load(ref):
        return Conversation.objects.get(pk=room.pk), ref

    def post(conversation, ref):
        return post_message(alice, conversation, "sent twice", client_ref=ref)

    posted = run_together(post, [("r-1",), ("r-1",), ("r-1",)], prepare=load)
    assert len({m.id for m in posted}) == 1
    assert Message.objects.filter(conversation=room, client_ref="r-1").count() == 1


class TestWhomAHandleNames:
    """Handles are unique per owner only, and names not at all: whoever @nova or a <dm> tag
    reaches must not depend on who joined first or on the order the database lists agents."""

    @pytest.fixture
    def impostor(self, bob):
        # Bob's agent is called "nova": the handle of Alice's agent.
        return agent_actions.create_agent(bob, name="nova", handle="impostor", backend="scripted")

    @pytest.fixture
    def nova(self, alice):
        return agent_actions.create_agent(
            alice, name="Nova Prime", handle="nova", backend="scripted"
        )

    @pytest.fixture
    def room(self, alice, team_a, impostor, nova):
        # The impostor joined first.
        return create_conversation(
            alice, team_a, kind="channel", title="names", agent_ids=[impostor.id, nova.id]
        )

    def test_a_mention_of_a_handle_wakes_its_agent_not_one_so_called(self, alice, room, nova):
        message = post_message(alice, room, "@nova what do you think?")
        assert woken(message) == [nova.id]

    def test_a_delegation_goes_to_the_agent_with_the_handle(self, alice, room, nova):
        post_message(alice, room, "@nova please summarise the week")
        post_message(alice, room, "/task @nova list the open questions")
        assert list(Task.objects.values_list("agent_id", flat=True)) == [nova.id, nova.id]

    def test_a_side_thread_goes_to_the_agent_with_the_handle(self, alice, room, impostor, nova):
        gus = agent_actions.create_agent(alice, name="Gus", backend="scripted")
        post_message(gus, room, '<dm target="nova">the salaries, privately</dm>')
        thread = Conversation.objects.get(kind="thread")
        assert set(thread.participants.values_list("agent_id", flat=True)) == {gus.id, nova.id}


class TestAHandleSharedByTwoAgents:
    @pytest.fixture
    def twins(self, alice, bob):
        return (
            agent_actions.create_agent(alice, name="Helper", backend="scripted"),
            agent_actions.create_agent(bob, name="Helper", backend="scripted"),
        )

    def test_a_task_for_it_is_refused_rather_than_given_to_either(self, alice, team_a, twins):
        room = create_conversation(alice, team_a, kind="channel", title="twins")
        for text in ("@helper please book the room", "/task @helper book the room"):
            with pytest.raises(AppError) as refused:
                post_message(alice, room, text)
            assert refused.value.code == "agent_ambiguous"
        assert not Task.objects.exists()

    def test_a_task_goes_to_the_one_taking_part(self, alice, team_a, twins):
        room = create_conversation(
            alice, team_a, kind="channel", title="twins", agent_ids=[twins[1].id]
        )
        post_message(alice, room, "@helper please book the room")
        assert list(Task.objects.values_list("agent_id", flat=True)) == [twins[1].id]

    def test_a_side_thread_is_refused_rather_than_opened_with_either(self, alice, team_a, twins):
        gus = agent_actions.create_agent(alice, name="Gus", backend="scripted")
        room = create_conversation(alice, team_a, kind="channel", title="t", agent_ids=[gus.id])
        message = post_message(gus, room, '<dm target="helper">the salaries</dm>')
        assert "Several agents" in message.payload["dm_error"]
        assert not Conversation.objects.filter(kind="thread").exists()

    def test_a_side_thread_goes_to_the_one_taking_part(self, alice, team_a, twins):
        gus = agent_actions.create_agent(alice, name="Gus", backend="scripted")
        room = create_conversation(
            alice, team_a, kind="channel", title="t", agent_ids=[gus.id, twins[0].id]
        )
        post_message(gus, room, '<dm target="helper">the salaries</dm>')
        thread = Conversation.objects.get(kind="thread")
        assert set(thread.participants.values_list("agent_id", flat=True)) == {gus.id, twins[0].id}

    def test_a_mention_queues_both_in_the_conversation(self, alice, team_a, twins):
        room = create_conversation(
            alice, team_a, kind="channel", title="t", agent_ids=[twins[0].id, twins[1].id]
        )
        message = post_message(alice, room, "@helper any news?")
        queue = TurnDecision.objects.get(message=message).queue
        assert [entry["agent_id"] for entry in queue] == [str(twins[0].id), str(twins[1].id)]


def test_matching_capabilities_is_quick_for_a_long_message_and_many_capabilities(alice, team_a):
    """Each message word was compared with each word of every capability: 50 capabilities of
    short words and a 20,000-character message of distinct words took seconds per post."""
    capabilities = [" ".join(f"{c}{i:02d}" for c in "abcdefghijklmnopqrst") for i in range(50)]
    agent = agent_actions.create_agent(
        alice, name="Wide", capabilities=capabilities, backend="scripted"
    )
    room = create_conversation(alice, team_a, kind="channel", title="w", agent_ids=[agent.id])
    body = " ".join(f"w{i:04d}x" for i in range(2850))  # 7 letters each: stems of 5 collide
    started = time.monotonic()
    message = post_message(alice, room, body)
    assert time.monotonic() - started < 1
    assert TurnDecision.objects.get(message=message).rule == "fallback"


def test_a_post_naming_hundreds_of_people_notifies_a_bounded_few(alice, team_a):
    people = User.objects.bulk_create(
        [User(username=f"p{i:03d}", email=f"p{i:03d}@example.com") for i in range(120)]
    )
    Membership.objects.bulk_create(
        [Membership(user=u, workspace=team_a, role="member") for u in people]
    )
    room = create_conversation(alice, team_a, kind="channel", title="all")
    body = " ".join(f"@P{i:03d}" for i in reversed(range(120)))
    with CaptureQueriesContext(connection) as queries:
        post_message(alice, room, body)
    notified = Notification.objects.filter(kind=Notification.Kind.MENTION)
    # The first named, in the order they are named.
    expected = {f"p{i:03d}" for i in range(120 - mentions.MAX_MENTIONED, 120)}
    assert set(notified.values_list("user__username", flat=True)) == expected
    assert len(queries) < 6 * mentions.MAX_MENTIONED


def test_a_handle_inside_a_link_is_no_mention(alice, bob, team_a):
    rex = agent_actions.create_agent(bob, name="Rex", handle="rex", backend="scripted")
    gus = agent_actions.create_agent(alice, name="Gus", role="generalist", backend="scripted")
    room = create_conversation(alice, team_a, kind="channel", title="l", agent_ids=[gus.id, rex.id])
    message = post_message(alice, room, "worth a read: https://example.social/@rex/1 and /@bob")
    assert TurnDecision.objects.get(message=message).rule == "fallback"
    assert not Notification.objects.filter(user=bob).exists()


def test_a_side_thread_with_long_agent_names_opens(alice, team_a):
    """Its title, the names of its agents, outgrew the column: the whole post failed."""
    author, *targets = [
        agent_actions.create_agent(alice, name=letter * 80, backend="scripted") for letter in "abc"
    ]
    room = create_conversation(alice, team_a, kind="channel", title="r", agent_ids=[author.id])
    tag = f'<dm target="{targets[0].handle}, {targets[1].handle}">the numbers</dm>'
    message = post_message(author, room, f"{tag} Done.")
    assert message.body == "Done." and "dm_error" not in message.payload
    thread = Conversation.objects.get(kind="thread")
    assert len(thread.title) == 200 and thread.title.startswith("a" * 80 + " ↔ " + "b" * 80)
    assert thread.messages.get().body == "the numbers"


def test_the_first_reply_in_a_thread_of_a_long_titled_conversation_opens_it(alice, bob, team_a):
    """ "Thread in <title>" outgrew the column for a title past 190 characters: every first
    reply under its messages failed (a 500)."""
    from conversations.actions import reply_in_thread

    group = create_conversation(alice, team_a, kind="direct", user_ids=[bob.id], title="x" * 200)
    origin = post_message(bob, group, "Plans?")
    reply = reply_in_thread(alice, origin, "Mine.")
    title = reply.conversation.title
    assert len(title) == 200 and title.startswith("Thread in xxx") and title.endswith("…")
