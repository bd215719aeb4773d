"""The publisher thread (core/events.py): events queued while a round trip to Redis is under
way go out together in the next, oldest first, each to every topic it names; an event that
cannot be sent is logged and skipped, and the rest of its batch still arrives."""

import asyncio

from channels.layers import get_channel_layer

from agntchat.core import events


async def test_a_burst_arrives_whole_in_order_and_a_bad_event_spoils_nothing(caplog):
    layer = get_channel_layer()
    first, second = await layer.new_channel(), await layer.new_channel()
    await layer.group_add(events.group_name("burst:a"), first)
    await layer.group_add(events.group_name("burst:b"), second)
    # Several batches' worth, submitted from another thread as commits do, with one event
    # msgpack cannot carry (an integer past 64 bits) in the middle.
    count = events.Publisher.BATCH * 3

    def submit_all():
        for i in range(count):
            if i == count // 2:
                events.publisher.submit(["burst:a"], {"type": "burst", "n": 2**70})
            events.publisher.submit(["burst:a", "burst:b"], {"type": "burst", "n": i})

    await asyncio.to_thread(submit_all)
    for channel in (first, second):
        got = [(await asyncio.wait_for(layer.receive(channel), 10))["n"] for _ in range(count)]
        assert got == list(range(count))
    assert "could not serialize burst" in caplog.text
    layer.discard_channel(first)
    layer.discard_channel(second)


def test_events_past_the_bound_are_dropped_not_kept(monkeypatch):
    """A Redis that hangs rather than refuses holds the publisher's round trips while events
    keep coming: they piled up in memory without bound, to go out stale."""
    import threading

    publisher = events.Publisher()
    monkeypatch.setattr(publisher, "MAX_QUEUED", 5)
    stuck = threading.Event()
    publisher.thread = threading.Thread(target=stuck.wait, daemon=True)  # a send that never ends
    publisher.thread.start()
    try:
        for n in range(8):
            publisher.submit(["workspace.x"], {"type": "n", "n": n})
        assert publisher.queue.qsize() == 5 and publisher.dropped == 3
        assert [publisher.queue.get_nowait()[1]["n"] for _ in range(5)] == [0, 1, 2, 3, 4]
    finally:
        stuck.set()
