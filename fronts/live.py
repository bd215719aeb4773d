"""Following live events from a front: the same events browsers get (``core.events``), heard
through the channel layer while a front waits for a task to end or an agent to answer."""

import asyncio
import time
import uuid

from channels.layers import get_channel_layer
from django.conf import settings

from agntchat.core.events import group_name
from agntchat.core.presence import client as redis

# Answers one person waits on at once through the fronts (OpenAI completions, MCP tool calls),
# on every node: each holds a live-event subscription and reads the database every few seconds,
# and a retried request may post nothing, so no post or task rate bounds them.
WAITS_PER_PERSON = 20
WAITS_TTL = 2 * 24 * 3600  # of the list of them: past the longest turn time limit (a day)


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


def _waits_key(person_id) -> str:
    # The answers the person waits on, scored by when each must have ended (Unix seconds): a
    # node that stops while one waits leaves a member that expires by itself.
    return f"{settings.REDIS_PREFIX}:front:waits:{person_id}"


def begin_wait(person_id, seconds: float) -> str | None:
    """A place for one more answer PERSON_ID waits on, for SECONDS at most: its id, or None
    when WAITS_PER_PERSON are taken (two asking for the last place at once may both be refused,
    never both let in)."""
    wait_id, key, now = uuid.uuid4().hex, _waits_key(person_id), time.time()
    pipe = redis().pipeline()
    pipe.zremrangebyscore(key, "-inf", now)
    pipe.zadd(key, {wait_id: now + seconds})
    pipe.expire(key, WAITS_TTL)
    pipe.zcard(key)
    if pipe.execute()[-1] <= WAITS_PER_PERSON:
        return wait_id
    end_wait(person_id, wait_id)
    return None


def end_wait(person_id, wait_id: str) -> None:
    redis().zrem(_waits_key(person_id), wait_id)
