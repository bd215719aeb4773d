"""The batched group send of core.layers, on the real Redis."""

import asyncio
import uuid

import pytest
from django.conf import settings

from agntchat.core.layers import RedisLayer


def layer(**config) -> RedisLayer:
    base = dict(settings.CHANNEL_LAYERS["default"]["CONFIG"])
    base["prefix"] = f"{base['prefix']}.test-{uuid.uuid4().hex[:8]}"
    return RedisLayer(**{**base, **config})


async def receive_all(channel_layer, channel, count):
    return [await asyncio.wait_for(channel_layer.receive(channel), 5) for _ in range(count)]


async def test_a_batch_reaches_every_member_of_every_group_in_order():
    channel_layer = layer()
    first, second, third = [await channel_layer.new_channel() for _ in range(3)]
    await channel_layer.group_add("team", first)
    await channel_layer.group_add("team", second)
    await channel_layer.group_add("agent", third)
    await channel_layer.group_send_many(
        [("team", {"type": "n", "i": i}) for i in range(20)]
        + [("agent", {"type": "wake", "i": 0}), ("nobody", {"type": "lost"})]
    )
    await channel_layer.group_send_many([("team", {"type": "n", "i": 20})])
    for channel in (first, second):
        assert [m["i"] for m in await receive_all(channel_layer, channel, 21)] == list(range(21))
    assert await receive_all(channel_layer, third, 1) == [{"type": "wake", "i": 0}]
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(channel_layer.receive(third), 0.3)
    await channel_layer.flush()


async def test_a_full_channel_drops_what_goes_beyond_its_capacity():
    channel_layer = layer(capacity=3)
    channel = await channel_layer.new_channel()
    await channel_layer.group_add("busy", channel)
    await channel_layer.group_send_many([("busy", {"type": "n", "i": i}) for i in range(5)])
    assert [m["i"] for m in await receive_all(channel_layer, channel, 3)] == [0, 1, 2]
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(channel_layer.receive(channel), 0.3)
    await channel_layer.flush()
