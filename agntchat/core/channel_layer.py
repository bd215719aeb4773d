"""The channel layer: channels_redis' Redis pub/sub layer, quiet while Redis is away.

Why pub/sub: a live event to a workspace watched by 1,000 browser sockets of one daphne is one
PUBLISH, received once by that process and handed to its 1,000 consumers in memory. The
list-based ``RedisChannelLayer`` pushed 1,000 copies into Redis and popped them back one round
trip each, behind one another (fan-out p99 0.6–2.6 s in bench/sockets.py), and kept group
memberships in Redis, where a mass disconnect that ran its connection pool dry left them stale.
Here a process's memberships live in the process; Redis holds only its subscriptions, which die
with its connection. Delivery is at-most-once, as the design already assumes (core/events.py).
"""

import asyncio
import logging

from channels_redis.pubsub import (
    RedisPubSubChannelLayer,
    RedisPubSubLoopLayer,
    RedisSingleShardConnection,
)
from channels_redis.utils import _wrap_close
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

log = logging.getLogger(__name__)

# The most events a channel keeps for its consumer. channels_redis' queues are unbounded: a
# consumer that stops reading (stuck on a store out of reach, say) would hold the process's
# memory. Past this, its queue is emptied and it is told to go instead
# (``channel.overflow``, JsonSocket hangs up): its client reconnects and reads what it missed
# from the database, as after any reconnect.
CAPACITY = 1000
# From this many events waiting on, an event with a ``fold`` key (a wake-up) goes into a waiting
# one of the same key instead of queueing. Not sooner: a consumer a few events behind claims
# more eagerly with each of its wake-ups (bench.pipeline: folding from the first gave 15 % fewer
# messages per second at saturation).
FOLD_AFTER = 100
OVERFLOW = {"type": "channel.overflow"}


class Shard(RedisSingleShardConnection):
    """One Redis: its receiving loop says once that Redis is gone and once that it is back,
    where channels_redis logs a traceback every second of an outage. redis-py's PubSub connects
    again on the next read and subscribes to everything it had."""

    async def publish_many(self, items) -> None:
        """ITEMS: (channel, serialized message) pairs, published in one round trip."""
        async with self._lock:
            self._ensure_redis()
            pipe = self._redis.pipeline(transaction=False)
            for channel, message in items:
                pipe.publish(channel, message)
            await pipe.execute()

    async def _do_receiving(self):
        lost = False
        while True:
            try:
                if self._pubsub and self._pubsub.subscribed:
                    message = await self._pubsub.get_message(
                        ignore_subscribe_messages=True, timeout=0.1
                    )
                    if lost:
                        lost = False
                        log.warning("channel layer: Redis is back, subscriptions restored")
                    self._receive_message(message)
                else:
                    await asyncio.sleep(0.1)
            except (RedisConnectionError, RedisTimeoutError, OSError) as exc:
                if not lost:
                    lost = True
                    log.warning("channel layer: Redis unreachable (%s), retrying each second", exc)
                await asyncio.sleep(1)
            except Exception:
                log.exception("channel layer: receiving failed")
                await asyncio.sleep(1)

    def _receive_message(self, message):
        """As channels_redis hands a message to its channel or its group's channels, with each
        channel's queue held to CAPACITY, and, past FOLD_AFTER, an event with a ``fold`` key
        folded into the last one of the same key still waiting there (it takes the newer one's
        content): a socket busy for a while finds a wake-up per lane, not a thousand."""
        if message is None:
            return
        name, data = message["channel"], message["data"]
        if isinstance(name, bytes):
            name = name.decode()
        layer = self.channel_layer
        targets = [name] if name in layer.channels else layer.groups.get(name, ())
        # Most events stay bytes until their consumer reads them (as channels_redis keeps them):
        # a fan-out to 1,000 sockets is not unpacked 1,000 times before the first.
        may_fold = b"fold" in data
        for channel in targets:
            queue = layer.channels.get(channel)
            if queue is None:
                continue
            event = layer.channel_layer.deserialize(data) if may_fold else data
            fold = event.get("fold") if isinstance(event, dict) else None
            if (
                fold is not None
                and queue.qsize() >= FOLD_AFTER
                and fold in layer.folds.get(channel, ())
            ):
                waiting = layer.folds[channel][fold]
                waiting.clear()
                waiting.update(event)
                continue
            if queue.qsize() >= CAPACITY:
                log.warning(
                    "channel layer: %s fell %d events behind; told to go", channel, CAPACITY
                )
                while not queue.empty():
                    queue.get_nowait()
                layer.folds.pop(channel, None)
                queue.put_nowait(dict(OVERFLOW))
            if fold is not None:
                layer.folds.setdefault(channel, {})[fold] = event
            queue.put_nowait(event)


class LoopLayer(RedisPubSubLoopLayer):
    """The layer of one event loop, with our shards, and a channel's subscription dropped by a
    task of its own when its consumer stops listening."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._shards = [Shard(shard.host, self) for shard in self._shards]
        self.unsubscribing: set[asyncio.Task] = set()
        self.folds: dict[str, dict[str, dict]] = {}  # channel → fold key → its waiting event

    async def receive(self, channel):
        if channel not in self.channels:
            await self._subscribe_to_channel(channel)
        try:
            message = await self.channels[channel].get()
        except asyncio.CancelledError:
            # The consumer stopped (channels cancels its receive). channels_redis unsubscribes
            # right here, inside the cancelled task; when sockets closed with others at once,
            # that was cut short and their subscriptions stayed in Redis (tests/test_mass_sockets).
            self.forget(channel)
            raise
        if isinstance(message, bytes):
            return self.channel_layer.deserialize(message)
        waiting = self.folds.get(channel)  # unpacked on arrival: it may fold (Shard)
        if waiting and waiting.get(message.get("fold")) is message:
            del waiting[message["fold"]]
        return message

    async def group_send_many(self, sends) -> None:
        """SENDS: (group, message) pairs, one round trip per shard; a message sent to several
        groups is serialized once."""
        serialized: dict[int, bytes | None] = {}
        by_shard: dict[Shard, list] = {}
        for group, message in sends:
            if id(message) not in serialized:
                try:
                    serialized[id(message)] = self.channel_layer.serialize(message)
                except (TypeError, ValueError, OverflowError):  # one bad event, not its batch
                    log.exception("could not serialize %s", message.get("type"))
                    serialized[id(message)] = None
            if serialized[id(message)] is None:
                continue
            channel = self._get_group_channel_name(group)
            by_shard.setdefault(self._get_shard(channel), []).append(
                (channel, serialized[id(message)])
            )
        for shard, items in by_shard.items():
            await shard.publish_many(items)

    def forget(self, channel: str) -> None:
        """Stop hearing CHANNEL (made by ``new_channel``), in a task nobody cancels."""
        self.folds.pop(channel, None)
        if self.channels.pop(channel, None) is not None:
            task = asyncio.ensure_future(self._get_shard(channel).unsubscribe(channel))
            self.unsubscribing.add(task)
            task.add_done_callback(self.unsubscribing.discard)


class PubSubChannelLayer(RedisPubSubChannelLayer):
    def _get_layer(self):
        loop = asyncio.get_running_loop()
        layer = self._layers.get(loop)
        if layer is None:
            layer = self._layers[loop] = LoopLayer(*self._args, **self._kwargs, channel_layer=self)
            _wrap_close(self, loop)  # the loop's connections close with it
        return layer

    def discard_channel(self, channel: str) -> None:
        """Forget a channel made by ``new_channel`` (channels' consumers do it by cancelling
        their receive; code that makes a channel by hand calls this when done with it)."""
        self._get_layer().forget(channel)
