"""The bridge: one agent's runtime, the same on a laptop or a host (AGT-3, AGT-5, RUN-2, RUN-7).

It exchanges the agent key for a session token, reads the agent's model configuration, opens the
agent socket, and works what the server pushes: chat messages in one lane, tasks in another,
each with its own concurrency limit. A work item is acknowledged only after its outcome (reply,
notice or result) is accepted by the server; while a turn runs, the item's lease is extended,
so a crash mid-turn means redelivery — and the reply's ref makes a redone post the same message.
No Django here: it speaks only the documented protocol (docs/protocol.md) and REST.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
import os
import random
import time
from collections import Counter, OrderedDict
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

import httpx
import websockets

from .backends.base import (
    REASON_CHARS,
    Backend,
    BackendError,
    Event,
    ToolOutcome,
    Turn,
    clip,
    make_backend,
    run_to_result,
)

log = logging.getLogger("agntchat.bridge")


# The server's limit on a frame: bytes of its UTF-8 text (docs/protocol.md §2).
MAX_FRAME_BYTES = 1024 * 1024
# How long the server may take to answer one tool call (its tools stop well within this).
TOOL_ANSWER_SECONDS = 180
# A chat turn's growing text goes out as a ``draft`` frame at most this often (the latest text).
DRAFT_SECONDS = 0.08
# The longest message body the server takes (characters): a longer draft is not sent, a longer
# reply is cut to fit.
MAX_BODY = 20_000


# Variables whose keys a model's shell or a provider's error page can quote back.
KEY_VARIABLES = ("ANTHROPIC_API_KEY", "OPENAI_API_KEY", "CODEX_API_KEY")
# Shorter values are no secret worth the name ("ollama" for a local server) and blanking them
# would eat ordinary words.
SECRET_MIN_CHARS = 16


class FrameTooLarge(ValueError):
    """A frame the server would refuse for its size: not sent."""


class AuthError(Exception):
    """The key was refused: retrying will not help until someone fixes it."""


# Error codes of a refused frame that a later try may pass: the rest will refuse again.
REFUSALS_THAT_LIFT = {"rate_limited", "service_unavailable", "database_unavailable"}


class Refused(RuntimeError):
    """The server answered a frame with an ``error`` frame."""

    def __init__(self, code: str, message: str):
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message


@dataclass
class Config:
    url: str  # http(s)://host:port of the agntchat server
    key: str  # agk_… (never sent anywhere but the session endpoint)
    workdir: Path = Path.home() / ".agntchat" / "agents"
    chat_lanes: int = 2
    task_lanes: int = 1
    heartbeat_seconds: float = 20.0
    extend_seconds: float = 20.0  # well inside the server's 60 s lease
    backend_options: dict = field(default_factory=dict)
    max_backoff: float = 30.0

    @property
    def ws_url(self) -> str:
        return self.url.replace("https://", "wss://", 1).replace("http://", "ws://", 1).rstrip("/")


class SessionStore:
    """CLI session ids per conversation or task, kept on disk so a restarted bridge resumes."""

    def __init__(self, path: Path):
        self.path = path
        try:
            self.data = json.loads(path.read_text())
        except (OSError, ValueError):
            self.data = {}

    def get(self, key: str) -> dict:
        return self.data.get(key, {})

    def put(self, key: str, session_id: str | None, cli_state: dict) -> None:
        self.data[key] = {"session_id": session_id, "cli_state": cli_state}
        self.save()

    # A turn parked at a tool call that waits for a person's approval, by work item: what its
    # backend needs to resume there if the item comes back after a restart.
    def parked(self, item_id: str) -> dict | None:
        return self.data.get(f"parked:{item_id}")

    def park(self, item_id: str, state: dict) -> None:
        self.data[f"parked:{item_id}"] = state
        self.save()

    def unpark(self, item_id: str) -> None:
        if self.data.pop(f"parked:{item_id}", None) is not None:
            self.save()

    def save(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.data))
        tmp.replace(self.path)


def call_id_for(item_id: str, name: str, arguments: dict, occurrence: int) -> str:
    """The id of a tool call: the same for the same call made again when a turn is redone
    (same item, tool, arguments, and how many times this turn made it before), so the server
    runs it once and answers the redone turn with the stored outcome."""
    key = json.dumps([item_id, name, arguments, occurrence], sort_keys=True, ensure_ascii=False)
    return hashlib.sha256(key.encode()).hexdigest()[:40]


def fitted(body: str) -> str:
    """BODY as a message holds it: past MAX_BODY characters, cut, saying so. (A post the server
    refused would leave the item unacked, to be redelivered and answered again, for ever.)"""
    if len(body) <= MAX_BODY:
        return body
    note = f"\n\n[cut: {len(body):,} characters, over the {MAX_BODY:,} a message holds]"
    return clip(body, MAX_BODY - len(note)) + note


def outcome_of(answer: dict) -> ToolOutcome:
    if answer.get("ok"):
        return ToolOutcome(True, output=answer.get("output") or "")
    error = answer.get("error") or {}
    return ToolOutcome(False, error=error.get("message") or "the tool call failed")


# How a draft can fail to go out (named once: websockets imports its names on first use).
DRAFT_LOST = (ConnectionError, FrameTooLarge, websockets.WebSocketException)


class Drafts:
    """The growing text of one chat turn, sent as ``draft`` frames: at most one every
    DRAFT_SECONDS, always the whole text so far, the latest one last (a trailing send catches
    the deltas that came inside the interval)."""

    def __init__(self, bridge: Bridge, item_id: str):
        self.bridge = bridge
        self.item_id = item_id
        self.text = ""
        self.sent_at = 0.0
        self.sent_text = ""
        self.later: asyncio.Task | None = None

    def add(self, delta: str) -> None:
        self.text += delta
        wait = self.sent_at + DRAFT_SECONDS - time.monotonic()
        if self.later is None or self.later.done():
            self.later = asyncio.create_task(self.send_after(max(wait, 0)))

    async def send_after(self, seconds: float) -> None:
        if seconds:
            await asyncio.sleep(seconds)
        if self.text == self.sent_text or len(self.text) > MAX_BODY:
            return
        self.sent_at, self.sent_text = time.monotonic(), self.text
        # A lost draft costs nothing (the next carries the whole text, the reply ends it).
        with contextlib.suppress(*DRAFT_LOST):
            await self.bridge.send({"type": "draft", "id": self.item_id, "text": self.text})

    def close(self) -> None:
        if self.later is not None:
            self.later.cancel()


class Bridge:
    def __init__(self, config: Config, backend: Backend | None = None):
        self.config = config
        self.backend = backend  # set from the agent's configuration when None
        self.agent: dict = {}
        self.token: str | None = None
        self.token_expires = 0.0
        # Renew when less than this is left: a minute, or a third of a short session's life
        # (renewing at every beat would soon hit the server's limit on key exchanges).
        self.token_margin = 60.0
        self.ws = None
        self.socket_token: str | None = None  # the session the open socket serves under
        self.pending: dict[str, asyncio.Future] = {}
        self.running: dict[str, asyncio.Task] = {}  # item id → its handler
        # Chat items held, by id: None while waiting for a lane ("stop" once a person's Stop
        # came then: it ends as it starts), True while the model writes (a Stop cancels the turn
        # then), False once the reply is being posted (a late Stop must not interrupt the post
        # or ack).
        self.chats: dict[str, bool | str | None] = {}
        self.stopping = asyncio.Event()
        self.lanes = {
            "message": asyncio.Semaphore(config.chat_lanes),
            "task": asyncio.Semaphore(config.task_lanes),
        }
        # Per conversation: its lock, and how many held items wait for it or hold it.
        self.conversations: dict[str, tuple[asyncio.Lock, list[int]]] = {}
        self.sessions: SessionStore | None = None
        # Permission requests: tool calls waiting for a decision, and decisions that came in
        # (a decision may arrive before its call starts waiting for it).
        self.awaiting: dict[str, asyncio.Future] = {}
        self.decided: OrderedDict[str, dict] = OrderedDict()
        self.api_keys: set[str] = set()  # workspace keys handed over with work items

    # --- session and configuration -------------------------------------------------------

    async def ensure_token(self, now: float | None = None) -> str:
        """A session token valid for at least ``token_margin`` after NOW (a Unix time; by
        default the current one), refreshed before expiry."""
        now = time.time() if now is None else now
        if self.token and now < self.token_expires - self.token_margin:
            return self.token
        async with httpx.AsyncClient(base_url=self.config.url, timeout=15) as client:
            response = await client.post(
                "/api/v1/agent/session/", headers={"Authorization": f"Bearer {self.config.key}"}
            )
            if response.status_code == 401:
                raise AuthError("the server refused the agent key (revoked or wrong?)")
            response.raise_for_status()
            try:
                body = response.json()
                token, expires = body["token"], datetime.fromisoformat(body["expiresAt"])
                me = await client.get(
                    "/api/v1/agent/me/", headers={"Authorization": f"Bearer {token}"}
                )
                me.raise_for_status()
                agent = me.json()
            except (ValueError, KeyError, TypeError) as exc:
                # A proxy's page in place of the answer (a deploy, a wrong URL): tried again
                # like any failed request, where it ended the bridge.
                raise httpx.DecodingError(f"not an agntchat session answer ({exc!r})") from None
        self.token = token
        self.token_expires = expires.timestamp()
        self.token_margin = min(60.0, max(0.0, self.token_expires - now) / 3)
        self.agent = agent
        if self.backend is None:
            self.backend = make_backend(self.agent["backend"], **self.config.backend_options)
        if self.sessions is None:
            home = self.config.workdir / self.agent["id"]
            home.mkdir(parents=True, exist_ok=True)
            self.sessions = SessionStore(home / "sessions.json")
        return self.token

    @property
    def home(self) -> Path:
        return self.config.workdir / self.agent["id"]

    # --- connection ------------------------------------------------------------------------

    async def run_forever(self) -> None:
        """Connect, serve, and reconnect with backoff and jitter until stopped."""
        backoff = 1.0
        while not self.stopping.is_set():
            try:
                token = await self.ensure_token()
                query = f"prefetch={self.config.chat_lanes}&tasks={self.config.task_lanes}"
                async with websockets.connect(
                    f"{self.config.ws_url}/ws/agent/?{query}",
                    additional_headers={"Authorization": f"Bearer {token}"},
                    max_size=8 * 1024 * 1024,
                ) as ws:
                    self.ws = ws
                    self.socket_token = token
                    backoff = 1.0
                    await self.serve(ws)
            except AuthError as exc:
                log.error("%s; retrying in %.0fs", exc, self.config.max_backoff)
                await self.sleep(self.config.max_backoff)
            except (TimeoutError, OSError, websockets.WebSocketException, httpx.HTTPError) as exc:
                if (
                    isinstance(exc, websockets.ConnectionClosed)
                    and exc.rcvd
                    and exc.rcvd.code == 4401
                ):
                    self.token = (
                        None  # the session ended (revoked or expired): exchange the key again
                    )
                log.warning(
                    "connection lost (%s); reconnecting in ~%.0fs", exc.__class__.__name__, backoff
                )
                await self.sleep(backoff * (0.5 + random.random()))
                backoff = min(backoff * 2, self.config.max_backoff)
            finally:
                self.ws = None
                await self.abandon_running()

    async def stop(self) -> None:
        """Stop after the current frame; running work is abandoned and will be redelivered."""
        self.stopping.set()
        if self.ws is not None:
            await self.ws.close()

    async def sleep(self, seconds: float) -> None:
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(self.stopping.wait(), seconds)

    async def serve(self, ws) -> None:
        heartbeat = asyncio.create_task(self.heartbeats(ws))
        try:
            async for raw in ws:
                try:
                    frame = json.loads(raw)
                    await self.on_frame(frame)
                except (ValueError, KeyError, TypeError, AttributeError) as exc:
                    # A frame we cannot read (a proxy's error page, a newer server's shape) is
                    # passed over: ending here took the agent offline until someone restarted it.
                    log.warning("unreadable frame from the server passed over (%r)", exc)
                if self.stopping.is_set():
                    break
        finally:
            heartbeat.cancel()

    async def heartbeats(self, ws) -> None:
        while True:
            await asyncio.sleep(self.config.heartbeat_seconds)
            await self.send({"type": "heartbeat"})
            # Refresh the session token ahead of expiry, and move the open socket onto the new
            # session: the server closes a socket whose session expires. A refusal (a rate
            # limit, a server restarting) is tried again at the next beat, not the end of beats.
            try:
                token = await self.ensure_token()
            except (AuthError, httpx.HTTPError) as exc:
                log.warning("could not renew the session (%s); trying again", exc)
                continue
            if token != self.socket_token:
                await self.send({"type": "session.renew", "token": token})
                self.socket_token = token

    async def abandon_running(self) -> None:
        """The socket is gone: the server releases what we held, so stop working on it."""
        for task in list(self.running.values()):
            task.cancel()
        for task in list(self.running.values()):
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self.running.clear()
        for future in [*self.pending.values(), *self.awaiting.values()]:
            if not future.done():
                future.set_exception(ConnectionError("socket closed"))
        self.pending.clear()
        self.awaiting.clear()

    async def send(self, frame: dict) -> None:
        if self.ws is None:
            raise ConnectionError("not connected")
        # UTF-8 as it is: \uXXXX escapes would make non-ASCII up to three times larger, and the
        # frame limit counts bytes.
        text = json.dumps(frame, ensure_ascii=False)
        if frame.get("type") != "session.renew":  # the one frame that carries a secret
            text = self.redacted(text)
        if len(text.encode()) > MAX_FRAME_BYTES:
            raise FrameTooLarge(f"a {frame.get('type')} frame over {MAX_FRAME_BYTES} bytes")
        await self.ws.send(text)

    def redacted(self, text: str) -> str:
        """TEXT without the keys and tokens this bridge holds: a provider's error or a model's
        output can quote them, and what the bridge sends is shown to people."""
        held = {self.config.key, self.token, *self.api_keys, *map(os.environ.get, KEY_VARIABLES)}
        for secret in held:
            if secret and len(secret) >= SECRET_MIN_CHARS:
                text = text.replace(secret, "[redacted]")
        return text

    async def call(self, frame: dict, key: str, timeout: float = 30) -> dict:
        """Send FRAME and wait for the server's answer matched by KEY (a ref or an item id)."""
        future = asyncio.get_running_loop().create_future()
        self.pending[key] = future
        try:
            await self.send(frame)
            return await asyncio.wait_for(future, timeout)
        finally:
            self.pending.pop(key, None)

    async def on_frame(self, frame: dict) -> None:
        kind = frame.get("type")
        if kind == "work" and frame["kind"] == "permission":
            await self.on_decision(frame)
        elif kind == "work":
            if frame["id"] in self.running:
                # Claimed back by this connection (its lease ran out while it waited): the turn
                # already working on it answers it; a second one ran the model beside it.
                self.log_item("work received again while worked on", frame)
                return
            self.log_item("work received", frame)
            handler = self.handle_message if frame["kind"] == "message" else self.handle_task
            if frame["kind"] == "message":
                self.chats[frame["id"]] = None
            self.running[frame["id"]] = asyncio.create_task(self.in_lane(frame, handler))
        elif kind == "tool.result":
            self.resolve(f"tool:{frame['callId']}", frame)
        elif kind == "cancel":
            task = self.running.get(frame["id"])
            state = self.chats.get(frame["id"], True)
            if state is None:
                self.chats[frame["id"]] = "stop"
            elif task is not None and state is True:
                task.cancel()
        elif kind == "posted":
            self.resolve(frame.get("ref"), frame)
        elif kind == "result.accepted":
            self.resolve(f"result:{frame['id']}", frame)
        elif kind == "error":
            key = frame.get("ref") or (f"result:{frame['id']}" if frame.get("id") else None)
            future = self.pending.get(key)
            if future is not None:
                # Said twice (a task's progress and its result both not_held): the first counts.
                if not future.done():
                    future.set_exception(Refused(frame["code"], frame["message"]))
            else:
                log.warning("server error frame: %s", frame)
        elif kind == "hello":
            log.info(
                "connected as %s (connection %s)", self.agent.get("name"), frame.get("connectionId")
            )

    def log_item(self, text: str, frame: dict, **fields) -> None:
        """A step of a work item, with the trace the server gave it (the message's id): the
        server logs the same id at the post, the claim and the ack."""
        if log.isEnabledFor(logging.INFO):
            log.info(
                text,
                extra={
                    "trace": frame.get("trace") or frame["id"],
                    "kind": frame.get("kind"),
                    "item": frame["id"],
                    **fields,
                },
            )

    def resolve(self, key, frame) -> None:
        future = self.pending.get(key)
        if future is not None and not future.done():
            future.set_result(frame)

    async def in_lane(self, frame: dict, handler) -> None:
        try:
            async with self.conversation_turn(frame), self.lanes[frame["kind"]]:
                await handler(frame)
        except asyncio.CancelledError:
            raise
        except (ConnectionError, websockets.ConnectionClosed):
            # The socket closed under the turn (the bridge stopping, the server gone): no bug.
            log.info("work item %s let go with its connection; it will be redelivered", frame["id"])
        except Exception:
            log.exception("work item %s failed; it will be redelivered", frame["id"])
        finally:
            self.running.pop(frame["id"], None)
            self.chats.pop(frame["id"], None)

    @contextlib.asynccontextmanager
    async def conversation_turn(self, frame: dict):
        """One chat message of a conversation at a time, in the order they came: with several
        lanes, a person's quick messages would otherwise be answered side by side and out of
        order. asyncio.Lock serves its waiters first come, first served; other conversations
        still run in parallel. A waiting item keeps its lease, as a running one does."""
        if frame["kind"] != "message":
            yield
            return
        conversation_id = frame["payload"]["conversation"]["id"]
        lock, holders = self.conversations.setdefault(conversation_id, (asyncio.Lock(), [0]))
        holders[0] += 1
        waiting = asyncio.create_task(self.keep_alive(frame["id"])) if lock.locked() else None
        try:
            async with lock:
                if waiting is not None:
                    waiting.cancel()
                yield
        finally:
            if waiting is not None:
                waiting.cancel()
            holders[0] -= 1
            if not holders[0]:
                del self.conversations[conversation_id]

    # --- tools and their approvals ------------------------------------------------------------

    async def on_decision(self, frame: dict) -> None:
        """A person decided on (or let expire) a tool call's permission request: the turn
        waiting on it goes on. The item is acked at once; the decision itself is kept by the
        server, which the call asks again."""
        decision = frame["payload"]
        request_id = decision["requestId"]
        self.decided[request_id] = decision
        if len(self.decided) > 1000:
            self.decided.popitem(last=False)
        future = self.awaiting.pop(request_id, None)
        if future is not None and not future.done():
            future.set_result(decision)
        await self.send({"type": "ack", "id": frame["id"]})
        self.log_item("decision acked", frame)

    async def decision(self, request_id: str) -> dict:
        """Wait for the decision on REQUEST_ID (claimed as a ``permission`` work item)."""
        if request_id in self.decided:
            return self.decided[request_id]
        future = self.awaiting.get(request_id)
        if future is None:
            future = self.awaiting[request_id] = asyncio.get_running_loop().create_future()
        return await future

    @contextlib.asynccontextmanager
    async def lane_handed_back(self, kind: str):
        """While a turn waits for a person, its lane serves other work; it takes a lane again
        (waiting its turn) before it goes on."""
        self.lanes[kind].release()
        try:
            yield
        finally:
            # Shielded: cancelled while waiting (stopped, then the socket lost), the lane is
            # still taken before the turn's end releases it, so it is released once, not twice.
            await asyncio.shield(self.lanes[kind].acquire())

    def tool_caller(self, frame: dict, turn: Turn):
        """``turn.call_tool`` for the turn working on FRAME's item: a ``tool.call`` frame per
        call. A call that must wait for approval parks the turn (its checkpoint is kept, in case
        the bridge restarts), hands the lane back and pauses the time limit until decided."""
        item_id, kind = frame["id"], frame["kind"]
        parked = self.sessions.parked(item_id) or {}
        # How many times this turn made each call so far (a resumed turn goes on counting), and
        # the parked call, which keeps its id when the resumed turn makes it again.
        made: Counter = Counter(parked.get("made") or {})
        resumed = parked.get("callId") and (parked["name"], parked["arguments"])

        async def call(name: str, arguments: dict, *, checkpoint: dict | None = None):
            nonlocal resumed
            key = json.dumps([name, arguments], sort_keys=True, ensure_ascii=False)
            if resumed == (name, arguments):
                call_id = parked["callId"]
            else:
                made[key] += 1
                call_id = call_id_for(item_id, name, arguments, made[key])
            resumed = None
            request = {
                "type": "tool.call",
                "id": item_id,
                "callId": call_id,
                "name": name,
                "input": arguments,
                "ref": f"tool:{call_id}",
            }
            answer = await self.ask(request)
            while answer.get("pending"):
                self.sessions.park(
                    item_id,
                    {"callId": call_id, "name": name, "arguments": arguments,
                     "checkpoint": checkpoint, "made": dict(made)},
                )  # fmt: skip
                async with turn.deadline.paused(), self.lane_handed_back(kind):
                    await self.decision(answer["pending"]["requestId"])
                answer = await self.ask(request)
            return outcome_of(answer)

        return call

    async def ask(self, request: dict) -> dict:
        """Send a ``tool.call`` and return the server's ``tool.result``. A refused frame or no
        answer in time is a failed call the model hears of; an item this connection no longer
        holds ends the turn (another connection has it now)."""
        try:
            return await self.call(request, request["ref"], timeout=TOOL_ANSWER_SECONDS)
        except Refused as exc:
            if exc.code == "not_held":
                raise
            return {"ok": False, "error": {"code": exc.code, "message": exc.message}}
        except TimeoutError:
            message = "the server did not answer this tool call in time"
            return {"ok": False, "error": {"code": "tool_timeout", "message": message}}

    # --- work ------------------------------------------------------------------------------

    def turn_for(self, directives: dict, frame: dict | None = None) -> Turn:
        """The Turn for an item's directives; with FRAME (the work item), its tools too."""
        saved = self.sessions.get(directives["sessionKey"])
        if directives.get("apiKey"):
            self.api_keys.add(directives["apiKey"])
        turn = Turn(
            stable=directives["stable"],
            volatile=directives["volatile"],
            prompt=directives["prompt"],
            history=directives.get("history", []),
            model=self.agent.get("model") or "",
            session_id=saved.get("session_id"),
            cli_state=saved.get("cli_state") or {},
            workdir=str(self.home),
            base_url=self.agent.get("baseUrl") or None,
            # A workspace credential handed over with the item wins over the environment.
            api_key=directives.get("apiKey") or None,
            tools=directives.get("tools") or [],
        )
        if frame is not None and turn.tools:
            turn.call_tool = self.tool_caller(frame, turn)
            parked = self.sessions.parked(frame["id"])
            if parked is not None:
                turn.resume = {
                    "checkpoint": parked.get("checkpoint"),
                    "name": parked["name"],
                    "arguments": parked["arguments"],
                }
        return turn

    async def keep_alive(self, item_id: str) -> None:
        """Extend the item's lease while its turn runs: a turn can take minutes."""
        while True:
            await asyncio.sleep(self.config.extend_seconds)
            await self.send({"type": "extend", "id": item_id})

    async def handle_message(self, frame: dict) -> None:
        payload = frame["payload"]
        directives = payload["directives"]
        conversation_id = payload["conversation"]["id"]
        extender = asyncio.create_task(self.keep_alive(frame["id"]))
        drafts = Drafts(self, frame["id"])

        def on_event(event: Event) -> None:
            if event.kind == "text_delta":
                drafts.add(event.data.get("text") or "")

        try:
            try:
                # The agent's limit on one turn comes with each item (a hung CLI stops there).
                turn = self.turn_for(directives, frame)
                if self.chats.get(frame["id"]) == "stop":
                    raise asyncio.CancelledError  # stopped while it waited: an empty stopped reply
                self.chats[frame["id"]] = True  # Stop may cancel it from here…
                try:
                    result = await run_to_result(
                        self.backend, turn, on_event, time_limit=payload.get("timeLimitSeconds")
                    )
                finally:
                    self.chats[frame["id"]] = False  # …until here, with no await in between
            except BackendError as exc:
                drafts.close()
                # Visible, never silent: a short notice in the conversation.
                await self.post(
                    conversation_id,
                    f"{self.agent['name']} could not answer: {clip(str(exc), REASON_CHARS)}",
                    frame,
                    notice=True,
                )
                usage = None
            except asyncio.CancelledError:
                if self.ws is None or self.stopping.is_set():
                    raise  # the connection is gone, not a stop request: the server redelivers
                asyncio.current_task().uncancel()  # a person pressed Stop: keep what was written
                drafts.close()
                await self.post(conversation_id, drafts.text, frame, stopped=True)
                usage = None
            else:
                drafts.close()
                self.sessions.put(directives["sessionKey"], result.session_id, result.cli_state)
                # A turn that only acted (published, said done…) has nothing more to say.
                if result.text.strip() or not turn.tools:
                    await self.post(conversation_id, result.text, frame)
                usage = {
                    **result.usage.__dict__,
                    "backend": self.backend.name,
                    "model": self.agent.get("model", ""),
                }
        finally:
            drafts.close()
            extender.cancel()
        await self.send({"type": "ack", "id": frame["id"], **({"usage": usage} if usage else {})})
        self.log_item("work acked", frame)
        self.sessions.unpark(frame["id"])

    async def post(
        self,
        conversation_id: str,
        body: str,
        frame: dict,
        notice: bool = False,
        stopped: bool = False,
    ) -> None:
        # The ref is derived from the work item: redoing the item after a crash posts the same message.
        ref = f"work:{frame['id']}"
        message = {
            "type": "post",
            "conversationId": conversation_id,
            "body": fitted(body if stopped else (body or "(empty reply)")),
            "replyTo": frame["payload"]["message"]["id"],
            "ref": ref,
            "notice": notice,
        }
        if stopped:
            message["stopped"] = True
        try:
            posted = await self.call(message, ref)
        except Refused as exc:
            if exc.code in REFUSALS_THAT_LIFT:
                raise  # not acked: the item comes back after its lease and is answered then
            # Refused for good (the channel archived, the agent taken out, the loop guard full):
            # the item is acked unanswered. Left unacked, it came back, and the model ran again,
            # every lease, for ever.
            log.warning("reply to %s refused, not retried: %s", frame["id"], exc)
            self.log_item("reply refused", frame, code=exc.code)
            return
        self.log_item("reply posted", frame, message_id=posted.get("messageId"))

    async def handle_task(self, frame: dict) -> None:
        directives = frame["payload"]["directives"]
        last_sent = 0.0

        async def on_event(event: Event) -> None:
            nonlocal last_sent
            # Text streams in tiny deltas: forward tools and progress always, text at most every second.
            if event.kind == "text_delta" and time.monotonic() - last_sent < 1:
                return
            last_sent = time.monotonic()
            await self.send(
                {"type": "event", "id": frame["id"], "event": {"kind": event.kind, **event.data}}
            )

        status, result, error, usage = "completed", {}, "", None
        # A quiet stretch (a long build in a CLI) sends no events, which extend the lease too.
        extender = asyncio.create_task(self.keep_alive(frame["id"]))
        try:
            outcome = await run_to_result(
                self.backend,
                self.turn_for(directives, frame),
                on_event,
                time_limit=frame["payload"].get("timeLimitSeconds"),
            )
            self.sessions.put(directives["sessionKey"], outcome.session_id, outcome.cli_state)
            result = {"text": outcome.text, "blocks": outcome.blocks}
            usage = {
                **outcome.usage.__dict__,
                "backend": self.backend.name,
                "model": self.agent.get("model", ""),
            }
        except BackendError as exc:
            status, error = "failed", clip(str(exc), REASON_CHARS)
        except asyncio.CancelledError:
            if self.ws is None or self.stopping.is_set():
                raise  # the connection is gone, not a cancel request: the server will retry it
            asyncio.current_task().uncancel()  # handled: we answer the cancel request below
            status, error = "cancelled", "cancelled on request"
        finally:
            extender.cancel()
        frame_out = {
            "type": "result",
            "id": frame["id"],
            "status": status,
            "result": result,
            "error": error,
        }
        if usage:
            frame_out["usage"] = usage
        await self.call(frame_out, f"result:{frame['id']}")
        self.log_item("task result sent", frame, status=status)
        self.sessions.unpark(frame["id"])
