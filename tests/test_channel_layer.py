"""The channel layer holds each channel's unread events to a bound: a consumer that stops
reading is told to go (its socket hangs up, 4503) instead of holding the process's memory. A
wake-up waiting for a busy consumer takes in newer ones of its lane, so a socket busy for a
moment is not a thousand events behind. Real Redis, the layer as configured, real sockets."""

import asyncio

import pytest
from asgiref.sync import sync_to_async
from channels.layers import get_channel_layer

from agents import actions as agent_actions
from agntchat.core import presence
from agntchat.core.channel_layer import CAPACITY, FOLD_AFTER
from agntchat.core.events import group_name, work_available
from conversations import actions
from conversations.models import Delivery
from tests.socket_helpers import agent_communicator, next_frame
from tests.waiting import until

pytestmark = pytest.mark.django_db(transaction=True)


async def test_a_channel_nobody_reads_is_emptied_and_told_to_go(caplog):
    layer = get_channel_layer()
    channel = await layer.new_channel()
    group = "overflow-test"
    await layer.group_add(group, channel)
    try:
        for n in range(CAPACITY + 5):
            await layer.group_send(group, {"type": "live.event", "n": n})
        queue = layer._get_layer().channels[channel]

        def last_heard():
            return queue.qsize() and layer.deserialize(queue._queue[-1]).get("n")

        await until(lambda: last_heard() == CAPACITY + 4, timeout=10, what="every event heard")
        # The CAPACITY events it never read are gone; in their place, the word to go, then
        # what came after it.
        assert queue.qsize() == 6
        assert await layer.receive(channel) == {"type": "channel.overflow"}
        after = [(await layer.receive(channel))["n"] for _ in range(5)]
        assert after == list(range(CAPACITY, CAPACITY + 5))
        warnings = [r for r in caplog.records if "fell 1000 events behind" in r.getMessage()]
        assert len(warnings) == 1
    finally:
        await layer.group_discard(group, channel)
        layer.discard_channel(channel)


async def test_wake_ups_waiting_for_a_busy_consumer_fold_into_one_per_lane():
    layer = get_channel_layer()
    channel = await layer.new_channel()
    group = "fold-test"
    await layer.group_add(group, channel)
    try:
        # A busy consumer reads nothing while 3,000 wake-ups for two lanes of one agent, one
        # for another agent, and plain events come: past CAPACITY, were nothing folded.
        sent = []
        for _ in range(1500):
            for lane in ("message", "task"):
                sent.append(work_available("agent-1", lane))
                await layer.group_send(group, sent[-1])
        await layer.group_send(group, work_available("agent-2", "message"))
        for n in range(3):
            await layer.group_send(group, {"type": "live.event", "n": n})
        queue = layer._get_layer().channels[channel]
        await until(
            lambda: queue.qsize() and layer.deserialize(queue._queue[-1]).get("n") == 2, timeout=10
        )

        # The first FOLD_AFTER as they came; every later wake-up folded into the last waiting
        # one of its lane (which carries the newest id); what has no fold key queued as usual.
        got = [await layer.receive(channel) for _ in range(queue.qsize())]
        lanes = [("work.available", "agent-1", lane) for lane in ("message", "task")]
        assert [(e["type"], e.get("agent"), e.get("kind")) for e in got] == [
            *lanes * (FOLD_AFTER // 2),
            ("work.available", "agent-2", "message"),
            *[("live.event", None, None)] * 3,
        ]
        wakes = [e["wake"] for e in got[:FOLD_AFTER]]
        assert wakes == [e["wake"] for e in sent[: FOLD_AFTER - 2]] + [
            sent[-2]["wake"],
            sent[-1]["wake"],
        ]

        # Once read, the next wake-up of that lane waits again on its own.
        await layer.group_send(group, work_available("agent-1", "message"))
        again = await asyncio.wait_for(layer.receive(channel), 10)
        assert (again["type"], again["kind"]) == ("work.available", "message")
    finally:
        await layer.group_discard(group, channel)
        layer.discard_channel(channel)


async def test_a_socket_told_it_fell_behind_hangs_up_and_gives_back_its_work(alice, channel, nova):
    _, secret = await sync_to_async(agent_actions.create_agent_key)(nova)
    _, token = await sync_to_async(agent_actions.open_agent_session)(secret)
    comm = agent_communicator(token)
    assert (await comm.connect())[0]
    assert (await next_frame(comm))["type"] == "hello"
    await sync_to_async(actions.post_message)(alice, channel, "held when it falls behind")
    work = await next_frame(comm)
    assert work["type"] == "work"

    # What the layer puts in a full channel's place, through the agent's own group.
    await get_channel_layer().group_send(
        group_name(f"agent.{nova.id}"), {"type": "channel.overflow"}
    )
    error = await next_frame(comm)
    assert (error["type"], error["code"]) == ("error", "fell_behind")
    assert await comm.receive_output(timeout=3) == {"type": "websocket.close", "code": 4503}
    # Nothing it held stays held: the item is free for the agent's next connection at once.
    delivery = Delivery.objects.filter(message_id=work["payload"]["message"]["id"])
    assert await delivery.filter(claimed_by__isnull=True).aexists()
    assert not await sync_to_async(presence.is_online)(nova.id)
