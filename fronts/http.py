"""The fronts' HTTP edge, in plain ASGI: their answers stream (server-sent events) and wait on
live events, while Django's HTTP side here answers complete bodies from sync views
(``agntchat.core.http``). One ``Exchange`` is one request and its response.

What the fronts share lives here: reading a bounded JSON body, the person behind a bearer
token, JSON and SSE responses, and noticing that the client went away."""

import asyncio

import orjson
from channels.db import database_sync_to_async
from django.conf import settings

from agents.auth import bearer_secret, person_for_token
from agntchat.core.origin import origin_allowed
from agntchat.core.validation import MAX_JSON_DEPTH, json_depth, json_value_problem

# Bodies larger than this (bytes) are checked in a worker thread (Exchange.read_json).
CHECK_IN_THREAD_ABOVE = 64 * 1024


class BadBody(Exception):
    """The body is not one JSON object within the limits; STATUS and MESSAGE say why. PARSED:
    it was JSON, just not what is taken in (not an object, or text PostgreSQL cannot store)."""

    def __init__(self, status: int, message: str, *, parsed: bool = False):
        super().__init__(message)
        self.status, self.message, self.parsed = status, message, parsed


def parse_json_object(body: bytes) -> dict:
    """BODY as one JSON object within the limits, else BadBody."""
    if json_depth(body) > MAX_JSON_DEPTH:
        raise BadBody(400, f"JSON can be nested at most {MAX_JSON_DEPTH} levels deep.")
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError:
        raise BadBody(400, "The body is not valid JSON.") from None
    if not isinstance(data, dict):
        raise BadBody(400, "The body must be a JSON object.", parsed=True)
    # As REST bodies and socket frames: no NUL, lone surrogates, NaN or outsized numbers.
    if problem := json_value_problem(data):
        raise BadBody(400, problem, parsed=True)
    return data


class Exchange:
    def __init__(self, scope, receive, send):
        self.scope, self.receive, self.send = scope, receive, send
        self.method: str = scope["method"]
        self.path: str = scope["path"]
        self.headers = {
            name.decode("latin-1").lower(): value.decode("latin-1")
            for name, value in scope.get("headers", [])
        }
        self.started = False
        # Set once the client has gone (a closed stream is how a client cancels, too).
        self.gone = asyncio.Event()
        self._watch: asyncio.Task | None = None

    async def read_body(self, limit: int | None = None) -> bytes:
        """The whole body; more than LIMIT bytes (the REST limit by default) raises BadBody 413
        as soon as it is seen, before the rest is read."""
        limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE if limit is None else limit
        chunks, size = [], 0
        while True:
            message = await self.receive()
            if message["type"] == "http.disconnect":
                self.gone.set()
                raise BadBody(400, "The client went away before sending its body.")
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > limit:
                raise BadBody(413, f"The body can be at most {limit} bytes.")
            chunks.append(chunk)
            if not message.get("more_body"):
                break
        # From here on, the only message ASGI sends is the client's going away.
        self._watch = asyncio.ensure_future(self._watch_disconnect())
        return b"".join(chunks)

    async def _watch_disconnect(self) -> None:
        while (await self.receive())["type"] != "http.disconnect":
            pass
        self.gone.set()

    async def read_json(self) -> dict:
        """The body as one JSON object, refused (BadBody 400/413) when it is not one."""
        body = await self.read_body()
        if len(body) > CHECK_IN_THREAD_ABOVE:
            # Checking a body of megabytes takes CPU for up to a second: off the event loop,
            # which every stream and socket of this process shares.
            return await asyncio.to_thread(parse_json_object, body)
        return parse_json_object(body)  # a small one: at once, cheaper than the hop

    async def person(self):
        """The active person whose personal API token (``Bearer apt_…``) came with the request,
        or None."""
        secret = bearer_secret(self.headers.get("authorization", ""))
        if secret is None or not secret.startswith("apt_"):
            return None
        return await database_sync_to_async(person_for_token)(secret)

    def foreign_origin(self) -> bool:
        """Whether the request came from a web page of another site: an Origin header that is not
        this site's (nor a trusted one). Clients that are not browsers send none, and pass."""
        return bool(self.headers.get("origin")) and not origin_allowed(self.scope)

    def accepts(self, content_type: str) -> bool:
        """Whether the Accept header names CONTENT_TYPE (or has */*)."""
        accepted = [
            part.split(";")[0].strip().lower() for part in self.headers.get("accept", "").split(",")
        ]
        return content_type in accepted or "*/*" in accepted

    async def respond(
        self, status: int, body: bytes = b"", content_type: str = "", headers=()
    ) -> None:
        """A whole response at once."""
        head = [(b"content-type", content_type.encode())] if content_type else []
        head += [(name.encode(), value.encode()) for name, value in headers]
        await self.send({"type": "http.response.start", "status": status, "headers": head})
        await self.send({"type": "http.response.body", "body": body})
        self.started = True
        self.close()

    async def json(self, status: int, data, headers=()) -> None:
        await self.respond(status, orjson.dumps(data), "application/json", headers)

    async def start_events(self, headers=()) -> None:
        """Begin a server-sent event stream (200); ``event`` sends, ``end`` closes it."""
        head = [
            (b"content-type", b"text/event-stream"),
            (b"cache-control", b"no-cache"),
            (b"x-accel-buffering", b"no"),  # a proxy in front must not hold events back
        ]
        head += [(name.encode(), value.encode()) for name, value in headers]
        await self.send({"type": "http.response.start", "status": 200, "headers": head})
        self.started = True

    async def event(self, data, *, event: str | None = None, event_id: str | None = None):
        """One SSE event: DATA as JSON (or as it is, when already text)."""
        text = data if isinstance(data, str) else orjson.dumps(data).decode()
        lines = [f"event: {event}"] if event else []
        lines += [f"id: {event_id}"] if event_id is not None else []
        lines += [f"data: {line}" for line in text.split("\n")]
        await self.send(
            {
                "type": "http.response.body",
                "body": ("\n".join(lines) + "\n\n").encode(),
                "more_body": True,
            }
        )

    async def comment(self, text: str = "") -> None:
        """An SSE comment line: clients skip it; it keeps a quiet stream from looking dead to
        proxies and read timeouts while the answer is awaited."""
        await self.send(
            {"type": "http.response.body", "body": f": {text}\n\n".encode(), "more_body": True}
        )

    async def end(self) -> None:
        await self.send({"type": "http.response.body", "body": b""})
        self.close()

    def close(self) -> None:
        if self._watch is not None:
            self._watch.cancel()
