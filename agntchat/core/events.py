"""Publish realtime events through the channel layer, only after the writing transaction commits.

Event payloads leave here as plain JSON types in camelCase (the channel layer speaks msgpack,
which knows no UUIDs or datetimes), converted once in ``wire()``.

Sending happens on one background thread per process, in commit order. Django runs every sync
view of a process on a single thread; if that thread waited for Redis on each publish, every
request would queue behind it. The channel layer is at-most-once anyway: the database claim is
the truth, and a lost event only delays work until the next claim (docs/protocol.md §6).
"""

import asyncio
import functools
import json
import logging
import queue
import threading
import uuid
from dataclasses import dataclass

import orjson
from channels.layers import get_channel_layer
from django.core.serializers.json import DjangoJSONEncoder
from django.db import transaction
from djangorestframework_camel_case.util import camelize_re, underscore_to_camel

log = logging.getLogger(__name__)


_encoder = DjangoJSONEncoder()


@functools.lru_cache(maxsize=4096)
def camel(key: str) -> str:
    """snake_case → camelCase, as the REST API spells keys (djangorestframework-camel-case)."""
    return camelize_re.sub(underscore_to_camel, key) if "_" in key else key


@dataclass(frozen=True)
class Verbatim:
    """JSON whose keys are content, not our fields (a tool's input schema, a model's tool
    arguments): ``wire`` passes it on as it is. It must hold plain JSON types only."""

    value: object


def wire(data):
    """Plain JSON types, camelCase keys: the one conversion for sockets and events. What a JSON
    round trip through Django's encoder would give, in one walk (this runs for every push)."""
    if isinstance(data, (str, int, float)) or data is None:  # bool is an int
        return data
    if isinstance(data, Verbatim):
        return data.value
    if isinstance(data, dict):
        return {
            camel(key if isinstance(key, str) else json.dumps(key)): wire(value)
            for key, value in data.items()
        }
    if isinstance(data, (list, tuple)):
        return [wire(item) for item in data]
    # The rest as Django's encoder writes them: datetimes, UUIDs, decimals, lazy text.
    return wire(_encoder.default(data))


def json_bytes(data) -> bytes:
    """The JSON of plain data (what ``wire`` gives), for every socket frame and API response:
    by orjson, which is much faster than json; what it refuses (integers past 64 bits, lone
    surrogates) is still written, by json."""
    try:
        return orjson.dumps(data)
    except TypeError:
        return json.dumps(data).encode()


def group_name(topic: str) -> str:
    """Channel-layer group names allow only [a-zA-Z0-9_.-]."""
    return topic.replace(":", ".")


async def apublish_now(topic: str, event: dict) -> None:
    """Publish from async code that has no transaction to wait for (consumers)."""
    await get_channel_layer().group_send(group_name(topic), wire(event))


class Publisher:
    """A daemon thread with its own event loop that sends queued events, oldest first: what
    queued while one round trip to Redis was under way goes out together in the next."""

    BATCH = 200  # events per round trip at most
    # Events waiting at most. A Redis that hangs rather than refuses holds each round trip for
    # its timeout while events keep coming: past this, new ones are dropped (events are at most
    # once: pages catch up on their next hello, agents on their next heartbeat), not kept in
    # memory to go out stale.
    MAX_QUEUED = 20_000

    def __init__(self):
        self.queue: queue.SimpleQueue = queue.SimpleQueue()
        self.thread: threading.Thread | None = None
        self.lock = threading.Lock()
        self.dropped = 0

    def submit(self, topics: list[str], event: dict) -> None:
        with self.lock:
            if self.thread is None or not self.thread.is_alive():
                self.thread = threading.Thread(target=self.run, name="event-publisher", daemon=True)
                self.thread.start()
        if self.queue.qsize() >= self.MAX_QUEUED:
            self.dropped += 1
            if self.dropped % 1000 == 1:
                log.warning("event queue full: %d events dropped so far", self.dropped)
            return
        self.queue.put((topics, event))

    def run(self) -> None:
        loop = asyncio.new_event_loop()
        while True:
            batch = [self.queue.get()]
            while len(batch) < self.BATCH:
                try:
                    batch.append(self.queue.get_nowait())
                except queue.Empty:
                    break
            try:
                loop.run_until_complete(self.send(batch))
            except Exception:  # one bad round trip must not stop every later event
                log.exception("could not publish %d events", len(batch))

    @staticmethod
    async def send(batch) -> None:
        """BATCH: (topics, event) pairs, published in one round trip (core/channel_layer.py)."""
        await get_channel_layer().group_send_many(
            [(group_name(topic), event) for topics, event in batch for topic in topics]
        )


publisher = Publisher()


def publish(topic: str, event: dict) -> None:
    """Publish on commit of the current transaction: a rolled-back write announces nothing."""
    publish_many([topic], event)


def publish_many(topics, event: dict) -> None:
    """One event to several topics, after commit."""
    event, topics = wire(event), list(topics)
    transaction.on_commit(lambda: publisher.submit(topics, event), robust=True)


@dataclass(frozen=True)
class LiveEvent:
    """What a live event to browsers carries besides its type (keys in snake_case, as built)."""

    carries: tuple[str, ...]
    # A membership may have ended: the browser socket follows its topics again before passing
    # the event on (conversations.consumers.LiveSocket.live_regroup). Not for news that ends
    # none: every socket of the workspace hears it, and its topics stay as they are (one who
    # joins hears nothing on the workspace's topic yet).
    regroups: bool = False


# Every live event a browser may hear (docs/protocol.md §7). tests/test_live_events.py applies
# each one an action emits to a client's state and compares it with a fresh REST read.
LIVE_EVENTS: dict[str, LiveEvent] = {
    "conversation.created": LiveEvent(("conversation_id",)),
    "conversation.updated": LiveEvent(("conversation",)),
    "conversation.capped": LiveEvent(("conversation_id", "streak", "cap")),
    "message.created": LiveEvent(("message", "conversation_kind")),
    "message.updated": LiveEvent(("message", "conversation_kind")),
    "typing": LiveEvent(("conversation_id", "user")),
    # An agent's reply as it is written: ephemeral, never stored (work.consumers.on_draft).
    "message.draft": LiveEvent(("conversation_id", "work_id", "reply_to", "agent", "text")),
    "task.created": LiveEvent(("task",)),
    "task.started": LiveEvent(("task",)),
    "task.progress": LiveEvent(("task_id", "seq", "data")),
    "task.cancel_requested": LiveEvent(("task",)),
    "task.finished": LiveEvent(("task",)),
    "artifact.updated": LiveEvent(("conversation_id", "artifact", "author", "note")),
    "artifact.commented": LiveEvent(("conversation_id", "artifact", "comment_id")),
    "agent.presence": LiveEvent(("agent_id", "online")),
    "tool.updated": LiveEvent(("call",)),
    "workspace.renamed": LiveEvent(("workspace_id",)),
    "workspace.deleted": LiveEvent(("workspace_id",), regroups=True),
    "member.joined": LiveEvent(("workspace_id",)),
    "member.role_changed": LiveEvent(("workspace_id",)),
    "member.removed": LiveEvent(("workspace_id",), regroups=True),
    "member.left": LiveEvent(("workspace_id",), regroups=True),
    # The person's inbox (workspaces.notifications), on their own topic only.
    "notification.created": LiveEvent(("notification", "unread_count")),
    "notification.read": LiveEvent(("notification_ids", "unread_count")),
    # Their text rewritten, as the message they quote was edited or deleted: all of one person's.
    "notification.updated": LiveEvent(("notifications",)),
}


def live_envelope(event_type: str, **data) -> dict:
    """The channel-layer message that brings a live event to browser sockets: the one place an
    envelope is built. Refuses a type not listed in LIVE_EVENTS, or data not what it carries."""
    spec = LIVE_EVENTS[event_type]
    if set(data) != set(spec.carries):
        raise ValueError(f"{event_type} carries {spec.carries}, not {tuple(data)}")
    return {
        "type": "live.regroup" if spec.regroups else "live.event",
        "event": {"type": event_type, **data},
    }


def publish_live(topics, event_type: str, **data) -> None:
    """A live event of EVENT_TYPE to browsers on TOPICS, after commit."""
    publish_many(topics, live_envelope(event_type, **data))


def work_available(agent_id, kind: str | None = None) -> dict:
    """The wake-up event for AGENT_ID's connections (and its host's supervisor, which starts a
    bridge that is down): work of KIND (a lane; None: any) may be waiting. Its id lets the
    connections of one process claim once for it, not once each. A wake-up still waiting for
    a busy socket takes in a newer one of the same lane (its ``fold``, core/channel_layer.py)."""
    return {
        "type": "work.available",
        "agent": str(agent_id),
        "kind": kind,
        "wake": uuid.uuid4().hex,
        "fold": f"work.available:{agent_id}:{kind}",
    }


def wake_agent(agent_id, kind: str | None = None) -> None:
    """Wake an agent's connections after commit."""
    publish(f"agent.{agent_id}", work_available(agent_id, kind))
