"""Streaming replies on the agent socket and the REST endpoints (issue 28): drafts of a chat
turn reach the browsers of the conversation and nobody else, the latest kept until the turn
ends (for a person who opens the conversation mid-turn); Stop reaches the connection that
holds the turn; the stopped reply is posted once and the item acked, never redelivered;
Regenerate queues the same agent's delivery again through the claims."""

import asyncio

import pytest
from asgiref.sync import sync_to_async

from conversations import actions
from conversations.drafts import drafts_in
from conversations.models import Delivery, Message
from tests.conftest import agent_session, client_for
from tests.socket_helpers import agent_communicator, frames_until, live_socket_for, next_frame
from tests.waiting import until

pytestmark = pytest.mark.django_db(transaction=True)

post = sync_to_async(actions.post_message)


async def connect(agent):
    token = await sync_to_async(agent_session)(agent)
    comm = agent_communicator(token)
    assert (await comm.connect())[0]
    assert (await next_frame(comm))["type"] == "hello"
    return comm


@sync_to_async
def call(user, url, data=None):
    """POST as USER (a person's session), JSON."""
    return client_for(user).post(url, data, format="json")


async def drafts_seen(live, count: int) -> list[dict]:
    frames = await frames_until(
        live, lambda f: f["type"] == "message.draft" and f["text"].count(" ") >= count - 1
    )
    return [f for f in frames if f["type"] == "message.draft"]


async def test_drafts_reach_the_conversations_readers_and_not_another_workspace(
    alice, charlie, channel, nova
):
    comm = await connect(nova)
    alice_live = await live_socket_for(alice)
    charlie_live = await live_socket_for(charlie)
    question = await post(alice, channel, "Tell me a story")
    work = await next_frame(comm)
    texts = ["Once", "Once upon", "Once upon a time"]
    for text in texts:
        await comm.send_json_to({"type": "draft", "id": work["id"], "text": text})
        await comm.receive_nothing(timeout=0.1)  # past the server's least interval
    drafts = await drafts_seen(alice_live, 4)
    assert [d["text"] for d in drafts] == texts
    assert drafts[-1] == {
        "type": "message.draft",
        "conversationId": str(channel.id),
        "workId": work["id"],
        "replyTo": str(question.id),
        "agent": {"id": str(nova.id), "name": "Nova"},
        "text": "Once upon a time",
    }
    assert await charlie_live.receive_nothing(timeout=0.3)
    # No message was stored.
    assert await Message.objects.filter(author_agent=nova).acount() == 0
    for socket in (comm, alice_live, charlie_live):
        await socket.disconnect()


async def test_someone_removed_mid_turn_stops_getting_its_drafts(alice, bob, team_a, nova):
    """A direct conversation's drafts go to each reader's own topic: who they are is looked up
    again while the turn goes on (AUDIENCE_SECONDS), not once for the whole turn."""
    from work.consumers import AUDIENCE_SECONDS
    from workspaces import actions as workspace_actions

    group = await sync_to_async(actions.create_conversation)(
        alice, team_a, kind="direct", user_ids=[bob.id], agent_ids=[nova.id]
    )
    comm = await connect(nova)
    alice_live, bob_live = await live_socket_for(alice), await live_socket_for(bob)
    await post(alice, group, "Draft the plan")
    work = await next_frame(comm)
    await comm.send_json_to({"type": "draft", "id": work["id"], "text": "One"})
    assert [d["text"] for d in await drafts_seen(bob_live, 1)] == ["One"]
    owner, member = await sync_to_async(
        lambda: (team_a.memberships.get(user=alice), team_a.memberships.get(user=bob))
    )()
    await sync_to_async(workspace_actions.remove_member)(owner, member)
    await asyncio.sleep(AUDIENCE_SECONDS + 0.2)
    await comm.send_json_to({"type": "draft", "id": work["id"], "text": "One two"})
    assert [d["text"] for d in await drafts_seen(alice_live, 2)][-1] == "One two"
    later = []
    while not await bob_live.receive_nothing(timeout=0.5):
        later.append(await bob_live.receive_json_from())
    assert [f for f in later if f["type"] == "message.draft"] == []
    for socket in (comm, alice_live, bob_live):
        await socket.disconnect()


async def test_an_agent_that_lost_access_can_neither_draft_nor_keep_its_turn(
    alice, bob, team_a, channel
):
    """Bob's agent holds a turn in team A's channel when Bob is removed from team A: its posts
    were refused already; its drafts and lease extensions are refused too."""
    from agents import actions as agent_actions
    from work.consumers import AUDIENCE_SECONDS
    from workspaces import actions as workspace_actions

    bix = await sync_to_async(agent_actions.create_agent)(
        bob, name="Bix", handle="bix", backend="scripted"
    )
    await sync_to_async(actions.add_agent_to_conversation)(bob, channel, bix)
    comm = await connect(bix)
    await post(alice, channel, "@bix summarise the week")
    work = await next_frame(comm)
    await comm.send_json_to({"type": "extend", "id": work["id"]})
    assert (await next_frame(comm))["type"] == "extended"
    owner, member = await sync_to_async(
        lambda: (team_a.memberships.get(user=alice), team_a.memberships.get(user=bob))
    )()
    await sync_to_async(workspace_actions.remove_member)(owner, member)
    await comm.send_json_to({"type": "extend", "id": work["id"]})
    refused = await next_frame(comm)
    assert refused["type"] == "error" and refused["code"] == "conversation_not_found"
    await asyncio.sleep(AUDIENCE_SECONDS + 0.1)
    await comm.send_json_to({"type": "draft", "id": work["id"], "text": "Monday:"})
    refused = await next_frame(comm)
    assert refused["type"] == "error" and refused["code"] == "conversation_not_found"
    await comm.disconnect()


async def test_the_latest_draft_is_kept_until_the_turn_is_acked(alice, channel, nova):
    comm = await connect(nova)
    question = await post(alice, channel, "Tell me a story")
    work = await next_frame(comm)
    assert await sync_to_async(drafts_in)(channel.id) == []
    for text in ["Once", "Once upon"]:
        await comm.send_json_to({"type": "draft", "id": work["id"], "text": text})
        await comm.receive_nothing(timeout=0.1)  # past the server's least interval
    await until(lambda: sync_to_async(drafts_in)(channel.id), what="the kept draft")
    assert await sync_to_async(drafts_in)(channel.id) == [
        {
            "type": "message.draft",
            "conversationId": str(channel.id),
            "workId": work["id"],
            "replyTo": str(question.id),
            "agent": {"id": str(nova.id), "name": "Nova"},
            "text": "Once upon",
        }
    ]
    await comm.send_json_to(
        {"type": "post", "conversationId": str(channel.id), "body": "Once upon a time.",
         "replyTo": str(question.id), "ref": f"work:{work['id']}"}
    )  # fmt: skip
    assert (await next_frame(comm))["type"] == "posted"
    await comm.send_json_to({"type": "ack", "id": work["id"]})
    await until(lambda: _no_drafts(channel.id), what="the draft deleted at the ack")
    await comm.disconnect()


async def test_a_kept_draft_goes_with_the_connection_that_wrote_it(alice, channel, nova):
    comm = await connect(nova)
    await post(alice, channel, "Tell me a story")
    work = await next_frame(comm)
    await comm.send_json_to({"type": "draft", "id": work["id"], "text": "Once"})
    await until(lambda: sync_to_async(drafts_in)(channel.id), what="the kept draft")
    await comm.disconnect()  # the bridge died mid-turn: the item is offered again, from scratch
    await until(lambda: _no_drafts(channel.id), what="the draft deleted at the release")


@sync_to_async
def _no_drafts(conversation_id) -> bool:
    return drafts_in(conversation_id) == []


async def test_drafts_faster_than_the_least_interval_are_dropped_not_queued(alice, channel, nova):
    comm = await connect(nova)
    live = await live_socket_for(alice)
    await post(alice, channel, "Quick")
    work = await next_frame(comm)
    for n in range(30):  # all at once: a misbehaving client
        await comm.send_json_to({"type": "draft", "id": work["id"], "text": "w " * n})
    await comm.receive_nothing(timeout=0.5)
    drafts = []
    while not await live.receive_nothing(timeout=0.3):
        frame = await live.receive_json_from()
        if frame["type"] == "message.draft":
            drafts.append(frame)
    assert 1 <= len(drafts) < 10
    await comm.disconnect()
    await live.disconnect()


async def test_a_draft_for_an_item_not_held_is_an_error(alice, channel, nova):
    comm = await connect(nova)
    await comm.send_json_to(
        {"type": "draft", "id": "00000000-0000-0000-0000-000000000000", "text": "hi"}
    )
    error = await next_frame(comm)
    assert error["type"] == "error" and error["code"] == "not_held"
    # An item another connection holds is not held here either. The other socket opens once
    # the item is held: open before the post, it could have claimed the item itself.
    await post(alice, channel, "Hello")
    work = await next_frame(comm)
    other = await connect(nova)
    await other.send_json_to({"type": "draft", "id": work["id"], "text": "hi"})
    error = await next_frame(other)
    assert error["type"] == "error" and error["code"] == "not_held"
    # A draft with no text field is a bad frame.
    await comm.send_json_to({"type": "draft", "id": work["id"]})
    error = await next_frame(comm)
    assert error["type"] == "error" and "text" in error.get("fields", {})
    await comm.disconnect()
    await other.disconnect()


async def test_stop_reaches_the_holder_and_the_stopped_reply_is_posted_once(
    alice, charlie, channel, nova
):
    comm = await connect(nova)
    question = await post(alice, channel, "Write a long essay")
    work = await next_frame(comm)
    url = f"/api/v1/conversations/{channel.id}/stop/"
    # Another workspace's person: 404, and nothing reaches the bridge.
    response = await call(charlie, url, {"work": work["id"]})
    assert response.status_code == 404
    assert await comm.receive_nothing(timeout=0.3)
    # Bad input: 400, nothing sent.
    for bad in ({}, {"work": "nope"}, {"work": work["id"], "extra": 1}):
        response = await call(alice, url, bad)
        assert response.status_code == 400, bad
    assert await comm.receive_nothing(timeout=0.3)
    response = await call(alice, url, {"work": work["id"]})
    assert response.status_code == 202
    assert await next_frame(comm) == {"type": "cancel", "id": work["id"]}
    # The bridge posts what it had, marked stopped (blank, or no body at all, is allowed then),
    # and acks.
    await comm.send_json_to(
        {"type": "post", "conversationId": str(channel.id), "stopped": True,
         "replyTo": str(question.id), "ref": f"work:{work['id']}"}
    )  # fmt: skip
    assert (await next_frame(comm))["type"] == "posted"
    await comm.send_json_to({"type": "ack", "id": work["id"]})
    await until(
        lambda: Delivery.objects.filter(pk=work["id"], acked_at__isnull=False).aexists(),
        what="the ack",
    )
    (reply,) = [m async for m in Message.objects.filter(author_agent=nova)]
    assert reply.payload == {"stopped": True} and reply.reply_to_id == question.id
    delivery = await Delivery.objects.aget(pk=work["id"])
    assert delivery.acked_at is not None and delivery.attempts == 1
    # The turn ended: a second Stop is refused, nothing is redelivered.
    response = await call(alice, url, {"work": work["id"]})
    assert response.status_code == 409
    assert await comm.receive_nothing(timeout=0.5)
    await comm.disconnect()


def stopped_post(channel, question, body=None) -> dict:
    frame = {"type": "post", "conversationId": str(channel.id), "stopped": True,
             "replyTo": str(question.id)}  # fmt: skip
    return frame if body is None else {**frame, "body": body}


async def test_a_stopped_reply_with_no_stop_pressed_is_an_ordinary_post(alice, channel, nova):
    """Only a person's Stop lets a reply be blank or marked stopped: else a blank one is
    refused as any blank post, and one with text is posted unmarked."""
    comm = await connect(nova)
    question = await post(alice, channel, "Write a long essay")
    await next_frame(comm)  # the turn, held; nobody presses Stop
    for blank in (None, ""):
        await comm.send_json_to(stopped_post(channel, question, blank))
        assert await next_frame(comm) == {
            "type": "error", "code": "bad_frame", "message": "Some fields are invalid.",
            "fields": {"body": "This field may not be blank."},
        }  # fmt: skip
    assert await Message.objects.filter(author_agent=nova).acount() == 0
    await comm.send_json_to(stopped_post(channel, question, "Half an essay"))
    posted = await next_frame(comm)
    reply = await Message.objects.aget(pk=posted["messageId"])
    assert reply.body == "Half an essay" and reply.payload == {}
    await comm.disconnect()


async def test_a_stop_on_one_turn_does_not_license_another(alice, channel, nova):
    comm = await connect(nova)
    first = await post(alice, channel, "Write a long essay")
    second = await post(alice, channel, "And a poem")
    work = await next_frame(comm)
    assert work["payload"]["message"]["id"] == str(first.id)
    url = f"/api/v1/conversations/{channel.id}/stop/"
    assert (await call(alice, url, {"work": work["id"]})).status_code == 202
    assert await next_frame(comm) == {"type": "cancel", "id": work["id"]}
    # A reply to the other message is not the stopped turn's.
    await comm.send_json_to(stopped_post(channel, second, ""))
    assert (await next_frame(comm))["fields"] == {"body": "This field may not be blank."}
    await comm.send_json_to(stopped_post(channel, second, "A po"))
    unmarked = await Message.objects.aget(pk=(await next_frame(comm))["messageId"])
    assert unmarked.payload == {} and unmarked.reply_to_id == second.id
    # The stopped turn's own reply is marked, blank as it is.
    await comm.send_json_to(stopped_post(channel, first, ""))
    marked = await Message.objects.aget(pk=(await next_frame(comm))["messageId"])
    assert marked.payload == {"stopped": True} and marked.body == ""
    await comm.disconnect()


async def test_regenerate_queues_the_same_agent_again_and_marks_both_replies(
    alice, charlie, channel, nova
):
    comm = await connect(nova)
    question = await post(alice, channel, "Name a colour")

    async def answer(body):
        work = await next_frame(comm)
        assert work["payload"]["message"]["id"] == str(question.id)
        await comm.send_json_to(
            {"type": "post", "conversationId": str(channel.id), "body": body,
             "replyTo": str(question.id), "ref": f"work:{work['id']}"}
        )  # fmt: skip
        posted = await next_frame(comm)
        await comm.send_json_to({"type": "ack", "id": work["id"]})
        return work, posted["messageId"]

    first_work, first_id = await answer("Red")
    url = f"/api/v1/messages/{first_id}/regenerate/"
    response = await call(charlie, url)
    assert response.status_code == 404
    # A person's message is no reply to regenerate.
    response = await call(alice, f"/api/v1/messages/{question.id}/regenerate/")
    assert response.status_code == 409
    assert await comm.receive_nothing(timeout=0.3)
    response = await call(alice, url)
    assert response.status_code == 202
    second_work, second_id = await answer("Blue")
    assert second_work["id"] == first_work["id"] and second_id != first_id
    replies = {str(m.id): m async for m in Message.objects.filter(author_agent=nova)}
    assert replies[first_id].payload == {"superseded": True}
    assert replies[second_id].payload == {"regenerated_from": first_id}
    await until(
        lambda: Delivery.objects.filter(pk=first_work["id"], acked_at__isnull=False).aexists(),
        what="the second ack",
    )
    # A new turn: its attempts count afresh (protocol §13), one claim so far.
    assert (await Delivery.objects.aget(pk=first_work["id"])).attempts == 1
    # The earlier answer is not regenerated again: the newer one is.
    assert (await call(alice, url)).status_code == 409
    assert await comm.receive_nothing(timeout=0.3)
    await comm.disconnect()


async def test_a_regenerated_turn_is_not_licensed_by_the_stop_of_the_one_before(
    alice, channel, nova
):
    comm = await connect(nova)
    question = await post(alice, channel, "Write a long essay")
    work = await next_frame(comm)
    assert (await call(alice, f"/api/v1/conversations/{channel.id}/stop/", {"work": work["id"]})).status_code == 202  # fmt: skip
    assert await next_frame(comm) == {"type": "cancel", "id": work["id"]}
    await comm.send_json_to(stopped_post(channel, question, "An ess"))
    stopped = (await next_frame(comm))["messageId"]
    await comm.send_json_to({"type": "ack", "id": work["id"]})
    await until(
        lambda: Delivery.objects.filter(pk=work["id"], acked_at__isnull=False).aexists(),
        what="the ack",
    )
    assert (await call(alice, f"/api/v1/messages/{stopped}/regenerate/")).status_code == 202
    assert (await next_frame(comm))["id"] == work["id"]  # the new turn, nobody stops it
    await comm.send_json_to(stopped_post(channel, question, ""))
    assert (await next_frame(comm))["fields"] == {"body": "This field may not be blank."}
    await comm.send_json_to(stopped_post(channel, question, "A whole essay"))
    answer = await Message.objects.aget(pk=(await next_frame(comm))["messageId"])
    assert answer.payload == {"regenerated_from": stopped}
    await comm.disconnect()
