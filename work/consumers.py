"""The agent socket (the gateway): claims work for a connected bridge and takes its replies.

Frames are documented in docs/protocol.md. Each connection holds at most ``prefetch`` unacked
items. It claims on connect (catch-up), whenever its agent's topic says work is available, after
acks that free half the window of a lane it found full, and on each heartbeat, so a push lost by
the channel layer only delays an item until the next of these (MSG-3…5, MSG-7).
"""

import asyncio
import logging
import time
import uuid
from collections import Counter, OrderedDict
from concurrent.futures import ThreadPoolExecutor
from urllib.parse import parse_qs
from weakref import WeakKeyDictionary, WeakSet

from channels.db import database_sync_to_async
from django.conf import settings
from django.db import close_old_connections
from django.utils import timezone

from agents import actions
from agents.access import session_for_token, session_is_live, workspaces_of_agent
from agents.auth import bearer_secret
from agents.models import Agent
from agntchat.core import presence
from agntchat.core.claims import NotHeld
from agntchat.core.events import (
    apublish_now,
    group_name,
    live_envelope,
    publish_live,
    wire,
    work_available,
)
from agntchat.core.logs import traced
from agntchat.core.sockets import SERVER_FAILED, FrameError, JsonSocket, frame_data, header
from artifacts import frames as artifact_frames
from conversations import actions as conversation_actions
from conversations import drafts, tasks, threads, turns
from conversations.access import access_conversation, access_message
from conversations.live import audience_topics
from conversations.models import Message, Task
from conversations.usage import record_usage
from work import approvals, directives, frames, gateway
from work.tools import calls

log = logging.getLogger(__name__)


# The event loops whose default pool is sized already (in_pool).
_sized_loops: WeakSet = WeakSet()


def in_pool(func):
    """Claims and acks of many connections run side by side in the thread pool, not queued on
    Django's one sync thread: each is short, self-contained, and mostly waits on PostgreSQL.
    The pool is the loop's default one, sized to SOCKET_THREADS (sized_pool)."""

    def run(*args, **kwargs):
        try:
            return func(*args, **kwargs)
        finally:
            # Here, in the context that took the pooled connection: channels closes old
            # connections around this call but outside that context, so it never saw this one,
            # and the connection stayed out of the pool for good.
            close_old_connections()

    threaded = database_sync_to_async(run, thread_sensitive=False)

    async def call(*args, **kwargs):
        sized_pool(asyncio.get_running_loop())
        return await threaded(*args, **kwargs)

    return call


def sized_pool(loop) -> None:
    """LOOP's default thread pool holds SOCKET_THREADS threads: asyncio's own grows with the
    machine (CPUs + 4, up to 32), each thread holding a pooled database connection while it
    works, past the pool's size (settings). The loop's, so that closing the loop waits for them."""
    if loop not in _sized_loops:
        _sized_loops.add(loop)
        loop.set_default_executor(
            ThreadPoolExecutor(settings.SOCKET_THREADS, thread_name_prefix="sockets")
        )


# A tool handler may wait on the network for its whole time (web_fetch, 20 s): in the pool that
# claims and acks every socket's work, a few at once would hold up the whole node. At most
# TOOL_THREADS of its threads run tool calls; more wait here for one of those to end.
_tool_slots: WeakKeyDictionary = WeakKeyDictionary()


def tool_slots() -> asyncio.Semaphore:
    loop = asyncio.get_running_loop()
    slots = _tool_slots.get(loop)
    if slots is None:
        slots = _tool_slots[loop] = asyncio.Semaphore(settings.TOOL_THREADS)
    return slots


# Wake-ups some connection of this process already claimed for, newest last (bounded).
HANDLED_WAKES: OrderedDict[str, None] = OrderedDict()
# Open connections per agent in this process: who could have skipped a wake-up.
LOCAL_CONNECTIONS: Counter = Counter()
# Decided permission requests a connection takes at a time: each is a few bytes and is acked
# as soon as the bridge has it.
PERMISSION_ROOM = 20
SESSION_ENDED = {
    "revoked": "The agent key of this session was revoked.",
    "deleted": "The agent was deleted by its owner.",
    "expired": "The session expired; renew it in time with a 'session.renew' frame.",
}
ARTIFACT_FRAMES = {
    "artifact.publish": artifact_frames.publish_artifact,
    "artifact.update": artifact_frames.update_artifact,
    "card.post": artifact_frames.post_card,
}


@in_pool  # as the two reads of a connect below: a burst of connects is not queued on one thread
def _session_for(secret):
    return session_for_token(secret) if secret and secret.startswith("ags_") else None


@in_pool  # one hop for all of it: at 10,000 agents a heartbeat's cost is a node's CPU
def _trip(socket, beat_session, acks, rooms):
    """A claim's trip to the pool for SOCKET (an AgentSocket): with BEAT_SESSION (a heartbeat's
    session id) the session is checked first (None if it no longer opens doors) and the
    presence refreshed; then ACKS written (``gateway.write_bare_acks``) and ROOMS claimed."""
    agent, connection_id = socket.agent, socket.connection_id
    if beat_session is not None:
        if not session_is_live(beat_session):
            return None
        presence.beat(agent.id, connection_id)
        if rooms:  # mostly nothing waits: one probe, not a claim per lane that finds nothing
            rooms = {kind: rooms[kind] for kind in gateway.waiting_kinds(agent, rooms)}
    if not rooms and not acks:
        return set(), []
    not_held = gateway.write_bare_acks(acks, connection_id) if acks else set()
    # The claim takes the socket's agent as it is now, not as the trip began: the acks' write
    # (turns handed on) may take long, and work posted meanwhile, after a change the socket
    # heard meanwhile (agent_changed), must be claimed with that change.
    return not_held, gateway.claim_work(socket.agent, connection_id, rooms) if rooms else []


@database_sync_to_async
def _post(agent, data):
    if data["stopped"] and not conversation_actions.turn_stopped(agent.id, data["reply_to"]):
        # Only a person's Stop licenses a blank or stopped reply (one Redis read, only then).
        data = frames.as_unstopped(data)
    conversation = access_conversation(agent, data["conversation_id"])
    reply_to = access_message(agent, data["reply_to"]) if data["reply_to"] else None
    return conversation_actions.post_message(
        agent,
        conversation,
        data["body"],
        reply_to=reply_to,
        kind=Message.Kind.NOTICE if data["notice"] else Message.Kind.TEXT,
        payload=_reply_marks(agent, reply_to, data),
        client_ref=data["ref"],
        attachments=data["attachments"],
    )


def _reply_marks(agent, reply_to, data) -> dict | None:
    """A reply's marks (streaming replies): stopped by a person (only if a Stop was recorded:
    _post), and regenerated from an earlier reply to the same message
    (conversations.actions.regenerate_reply)."""
    marks = {"stopped": True} if data["stopped"] else {}
    earlier = (reply_to.payload.get("regenerated") or {}).get(str(agent.id)) if reply_to else None
    if earlier and not data["notice"]:
        marks["regenerated_from"] = earlier
    return marks or None


@database_sync_to_async
def _draft_audience(agent, conversation_id) -> list[str]:
    return audience_topics(access_conversation(agent, conversation_id))


def _announce_presence(agent) -> None:
    """Browsers of every workspace the agent appears in see its dot change at once."""
    publish_live(
        [f"workspace.{w}" for w in workspaces_of_agent(agent).values_list("id", flat=True)],
        "agent.presence",
        agent_id=agent.id,
        online=presence.is_online(agent.id),
    )


def _task_in_reach(agent, task_id) -> None:
    """AGENT may still work where its held task TASK_ID was asked (else OutOfReach, as for its
    tool calls: work.tools.calls.held_item)."""
    calls.task_in_reach(agent, Task.objects.values_list("workspace_id", flat=True).get(pk=task_id))


@database_sync_to_async
def _done(agent, data):
    conversation = access_conversation(agent, data["conversation_id"])
    turns.mark_done(agent, conversation)
    return conversation


@database_sync_to_async
def _resolve(agent, data):
    conversation = access_conversation(agent, data["conversation_id"])
    return threads.resolve_thread(agent, conversation, data["summary"])


@database_sync_to_async
def _record_task_usage(agent, task_id, usage):
    """Usage reported with a task's result (RUN-8)."""
    task = tasks.access_task(agent, task_id)
    record_usage(
        agent, task.workspace_id, usage, conversation_id=task.conversation_id, task_id=task.id
    )


@database_sync_to_async
def _personality_set(agent, data):
    return actions.set_personality(agent, data["text"], author=agent)


@database_sync_to_async
def _personality_get(agent):
    return Agent.objects.values_list("personality", flat=True).get(pk=agent.pk)


def _configured_agent(agent_id) -> Agent:
    """The agent as configured now, with its granted tools and its skills' index read (the
    claims' directives use them, and a claim reads nothing more)."""
    agent = Agent.objects.get(pk=agent_id)
    directives.tools_and_skills(agent)
    return agent


# The least time between two drafts of one item passed on to browsers (the bridge sends one
# every 80 ms at most; a faster client only loses the drafts in between).
DRAFT_SECONDS = 0.05


# Who may read a turn's drafts, and whether its agent may still write there, is looked up again
# this often while the turn goes on: someone removed meanwhile stops getting its text, and an
# agent that lost access stops showing any, within this bound (not at every draft: a turn sends
# up to one every DRAFT_SECONDS).
AUDIENCE_SECONDS = 1.0


class DraftState:
    """Where the drafts of one chat turn go: read from its work frame's payload; the topics
    are looked up at its first draft, and again every AUDIENCE_SECONDS."""

    def __init__(self, payload: dict):
        self.conversation_id = (payload.get("conversation") or {}).get("id")
        self.reply_to = (payload.get("message") or {}).get("id")
        self.topics: list[str] | None = None
        self.checked_at = float("-inf")
        self.sent_at = float("-inf")


class AgentSocket(JsonSocket):
    socket_kind = "agent"
    check_in_frame = "heartbeat"  # what refreshes its presence (fill with beat)
    # Frame type → handler, and the serializer that validates the frame before it is used.
    handlers = {
        "ack": ("on_ack", frames.AckFrame),
        "heartbeat": ("on_heartbeat", frames.EmptyFrame),
        "extend": ("on_extend", frames.ItemFrame),
        "event": ("on_event", frames.EventFrame),
        "result": ("on_result", frames.ResultFrame),
        "post": ("on_post", frames.PostFrame),
        "configure": ("on_configure", frames.ConfigureFrame),
        "done": ("on_done", frames.ConversationFrame),
        "thread.resolve": ("on_thread_resolve", frames.ResolveFrame),
        # Validated by the artifacts app's own frame functions.
        "artifact.publish": "on_artifact_frame",
        "artifact.update": "on_artifact_frame",
        "card.post": "on_artifact_frame",
        "personality.get": ("on_personality_get", frames.EmptyFrame),
        "personality.set": ("on_personality_set", frames.PersonalitySetFrame),
        "session.renew": ("on_session_renew", frames.SessionRenewFrame),
        "tool.call": ("on_tool_call", frames.ToolCallFrame),
        "draft": ("on_draft", frames.DraftFrame),
    }
    frame_rate = ("AGENT_FRAMES_PER_MINUTE", "AGENT_FRAMES_BURST")

    async def connect(self):
        self.session = await _session_for(bearer_secret(header(self.scope, b"authorization")))
        if self.session is None:
            await self.refuse(
                "A valid agent session token is required (Authorization: Bearer ags_…)."
            )
            return
        connection_id = uuid.uuid4().hex
        cap = settings.AGENT_MAX_CONNECTIONS
        self.checked_in_at = time.monotonic()  # before its place's TTL starts: closed in time
        if not await in_pool(presence.join)(self.session.agent_id, connection_id, cap):
            await self.refuse(
                f"This agent has {cap} open connections already, the most allowed "
                "(AGENT_MAX_CONNECTIONS); close one first.",
                "too_many_connections",
                4429,
            )
            return
        self.agent = await in_pool(_configured_agent)(self.session.agent_id)
        query = parse_qs(self.scope.get("query_string", b"").decode())
        self.connection_id = connection_id
        self.held: dict[str, str] = {}  # item id → kind
        self.traces: dict[str, str] = {}  # item id → its trace (logs), while held
        self.drafting: dict[str, DraftState] = {}  # message item id → its draft's audience
        self.recently_acked: OrderedDict[str, str] = OrderedDict()  # id → kind
        # Separate room per lane (RUN-7): chat messages never wait behind long tasks.
        self.capacity = {"message": 1, "task": 1, "permission": PERMISSION_ROOM}
        self.starved: set[str] = set()  # lanes that may have work this connection had no room for
        # Bare acks received and not yet written: the bridge is done with those items, so no
        # frame may act on them any more. ``acking`` holds those waiting for the next trip.
        self.acked: set[str] = set()
        self.acking: list[str] = []
        self.acker: asyncio.Task | None = None  # writes them, a batch per trip
        self.claiming = asyncio.Lock()  # one claim at a time, or two could overfill the window
        self.tool_runs: set[asyncio.Task] = set()  # tool calls under way (they run beside frames)
        self.closing = False
        self.released = False
        self.topic = group_name(f"agent.{self.agent.id}")
        await self.accept()
        self.watch_check_ins()
        try:
            self.configure(frame_data(frames.ConfigureQuery, {k: v[0] for k, v in query.items()}))
        except FrameError as exc:
            await self.send_error(exc.code, exc.message, fields=exc.fields)
        await self.follow_session(self.session)
        await self.channel_layer.group_add(self.topic, self.channel_name)
        LOCAL_CONNECTIONS[self.agent.id] += 1
        self.counted = True
        await database_sync_to_async(presence.beat)(self.agent.id, self.connection_id)
        await database_sync_to_async(_announce_presence)(self.agent)
        await self.send_json(
            wire(
                {
                    "type": "hello",
                    "agent_id": self.agent.id,
                    "connection_id": self.connection_id,
                    "prefetch": self.capacity["message"],
                    "tasks": self.capacity["task"],
                }
            )
        )
        await self.fill()

    async def follow_session(self, session) -> None:
        """Serve under SESSION until it is revoked (its topic says so, on whichever node the
        revocation happened) or expires (a timer, so an idle socket closes too)."""
        old_group = getattr(self, "session_group", None)
        if getattr(self, "expiry", None) is not None:
            self.expiry.cancel()
        self.session = session
        self.session_group = group_name(actions.session_topic(session.id))
        await self.channel_layer.group_add(self.session_group, self.channel_name)
        if old_group is not None and old_group != self.session_group:
            await self.channel_layer.group_discard(old_group, self.channel_name)
        self.expiry = asyncio.create_task(self.end_at_expiry(session))

    async def end_at_expiry(self, session) -> None:
        await asyncio.sleep(max(0.0, (session.expires_at - timezone.now()).total_seconds()))
        # Through the channel layer to this very socket: handled in turn, like any event.
        await self.channel_layer.send(
            self.channel_name, {"type": "session.ended", "reason": "expired"}
        )

    async def release(self):
        """Stop claiming, keep what was acked, give back every unacked item at once, go offline."""
        if getattr(self, "connection_id", None) is None or self.released:
            return
        self.released = True
        self.closing = True
        if getattr(self, "expiry", None) is not None:
            self.expiry.cancel()
        for run in list(getattr(self, "tool_runs", ())):
            run.cancel()  # a handler already running finishes in its thread, answered to no one
        await self.channel_layer.group_discard(self.topic, self.channel_name)
        if getattr(self, "session_group", None) is not None:
            await self.channel_layer.group_discard(self.session_group, self.channel_name)
        if self.acker is not None and self.acker is not asyncio.current_task():
            await self.acker  # what the bridge acked stays acked; nothing more is claimed
        if getattr(self, "counted", False):
            LOCAL_CONNECTIONS[self.agent.id] -= 1
            if LOCAL_CONNECTIONS[self.agent.id] <= 0:
                del LOCAL_CONNECTIONS[self.agent.id]
        # In the pool, as a connect's reads: a mass disconnect is not queued on one thread.
        released = await in_pool(gateway.release_work)(
            self.agent.id, self.connection_id, dict(self.held)
        )
        self.held.clear()
        self.traces.clear()
        await self.end_drafts(list(getattr(self, "drafting", ())))
        await in_pool(presence.leave)(self.agent.id, self.connection_id)
        await in_pool(_announce_presence)(self.agent)
        if released:
            # Its unacked items are free again at once: wake the agent's other connections.
            await apublish_now(f"agent.{self.agent.id}", work_available(self.agent.id))

    async def session_ended(self, event):
        """The session was revoked or ran out: the socket closes now, on every node (4401)."""
        await self.send_error(
            "unauthorized", SESSION_ENDED.get(event.get("reason"), "The session ended.")
        )
        await self.hang_up(4401)

    def room(self, kind: str) -> int:
        return self.capacity[kind] - sum(1 for k in self.held.values() if k == kind)

    def wants_refill(self, freed: int = 0) -> bool:
        """With a backlog, refill once half the window is free (FREED: slots about to be):
        one claim, and one payload read, for several items while the bridge still works on the
        other half."""
        room = self.room("message") + freed
        return "message" in self.starved and room >= max(1, self.capacity["message"] // 2)

    async def fill(
        self, only: str | None = None, acks=(), claim: bool = True, beat: bool = False
    ) -> set[str] | None:
        """Claim as many items as this connection has room for and push them (ONLY: one lane;
        CLAIM false: no claim). ACKS: bare acks of message items to write first, and BEAT: a
        heartbeat's session check and presence, in the same trip. Return the lanes where a
        claim took all the room (more work may be waiting), or None if the beat found the
        session ended."""
        async with self.claiming:
            freed = sum(1 for item_id in acks if item_id in self.held)  # once these are written
            # Nothing new for a closing socket, nor for one whose session ran out a moment ago.
            claim = claim and not self.closing and timezone.now() < self.session.expires_at
            rooms = {
                kind: self.room(kind) + (freed if kind == "message" else 0)
                for kind in self.capacity
                if claim and only in (None, kind)
            }
            # A lane that was full, or filled to the brim, may have more waiting: claim again
            # there when slots free up. Otherwise a free slot waits for the next wake-up event.
            self.starved |= {kind for kind, room in rooms.items() if room <= 0}
            rooms = {kind: room for kind, room in rooms.items() if room > 0}
            if not rooms and not acks and not beat:
                return set()
            done = await _trip(self, self.session.id if beat else None, list(acks), rooms)
            if done is None:
                return None
            not_held, frames = done
            for item_id in acks:
                self.held.pop(item_id, None)
                if item_id not in not_held:
                    self.remember_done(item_id, "message")
            full = {
                kind
                for kind, room in rooms.items()
                if sum(f["kind"] == kind for f in frames) >= room
            }
            self.starved = (self.starved - set(rooms)) | full
            for item_id in acks:
                if item_id not in not_held:
                    self.log_done("work acked", item_id, "message")
            for frame in frames:
                self.held[frame["id"]] = frame["kind"]
                self.traces[frame["id"]] = str(frame["trace"])
                if frame["kind"] == "message":
                    self.drafting[frame["id"]] = DraftState(frame["payload"])
                await self.send_json(frame)
        for item_id in not_held:
            # Its lease ran out and another connection has it now; the slot here is free.
            await self.send_error(NotHeld.code, NotHeld.default_message, {"id": item_id})
        return full

    async def receive(self, text_data=None, bytes_data=None, **kwargs):
        if timezone.now() >= self.session.expires_at:
            # The timer closes an idle socket; a frame that comes first is refused all the same.
            await self.session_ended({"reason": "expired"})
            return
        await super().receive(text_data, bytes_data, **kwargs)

    # Events from the channel layer.
    async def work_available(self, event):
        """A wake-up reaches every connection of the agent. For work in one lane, the first
        connection of this process with room there claims; the others would come back empty.
        A wake-up for any lane (a released batch, rare) is claimed for by every connection."""
        lane, wake = event.get("kind"), event.get("wake")
        if lane is not None and wake is not None:
            if wake in HANDLED_WAKES:
                return
            if self.room(lane) > 0:
                HANDLED_WAKES[wake] = None  # before the claim's await: siblings see it at once
                if len(HANDLED_WAKES) > 1000:
                    HANDLED_WAKES.popitem(last=False)
        full = await self.fill(lane)
        if lane in full and LOCAL_CONNECTIONS[self.agent.id] > 1:
            # This claim filled the lane here, and siblings in this process skipped the wake-up:
            # more may wait for them. Pass it on. (Other processes claimed for it themselves.)
            await apublish_now(f"agent.{self.agent.id}", work_available(self.agent.id, lane))

    async def task_cancel(self, event):
        if self.held.get(event["id"]) == "task":
            await self.send_json({"type": "cancel", "id": event["id"]})
            # As on a Stop: what the task waited to have approved is withdrawn.
            await in_pool(approvals.withdraw_stopped_requests)("task", event["id"])

    # ---- streaming replies (issue 28): drafts of a chat turn, and Stop ----------------------

    async def turn_stop(self, event):
        """A person pressed Stop on a chat turn: the bridge holding it cancels the turn, posts
        what it has marked stopped, and acks (conversations.actions.stop_turn)."""
        if self.held.get(event["id"]) == "message":
            await self.send_json({"type": "cancel", "id": event["id"]})
            # What the turn waited to have approved is withdrawn: no Approve runs it now.
            await in_pool(approvals.withdraw_stopped_requests)("message", event["id"])

    async def on_draft(self, data):
        """The growing text of a chat turn this connection holds, passed on to the browsers
        that may read the conversation as an ephemeral live event (nothing is stored). At most
        one every DRAFT_SECONDS per item: each draft carries the whole text so far, so one
        dropped in between loses nothing."""
        item_id = data["id"]
        if self.holds(item_id) != "message":
            raise FrameError("This connection does not hold that item.", code="not_held")
        for stale in [i for i in self.drafting if i not in self.held]:
            del self.drafting[stale]
        state = self.drafting.setdefault(item_id, DraftState({}))
        now = asyncio.get_running_loop().time()
        if not state.conversation_id or now - state.sent_at < DRAFT_SECONDS:
            return
        if now - state.checked_at >= AUDIENCE_SECONDS:
            state.topics = await _draft_audience(self.agent, state.conversation_id)
            state.checked_at = now
        state.sent_at = now
        envelope = live_envelope(
            "message.draft",
            conversation_id=state.conversation_id,
            work_id=item_id,
            reply_to=state.reply_to,
            agent={"id": str(self.agent.id), "name": self.agent.name},
            text=data["text"],
        )
        for topic in state.topics:
            await apublish_now(topic, envelope)
        # Kept too, for a person who opens the conversation while the turn goes on.
        await in_pool(drafts.keep_draft)(state.conversation_id, item_id, envelope["event"])

    async def end_drafts(self, item_ids) -> None:
        """These turns ended (acked, or released with the connection): their kept drafts go."""
        for item_id in item_ids:
            state = self.drafting.pop(item_id, None)
            if state is not None and state.topics is not None:  # it had a draft published
                await in_pool(drafts.drop_draft)(state.conversation_id, item_id)

    def holds(self, item_id: str) -> str | None:
        """The kind of ITEM_ID if the bridge may still act on it here (held, not acked)."""
        return None if item_id in self.acked else self.held.get(item_id)

    # Frames from the bridge, each validated by its serializer (see ``handlers``).
    async def on_ack(self, data):
        item_id = data["id"]
        kind = self.held.get(item_id)
        if kind is None or item_id in self.acked:
            if item_id in self.recently_acked or item_id in self.acked:
                return  # acks are idempotent
            raise FrameError("This connection does not hold that item.", code="not_held")
        if kind == "task":
            raise FrameError("A task ends with a 'result' frame, not an ack.")
        if kind == "permission":
            await self.ack_permission(item_id)
            return
        if data["done"] or data["usage"] is not None:
            await self.ack_reporting(item_id, data)
            return
        # Bare acks are written by one task, a batch per trip: those that arrive while a trip
        # is under way go together in the next, with the refill they make room for.
        self.acked.add(item_id)
        self.acking.append(item_id)
        if self.acker is None or self.acker.done():
            self.acker = asyncio.create_task(self.write_acks())

    async def write_acks(self):
        while self.acking:
            acks, self.acking = self.acking, []
            try:
                await self.fill("message", acks=acks, claim=self.wants_refill(freed=len(acks)))
            except Exception:
                self.acked.clear()
                # Not a bad frame: the database failed. Hang up as a crashed handler would; the
                # bridge reconnects and whatever was not acked is offered again.
                log.exception("writing acks failed")
                self.acking.clear()
                await self.hang_up(SERVER_FAILED)
                return
            self.acked.difference_update(acks)
            await self.end_drafts(acks)

    async def ack_reporting(self, item_id: str, data: dict):
        """An ack with the turn's usage or "done": written on its own, with what it reports."""
        try:
            await in_pool(gateway.ack_work)(
                item_id, self.connection_id, data["done"], data["usage"]
            )
        except NotHeld:
            # Its lease ran out and another connection has it now: free the slot here.
            self.held.pop(item_id, None)
            self.traces.pop(item_id, None)
            await self.fill()
            raise
        self.held.pop(item_id, None)
        self.remember_done(item_id, "message")
        self.log_done("work acked", item_id, "message", usage=data["usage"], done=data["done"])
        await self.end_drafts([item_id])
        if self.wants_refill():
            await self.fill("message")

    async def ack_permission(self, item_id: str) -> None:
        """The bridge has a decision: the request leaves the queue and its slot is free."""
        try:
            await in_pool(gateway.ack_permission)(item_id, self.connection_id)
        except NotHeld:
            self.traces.pop(item_id, None)
            raise
        finally:
            self.held.pop(item_id, None)
        self.remember_done(item_id, "permission")
        self.log_done("work acked", item_id, "permission")
        if "permission" in self.starved:
            await self.fill("permission")

    def log_done(self, text: str, item_id: str, kind: str, usage=None, **fields) -> None:
        """The end of an item's path here, traced as its claim was; forgets its trace."""
        trace = self.traces.pop(item_id, None)
        if not log.isEnabledFor(logging.INFO):
            return
        if isinstance(usage, dict):
            fields["backend"] = str(usage.get("backend", ""))[:20]
            fields["latency_ms"] = usage.get("latency_ms")
        log.info(
            text,
            extra={
                "trace": trace or item_id,
                "kind": kind,
                "item": item_id,
                "agent": str(self.agent.id),
                "connection": self.connection_id,
                **fields,
            },
        )

    def remember_done(self, item_id: str, kind: str) -> None:
        self.recently_acked[item_id] = kind
        if len(self.recently_acked) > 1000:
            self.recently_acked.popitem(last=False)

    async def on_event(self, data):
        """Progress of an item; it also extends the item's lease (the run is alive)."""
        item_id = data["id"]
        kind = self.holds(item_id)
        if kind is None and self.recently_acked.get(item_id) == "task":
            # An event after the terminal result breaks the contract: recorded, refused.
            await database_sync_to_async(tasks.record_event)(item_id, data["event"])
        if kind is None:
            raise FrameError("This connection does not hold that item.", code="not_held")
        await self.check_reach(kind, item_id)
        await database_sync_to_async(gateway.extend_work)(kind, item_id, self.connection_id)
        if kind == "task":
            await database_sync_to_async(tasks.record_event)(item_id, data["event"])

    async def on_result(self, data):
        """The one terminal result of a task."""
        item_id = data["id"]
        if self.held.get(item_id) != "task" and self.recently_acked.get(item_id) != "task":
            raise FrameError("This connection does not hold that task.", code="not_held")
        try:
            await database_sync_to_async(tasks.record_result)(
                item_id,
                data["status"],
                connection_id=self.connection_id,
                result=data["result"],
                error=data["error"],
            )
        except (NotHeld, tasks.ProtocolError):
            # Its lease ran out and another connection has it now, or it ended without this
            # result (cancelled when its agent left the workspace): the slot here is free.
            self.held.pop(item_id, None)
            self.traces.pop(item_id, None)
            await self.fill()
            raise
        if data["usage"] is not None:
            await _record_task_usage(self.agent, item_id, data["usage"])
        self.held.pop(item_id, None)
        self.remember_done(item_id, "task")
        self.log_done("task result", item_id, "task", usage=data["usage"], status=data["status"])
        await self.send_json({"type": "result.accepted", "id": item_id})
        await self.fill("task")

    async def on_done(self, data):
        """The agent is done in a conversation: not woken there until something new (TURN-3)."""
        conversation = await _done(self.agent, data)
        await self.send_json(wire({"type": "done.noted", "conversation_id": conversation.id}))

    async def on_thread_resolve(self, data):
        thread = await _resolve(self.agent, data)
        await self.send_json(wire({"type": "thread.resolved", "conversation_id": thread.id}))

    async def on_artifact_frame(self, frame):
        """Artifacts and result cards: the artifacts app answers these frames (ART, CARD)."""
        handler = ARTIFACT_FRAMES[frame["type"]]
        await self.send_json(await database_sync_to_async(handler)(self.agent, frame))

    async def on_personality_get(self, data):
        text = await _personality_get(self.agent)
        await self.send_json({"type": "personality", "text": text})

    async def on_personality_set(self, data):
        revision = await _personality_set(self.agent, data)
        await self.send_json(wire({"type": "personality.saved", "revision_id": revision.id}))

    async def on_tool_call(self, data):
        """A tool call of a turn this connection holds. It runs beside the socket's other
        frames (a tool may take a while; acks, extends and heartbeats must not wait behind it)
        and is answered with one ``tool.result``."""
        kind = self.holds(data["id"])
        if kind not in ("message", "task"):
            raise FrameError("This connection does not hold that item.", code="not_held")
        run = asyncio.create_task(self.run_tool_call(kind, data))
        self.tool_runs.add(run)
        run.add_done_callback(self.tool_runs.discard)

    async def run_tool_call(self, kind: str, data: dict) -> None:
        try:
            answer, prepared = await in_pool(calls.call_tool)(
                self.agent, self.connection_id, kind, data["id"], data["call_id"], data["name"],
                data["input"],
            )  # fmt: skip
            if prepared is not None:
                answer = await self.run_prepared(prepared)
        except NotHeld as exc:
            await self.send_error(exc.code, exc.message, {"id": data["id"], "ref": data["ref"]})
            return
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("tool call %s failed", data["call_id"])
            answer = calls.Answer(
                data["call_id"], False,
                error={"code": "tool_error", "message": "The server failed on this tool call."},
            )  # fmt: skip
        frame = answer.frame()
        if data["ref"]:
            frame["ref"] = data["ref"]
        await self.send_json(wire(frame))

    async def run_prepared(self, prepared) -> "calls.Answer":
        """Run the handler in the pool, for at most the tool's time: past it the model is told,
        and the handler's work, should it still finish, is rolled back (calls.Guard)."""
        guard = calls.Guard()
        slots = tool_slots()
        await slots.acquire()
        running = asyncio.ensure_future(in_pool(calls.run_prepared)(prepared, guard))
        running.add_done_callback(lambda _: slots.release())  # when the thread is done
        try:
            return await asyncio.wait_for(asyncio.shield(running), prepared.tool.timeout_seconds)
        except TimeoutError:
            if guard.give_up():
                return calls.timeout_answer(prepared)
            return await running  # it was committing its outcome already

    async def agent_changed(self, event):
        """The agent's owner changed its configuration or tools: later work uses them."""
        self.agent = await database_sync_to_async(_configured_agent)(self.agent.id)

    async def check_reach(self, kind: str, item_id: str) -> None:
        """An agent that can no longer act where a held item is (taken out of the message's
        conversation, pinned elsewhere, its owner left the workspace) cannot keep the item
        either: the frame extending its lease is refused, and the lease runs out."""
        if kind == "task":
            await in_pool(_task_in_reach)(self.agent, item_id)
            return
        state = self.drafting.get(item_id)
        if state is not None and state.conversation_id:
            await in_pool(access_conversation)(self.agent, state.conversation_id)

    async def on_extend(self, data):
        item_id = data["id"]
        kind = self.holds(item_id)
        if kind is None:
            raise FrameError("This connection does not hold that item.", code="not_held")
        await self.check_reach(kind, item_id)
        try:
            expires = await database_sync_to_async(gateway.extend_work)(
                kind, item_id, self.connection_id
            )
        except NotHeld:
            self.held.pop(item_id, None)
            self.traces.pop(item_id, None)
            raise
        await self.send_json(wire({"type": "extended", "id": item_id, "lease_expires_at": expires}))

    async def on_heartbeat(self, data):
        beat_at = time.monotonic()  # no later than the beat's presence refresh
        if await self.fill(beat=True) is None:
            # Its topic said so at once, unless the channel layer lost that event.
            await self.session_ended({})
            return
        self.checked_in_at = beat_at

    async def on_session_renew(self, data):
        """A newer session token of the same agent: the socket goes on under that session, so a
        bridge renewing before expiry keeps its socket and the items its turns hold."""
        session = await _session_for(data["token"])
        if session is None or session.agent_id != self.agent.id:
            raise FrameError("A live session token of this agent is required.", code="unauthorized")
        await self.follow_session(session)
        # Read afresh: its configuration may have changed since.
        self.agent = await database_sync_to_async(_configured_agent)(session.agent_id)
        await self.send_json(wire({"type": "session.renewed", "expires_at": session.expires_at}))

    def configure(self, data: dict) -> None:
        for name, kind in (("prefetch", "message"), ("tasks", "task")):
            if name in data:
                self.capacity[kind] = data[name]

    async def on_configure(self, data):
        self.configure(data)
        await self.send_json(
            {
                "type": "configured",
                "prefetch": self.capacity["message"],
                "tasks": self.capacity["task"],
            }
        )
        await self.fill()

    async def on_post(self, data):
        # A reply carries the trace of the message it answers: its records join that path.
        with traced(data["reply_to"]):
            message = await _post(self.agent, data)
        reply = {"type": "posted", "message_id": message.id}
        if data["ref"]:
            reply["ref"] = data["ref"]
        if message.held_at is not None:
            # Posted, but held by the loop guard until a person speaks: ack as usual.
            reply["held"] = True
        if message.payload.get("dm_error"):
            reply["warnings"] = [
                {"code": "side_thread_invalid", "message": message.payload["dm_error"]}
            ]
        await self.send_json(wire(reply))
