"""What every WebSocket consumer shares: JSON frames, error frames, the domain-error mapping."""

import asyncio
import contextlib
import functools
import json
import logging
import math
import time

from autobahn.exception import Disconnected
from channels.consumer import get_handler_name
from channels.exceptions import StopConsumer
from channels.generic.websocket import AsyncJsonWebsocketConsumer
from django.conf import settings
from djangorestframework_camel_case.util import camel_to_underscore

from agntchat.core import metrics
from agntchat.core.api import UNAVAILABLE
from agntchat.core.api import _flatten as error_fields
from agntchat.core.events import json_bytes, wire
from agntchat.core.exceptions import AppError, wait_words
from agntchat.core.throttle import Bucket
from agntchat.core.validation import check_json_text, json_value_problem

log = logging.getLogger(__name__)

# The close code of a socket hung up because the server failed (a bug, a database outage): as
# HTTP 500. Not 1011: a server may not send that as an application close (autobahn refuses it).
SERVER_FAILED = 4500
# The close code of a socket that went too long without checking in (watch_check_ins): as HTTP
# 408, the client said nothing in time.
CHECK_IN_MISSED = 4408
# The close code of a socket that fell too far behind its events (core/channel_layer.py): as
# HTTP 503, come back and catch up.
FELL_BEHIND = 4503

# The largest frame taken in: bytes of its UTF-8 text (non-ASCII sent unescaped, as JSON allows).
# daphne is started to read more than this (Procfile), so a bigger frame gets an answer here.
MAX_FRAME_BYTES = 1024 * 1024
# Frames longer than this are parsed and checked in a worker thread: a frame of 1 MiB of small
# numbers costs ~0.1 s of CPU, which the event loop (every socket of the node) would wait out.
PARSE_IN_THREAD_ABOVE = 64 * 1024


def _parse_frame(text: str):
    """(content, what makes it unfit or None) of frame TEXT; AppError when it is too large or
    deep (checked on the text, before the parser, which recurses once per level), ValueError
    when it is not JSON."""
    check_json_text(text, max_bytes=MAX_FRAME_BYTES)
    content = json.loads(text)
    return content, json_value_problem(content) if isinstance(content, dict) else None


class FrameError(AppError):
    code = "bad_frame"


@functools.cache
def snake(key: str) -> str:
    """A frame's camelCase key as serializers name it (what the REST parser does to bodies)."""
    return camel_to_underscore(key)


def frame_data(serializer_class, frame: dict) -> dict:
    """FRAME's fields (less its type) validated by SERIALIZER_CLASS, the REST input of the
    same action where there is one; a refusal is a ``bad_frame`` error naming the fields."""
    serializer = serializer_class(
        data={snake(key): value for key, value in frame.items() if key != "type"}
    )
    if not serializer.is_valid():
        raise FrameError("Some fields are invalid.", fields=error_fields(serializer.errors))
    return serializer.validated_data


class JsonSocket(AsyncJsonWebsocketConsumer):
    """Frames are JSON objects with a ``type``; a bad frame gets an error frame, never a hang-up."""

    # Frame type → handler method name, or (name, serializer): the handler then gets the
    # frame's fields as that serializer validated them (snake_case), never the raw frame.
    handlers: dict = {}
    hung_up = False
    # Frames per minute and burst this socket may send: the names of the settings. Frames of a
    # QUIET type beyond them are dropped without a word (typing); others get a rate_limited error.
    frame_rate: tuple[str, str] | None = None
    quiet_when_limited: frozenset = frozenset()
    frames: Bucket | None = None
    # Its label in /metrics (agntchat_open_sockets, error frames).
    socket_kind = "other"
    counted_open = False
    # A socket counted against a cap in Redis only while it checks in (core.presence.join) names
    # the frame that checks it in here, sets ``checked_in_at`` (time.monotonic()) at each
    # check-in, defines unchecked_seconds and calls watch_check_ins once accepted.
    check_in_frame = ""
    check_in_timer: asyncio.TimerHandle | asyncio.Task | None = None

    async def __call__(self, scope, receive, send):
        try:
            await super().__call__(scope, receive, send)
        finally:
            # However the consumer ended: its channel is no longer heard. channels only cancels
            # the channel's receive, and a receive that had just got a message, or not yet
            # started, is never cancelled (core/channel_layer.py).
            if getattr(self, "channel_name", None):
                self.channel_layer.discard_channel(self.channel_name)
            if self.check_in_timer is not None:
                self.check_in_timer.cancel()

    def unchecked_seconds(self) -> int:
        """How long the socket may go without checking in: less than its place is counted.
        For the agent and host sockets (core.presence's TTL): 90 s of the default 120, where
        their clients beat every 20 s."""
        return settings.PRESENCE_TTL_SECONDS * 3 // 4

    def watch_check_ins(self) -> None:
        """Hang up once the socket has gone unchecked_seconds without checking in, before its
        place in the count lapses: else a client that never checks in could open sockets past
        its cap, a batch each time the earlier ones stopped counting. A timer with no I/O of
        its own; check-ins move its deadline on."""
        loop = asyncio.get_running_loop()
        late_in = self.checked_in_at + self.unchecked_seconds() - time.monotonic()
        if late_in > 0:
            self.check_in_timer = loop.call_later(late_in, self.watch_check_ins)
        else:
            # Through the channel layer to this very socket: handled in turn, like any event.
            missed = {"type": "check_in.missed"}
            self.check_in_timer = loop.create_task(
                self.channel_layer.send(self.channel_name, missed)
            )

    async def check_in_missed(self, event):
        """Its timer found no check-in in time (watch_check_ins): closed (4408), releasing
        what it holds as any close; the client reconnects."""
        if time.monotonic() - self.checked_in_at < self.unchecked_seconds():
            self.watch_check_ins()  # checked in meanwhile
            return
        await self.send_error(
            "ping_missed",
            f"No {self.check_in_frame} in {wait_words(self.unchecked_seconds())}: "
            "this connection closes; reconnect.",
        )
        await self.hang_up(CHECK_IN_MISSED)

    async def channel_overflow(self, event):
        """Its events piled up unread (core/channel_layer.py CAPACITY): rather than skip some,
        it hangs up; the client reconnects and reloads what it missed."""
        with contextlib.suppress(Disconnected):
            await self.send_error(
                "fell_behind", "This connection fell too far behind its events; reconnect."
            )
        await self.hang_up(FELL_BEHIND)

    @classmethod
    async def encode_json(cls, content) -> str:
        return json_bytes(content).decode()

    async def accept(self, *args, **kwargs):
        await super().accept(*args, **kwargs)
        if not self.counted_open:
            self.counted_open = True
            metrics.OPEN_SOCKETS.labels(self.socket_kind).inc()

    async def websocket_disconnect(self, message):
        try:
            await super().websocket_disconnect(message)
        finally:
            if self.counted_open:
                self.counted_open = False
                metrics.OPEN_SOCKETS.labels(self.socket_kind).dec()

    async def dispatch(self, message):
        """As channels dispatches, less its hop to Django's one sync thread before every
        message to close stale connections: here every database use goes through
        database_sync_to_async, which does that itself. Otherwise each frame and event would
        wait for that thread, and for whatever request it is serving."""
        handler = getattr(self, get_handler_name(message), None)
        if handler is None:
            raise ValueError(f"No handler for message type {message['type']}")
        if message["type"] == "websocket.disconnect":
            await handler(message)  # ends the consumer (StopConsumer), whatever happens
            return
        if self.hung_up:
            return  # once hung up, nothing it receives (frame or event) is acted on
        try:
            await handler(message)
        except StopConsumer:
            raise
        except Disconnected:
            # The client left while this was on its way (daphne refuses a send on a closed
            # connection); its websocket.disconnect follows.
            return
        except Exception as exc:
            # A bug or a store out of reach, not a bad frame: hang up as a crash would, but give
            # back what the socket holds first (a crashed consumer never hears its disconnect).
            metrics.SOCKET_FAILURES.labels(self.socket_kind).inc()
            down = next((why for kinds, why in UNAVAILABLE.items() if isinstance(exc, kinds)), None)
            if down is None:
                log.exception("%s failed on %s", type(self).__name__, message["type"])
            else:
                # An outage hangs up every socket of a node: one line each, and the client is
                # told why (the REST API answers 503 with the same words).
                log.warning("%s hung up on %s: %r", type(self).__name__, message["type"], exc)
                with contextlib.suppress(Disconnected):
                    await self.send_error(*down)
            await self.hang_up(SERVER_FAILED)

    async def hang_up(self, code: int) -> None:
        """Release what the socket holds, then close with CODE; nothing received afterwards is
        acted on."""
        if self.hung_up:
            return
        self.hung_up = True
        try:
            await self.release()
        finally:
            await self.close(code=code)

    async def release(self) -> None:
        """Give back what this socket holds (subscriptions, claimed work). Called on hang-up and
        on disconnect, so it must be safe to call twice."""

    async def disconnect(self, code):
        await self.release()

    def frame_wait(self) -> float:
        """Count one frame received: 0 if it is within the socket's rate, else the seconds
        until one would be. In memory: a socket lives in one process."""
        if self.frame_rate is None:
            return 0
        if self.frames is None:
            per, burst = (getattr(settings, name) for name in self.frame_rate)
            self.frames = Bucket(per, burst=burst)
        return self.frames.hit()

    async def refuse_frame(self, text_data: str, wait: float) -> None:
        """Over the frame rate: nothing said to a quiet frame, an error frame to any other."""
        try:
            frame = json.loads(text_data) if len(text_data) <= 1024 else None
        except ValueError:
            frame = None
        if isinstance(frame, dict) and frame.get("type") in self.quiet_when_limited:
            return
        seconds = max(1, math.ceil(wait))
        await self.send_error(
            "rate_limited",
            f"Too many frames: try again in {wait_words(seconds)}.",
            frame if isinstance(frame, dict) else None,
        )

    async def receive(self, text_data=None, bytes_data=None, **kwargs):
        wait = self.frame_wait()
        if wait:
            await self.refuse_frame(text_data or "", wait)
            return
        text = text_data or ""
        try:
            if len(text) > PARSE_IN_THREAD_ABOVE:
                content, problem = await asyncio.to_thread(_parse_frame, text)
            else:
                content, problem = _parse_frame(text)
        except AppError as exc:
            await self.send_error(exc.code, exc.message)
            return
        except ValueError:
            await self.send_error("bad_frame", "Frames must be JSON text.")
            return
        if not isinstance(content, dict) or not isinstance(content.get("type"), str):
            await self.send_error("bad_frame", "A frame is a JSON object with a string 'type'.")
            return
        if problem is not None:
            await self.send_error("bad_frame", problem, content)
            return
        handler = self.handlers.get(content["type"])
        if handler is None:
            await self.send_error(
                "unknown_type", f"Unknown frame type '{content['type'][:40]}'.", content
            )
            return
        name, serializer = handler if isinstance(handler, tuple) else (handler, None)
        try:
            await getattr(self, name)(frame_data(serializer, content) if serializer else content)
        except AppError as exc:
            await self.send_error(exc.code, exc.message, content, exc.fields)

    async def send_error(
        self, code: str, message: str, frame: dict | None = None, fields=None
    ) -> None:
        metrics.ERROR_FRAMES.labels(self.socket_kind, code).inc()
        error = {"type": "error", "code": code, "message": message}
        if frame:
            for echo in ("id", "ref"):
                value = frame.get(echo)
                # Echoed so a client can match the error to what it sent; only a plain token.
                if isinstance(value, (str, int)) and len(str(value)) <= 100:
                    if json_value_problem(value) is None:
                        error[echo] = value
        if fields:
            error["fields"] = fields
        await self.send_json(wire(error))

    async def refuse(
        self, message: str, code: str = "unauthorized", close_code: int = 4401
    ) -> None:
        """Accept, say why, and close with CLOSE_CODE (4401: bad credentials, 4403: not allowed),
        so a client can tell a refusal from a crash."""
        await self.accept()
        await self.send_error(code, message)
        await self.hang_up(close_code)


class NoSuchSocket(AsyncJsonWebsocketConsumer):
    """A WebSocket to any other path: the handshake is refused (daphne answers 403), where the
    router's "no route" was a 500."""

    async def connect(self):
        await self.close()


def header(scope, name: bytes) -> str:
    for key, value in scope.get("headers", []):
        if key.lower() == name:
            return value.decode("latin-1")
    return ""


def _unsent(transport) -> int:
    """Bytes written to TRANSPORT that the client has not taken yet, beyond the kernel's buffer."""
    try:
        return len(transport.dataBuffer) - transport.offset + transport._tempDataLen
    except AttributeError:  # not a plain TCP transport (daphne serving TLS itself): not measured
        return 0


def daphne_drops_stalled_sockets() -> None:
    """A client that stops reading (stalled, or hostile) makes Twisted keep every frame sent to
    it in memory until daphne's ping timeout drops it, up to a minute of its events later. Here
    a socket with more than WEBSOCKET_MAX_UNSENT_BYTES waiting to go out is dropped at once:
    its consumer hears the disconnect and releases what it held, as on any close, and a client
    that was merely slow reconnects and catches up (as after 4503)."""
    from daphne.ws_protocol import WebSocketProtocol

    limit = settings.WEBSOCKET_MAX_UNSENT_BYTES
    send = WebSocketProtocol.serverSend

    @functools.wraps(send)
    def serverSend(self, content, binary=False):
        unsent = _unsent(self.transport)
        if unsent > limit:
            log.warning("dropped a socket with %d bytes it did not read", unsent)
            self.dropConnection(abort=True)
            return
        send(self, content, binary)

    WebSocketProtocol.serverSend = serverSend
