"""The MCP endpoint, ``/mcp`` (API-2, TASK-1): every agent a person can see is a tool; calling it
gives the agent a real task (``conversations.tasks.create_task``) and answers with its result.

Streamable HTTP in two revisions (docs/mcp.md):

- 2025-11-25 (and 2025-06-18), the handshake era: ``initialize`` opens a session
  (``MCP-Session-Id``, kept in Redis so any server process serves it, tied to the person who
  opened it); ``notifications/cancelled`` cancels a call's task; DELETE ends the session.
- 2026-07-28, the modern era: no sessions; ``server/discover``; every request carries its
  version and client in ``_meta`` and mirrors them in headers (checked by the SDK's own ladder,
  ``mcp.shared.inbound``); a client cancels a call by closing its stream.

Messages are read and written with the official SDK's types (``mcp_types``); the transport is
the fronts' own (``fronts.http.Exchange``). A call waits for its task through the live events
browsers get (``fronts.live.Following``), reading the task again after subscribing and whenever
a wait times out, so a lost event only delays the answer.
"""

import asyncio
import importlib.metadata
import json
import re
import secrets

import jsonschema
import mcp_types as types
from channels.db import database_sync_to_async
from django.conf import settings
from django.db import transaction
from django.utils import timezone
from mcp.shared.inbound import (
    ERROR_CODE_HTTP_STATUS,
    InboundLadderRejection,
    classify_inbound_request,
    find_duplicated_routing_header,
)
from mcp_types.jsonrpc import (
    HEADER_MISMATCH,
    INVALID_PARAMS,
    INVALID_REQUEST,
    METHOD_NOT_FOUND,
    PARSE_ERROR,
    UNSUPPORTED_PROTOCOL_VERSION,
)
from pydantic import ValidationError

from agntchat.core.exceptions import AppError, RateLimited
from agntchat.core.presence import client as redis
from artifacts.models import Artifact
from conversations import tasks
from conversations.models import Message, Task, TaskEvent
from fronts import live
from fronts.http import BadBody, Exchange
from fronts.jobs import give_up_unstarted, schedule_give_up
from fronts.live import ClientGone, Following
from fronts.targets import Ambiguous, NoWorkspace, agent_named, named_agents, workspace_for

PATH = "/mcp"
LEGACY_VERSIONS = ("2025-06-18", "2025-11-25")
MODERN_VERSIONS = ("2026-07-28",)
SUPPORTED_VERSIONS = (*LEGACY_VERSIONS, *MODERN_VERSIONS)
SESSION_TTL = 24 * 3600  # seconds a session lives after its last use
WAIT_SLICE = 15.0  # seconds: a waiting call reads its task again and keeps its stream alive
WAIT_RETRY_SECONDS = 5  # a call refused for the answers its person waits on: try again then
LIST_TTL_MS = 10_000  # how long a modern client may cache the tool list (its own: private)
SESSION_ID = re.compile(r"^[\x21-\x7e]{1,128}$")
# A request id is kept in Redis while its call runs (to cancel it by): a longer one is refused.
MAX_ID_CHARS = 256
# All a session keeps of the client's clientInfo: its name and version, cut to this.
CLIENT_CHARS = 200
# Our own code (the implementation-defined range): too many calls, come back in data.retryAfter.
RATE_LIMITED = -32029
# Result fields of the modern revision, not sent to a handshake-era client.
MODERN_ONLY = {"result_type", "ttl_ms", "cache_scope"}

INPUT_SCHEMA = {
    "type": "object",
    "properties": {
        "instructions": {
            "type": "string",
            "minLength": 1,
            "maxLength": tasks.MAX_INSTRUCTIONS,
            "description": "What the agent should do: the task, in plain words.",
        },
        "workspace": {
            "type": "string",
            "description": (
                "id or name of the workspace the task runs in (its people and data); "
                "by default the only one you share with the agent, or your personal one"
            ),
        },
    },
    "required": ["instructions"],
    "additionalProperties": False,
}
INSTRUCTIONS = (
    "Every agntchat agent you can see is a tool here, named by its handle. Calling one gives "
    "it a task, as if you had asked it in agntchat, and answers with its result once it is "
    "done; progress is reported while it works. Tasks show in agntchat like any other."
)


def server_version() -> str:
    try:
        return importlib.metadata.version("agntchat")
    except importlib.metadata.PackageNotFoundError:  # pragma: no cover - a checkout without install
        return "0"


SERVER_INFO = types.Implementation(
    name="agntchat", title="agntchat agents", version=server_version()
)
CAPABILITIES = types.ServerCapabilities(tools=types.ToolsCapability(list_changed=False))


class RpcError(Exception):
    """A JSON-RPC error answer; STATUS is its HTTP status (None: as the revision says), HEADERS
    more of its HTTP headers."""

    def __init__(self, code: int, message: str, data=None, status: int | None = None, headers=()):
        super().__init__(message)
        self.code, self.message, self.data, self.status = code, message, data, status
        self.headers = list(headers)


def is_request_id(value) -> bool:
    """A JSON-RPC id we take: a string (of at most MAX_ID_CHARS) or an integer."""
    if isinstance(value, str):
        return len(value) <= MAX_ID_CHARS
    return isinstance(value, int) and not isinstance(value, bool)


def error_body(request_id, code: int, message: str, data=None) -> dict:
    error = {"code": code, "message": message}
    if data is not None:
        error["data"] = data
    return {"jsonrpc": "2.0", "id": request_id, "error": error}


# Sessions and in-flight calls of the handshake era, in Redis: every server process sees them.


def _session_key(session_id: str) -> str:
    return f"{settings.REDIS_PREFIX}:mcp:session:{session_id}"


def _call_key(session_id: str, request_id) -> str:
    # The id as JSON: "1" and 1 are different requests.
    return f"{settings.REDIS_PREFIX}:mcp:call:{session_id}:{json.dumps(request_id)}"


def _sessions_key(person_id) -> str:
    # A person's live sessions, scored by their last use: what MCP_SESSIONS_PER_PERSON counts.
    return f"{settings.REDIS_PREFIX}:mcp:sessions:{person_id}"


def client_label(info: types.Implementation) -> str:
    """Who the client says it is, in a line: all a session keeps of its clientInfo (whose size
    is the client's to choose)."""
    return f"{info.name} {info.version}"[:CLIENT_CHARS]


def open_session(person, version: str, client: str) -> str:
    """A new session of PERSON's. Past MCP_SESSIONS_PER_PERSON live ones, those used least
    lately are ended (their next request gets 404 and their client initializes again): clients
    that never DELETE theirs must not lock their person out, nor fill Redis."""
    session_id = secrets.token_urlsafe(32)
    key, mine = _session_key(session_id), _sessions_key(person.id)
    now = timezone.now().timestamp()
    keep = max(1, settings.MCP_SESSIONS_PER_PERSON)
    pipe = redis().pipeline()
    pipe.hset(key, mapping={"user": str(person.id), "version": version, "client": client})
    pipe.expire(key, SESSION_TTL)
    pipe.zremrangebyscore(mine, "-inf", now - SESSION_TTL)  # expired by themselves
    pipe.zadd(mine, {session_id: now})
    pipe.expire(mine, SESSION_TTL)
    pipe.zrange(mine, 0, -keep - 1)  # all but the KEEP used last
    ended = pipe.execute()[-1]
    if ended:
        pipe = redis().pipeline()
        pipe.delete(*(_session_key(s.decode()) for s in ended))
        pipe.zrem(mine, *ended)
        pipe.execute()
    return session_id


def session_of(person, session_id: str) -> dict | None:
    """PERSON's live session SESSION_ID ({version, …}), its life extended; None when it is
    unknown, ended, expired or another person's."""
    if not SESSION_ID.match(session_id):
        return None
    key = _session_key(session_id)
    pipe = redis().pipeline()
    pipe.hgetall(key)
    pipe.expire(key, SESSION_TTL)
    # Its last use, in its person's list only (xx: never added to another person's).
    pipe.zadd(_sessions_key(person.id), {session_id: timezone.now().timestamp()}, xx=True)
    pipe.expire(_sessions_key(person.id), SESSION_TTL)  # it outlives every session it counts
    found = {k.decode(): v.decode() for k, v in pipe.execute()[0].items()}
    if found.get("user") != str(person.id):
        return None
    return found


def end_session(person, session_id: str) -> bool:
    if session_of(person, session_id) is None:
        return False
    pipe = redis().pipeline()
    pipe.delete(_session_key(session_id))
    pipe.zrem(_sessions_key(person.id), session_id)
    return bool(pipe.execute()[0])


def remember_call(session_id: str, request_id, task_id) -> None:
    key = _call_key(session_id, request_id)
    pipe = redis().pipeline()
    pipe.hset(key, mapping={"task": str(task_id), "cancelled": "0"})
    pipe.expire(key, SESSION_TTL)
    pipe.execute()


def forget_call(session_id: str, request_id) -> None:
    """The call has ended: nothing can cancel it any more."""
    redis().delete(_call_key(session_id, request_id))


def call_cancelled(session_id: str, request_id) -> bool:
    return redis().hget(_call_key(session_id, request_id), "cancelled") == b"1"


def cancel_call(person, session_id: str, request_id) -> None:
    """``notifications/cancelled`` for REQUEST_ID of the session: its task is asked to stop, and
    the waiting call ends without a result. An id that is not an in-flight call of this session
    (finished, never seen, another session's) changes nothing."""
    key = _call_key(session_id, request_id)
    task_id = redis().hget(key, "task")
    if task_id is None:
        return
    pipe = redis().pipeline()
    pipe.hset(key, "cancelled", "1")  # first: the waiting call wakes on the cancel's event
    pipe.expire(key, SESSION_TTL)  # should the call have ended (and the key gone) meanwhile
    pipe.execute()
    try:
        tasks.request_cancel(tasks.access_task(person, task_id.decode()))
    except AppError:
        pass  # it ended meanwhile (a race the spec asks us to tolerate), or is no longer visible


# Tools: the agents a person can see.


def first_line(text: str) -> str:
    return next((line.strip() for line in (text or "").splitlines() if line.strip()), "")


def describe(named) -> str:
    agent = named.agent
    parts = [f"{agent.name} (@{agent.handle})" + (f", {agent.role}" if agent.role else "") + "."]
    if agent.capabilities:
        parts.append("Capabilities: " + ", ".join(map(str, agent.capabilities)) + ".")
    if personality := first_line(agent.personality)[:300]:
        parts.append(personality)
    if named.qualified:
        parts.append(
            f"More than one agent you can see is called @{agent.handle}: this is the one of "
            f"{agent.owner.username}."
        )
    parts.append(
        "Give it instructions: it works on them as a task in agntchat and answers with the result."
    )
    return " ".join(parts)


def list_tools(person) -> list[types.Tool]:
    return [
        types.Tool(
            name=n.name, title=n.agent.name, description=describe(n), input_schema=INPUT_SCHEMA
        )
        for n in named_agents(person)
    ]


class UnknownTool(Exception):
    pass


def tool_error(text: str) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(text=text)], is_error=True)


def start_task(person, name: str, arguments, session_id: str | None, request_id):
    """The task a call of tool NAME gives, the live topics it is followed on and PERSON's place
    among the answers they wait on (``fronts.live.begin_wait``: end it), or the error result to
    answer with (bad arguments, no workspace fits, the task refused). Nothing is created when
    PERSON calls too often or waits on too many answers already (RateLimited), calls an agent
    they cannot see (UnknownTool) or a name more than one visible agent goes by (Ambiguous)."""
    named = agent_named(person, name)
    if named is None:
        raise UnknownTool(name)
    arguments = arguments or {}
    problems = sorted(
        jsonschema.Draft202012Validator(INPUT_SCHEMA).iter_errors(arguments),
        key=lambda e: list(e.absolute_path),
    )
    if problems:
        where = lambda e: ".".join(map(str, e.absolute_path)) or "arguments"  # noqa: E731
        return tool_error(
            "Invalid arguments: " + "; ".join(f"{where(e)}: {e.message}" for e in problems)
        )
    longest = settings.FRONT_START_SECONDS + named.agent.turn_time_limit_seconds + 60
    wait_id = live.begin_wait(person.id, longest)
    if wait_id is None:
        raise RateLimited(WAIT_RETRY_SECONDS, "answers waited on at once")
    try:
        workspace = workspace_for(person, named.agent, arguments.get("workspace"))
        with transaction.atomic():
            task = tasks.create_task(
                person, workspace, named.agent, arguments["instructions"], own_conversation=True
            )
            schedule_give_up(task)
    except BaseException as exc:
        live.end_wait(person.id, wait_id)
        if isinstance(exc, NoWorkspace):
            return tool_error(str(exc))
        if isinstance(exc, AppError) and not isinstance(exc, RateLimited):
            return tool_error(exc.message)
        raise  # the person's task rate (tasks.create_task): an HTTP 429, not a tool's error
    if session_id is not None:
        remember_call(session_id, request_id, task.id)
    return task, tasks.task_topics(task), wait_id


def task_state(task_id, after_seq: int, session_id: str | None, request_id):
    """The task as stored now, its progress events after AFTER_SEQ, and whether the client
    cancelled the call (handshake era)."""
    task = Task.objects.select_related("conversation", "work_conversation").get(pk=task_id)
    events = list(
        TaskEvent.objects.filter(task_id=task_id, seq__gt=after_seq).order_by("seq")[:100]
    )
    cancelled = session_id is not None and call_cancelled(session_id, request_id)
    return task, events, cancelled


def progress_message(data: dict) -> str | None:
    """What a run's event says, in a line (the bridge's events: text, tool use, a message)."""
    if isinstance(data.get("message"), str) and data["message"].strip():
        return data["message"].strip()[:500]
    kind = data.get("kind")
    if kind == "text_delta" and isinstance(data.get("text"), str):
        return data["text"].strip()[:500] or None
    if kind == "tool" and data.get("name"):
        return f"Used {data['name']}" + ("" if data.get("ok", True) else " (it failed)")
    return None


def produced(task: Task) -> dict:
    """Artifacts and result cards the agent published in the task's conversation while it ran."""
    where = task.work_conversation_id or task.conversation_id
    if where is None:
        return {}
    window = {"created_at__gte": task.created_at}
    if task.finished_at:
        window["created_at__lte"] = task.finished_at
    artifacts = Artifact.objects.filter(
        conversation_id=where, created_by_agent_id=task.agent_id, **window
    ).order_by("created_at")
    cards = Message.objects.filter(
        conversation_id=where, author_agent_id=task.agent_id, payload__has_key="card", **window
    ).order_by("created_at")
    found = {}
    if artifacts:
        found["artifacts"] = [
            {"id": str(a.id), "title": a.title, "kind": a.kind, "version": a.current_version}
            for a in artifacts
        ]
    if cards:
        found["cards"] = [{"messageId": str(m.id), "card": m.payload["card"]} for m in cards]
    return found


def call_result(task: Task) -> types.CallToolResult:
    result = task.result or {}
    structured = {
        "taskId": str(task.id),
        "status": task.status,
        "agentId": str(task.agent_id),
        "workspaceId": str(task.workspace_id),
        **({"blocks": result["blocks"]} if result.get("blocks") else {}),
        **produced(task),
    }
    if task.status == Task.Status.COMPLETED:
        text = result.get("text") or "(The agent finished without a text result.)"
        return types.CallToolResult(
            content=[types.TextContent(text=text)], structured_content=structured
        )
    error = task.error or (
        "cancelled" if task.status == Task.Status.CANCELLED else "no reason given"
    )
    structured["error"] = error
    return types.CallToolResult(
        content=[types.TextContent(text=f"The task {task.status}: {error}")],
        structured_content=structured,
        is_error=True,
    )


class Endpoint:
    """One HTTP request to /mcp and its answer."""

    def __init__(self, exchange: Exchange):
        self.x = exchange
        self.person = None
        self.modern = False
        self.session_id: str | None = None

    # Answers.

    async def reply(self, request_id, result: types.Result) -> None:
        await self.x.json(200, {"jsonrpc": "2.0", "id": request_id, "result": self.dump(result)})

    def dump(self, model) -> dict:
        exclude = None if self.modern else MODERN_ONLY
        return model.model_dump(by_alias=True, mode="json", exclude_none=True, exclude=exclude)

    async def error(self, request_id, exc: RpcError) -> None:
        status = exc.status
        if status is None:
            # The modern revision maps codes to statuses; the handshake era answers errors at 200.
            status = ERROR_CODE_HTTP_STATUS.get(exc.code, 200) if self.modern else 200
        await self.x.json(
            status, error_body(request_id, exc.code, exc.message, exc.data), exc.headers
        )

    async def accepted(self) -> None:
        await self.x.respond(202)

    # The request.

    async def serve(self) -> None:
        x = self.x
        if x.foreign_origin():
            return await self.error(
                None,
                RpcError(
                    INVALID_REQUEST, "Requests from another site's pages are refused.", status=403
                ),
            )
        if x.method not in ("POST", "DELETE"):
            # No server-push stream (GET): everything arrives on the stream of its own request.
            return await x.respond(405, headers=[("allow", "POST, DELETE")])
        self.person = await x.person()
        if self.person is None:
            return await x.json(
                401,
                error_body(
                    None,
                    INVALID_REQUEST,
                    "Authentication required: send 'Authorization: Bearer apt_…' with a personal "
                    "API token of yours (POST /api/v1/auth/token/ with your username and password "
                    "gives one; docs/mcp.md). This one is missing, unknown or revoked.",
                    {"code": "not_authenticated"},
                ),
                headers=[("www-authenticate", 'Bearer realm="agntchat"')],
            )
        if x.method == "DELETE":
            return await self.delete()
        try:
            body = await x.read_json()
        except BadBody as exc:
            # Not JSON at all: a parse error; JSON but not one request object: an invalid one.
            code = PARSE_ERROR if exc.status == 400 and not exc.parsed else INVALID_REQUEST
            return await self.error(None, RpcError(code, exc.message, status=exc.status))
        try:
            await self.message(body)
        except RpcError as exc:
            if not x.started:
                request_id = body.get("id")
                await self.error(request_id if is_request_id(request_id) else None, exc)

    async def delete(self) -> None:
        version = self.x.headers.get("mcp-protocol-version")
        session_id = self.x.headers.get("mcp-session-id")
        if version in MODERN_VERSIONS or not session_id:
            return await self.x.respond(405, headers=[("allow", "POST")])
        ended = await database_sync_to_async(end_session)(self.person, session_id)
        await self.x.respond(204 if ended else 404)

    async def message(self, body: dict) -> None:
        method = body.get("method")
        if body.get("jsonrpc") != "2.0":
            raise RpcError(INVALID_REQUEST, "Not a JSON-RPC 2.0 message.", status=400)
        if method is None and ("result" in body or "error" in body):
            return await self.accepted()  # an answer to a request we never send: nothing to do
        if not isinstance(method, str):
            raise RpcError(INVALID_REQUEST, "A JSON-RPC message needs a method.", status=400)
        is_request = "id" in body
        request_id = body.get("id")
        if is_request and not is_request_id(request_id):
            raise RpcError(
                INVALID_REQUEST,
                f"The id must be an integer or a string of at most {MAX_ID_CHARS} characters.",
                status=400,
            )
        params = body.get("params")
        if params is not None and not isinstance(params, dict):
            raise RpcError(INVALID_PARAMS, "params must be an object.", status=400)
        version = self.x.headers.get("mcp-protocol-version")
        if version is not None and version not in SUPPORTED_VERSIONS:
            raise RpcError(
                UNSUPPORTED_PROTOCOL_VERSION,
                f"Unsupported MCP-Protocol-Version {version!r}.",
                {"supported": list(SUPPORTED_VERSIONS), "requested": version},
                status=400,
            )
        self.modern = version in MODERN_VERSIONS or (
            version is None and method == "server/discover"
        )
        if self.modern:
            await self.modern_message(body, method, is_request, request_id, params or {})
        else:
            await self.legacy_message(body, method, is_request, request_id, params or {}, version)

    async def modern_message(self, body, method, is_request, request_id, params) -> None:
        if not is_request:
            # Notifications have no part in the modern HTTP transport (a call is cancelled by
            # closing its stream): accepted and dropped.
            return await self.accepted()
        if duplicated := find_duplicated_routing_header(
            (k.decode("latin-1"), v.decode("latin-1")) for k, v in self.x.scope.get("headers", [])
        ):
            raise RpcError(HEADER_MISMATCH, f"The {duplicated} header came more than once.")
        route = classify_inbound_request(
            body, headers=self.x.headers, supported_modern_versions=MODERN_VERSIONS
        )
        if isinstance(route, InboundLadderRejection):
            raise RpcError(route.code, route.message, route.data)
        await self.request(method, request_id, params)

    async def legacy_message(self, body, method, is_request, request_id, params, version) -> None:
        if method == "initialize":
            if not is_request:
                raise RpcError(
                    INVALID_REQUEST, "initialize is a request (it needs an id).", status=400
                )
            return await self.initialize(request_id, params)
        session_id = self.x.headers.get("mcp-session-id")
        if not session_id and method == "ping" and is_request:
            return await self.request(method, request_id, params)  # allowed before initialize
        if not session_id:
            raise RpcError(
                INVALID_REQUEST,
                "Missing MCP-Session-Id: send initialize first (or use protocol 2026-07-28).",
                status=400,
            )
        session = await database_sync_to_async(session_of)(self.person, session_id)
        if session is None:
            raise RpcError(
                INVALID_REQUEST, "Unknown or ended session: initialize again.", status=404
            )
        if version is not None and version != session["version"]:
            raise RpcError(
                INVALID_REQUEST,
                f"MCP-Protocol-Version {version} is not this session's ({session['version']}).",
                status=400,
            )
        self.session_id = session_id
        if not is_request:
            if method == "notifications/cancelled":
                cancelled = params.get("requestId")
                if is_request_id(cancelled):
                    await database_sync_to_async(cancel_call)(self.person, session_id, cancelled)
            return await self.accepted()
        await self.request(method, request_id, params)

    async def initialize(self, request_id, params) -> None:
        try:
            asked = types.InitializeRequestParams.model_validate(params)
        except ValidationError as exc:
            raise RpcError(
                INVALID_PARAMS, f"Invalid initialize params: {exc.errors()[0]['msg']}"
            ) from None
        version = (
            asked.protocol_version
            if asked.protocol_version in LEGACY_VERSIONS
            else LEGACY_VERSIONS[-1]
        )
        session_id = await database_sync_to_async(open_session)(
            self.person, version, client_label(asked.client_info)
        )
        result = types.InitializeResult(
            protocol_version=version,
            capabilities=CAPABILITIES,
            server_info=SERVER_INFO,
            instructions=INSTRUCTIONS,
        )
        await self.x.json(
            200,
            {"jsonrpc": "2.0", "id": request_id, "result": self.dump(result)},
            headers=[("mcp-session-id", session_id)],
        )

    async def request(self, method: str, request_id, params: dict) -> None:
        if method == "ping":
            return await self.reply(request_id, types.EmptyResult())
        if method == "server/discover" and self.modern:
            return await self.reply(
                request_id,
                types.DiscoverResult(
                    supported_versions=list(SUPPORTED_VERSIONS),
                    capabilities=CAPABILITIES,
                    instructions=INSTRUCTIONS,
                    ttl_ms=LIST_TTL_MS,
                    cache_scope="private",
                    _meta={
                        types.SERVER_INFO_META_KEY: SERVER_INFO.model_dump(
                            mode="json", exclude_none=True
                        )
                    },
                ),
            )
        if method == "tools/list":
            tools = await database_sync_to_async(list_tools)(self.person)
            return await self.reply(
                request_id,
                types.ListToolsResult(tools=tools, ttl_ms=LIST_TTL_MS, cache_scope="private"),
            )
        if method == "tools/call":
            return await self.call(request_id, params)
        raise RpcError(METHOD_NOT_FOUND, f"Method not found: {method}")

    # tools/call

    async def call(self, request_id, params: dict) -> None:
        try:
            asked = types.CallToolRequestParams.model_validate(params)
        except ValidationError as exc:
            raise RpcError(
                INVALID_PARAMS, f"Invalid tools/call params: {exc.errors()[0]['msg']}"
            ) from None
        token = (asked.meta or {}).get("progress_token")
        try:
            started = await database_sync_to_async(start_task)(
                self.person, asked.name, asked.arguments, self.session_id, request_id
            )
        except RateLimited as exc:
            raise RpcError(
                RATE_LIMITED,
                exc.message,
                {"code": exc.code, "retryAfter": exc.retry_after},
                status=429,
                headers=[("retry-after", str(exc.retry_after))],
            ) from None
        except UnknownTool:
            raise RpcError(INVALID_PARAMS, f"Unknown tool: {asked.name}") from None
        except Ambiguous as exc:
            raise RpcError(INVALID_PARAMS, f"Unknown tool: {exc}") from None
        if isinstance(started, types.CallToolResult):
            return await self.reply(request_id, started)
        task, topics, wait_id = started
        try:
            await self.answer_call(request_id, token, task, topics)
        finally:
            live.end_wait(self.person.id, wait_id)  # one quick Redis call: no hop to skip
            await self.forget(request_id)  # again if the answer never went (the client left)

    async def forget(self, request_id) -> None:
        """The call is over: its id no longer names it (a cancel finds nothing to cancel)."""
        if self.session_id is not None:
            await database_sync_to_async(forget_call)(self.session_id, request_id)

    async def answer_call(self, request_id, token, task: Task, topics) -> None:
        """Wait for TASK and answer the call with its result (progress on the way, when the
        client takes a stream)."""
        streaming = self.x.accepts("text/event-stream")
        if streaming:
            # Progress as it comes; without a progress token, a comment now and then instead.
            await self.x.start_events()
        task = await self.wait(task, topics, token if streaming else None, streaming, request_id)
        # Before the answer: a client that has it may close at once, and this request with it.
        await self.forget(request_id)
        if task is None:
            # Cancelled by the client (its notification, or its closing the stream): no result.
            if streaming and not self.x.gone.is_set():
                await self.x.end()
            elif not streaming and not self.x.gone.is_set():
                await self.x.respond(204)
            return
        result = await database_sync_to_async(call_result)(task)
        message = {"jsonrpc": "2.0", "id": request_id, "result": self.dump(result)}
        if streaming:
            await self.x.event(message)
            await self.x.end()
        else:
            await self.x.json(200, message)

    async def wait(self, task: Task, topics, token, streaming: bool, request_id) -> Task | None:
        """TASK once terminal, or None when the client cancelled the call or went away."""
        state = database_sync_to_async(task_state)
        progress, last_seq = 0, 0
        loop = asyncio.get_running_loop()
        start_by = loop.time() + settings.FRONT_START_SECONDS

        async def report(seq: int, data: dict) -> None:
            nonlocal progress, last_seq
            if seq <= last_seq:
                return
            last_seq = seq
            if token is None:
                return
            progress += 1
            params = types.ProgressNotificationParams(
                progress_token=token, progress=progress, message=progress_message(data)
            )
            await self.x.event(
                self.dump(types.ProgressNotification(params=params)) | {"jsonrpc": "2.0"}
            )

        async with Following(topics) as live:
            while True:
                task, events, cancelled = await state(
                    task.id, last_seq, self.session_id, request_id
                )
                if cancelled:
                    return None
                for event in events:
                    await report(event.seq, event.data)
                if task.is_terminal:
                    return task
                if task.status == Task.Status.QUEUED and loop.time() >= start_by:
                    # No bridge took it: the agent is offline. Answered, not waited on for ever
                    # (and given up by the worker too, should this process not get here).
                    await database_sync_to_async(give_up_unstarted)(task.id)
                    continue  # read it again: cancelled, or taken at the last moment
                while True:
                    try:
                        event = await live.next_unless_gone(self.x.gone, WAIT_SLICE)
                    except ClientGone:
                        if self.modern and not task.is_terminal:
                            # The modern revision's cancellation: the client closed the stream.
                            await database_sync_to_async(cancel_task)(task.id)
                        return None
                    if event is None:
                        if streaming:
                            await self.x.comment("waiting")
                        break  # read the task again: events are at-most-once
                    if event.get("type") == "task.progress" and event.get("taskId") == str(task.id):
                        await report(event["seq"], event.get("data") or {})
                    elif (event.get("task") or {}).get("id") == str(task.id):
                        break  # started, cancel requested, finished: read it


def cancel_task(task_id) -> None:
    try:
        tasks.request_cancel(Task.objects.get(pk=task_id))
    except AppError:
        pass  # it ended meanwhile


async def endpoint(scope, receive, send) -> None:
    """The ASGI app mounted at /mcp (agntchat.asgi.FRONTS)."""
    exchange = Exchange(scope, receive, send)
    try:
        if exchange.path.rstrip("/") != PATH:
            return await exchange.json(
                404, {"error": {"code": "not_found", "message": f"MCP is at {PATH}."}}
            )
        await Endpoint(exchange).serve()
    finally:
        exchange.close()
