"""Who speaks next (TURN-1), the loop guard (TURN-2) and the done signal (TURN-3), driven
through post_message and the agent socket with several agents in one room."""

import uuid

import pytest
from asgiref.sync import sync_to_async

from agents import actions as agent_actions
from agents.models import Agent
from agntchat.core.exceptions import AppError
from conversations import caps, turns
from conversations.access import access_conversation
from conversations.actions import create_conversation, post_message, update_settings
from conversations.models import Conversation, Delivery, Message, TurnDecision
from tests.concurrency import run_together
from tests.conftest import agent_session
from tests.socket_helpers import agent_communicator, next_frame

pytestmark = pytest.mark.django_db


@pytest.fixture
def cast(alice, bob, team_a):
    """Three agents in team A's #room: a research specialist, a finance specialist, a generalist."""
    nova = agent_actions.create_agent(
        alice, name="Nova", capabilities=["research", "literature"], backend="scripted"
    )
    rex = agent_actions.create_agent(
        bob, name="Rex", capabilities=["finance", "budget"], backend="scripted"
    )
    gus = agent_actions.create_agent(
        alice, name="Gus", role="generalist", capabilities=["general"], backend="scripted"
    )
    room = create_conversation(
        alice,
        team_a,
        kind="channel",
        title="room",
        user_ids=[bob.id],
        agent_ids=[gus.id, nova.id, rex.id],
    )
    return {"nova": nova, "rex": rex, "gus": gus, "room": room}


def woken(message):
    """Names of the agents that got a delivery of MESSAGE."""
    return sorted(Delivery.objects.filter(message=message).values_list("agent__name", flat=True))


def queue_names(message):
    return [entry["name"] for entry in TurnDecision.objects.get(message=message).queue]


def post_at_once(posts):
    """Run each of POSTS, (author, conversation id, text), on its own thread and database
    connection, all released together; as the author's request would, each loads the
    conversation itself first."""

    def load(author, conversation_id, text):
        if isinstance(author, Agent):
            mine = Conversation.objects.get(pk=conversation_id)
        else:
            mine = access_conversation(author, conversation_id)
        return author, mine, text

    run_together(post_message, posts, prepare=load)


class TestWhoSpeaksNext:
    def test_a_mention_goes_first_and_alone(self, alice, cast):
        message = post_message(
            alice, cast["room"], "@rex what do you think about this research paper?"
        )
        assert queue_names(message) == ["Rex"]
        assert woken(message) == ["Rex"]
        assert TurnDecision.objects.get(message=message).rule == "mention"

    def test_a_mention_beats_the_specialist_both_ways(self, alice, cast):
        research = post_message(alice, cast["room"], "@gus can you check this research?")
        assert queue_names(research) == ["Gus"]
        plain = post_message(alice, cast["room"], "can you check this research?")
        assert queue_names(plain)[0] == "Nova"

    def test_a_single_domain_question_goes_to_the_specialist_before_the_generalist(
        self, alice, cast
    ):
        message = post_message(alice, cast["room"], "Please review the budget numbers")
        decision = TurnDecision.objects.get(message=message)
        assert decision.rule == "specialist"
        assert queue_names(message) == ["Rex", "Gus"]
        assert decision.explanation["domains"] == ["budget"]
        assert decision.explanation["matches"] == {"Rex": {"budget": ["budget"]}}
        # Only the agent holding the turn is woken.
        assert woken(message) == ["Rex"]

    def test_a_multi_domain_request_goes_to_the_generalist_first(self, alice, cast):
        message = post_message(
            alice, cast["room"], "Find research on the financial impact and a budget plan"
        )
        decision = TurnDecision.objects.get(message=message)
        assert decision.rule == "generalist"
        assert queue_names(message)[0] == "Gus"
        assert set(queue_names(message)[1:]) == {"Nova", "Rex"}
        assert woken(message) == ["Gus"]

    def test_nobody_matching_falls_back_so_someone_answers(self, alice, cast):
        message = post_message(alice, cast["room"], "good morning everyone")
        assert TurnDecision.objects.get(message=message).rule == "fallback"
        assert woken(message) == ["Gus"]  # first to join the room
        update_settings(alice, cast["room"], {"fallback_order": [str(cast["rex"].id)]})
        cast["room"].refresh_from_db()
        again = post_message(alice, cast["room"], "good afternoon")
        assert woken(again) == ["Rex"]

    def test_the_turn_is_handed_on_when_the_holder_acks(self, alice, cast):
        message = post_message(alice, cast["room"], "Please review the budget numbers")
        rex_delivery = Delivery.objects.get(message=message, agent=cast["rex"])
        Delivery.objects.filter(pk=rex_delivery.pk).update(claimed_by="c1")
        from work.gateway import ack_work

        ack_work(rex_delivery.id, "c1")
        assert woken(message) == ["Gus", "Rex"]
        assert TurnDecision.objects.get(message=message).position == 1
        gus_delivery = Delivery.objects.get(message=message, agent=cast["gus"])
        Delivery.objects.filter(pk=gus_delivery.pk).update(claimed_by="c2")
        ack_work(gus_delivery.id, "c2")
        assert TurnDecision.objects.get(message=message).finished_at is not None

    def test_an_agent_does_not_wake_an_agent_already_waiting_for_its_turn(self, alice, cast):
        message = post_message(alice, cast["room"], "Please review the budget numbers")
        assert queue_names(message) == ["Rex", "Gus"]  # Rex has the turn; Gus waits for his
        asks_gus = post_message(cast["rex"], cast["room"], "@gus can you check my sums?")
        assert woken(asks_gus) == []
        asks_nova = post_message(cast["rex"], cast["room"], "@nova any sources?")
        assert woken(asks_nova) == ["Nova"]

    def test_turn_decisions_are_visible_with_their_reasons(self, alice, charlie, team_b, cast, api):
        post_message(alice, cast["room"], "Please review the budget numbers")
        turns_out = (
            api(alice).get(f"/api/v1/conversations/{cast['room'].id}/turns/").json()["results"]
        )
        assert turns_out[0]["rule"] == "specialist"
        assert turns_out[0]["queue"][0]["reason"] == "best specialist for budget"
        assert (
            api(charlie).get(f"/api/v1/conversations/{cast['room'].id}/turns/").status_code == 404
        )

    def test_an_open_turn_names_the_holders_running_work_item(self, alice, cast, api):
        """What the page's Stop stops before any text is written (protocol §13): the delivery
        of the agent holding the turn, until it is acked; then the next holder's."""
        from work.gateway import ack_work

        message = post_message(alice, cast["room"], "Please review the budget numbers")
        url = f"/api/v1/conversations/{cast['room'].id}/turns/"

        def work():
            return api(alice).get(url).json()["results"][0]["work"]

        rex_delivery = Delivery.objects.get(message=message, agent=cast["rex"])
        assert work() == str(rex_delivery.id)
        Delivery.objects.filter(pk=rex_delivery.pk).update(claimed_by="c1")
        ack_work(rex_delivery.id, "c1")  # the turn goes on to Gus
        assert work() == str(Delivery.objects.get(message=message, agent=cast["gus"]).id)
        Delivery.objects.filter(message=message, agent=cast["gus"]).update(claimed_by="c2")
        ack_work(Delivery.objects.get(message=message, agent=cast["gus"]).id, "c2")
        assert work() is None


class TestLoopGuard:
    def test_the_cap_holds_at_exactly_the_group_count_and_lifts_when_a_person_speaks(
        self, alice, cast, api
    ):
        room, nova, rex = cast["room"], cast["nova"], cast["rex"]
        for i in range(caps.GROUP_CAP):
            assert post_message(nova, room, f"agent chatter {i}").held_at is None
        room.refresh_from_db()
        assert room.agent_streak == 6 and caps.is_capped(room)
        held = post_message(rex, room, "@nova one more")
        assert held.held_at is not None and woken(held) == []
        listed = api(alice).get(f"/api/v1/conversations/{room.id}/messages/").json()["results"]
        assert [m["body"] for m in listed] == [f"agent chatter {i}" for i in range(6)]
        # A person speaks: the cap lifts and the held post is let through (it wakes nobody).
        url = f"/api/v1/conversations/{room.id}/messages/"
        assert api(alice).post(url, {"body": "ok, carry on"}, format="json").status_code == 201
        room.refresh_from_db()
        held.refresh_from_db()
        assert room.agent_streak == 0 and held.held_at is None and woken(held) == []
        listed = api(alice).get(f"/api/v1/conversations/{room.id}/messages/").json()["results"]
        assert [m["body"] for m in listed][-2:] == ["@nova one more", "ok, carry on"]
        assert post_message(rex, room, "thanks").held_at is None

    @pytest.mark.django_db(transaction=True)
    def test_a_persons_post_in_its_own_transaction_releases_the_held_posts(self, alice, cast, api):
        # As in a running server: the post's write commits alone, the release after it.
        room, nova = cast["room"], cast["nova"]
        for i in range(caps.GROUP_CAP + 2):
            post_message(nova, room, f"agent chatter {i}")
        assert Message.objects.filter(conversation=room, held_at__isnull=False).count() == 2
        url = f"/api/v1/conversations/{room.id}/messages/"
        assert api(alice).post(url, {"body": "enough"}, format="json").status_code == 201
        room.refresh_from_db()
        assert room.agent_streak == 0
        assert not Message.objects.filter(conversation=room, held_at__isnull=False).exists()
        listed = api(alice).get(url).json()["results"]
        assert [m["body"] for m in listed][-3:] == ["agent chatter 6", "agent chatter 7", "enough"]

    @pytest.mark.django_db(transaction=True)
    def test_agents_posting_at_once_at_the_cap_let_exactly_one_through(self, cast):
        # One post short of the cap, eight agent posts arrive at the same time, each on its own
        # connection: the check against the cap and the count may not race.
        room = cast["room"]
        Conversation.objects.filter(pk=room.pk).update(agent_streak=caps.GROUP_CAP - 1)
        agents = [cast["nova"], cast["rex"], cast["gus"]] * 3
        post_at_once([(agents[i], room.pk, f"{agents[i].name} {i}") for i in range(8)])
        room.refresh_from_db()
        assert room.agent_streak == caps.GROUP_CAP
        stored = Message.objects.filter(conversation=room)
        assert stored.count() == 8
        assert stored.filter(held_at__isnull=False).count() == 7

    @pytest.mark.django_db(transaction=True)
    def test_posts_held_while_a_person_speaks_are_never_left_behind(self, alice, cast):
        # At the cap, agents' posts (held) race a person's post (which releases what is held):
        # a post held after the release would stay hidden with nothing left to release it.
        room = cast["room"]
        agents = [cast["nova"], cast["rex"], cast["gus"]]
        for attempt in range(5):
            Conversation.objects.filter(pk=room.pk).update(agent_streak=caps.GROUP_CAP)
            post_at_once(
                [(alice, room.pk, f"person {attempt}")]
                + [(agent, room.pk, f"{agent.name} {attempt}") for agent in agents]
            )
            room.refresh_from_db()
            held = Message.objects.filter(conversation=room, held_at__isnull=False).count()
            # Held posts wait for a person only while agents are over the streak they count.
            assert held == 0 or room.agent_streak >= caps.GROUP_CAP, (attempt, held)

    def test_a_one_to_one_is_capped_sooner_and_caps_are_configurable(self, alice, team_a, cast):
        dm = create_conversation(alice, team_a, kind="direct", agent_ids=[cast["nova"].id])
        for i in range(caps.DIRECT_CAP):
            assert post_message(cast["nova"], dm, f"m{i}").held_at is None
        assert post_message(cast["nova"], dm, "too many").held_at is not None
        # A post reads the cap from the conversation as loaded: every request loads it anew.
        dm = update_settings(alice, dm, {"loop_guard": {"direct_cap": 5}})
        assert post_message(cast["nova"], dm, "one more allowed").held_at is None
        assert post_message(cast["nova"], dm, "not this one").held_at is not None

    def test_a_cap_set_through_the_api_can_be_cleared_back_to_the_default(self, alice, cast, api):
        room, url = cast["room"], f"/api/v1/conversations/{cast['room'].id}/settings/"
        response = api(alice).patch(url, {"loopGuard": {"groupCap": 2, "directCap": 3}}, "json")
        assert response.status_code == 200, response.json()
        room.refresh_from_db()
        assert caps.cap_for(room) == 2
        # null clears one cap (the settings page sends it for an emptied field); the other stays.
        response = api(alice).patch(url, {"loopGuard": {"groupCap": None}}, "json")
        assert response.status_code == 200, response.json()
        assert response.json()["settings"]["loopGuard"] == {"directCap": 3}
        room.refresh_from_db()
        assert caps.cap_for(room) == caps.GROUP_CAP

    def test_a_fallback_order_names_only_agents_taking_part(self, alice, cast, charlie, api):
        room, url = cast["room"], f"/api/v1/conversations/{cast['room'].id}/settings/"
        stranger = agent_actions.create_agent(charlie, name="Spy", handle="spy", backend="scripted")
        before = dict(room.settings)
        for order in ([str(cast["rex"].id), str(stranger.id)], [str(uuid.uuid4())]):
            refused = api(alice).patch(url, {"fallbackOrder": order}, "json")
            assert refused.status_code == 400, refused.json()
            assert order[-1] in refused.json()["error"]["fields"]["fallbackOrder"]
        assert api(alice).patch(url, {}, "json").status_code == 400  # nothing to change
        room.refresh_from_db()
        assert room.settings == before
        taken = api(alice).patch(url, {"fallbackOrder": [str(cast["rex"].id)]}, "json")
        assert taken.status_code == 200, taken.json()

    def test_capped_shows_in_the_api(self, alice, cast, api):
        for i in range(caps.GROUP_CAP):
            post_message(cast["nova"], cast["room"], f"m{i}")
        body = api(alice).get(f"/api/v1/conversations/{cast['room'].id}/").json()
        assert body["capped"] is True and body["agentStreak"] == 6

    def test_agents_are_not_woken_while_capped(self, alice, cast):
        for i in range(caps.GROUP_CAP - 1):
            post_message(cast["gus"], cast["room"], f"chatter {i}")
        last = post_message(cast["gus"], cast["room"], "@nova research this please")
        # The sixth message is stored, but it reached the cap: nobody is woken by it.
        assert woken(last) == []


class TestAnswersToPeople:
    """TURN-2: an agent's answer to a person's message never counts toward the streak."""

    def test_a_persons_quick_burst_is_answered_in_full(self, alice, team_a, cast):
        nova = cast["nova"]
        dm = create_conversation(alice, team_a, kind="direct", agent_ids=[nova.id])
        burst = [post_message(alice, dm, f"question {i}") for i in range(10)]
        assert [woken(m) for m in burst] == [["Nova"]] * 10
        answers = [post_message(nova, dm, f"answer {i}", reply_to=m) for i, m in enumerate(burst)]
        assert [a.held_at for a in answers] == [None] * 10
        dm.refresh_from_db()
        assert dm.agent_streak == 0 and not caps.is_capped(dm)

    def test_an_answer_while_agents_are_at_the_cap_is_shown_but_wakes_nobody(self, alice, cast):
        room, nova, rex = cast["room"], cast["nova"], cast["rex"]
        question = post_message(alice, room, "@nova what does the literature say?")
        for i in range(caps.GROUP_CAP):
            post_message(rex, room, f"chatter {i}")
        answer = post_message(nova, room, "@rex see the literature", reply_to=question)
        assert answer.held_at is None and woken(answer) == []
        room.refresh_from_db()
        assert room.agent_streak == caps.GROUP_CAP

    def test_only_the_first_answer_to_a_message_delivered_to_the_agent_is_free(
        self, alice, team_a, cast
    ):
        from work.gateway import ack_work

        room, nova, rex, gus = cast["room"], cast["nova"], cast["rex"], cast["gus"]
        to_nova = post_message(alice, room, "@nova what does the literature say?")
        to_rex = post_message(alice, room, "@rex and the budget?")
        acked = post_message(alice, room, "@gus anything else?")
        gus_delivery = Delivery.objects.get(message=acked, agent=gus)
        Delivery.objects.filter(pk=gus_delivery.pk).update(claimed_by="c1")
        ack_work(gus_delivery.id, "c1")  # Gus passed
        by_agent = post_message(rex, room, "a thought of my own")
        dodges = [
            (nova, to_nova),  # its one free answer...
            (nova, to_nova),  # ...but not twice
            (nova, to_rex),  # a person's message given to another agent
            (gus, acked),  # a message the agent already acked
            (nova, by_agent),  # an agent's message
            (rex, None),  # no reply at all
        ]
        streaks = []
        for agent, reply_to in dodges:
            post_message(agent, room, "reply", reply_to=reply_to)
            room.refresh_from_db()
            streaks.append(room.agent_streak)
        # The streak started at 1 (Rex's own thought); only Nova's first answer was free.
        assert streaks == [1, 2, 3, 4, 5, 6]
        assert post_message(rex, room, "reply", reply_to=to_rex).held_at is None  # Rex's own
        assert post_message(rex, room, "again", reply_to=to_rex).held_at is not None

    @pytest.mark.django_db(transaction=True)
    def test_answers_racing_to_the_same_message_are_free_once(self, alice, team_a, cast):
        nova = cast["nova"]
        dm = create_conversation(alice, team_a, kind="direct", agent_ids=[nova.id])
        question = post_message(alice, dm, "question")

        def load(i):
            return i, Conversation.objects.get(pk=dm.pk), Message.objects.get(pk=question.pk)

        def answer(i, mine, reply_to):
            post_message(nova, mine, f"answer {i}", reply_to=reply_to)

        run_together(answer, [(i,) for i in range(6)], prepare=load)
        dm.refresh_from_db()
        assert dm.agent_streak == caps.DIRECT_CAP  # 5 counted, capped at 4
        assert Message.objects.filter(conversation=dm, held_at__isnull=False).count() == 1


class TestDone:
    def test_done_suppresses_wakeups_until_something_new(self, alice, cast):
        room, nova = cast["room"], cast["nova"]
        turns.mark_done(nova, room)
        research = post_message(cast["rex"], room, "here is new research literature")
        assert "Nova" not in woken(research)
        # A mention is something new.
        mention = post_message(cast["rex"], room, "@nova have a look")
        assert woken(mention) == ["Nova"]
        turns.mark_done(nova, room)
        # So is a person speaking.
        post_message(alice, room, "thanks all")
        again = post_message(cast["rex"], room, "more research literature")
        assert "Nova" in woken(again)


@pytest.mark.django_db(transaction=True)
async def test_an_agent_signals_done_over_the_socket(alice, cast):
    nova, room = cast["nova"], cast["room"]
    comm = agent_communicator(await sync_to_async(agent_session)(nova))
    assert (await comm.connect())[0]
    assert (await next_frame(comm))["type"] == "hello"
    await comm.send_json_to({"type": "done", "conversationId": str(room.id)})
    assert (await next_frame(comm)) == {"type": "done.noted", "conversationId": str(room.id)}
    message = await sync_to_async(post_message)(cast["rex"], room, "new research literature")
    assert await comm.receive_nothing(timeout=0.3)
    assert await Delivery.objects.filter(message=message, agent=nova).acount() == 0
    await comm.disconnect()


class TestDelegation:
    def test_at_agent_please_creates_a_real_task_for_it(self, alice, cast):
        message = post_message(alice, cast["room"], "@nova please summarise the latest research")
        from conversations.models import Task

        task = Task.objects.get()
        assert (
            task.agent == cast["nova"]
            and task.instructions == "@nova please summarise the latest research"
        )
        assert task.conversation == cast["room"] and task.work_conversation is None
        assert woken(message) == []  # the task is the work; no chat turn on top

    def test_slash_task_without_a_name_picks_the_owner_by_score(self, alice, cast):
        from conversations.models import Task

        post_message(alice, cast["room"], "/task prepare the budget forecast")
        task = Task.objects.get()
        assert task.agent == cast["rex"]
        assert task.owner_scores["winner"] == str(cast["rex"].id)
        assert [c["name"] for c in task.owner_scores["candidates"]][0] == "Rex"

    def test_a_task_delegated_in_a_dm_keeps_its_chatter_out_of_the_dm(self, alice, team_a, cast):
        from conversations import tasks
        from conversations.models import Task

        dm = create_conversation(alice, team_a, kind="direct", agent_ids=[cast["nova"].id])
        post_message(alice, dm, "/task @nova dig into the literature on caching")
        task = Task.objects.get()
        work = task.work_conversation
        assert work.kind == Conversation.Kind.TASK and work != dm
        assert set(work.participants.values_list("user_id", "agent_id")) == {
            (alice.id, None),
            (None, cast["nova"].id),
        }
        Task.objects.filter(pk=task.pk).update(claimed_by="c1", status="running")
        tasks.record_event(task.id, {"kind": "progress", "message": "reading 12 papers"})
        tasks.record_event(task.id, {"kind": "progress", "message": "drafting"})
        tasks.record_result(
            task.id, "completed", connection_id="c1", result={"text": "Three findings: …"}
        )
        dm_bodies = list(dm.messages.order_by("created_at").values_list("body", flat=True))
        assert dm_bodies == ["/task @nova dig into the literature on caching", "Three findings: …"]
        work_bodies = list(work.messages.order_by("created_at").values_list("body", flat=True))
        assert work_bodies == ["reading 12 papers", "drafting", "Three findings: …"]

    def test_an_unknown_agent_in_slash_task_is_a_clear_error(self, alice, cast):
        from conversations.models import Message

        with pytest.raises(AppError, match="No agent called @nobody"):
            post_message(alice, cast["room"], "/task @nobody do it")
        assert Message.objects.filter(conversation=cast["room"]).count() == 0


@pytest.mark.django_db(transaction=True)
async def test_a_held_post_is_acknowledged_to_the_agent_as_held(alice, cast):
    nova, room = cast["nova"], cast["room"]
    for i in range(caps.GROUP_CAP):
        await sync_to_async(post_message)(cast["gus"], room, f"chatter {i}")
    comm = agent_communicator(await sync_to_async(agent_session)(nova))
    assert (await comm.connect())[0]
    assert (await next_frame(comm))["type"] == "hello"
    await comm.send_json_to(
        {"type": "post", "conversationId": str(room.id), "body": "me too", "ref": "r"}
    )
    posted = await next_frame(comm)
    assert posted["type"] == "posted" and posted["held"] is True
    await comm.disconnect()
