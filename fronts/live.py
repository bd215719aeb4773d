"""Following live events from a front: the same events browsers get (``core.events``), heard
through the channel layer while a front waits for a task to end or an agent to answer."""

import asyncio

from channels.layers import get_channel_layer

from agntchat.core.events import group_name


class ClientGone(Exception):
    """The client left while a front waited for it."""


class Following:
    """``async with Following(topics) as live: event = await live.next(timeout)``.

    Events are at-most-once (a lost one only delays, as everywhere here): whoever waits on them
    reads the database again after joining, and when a wait times out, before it gives up."""

    def __init__(self, topics):
        self.groups = [group_name(topic) for topic in topics]
        self.layer = get_channel_layer()
        self.channel = ""

    async def __aenter__(self):
        self.channel = await self.layer.new_channel()
        for group in self.groups:
            await self.layer.group_add(group, self.channel)
        return self

    async def __aexit__(self, *exc):
        for group in self.groups:
            await self.layer.group_discard(group, self.channel)
        self.layer.discard_channel(self.channel)

    async def next(self, timeout: float) -> dict | None:
        """The next live event (its ``type`` and data, camelCase as on the wire), or None when
        none came within TIMEOUT seconds. Other channel-layer messages are skipped."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while (left := deadline - loop.time()) > 0:
            try:
                message = await asyncio.wait_for(self.layer.receive(self.channel), left)
            except TimeoutError:
                return None
            if message.get("type") in ("live.event", "live.regroup"):
                return message["event"]
        return None

    async def next_unless_gone(self, gone: asyncio.Event, timeout: float) -> dict | None:
        """``next``, but ClientGone as soon as GONE is set (the client left): a front stops
        waiting for an answer nobody will read."""
        if gone.is_set():
            raise ClientGone()
        following = asyncio.ensure_future(self.next(timeout))
        leaving = asyncio.ensure_future(gone.wait())
        try:
            await asyncio.wait({following, leaving}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            leaving.cancel()
            if not following.done():
                following.cancel()
                await asyncio.gather(following, return_exceptions=True)
        if gone.is_set():
            raise ClientGone()
        return following.result()
