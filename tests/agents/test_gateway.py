"""The agent socket: claims, acks, leases, release on close, catch-up, fairness, bad frames."""

import pytest
from asgiref.sync import sync_to_async
from channels.testing import WebsocketCommunicator
from django.conf import settings
from django.db import transaction

from agents import actions as agent_actions
from agntchat.asgi import application
from agntchat.core import presence
from agntchat.core.events import group_name
from conversations import actions
from conversations.models import Delivery, Message
from tests.conftest import agent_session
from tests.socket_helpers import (
    agent_communicator,
    drain,
    frames_until,
    live_socket_for,
    lose_group_events,
    next_frame,
)
from tests.waiting import loop_stalls, until

pytestmark = pytest.mark.django_db(transaction=True)

post = sync_to_async(actions.post_message)


async def connect(token, query=""):
    comm = agent_communicator(token, query)
    connected, _ = await comm.connect()
    assert connected
    hello = await next_frame(comm)
    assert hello["type"] == "hello"
    return comm, hello


async def test_it_pushes_a_message_to_the_connected_agent_and_acks_it(alice, channel, nova):
    token = await sync_to_async(agent_session)(nova)
    comm, hello = await connect(token)
    assert hello["agentId"] == str(nova.id)
    assert await comm.receive_nothing(timeout=0.2)
    message = await post(alice, channel, "Hello @nova")
    work = await next_frame(comm)
    assert work["type"] == "work" and work["kind"] == "message"
    assert work["payload"]["message"]["id"] == str(message.id)
    assert work["payload"]["message"]["body"] == "Hello @nova"
    assert work["payload"]["conversation"]["id"] == str(channel.id)
    assert work["payload"]["workspace"]["id"] == str(channel.workspace_id)
    assert "directives" in work["payload"]
    assert work["payload"]["timeLimitSeconds"] == 600  # the agent's limit on this turn
    await comm.send_json_to({"type": "ack", "id": work["id"]})
    await comm.send_json_to({"type": "ack", "id": work["id"]})  # idempotent: no error
    assert await comm.receive_nothing(timeout=0.3)
    delivery = await Delivery.objects.aget(id=work["id"])
    assert delivery.acked_at is not None and delivery.attempts == 1
    await comm.disconnect()


async def test_an_agent_does_not_get_its_own_message(channel, nova):
    token = await sync_to_async(agent_session)(nova)
    comm, _ = await connect(token)
    await comm.send_json_to(
        {"type": "post", "conversationId": str(channel.id), "body": "I am here", "ref": "r1"}
    )
    posted = await next_frame(comm)
    assert posted["type"] == "posted" and posted["ref"] == "r1"
    assert await comm.receive_nothing(timeout=0.3)
    assert await Delivery.objects.filter(message_id=posted["messageId"]).acount() == 0
    await comm.disconnect()


async def test_offline_messages_all_arrive_in_order_on_connect(alice, channel, nova):
    posted = [await post(alice, channel, f"m{i}") for i in range(5)]
    token = await sync_to_async(agent_session)(nova)
    comm, _ = await connect(token, "prefetch=10")
    bodies = [(await next_frame(comm))["payload"]["message"]["body"] for _ in posted]
    assert bodies == [m.body for m in posted]
    assert await comm.receive_nothing(timeout=0.2)
    await comm.disconnect()


async def test_prefetch_limits_unacked_items_and_an_ack_frees_a_slot(alice, channel, nova):
    for i in range(4):
        await post(alice, channel, f"m{i}")
    token = await sync_to_async(agent_session)(nova)
    comm, _ = await connect(token, "prefetch=2")
    first, second = await next_frame(comm), await next_frame(comm)
    assert first["id"] != second["id"]
    assert await comm.receive_nothing(timeout=0.3)
    await comm.send_json_to({"type": "ack", "id": first["id"]})
    third = await next_frame(comm)
    assert third["payload"]["message"]["body"] == "m2"
    assert await comm.receive_nothing(timeout=0.3)
    await comm.disconnect()


async def test_a_closed_socket_gives_its_items_to_another_connection(alice, channel, nova):
    token = await sync_to_async(agent_session)(nova)
    first, _ = await connect(token, "prefetch=3")
    for i in range(3):
        await post(alice, channel, f"m{i}")
    held_by_first = {f["id"] for f in await drain(first)}
    assert len(held_by_first) == 3
    second, _ = await connect(token, "prefetch=3")
    assert await second.receive_nothing(timeout=0.3)  # all three are the first one's
    await first.disconnect()  # never acked: its items move at once, not after the lease
    redelivered = [await next_frame(second) for _ in range(3)]
    assert {f["id"] for f in redelivered} == held_by_first
    for frame in redelivered:
        await second.send_json_to({"type": "ack", "id": frame["id"]})
    assert await second.receive_nothing(timeout=0.3)
    assert await Delivery.objects.filter(acked_at__isnull=True).acount() == 0
    await second.disconnect()


async def test_a_released_batch_is_passed_on_to_every_connection_with_room(alice, channel, nova):
    """A release wakes the agent once. In a process, one connection claims for a wake-up; when
    that claim fills it, the wake-up is passed on, so its siblings claim the rest at once (not
    at their next heartbeat)."""
    token = await sync_to_async(agent_session)(nova)
    holder, _ = await connect(token, "prefetch=3")
    for i in range(3):
        await post(alice, channel, f"m{i}")
    assert len(await drain(holder)) == 3
    siblings = [(await connect(token, "prefetch=1"))[0] for _ in range(3)]
    for sibling in siblings:
        assert await sibling.receive_nothing(timeout=0.2)
    await holder.disconnect()
    got = [await next_frame(sibling, timeout=3) for sibling in siblings]
    assert sorted(f["payload"]["message"]["body"] for f in got) == ["m0", "m1", "m2"]
    for sibling in siblings:
        await sibling.disconnect()


async def test_a_wake_up_that_fills_a_connection_is_passed_on_to_its_siblings(alice, channel, nova):
    """Two items wait (a backlog nobody announced, such as leases that ran out) and one wake-up
    comes. The first connection claims for it and is full: the wake-up is passed on, so the
    sibling, which skipped it, takes the other item now rather than at its next heartbeat."""
    from agntchat.core.events import apublish_now, work_available

    token = await sync_to_async(agent_session)(nova)
    first, _ = await connect(token, "prefetch=1")
    second, _ = await connect(token, "prefetch=1")

    @sync_to_async
    def backlog():
        for body in ("b0", "b1"):
            message = Message.objects.create(conversation=channel, author_user=alice, body=body)
            Delivery.objects.create(agent=nova, workspace_id=channel.workspace_id, message=message)

    await backlog()
    await apublish_now(f"agent.{nova.id}", work_available(nova.id, "message"))
    got = [await next_frame(first), await next_frame(second)]
    assert sorted(f["payload"]["message"]["body"] for f in got) == ["b0", "b1"]
    await first.disconnect()
    await second.disconnect()


async def test_one_wake_up_is_claimed_once_by_the_connections_of_a_process(
    alice, channel, nova, monkeypatch
):
    """Every connection hears a wake-up; only the first with room claims. The others' claims
    would come back empty: they are not made."""
    from work import gateway

    token = await sync_to_async(agent_session)(nova)
    claims = []
    real_claim = gateway.claim_work

    def counted(*args, **kwargs):  # the real claim, counted
        frames = real_claim(*args, **kwargs)
        claims.append(len(frames))
        return frames

    monkeypatch.setattr(gateway, "claim_work", counted)
    sockets = [(await connect(token, "prefetch=4"))[0] for _ in range(4)]
    await until(lambda: len(claims) == 4, what="the catch-up claim each connection makes")
    assert claims == [0, 0, 0, 0]
    claims.clear()
    await post(alice, channel, "one")
    frames = []
    for sock in sockets:
        frames += await drain(sock)
    assert [f["payload"]["message"]["body"] for f in frames] == ["one"]
    assert claims == [1]
    for sock in sockets:
        await sock.disconnect()


async def test_a_silent_holder_loses_its_item_after_the_lease(alice, channel, nova, clock):
    token = await sync_to_async(agent_session)(nova)
    holder, _ = await connect(token)
    message = await post(alice, channel, "slow one")
    work = await next_frame(holder)
    other, _ = await connect(token)
    assert await other.receive_nothing(timeout=0.3)  # still leased to the holder
    clock.advance(settings.CLAIM_LEASE_SECONDS + 1)
    # A heartbeat does not extend the holder's lease, and makes the other connection look again.
    await holder.send_json_to({"type": "heartbeat"})
    await other.send_json_to({"type": "heartbeat"})
    again = await next_frame(other)
    assert again["id"] == work["id"] and again["payload"]["message"]["id"] == str(message.id)
    assert again["payload"]["attempt"] == 2
    await holder.send_json_to({"type": "ack", "id": work["id"]})
    error = await next_frame(holder)
    assert error["type"] == "error" and error["code"] == "not_held"
    await other.send_json_to({"type": "ack", "id": again["id"]})
    await holder.disconnect()
    await other.disconnect()


async def test_extend_keeps_an_item_past_its_lease(alice, channel, nova, clock):
    token = await sync_to_async(agent_session)(nova)
    holder, _ = await connect(token)
    await post(alice, channel, "long turn")
    work = await next_frame(holder)
    other, _ = await connect(token)
    for _ in range(3):  # three half leases: past the first lease by half
        clock.advance(settings.CLAIM_LEASE_SECONDS / 2)
        await holder.send_json_to({"type": "extend", "id": work["id"]})
        assert (await next_frame(holder))["type"] == "extended"
        await other.send_json_to({"type": "heartbeat"})
    assert await other.receive_nothing(timeout=0.3)
    await holder.send_json_to({"type": "ack", "id": work["id"]})
    await holder.disconnect()
    await other.disconnect()


async def test_a_dropped_push_is_recovered_by_the_next_heartbeat(alice, channel, nova):
    token = await sync_to_async(agent_session)(nova)
    comm, _ = await connect(token)
    # A round trip first: the socket's first claim (after hello) must be over, or it could
    # pick up the message below and hide the lost push.
    await comm.send_json_to({"type": "no-such-frame"})
    assert (await next_frame(comm))["type"] == "error"
    # Drop the push for real, as a lost group message would.
    await lose_group_events(group_name(f"agent.{nova.id}"))
    await post(alice, channel, "nobody heard this")
    assert await comm.receive_nothing(timeout=0.3)
    await comm.send_json_to({"type": "heartbeat"})
    work = await next_frame(comm)
    assert work["payload"]["message"]["body"] == "nobody heard this"
    await comm.disconnect()


async def test_a_rolled_back_message_queues_and_pushes_nothing(alice, channel, nova):
    token = await sync_to_async(agent_session)(nova)
    comm, _ = await connect(token)

    def post_then_fail():
        with transaction.atomic():
            actions.post_message(alice, channel, "never happened")
            raise RuntimeError("boom")

    with pytest.raises(RuntimeError):
        await sync_to_async(post_then_fail)()
    assert await comm.receive_nothing(timeout=0.5)
    assert await Message.objects.acount() == 0 and await Delivery.objects.acount() == 0
    await comm.disconnect()


async def test_claims_rotate_across_workspaces(alice, channel, nova):
    # 200 messages queued in team A, then 1 in Alice's personal workspace.
    personal = await sync_to_async(lambda: alice.owned_workspaces.get(kind="personal"))()
    dm = await sync_to_async(actions.create_conversation)(
        alice, personal, kind="direct", agent_ids=[nova.id]
    )

    def queue():
        for i in range(200):
            actions.post_message(alice, channel, f"busy {i}")
        actions.post_message(alice, dm, "quiet one")

    await sync_to_async(queue)()
    token = await sync_to_async(agent_session)(nova)
    comm, _ = await connect(token)
    order = []
    for _ in range(4):
        work = await next_frame(comm)
        order.append(work["payload"]["message"]["body"])
        await comm.send_json_to({"type": "ack", "id": work["id"]})
    assert "quiet one" in order[:3], order
    await comm.disconnect()


async def test_bad_frames_get_error_frames_and_the_socket_stays_open(alice, channel, nova):
    token = await sync_to_async(agent_session)(nova)
    comm, _ = await connect(token)
    cases = [
        ("not json", "bad_frame"),
        ("[1, 2]", "bad_frame"),
        ('{"no": "type"}', "bad_frame"),
        ('{"type": "dance"}', "unknown_type"),
        ('{"type": "ack", "id": "00000000-0000-0000-0000-000000000000"}', "not_held"),
        ('{"type": "extend", "id": "nope"}', "not_held"),
        ('{"type": "configure", "prefetch": 0}', "bad_frame"),
        ('{"type": "post", "conversationId": "nope", "body": "x"}', "conversation_not_found"),
        (f'{{"type": "post", "conversationId": "{channel.id}", "body": 5}}', "bad_frame"),
        (f'{{"type": "post", "conversationId": "{channel.id}", "body": "   "}}', "bad_frame"),
    ]
    for raw, code in cases:
        await comm.send_to(text_data=raw)
        frame = await next_frame(comm)
        assert frame["type"] == "error" and frame["code"] == code, (raw, frame)
    # A refused field is named, as REST names it.
    assert frame["fields"] == {"body": "This field may not be blank."}
    assert await Message.objects.acount() == 0
    await comm.send_json_to({"type": "configure", "prefetch": 2})
    assert (await next_frame(comm)) == {"type": "configured", "prefetch": 2, "tasks": 1}
    await comm.disconnect()


async def test_presence_follows_connections(nova):
    token = await sync_to_async(agent_session)(nova)
    assert not await sync_to_async(presence.is_online)(nova.id)
    comm, _ = await connect(token)
    assert await sync_to_async(presence.is_online)(nova.id)
    await comm.disconnect()
    assert not await sync_to_async(presence.is_online)(nova.id)


async def test_it_refuses_keys_expired_sessions_and_nonsense(nova):
    _, key = await sync_to_async(agent_actions.create_agent_key)(nova)
    for token in [key, "ags_forged", "", "apt_x"]:
        comm = agent_communicator(token)
        connected, _ = await comm.connect()
        assert connected
        frame = await next_frame(comm)
        assert frame["type"] == "error" and frame["code"] == "unauthorized"
        assert (await comm.receive_output(timeout=1))["type"] == "websocket.close"
        await comm.disconnect()


async def test_an_agent_pinned_away_is_not_woken_there(alice, channel, nova):
    personal = await sync_to_async(lambda: alice.owned_workspaces.get(kind="personal"))()
    await sync_to_async(agent_actions.set_agent_pins)(nova, [personal.id])
    token = await sync_to_async(agent_session)(nova)
    comm, _ = await connect(token)
    await post(alice, channel, "anyone?")
    assert await comm.receive_nothing(timeout=0.4)
    assert await Delivery.objects.acount() == 0
    await comm.send_json_to({"type": "post", "conversationId": str(channel.id), "body": "sneaky"})
    error = await next_frame(comm)
    assert error["code"] == "conversation_not_found"
    await comm.disconnect()


async def test_the_live_socket_shows_new_messages_to_members_only(
    alice, bob, charlie, channel, team_b, nova
):

    bob_live, charlie_live = await live_socket_for(bob), await live_socket_for(charlie)
    token = await sync_to_async(agent_session)(nova)
    agent, _ = await connect(token)
    await agent.send_json_to(
        {"type": "post", "conversationId": str(channel.id), "body": "Findings are in"}
    )
    seen = await frames_until(bob_live, lambda f: f.get("type") == "message.created")
    assert seen[-1]["message"]["body"] == "Findings are in"
    assert seen[-1]["message"]["author"]["type"] == "agent"
    assert await charlie_live.receive_nothing(timeout=0.5)
    # No cookie, or a foreign origin: refused.
    anon = WebsocketCommunicator(
        application,
        "/ws/live/",
        headers=[(b"origin", b"http://127.0.0.1"), (b"host", b"127.0.0.1")],
    )
    await anon.connect()
    assert (await next_frame(anon))["code"] == "unauthorized"
    evil = WebsocketCommunicator(
        application,
        "/ws/live/",
        headers=[(b"origin", b"http://evil.example"), (b"host", b"127.0.0.1")],
    )
    await evil.connect()
    assert (await next_frame(evil))["code"] == "forbidden_origin"
    assert (await evil.receive_output())["code"] == 4403
    # Refused sockets are disconnected too: a consumer left waiting would keep the shared
    # channel layer's receive lock on this test's event loop.
    for comm in (bob_live, charlie_live, agent, anon, evil):
        await comm.disconnect()


async def test_an_idle_socket_stays_subscribed(alice, channel, nova):
    """Regression: the channel layer's blocking reads must outlive quiet periods (>5 s)."""
    token = await sync_to_async(agent_session)(nova)
    comm, _ = await connect(token)
    assert await comm.receive_nothing(timeout=6.5)
    await post(alice, channel, "after a quiet spell")
    work = await next_frame(comm)
    assert work["payload"]["message"]["body"] == "after a quiet spell"
    await comm.disconnect()


async def test_an_agent_publishes_artifacts_and_cards_over_the_socket(alice, channel, nova):
    from artifacts.card_library import SEED_TEMPLATES
    from artifacts.models import Artifact

    token = await sync_to_async(agent_session)(nova)
    comm, _ = await connect(token)
    await comm.send_json_to(
        {
            "type": "artifact.publish",
            "conversationId": str(channel.id),
            "title": "Plan",
            "kind": "markdown",
            "content": "# Plan\n\n- one",
            "ref": "a1",
        }
    )
    published = await next_frame(comm)
    assert published["type"] == "artifact.published" and published["version"] == 1
    await comm.send_json_to(
        {
            "type": "artifact.update",
            "artifactId": published["artifactId"],
            "content": "# Plan\n\n- one\n- two",
            "note": "added two",
        }
    )
    assert (await next_frame(comm))["version"] == 2
    artifact = await Artifact.objects.aget(pk=published["artifactId"])
    assert artifact.current_version == 2
    hotels = next(t for t in SEED_TEMPLATES if t["name"] == "hotels")
    await comm.send_json_to(
        {
            "type": "card.post",
            "conversationId": str(channel.id),
            "card": hotels["sample"],
            "ref": "c1",
        }
    )
    posted = await next_frame(comm)
    assert posted["type"] == "posted" and posted["ref"] == "c1"
    message = await Message.objects.aget(pk=posted["messageId"])
    assert message.payload["card_layout"]["template"] == "hotels"
    bad = dict(hotels["sample"], items=[{"title": "x", "image": "javascript:alert(1)"}])
    await comm.send_json_to({"type": "card.post", "conversationId": str(channel.id), "card": bad})
    error = await next_frame(comm)
    assert error["type"] == "error" and error["code"] == "card_invalid"
    assert await Message.objects.filter(conversation=channel).acount() == 2
    await comm.disconnect()


async def test_presence_changes_reach_browsers_of_the_agents_workspaces_only(
    alice, bob, charlie, channel, team_b, nova
):

    bob_live, charlie_live = await live_socket_for(bob), await live_socket_for(charlie)
    agent, _ = await connect(await sync_to_async(agent_session)(nova))
    online = await frames_until(bob_live, lambda f: f.get("type") == "agent.presence")
    assert online[-1] == {"type": "agent.presence", "agentId": str(nova.id), "online": True}
    await agent.disconnect()
    offline = await frames_until(bob_live, lambda f: f.get("type") == "agent.presence")
    assert offline[-1]["online"] is False
    assert await charlie_live.receive_nothing(timeout=0.3)
    for comm in (bob_live, charlie_live):
        await comm.disconnect()


async def test_a_backlog_is_refilled_once_half_the_window_is_free(alice, channel, nova):
    for i in range(10):
        await post(alice, channel, f"m{i}")
    token = await sync_to_async(agent_session)(nova)
    comm, _ = await connect(token, "prefetch=4")
    held = [await next_frame(comm) for _ in range(4)]
    await comm.send_json_to({"type": "ack", "id": held[0]["id"]})
    assert await comm.receive_nothing(timeout=0.3)  # one slot free: the bridge still has three
    await comm.send_json_to({"type": "ack", "id": held[1]["id"]})
    refill = [await next_frame(comm), await next_frame(comm)]  # half free: one claim of two
    assert [f["payload"]["message"]["body"] for f in refill] == ["m4", "m5"]
    assert await comm.receive_nothing(timeout=0.3)
    await comm.disconnect()


async def test_acks_that_arrive_during_a_write_are_written_together(
    alice, channel, nova, monkeypatch
):
    import time

    from agntchat.core import claims

    for i in range(4):
        await post(alice, channel, f"m{i}")
    token = await sync_to_async(agent_session)(nova)
    comm, _ = await connect(token, "prefetch=4")
    held = [await next_frame(comm) for _ in range(4)]
    batches = []
    real_ack_many = claims.ack_many

    def slow_ack_many(model, ids, *args, **kwargs):  # the real statement, after a pause
        batches.append(len(ids))
        time.sleep(0.3)  # a slow write: the behaviour under test is what arrives meanwhile
        return real_ack_many(model, ids, *args, **kwargs)

    monkeypatch.setattr(claims, "ack_many", slow_ack_many)
    for frame in held:
        await comm.send_json_to({"type": "ack", "id": frame["id"]})

    async def all_acked():
        return await Delivery.objects.filter(acked_at__isnull=False).acount() == 4

    await until(all_acked, what="the four acks")
    assert batches == [1, 3]
    assert await Delivery.objects.filter(acked_at__isnull=True).acount() == 0
    await comm.send_json_to({"type": "ack", "id": held[3]["id"]})  # again: still idempotent
    assert await comm.receive_nothing(timeout=0.3)
    await comm.disconnect()


async def test_when_writing_acks_fails_the_socket_hangs_up_and_the_item_is_offered_again(
    alice, channel, nova, monkeypatch
):
    from work import gateway

    await post(alice, channel, "survives a failed ack")
    token = await sync_to_async(agent_session)(nova)
    comm, _ = await connect(token)
    work = await next_frame(comm)

    def database_down(*args, **kwargs):
        raise RuntimeError("the database went away")

    monkeypatch.setattr(gateway, "write_bare_acks", database_down)
    await comm.send_json_to({"type": "ack", "id": work["id"]})
    closed = await comm.receive_output(timeout=3)
    assert closed == {"type": "websocket.close", "code": 4500}
    monkeypatch.undo()
    await comm.disconnect()  # the bridge's side of the hang-up: its item is released
    again, _ = await connect(token)
    redelivered = await next_frame(again)
    assert (redelivered["id"], redelivered["payload"]["attempt"]) == (work["id"], 2)
    await again.disconnect()


async def test_an_ack_sent_just_before_closing_is_kept(alice, channel, nova, monkeypatch):
    import time

    from agntchat.core import claims

    await post(alice, channel, "acked on the way out")
    token = await sync_to_async(agent_session)(nova)
    comm, _ = await connect(token)
    work = await next_frame(comm)
    real_ack_many = claims.ack_many

    def slow_ack_many(*args, **kwargs):  # the real statement, after a pause
        time.sleep(0.3)  # a slow write: the socket closes while it is still under way
        return real_ack_many(*args, **kwargs)

    monkeypatch.setattr(claims, "ack_many", slow_ack_many)
    await comm.send_json_to({"type": "ack", "id": work["id"]})
    await comm.disconnect()  # at once: the ack is still being written
    assert await Delivery.objects.filter(pk=work["id"], acked_at__isnull=False).aexists()
    again, _ = await connect(token)
    assert await again.receive_nothing(timeout=0.5)  # not offered again
    await again.disconnect()


async def test_a_large_frame_is_checked_without_stalling_the_event_loop(nova):
    """Every socket of a node shares its event loop: checking a frame of 1 MiB of small numbers
    there held it for a tenth of a second per frame, which any socket could repeat."""
    import asyncio
    import time

    from agntchat.core.sockets import MAX_FRAME_BYTES, _parse_frame

    numbers = ",".join(["0"] * (MAX_FRAME_BYTES // 2 - 40))
    frame = '{"type": "no_such_frame", "pad": [' + numbers + "]}"
    started = time.perf_counter()
    await asyncio.to_thread(_parse_frame, frame)
    checking = time.perf_counter() - started  # what the check costs on this machine
    token = await sync_to_async(agent_session)(nova)
    comm, _ = await connect(token)
    stalls = []
    for _ in range(3):  # a loaded machine may pause the process at any time: the best of three
        async with loop_stalls() as longest:
            await comm.send_to(text_data=frame)
            answer = await next_frame(comm)
        assert answer["type"] == "error" and answer["code"] == "unknown_type"
        stalls.append(longest[0])
    assert min(stalls) < checking / 2, (stalls, checking)
    await comm.disconnect()
