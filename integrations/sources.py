"""A workspace's outside tool sources (TOOL-1, issue 24): MCP servers (Streamable HTTP) and
custom HTTP APIs its admins add, whose functions become tools of the agents granted them.

- An MCP server's ``tools/list`` is imported (``import_tools``) into ``ToolSource.functions``;
  a call is a ``tools/call`` through the official ``mcp`` client, with the source's timeout.
- An HTTP API has one function, ``request``: a method and a path, checked against the allowed
  methods and path patterns (fnmatch) before anything is sent.
- Both may send an auth header whose value is one of the workspace's encrypted credentials.
- The model sees ``<source>__<function>``. A right is one ``SourceGrant`` (agent × source ×
  function): workspace admins grant and take away; an agent's owner may take away its own
  agent's (an owner can always narrow what their agent does, never widen it with a secret of
  the workspace). The agent must appear in the source's workspace.
- A source's tool belongs to its workspace (``Tool.workspace_id``): the call path refuses it in
  work of another workspace (``tool_not_here``).
- Addresses follow web_fetch's rule: private and local networks are refused unless the operator
  allows them (``WEB_FETCH_ALLOW_PRIVATE``).

Everything that changes agents' tool lists announces ``agent.changed`` to the agents granted,
so their sockets read their tools again.
"""

import asyncio
import fnmatch
import json
import re
import time
import zlib
from functools import partial
from urllib.parse import parse_qsl, unquote, urlsplit, urlunsplit

import httpx
import httpx2
import jsonschema
from django.db import transaction
from django.utils import timezone
from mcp import Client, MCPError
from mcp.client.streamable_http import streamable_http_client
from mcp_types import Implementation

from agents.access import agents_visible_in, is_agent_owner
from agents.actions import announce_agent_changed
from agents.exceptions import AgentNotFound
from agents.models import Agent
from agntchat.core import crypto
from agntchat.core.exceptions import AppError, Conflict, NotFound, PermissionDenied
from agntchat.core.ids import as_uuid
from integrations.models import SourceGrant, ToolSource
from work.models import Risk
from work.tools import platform_web
from work.tools.registry import Tool, ToolContext, register_source
from workspaces.access import access_membership, require_manager
from workspaces.models import Credential, Membership

NAME = re.compile(r"^[a-z][a-z0-9_]{0,31}$")
TOOL_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
HEADER_NAME = re.compile(r"^[A-Za-z0-9-]{1,64}$")
METHODS = ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE"]
MAX_PATTERNS = 50
MAX_FUNCTIONS = 200  # imported from one MCP server at most
MAX_LIST_PAGES = 20
MAX_DESCRIPTION = 2000
MAX_SCHEMA_CHARS = 20_000  # of one function's input schema, as JSON
MAX_OUTPUT_CHARS = 50_000  # of one MCP call's text
MAX_MCP_ANSWER_BYTES = 8 * 1024 * 1024  # read of one answer of an MCP server, inflated
MAX_RESPONSE_BYTES = 1024 * 1024  # read of an HTTP API's response
MAX_RESPONSE_CHARS = 20_000  # and returned of it
MIN_TIMEOUT, MAX_TIMEOUT = 1, 120
# The socket waits a little past the source's own timeout, so the model reads which server
# did not answer rather than a generic time-out.
TIMEOUT_MARGIN = 5


class SourceInvalid(AppError):
    code = "tool_source_invalid"


class SourceExists(Conflict):
    code = "tool_source_exists"


class SourceNotFound(NotFound):
    code = "tool_source_not_found"
    default_message = "No such tool source."


class GrantNotFound(NotFound):
    code = "source_grant_not_found"
    default_message = "This agent has no grant of that function."


class NotAllowedHere(PermissionDenied):
    code = "not_allowed"


class SourceUnreachable(AppError):
    """The server could not be reached, or did not answer in time: nothing was done."""

    code = "tool_source_unreachable"
    status = 502


class SourceFailed(AppError):
    """The server answered with a failure (the tool's isError, or a refusal)."""

    code = "tool_source_error"
    status = 502


class RequestRefused(AppError):
    """An HTTP API request outside what the admins allowed: refused before anything is sent."""

    code = "tool_source_refused"


# ---- access -------------------------------------------------------------------------------


def sources_of(membership: Membership):
    return ToolSource.objects.filter(workspace_id=membership.workspace_id).select_related(
        "credential"
    )


def access_source(user, source_id) -> tuple[Membership, ToolSource]:
    """A tool source of a workspace USER belongs to, with their membership there; another
    workspace's is not found. (Here rather than an access.py: integrations has no other
    permission-checked lookup of its own yet.)"""
    source = (
        ToolSource.objects.select_related("workspace", "credential")
        .filter(pk=as_uuid(source_id), workspace__memberships__user=getattr(user, "pk", None))
        .first()
        if getattr(user, "is_authenticated", False)
        else None
    )
    if source is None:
        raise SourceNotFound()
    return access_membership(user, source.workspace_id), source


def source_agent(source: ToolSource, agent_id) -> Agent:
    """An agent that appears in SOURCE's workspace, or not found."""
    agent = agents_visible_in(source.workspace_id).filter(pk=as_uuid(agent_id)).first()
    if agent is None:
        raise AgentNotFound("No such agent in this workspace.")
    return agent


def granted_agent(source: ToolSource, agent_id) -> Agent:
    """An agent granted a function of SOURCE (it may since have left the workspace), or not
    found."""
    agent = Agent.objects.filter(source_grants__source=source, pk=as_uuid(agent_id)).first()
    if agent is None:
        raise GrantNotFound()
    return agent


# ---- names and checks -----------------------------------------------------------------------


def tool_name(source_name: str, function: str, taken=()) -> str:
    """The name the model sees: ``<source>__<function>``, other characters as ``_``, at most 64;
    a suffix keeps it apart from TAKEN (two functions that sanitise alike)."""
    base = re.sub(r"[^a-zA-Z0-9_-]", "_", f"{source_name}__{function}")[:64]
    name, n = base, 2
    while name in taken:
        suffix = f"_{n}"
        name, n = base[: 64 - len(suffix)] + suffix, n + 1
    return name


def _check_url(url) -> str:
    url = (url or "").strip() if isinstance(url, str) else ""
    try:
        parts = urlsplit(url)
    except ValueError:
        parts = None
    if parts is None or parts.scheme not in ("http", "https") or not parts.hostname:
        raise SourceInvalid(
            "url must be an http or https URL with a host.", fields={"url": "invalid"}
        )
    if parts.username or parts.password or parts.fragment or len(url) > 500:
        raise SourceInvalid(
            "url must have no user name, password or #fragment, and at most 500 characters "
            "(put a secret in a credential).",
            fields={"url": "invalid"},
        )
    return url


def _check_patterns(paths) -> list[str]:
    if not isinstance(paths, (list, tuple)) or not paths or len(paths) > MAX_PATTERNS:
        raise SourceInvalid(
            f"paths: 1 to {MAX_PATTERNS} path patterns, such as /v1/items/*.",
            fields={"paths": "invalid"},
        )
    for pattern in paths:
        if not isinstance(pattern, str) or not pattern.startswith("/") or len(pattern) > 200:
            raise SourceInvalid(
                f"Each path pattern starts with / and has at most 200 characters: {pattern!r}.",
                fields={"paths": "invalid"},
            )
    return list(dict.fromkeys(paths))


def _check_methods(methods) -> list[str]:
    if not isinstance(methods, (list, tuple)) or not methods:
        raise SourceInvalid(
            f"methods: one or more of {', '.join(METHODS)}.", fields={"methods": "invalid"}
        )
    upper = [m.upper() if isinstance(m, str) else m for m in methods]
    unknown = [m for m in upper if m not in METHODS]
    if unknown:
        raise SourceInvalid(
            f"Unknown method {unknown[0]!r}: use {', '.join(METHODS)}.",
            fields={"methods": "invalid"},
        )
    return [m for m in METHODS if m in upper]


def _checked(source: ToolSource, membership: Membership) -> None:
    """SOURCE's fields as the admins set them, or SourceInvalid; nothing is written before."""
    if source.kind not in ToolSource.Kind.values:
        raise SourceInvalid("kind must be mcp or http.", fields={"kind": "invalid"})
    if not isinstance(source.name, str) or not NAME.match(source.name):
        raise SourceInvalid(
            "name: a lowercase letter, then up to 31 lowercase letters, digits or underscores.",
            fields={"name": "invalid"},
        )
    source.url = _check_url(source.url)
    if not isinstance(source.description, str) or len(source.description) > MAX_DESCRIPTION:
        raise SourceInvalid(f"description: at most {MAX_DESCRIPTION} characters.")
    if source.credential is not None and source.credential.workspace_id != membership.workspace_id:
        raise SourceInvalid("The credential must be one of this workspace's.")
    if not HEADER_NAME.match(source.auth_header or "Authorization"):
        raise SourceInvalid(
            "auth_header: a header name (letters, digits and -).", fields={"auth_header": "invalid"}
        )
    if not isinstance(source.auth_scheme, str) or not re.fullmatch(
        r"[A-Za-z0-9._-]{0,32}", source.auth_scheme
    ):
        raise SourceInvalid(
            "auth_scheme: empty, or one word such as Bearer or Token.",
            fields={"auth_scheme": "invalid"},
        )
    if not isinstance(source.timeout_seconds, int) or not (
        MIN_TIMEOUT <= source.timeout_seconds <= MAX_TIMEOUT
    ):
        raise SourceInvalid(
            f"timeout_seconds: {MIN_TIMEOUT} to {MAX_TIMEOUT}.",
            fields={"timeout_seconds": "invalid"},
        )
    if source.kind == ToolSource.Kind.HTTP:
        source.methods = _check_methods(source.methods)
        source.paths = _check_patterns(source.paths)
        source.functions = [http_function(source)]
    else:
        source.methods, source.paths = [], []
    clash = ToolSource.objects.filter(workspace_id=membership.workspace_id, name=source.name)
    if clash.exclude(pk=source.pk).exists():
        raise SourceExists(f"This workspace has a tool source named {source.name} already.")


def shown_url(url: str) -> str:
    """URL as models and members see it: no query string (an ``?api_key=`` is a secret; admins
    see it in the source's settings), no user name or password, no #fragment."""
    parts = urlsplit(url)
    netloc = parts.hostname or ""
    netloc = f"[{netloc}]" if ":" in netloc else netloc
    if parts.port:
        netloc += f":{parts.port}"
    return urlunsplit((parts.scheme, netloc, parts.path, "", ""))


def http_function(source: ToolSource) -> dict:
    """The one function of an HTTP API: a request within what is allowed."""
    patterns = ", ".join(source.paths)
    return {
        "name": "request",
        "tool": tool_name(source.name, "request"),
        "description": (
            f"Send an HTTP request to the {source.name} API at {shown_url(source.url)}"
            f"{': ' + source.description.strip() if source.description.strip() else ''}. "
            f"Allowed methods: {', '.join(source.methods)}; allowed paths (glob patterns, "
            f"relative to the base URL): {patterns}. Returns the status and the response body "
            f"(at most {MAX_RESPONSE_CHARS} characters)."
        ),
        "input_schema": {
            "type": "object",
            "properties": {
                "method": {"type": "string", "enum": list(source.methods)},
                "path": {
                    "type": "string",
                    "minLength": 1,
                    "maxLength": 2000,
                    "description": "Starts with /, relative to the base URL; no query string.",
                },
                "query": {
                    "type": "object",
                    "additionalProperties": {"type": ["string", "number", "boolean"]},
                    "description": "Query parameters.",
                },
                "body": {"description": "A JSON body, for methods that take one."},
            },
            "required": ["method", "path"],
            "additionalProperties": False,
        },
        "risk": Risk.EXTERNAL,
    }


# ---- actions --------------------------------------------------------------------------------


def _announce(source: ToolSource) -> None:
    """The agents granted a function of SOURCE read their tools again (after commit)."""
    for agent in Agent.objects.filter(source_grants__source=source).distinct():
        announce_agent_changed(agent)


SETTABLE = (
    "description", "url", "credential", "auth_header", "auth_scheme", "methods", "paths",
    "timeout_seconds", "name",
)  # fmt: skip


def add_source(membership: Membership, *, kind: str, name: str, url: str, **fields) -> ToolSource:
    """A new source of MEMBERSHIP's workspace (admins). An MCP server's tools are imported
    separately (``import_tools``: it goes over the network, outside this transaction)."""
    require_manager(membership)
    unknown = set(fields) - set(SETTABLE)
    if unknown:
        raise SourceInvalid(f"Unknown field {sorted(unknown)[0]}.")
    source = ToolSource(
        workspace_id=membership.workspace_id, created_by=membership.user, kind=kind, name=name,
        url=url, **fields,
    )  # fmt: skip
    with transaction.atomic():
        _checked(source, membership)
        source.save()
    return source


def change_source(membership: Membership, source: ToolSource, **fields) -> ToolSource:
    """Change some of SOURCE's settings (admins); the agents granted its functions follow."""
    require_manager(membership)
    unknown = set(fields) - set(SETTABLE)
    if unknown:
        raise SourceInvalid(f"Unknown field {sorted(unknown)[0]}.")
    renamed = "name" in fields and fields["name"] != source.name
    for key, value in fields.items():
        setattr(source, key, value)
    with transaction.atomic():
        _checked(source, membership)
        if renamed and source.kind == ToolSource.Kind.MCP:
            source.functions = _renamed(source.name, source.functions)
        source.save()
        _announce(source)
    return source


def _renamed(source_name: str, functions: list[dict]) -> list[dict]:
    taken: set[str] = set()
    for function in functions:
        function["tool"] = tool_name(source_name, function["name"], taken)
        taken.add(function["tool"])
    return functions


def remove_source(membership: Membership, source: ToolSource) -> None:
    """Remove SOURCE and every grant of it (admins)."""
    require_manager(membership)
    with transaction.atomic():
        _announce(source)  # read before the grants go; sent after commit
        source.delete()


def needs_import(fields: dict) -> bool:
    """A change of where or how the server is reached: its tools are read again."""
    return bool({"url", "credential", "auth_header", "auth_scheme"} & set(fields))


def import_tools(membership: Membership, source: ToolSource) -> ToolSource:
    """Read an MCP server's tools (``initialize``, ``tools/list``) into SOURCE.FUNCTIONS; when
    the server is down or refuses, PROBLEM says so and the functions last imported stay (a
    flaky server does not take its tools away from the agents)."""
    require_manager(membership)
    if source.kind != ToolSource.Kind.MCP:
        raise SourceInvalid(
            "Only an MCP server's tools are imported; an HTTP API has one function."
        )
    try:
        listed = _mcp(source, _list_all)
    except AppError as exc:
        source.problem = exc.message
    else:
        source.functions, source.problem = _functions(source, listed)
        source.imported_at = timezone.now()
    with transaction.atomic():
        source.save(update_fields=["functions", "problem", "imported_at", "updated_at"])
        _announce(source)
    return source


async def _list_all(client: Client) -> list:
    tools, cursor = [], None
    for _page in range(MAX_LIST_PAGES):
        page = await client.list_tools(cursor=cursor)
        tools += page.tools
        cursor = page.next_cursor
        if not cursor or len(tools) >= MAX_FUNCTIONS:
            break
    return tools


def _functions(source: ToolSource, listed) -> tuple[list[dict], str]:
    """The functions stored of a server's listed tools, and what was left out (its problem)."""
    functions, skipped, too_large, taken = [], [], [], set()
    for tool in listed[:MAX_FUNCTIONS]:
        schema = tool.input_schema if isinstance(tool.input_schema, dict) else None
        try:
            jsonschema.Draft202012Validator.check_schema(schema or {})
        except jsonschema.SchemaError:
            schema = None
        if not schema or schema.get("type") != "object":
            skipped.append(tool.name)
            continue
        # Every request of a granted agent's model carries the schema.
        if len(json.dumps(schema, ensure_ascii=False)) > MAX_SCHEMA_CHARS:
            too_large.append(tool.name)
            continue
        read_only = bool(tool.annotations and tool.annotations.read_only_hint)
        name = tool_name(source.name, tool.name, taken)
        taken.add(name)
        functions.append({
            "name": tool.name,
            "tool": name,
            "description": (tool.description or tool.title or tool.name)[:MAX_DESCRIPTION],
            "input_schema": schema,
            # Annotations are hints from the server: read-only ones run without asking.
            "risk": Risk.READ if read_only else Risk.EXTERNAL,
        })  # fmt: skip
    problem = ""
    if skipped:
        problem = "Left out (their input schema is not a JSON Schema object): " + ", ".join(
            skipped[:20]
        )
    if too_large:
        problem = (problem + " " if problem else "") + (
            f"Left out (their input schema is too large, over {MAX_SCHEMA_CHARS} characters): "
            + ", ".join(too_large[:20])
        )
    if len(listed) > MAX_FUNCTIONS:
        problem = (
            problem + " " if problem else ""
        ) + f"Only the first {MAX_FUNCTIONS} tools are used."
    return functions, problem


def grant_function(membership: Membership, source: ToolSource, agent: Agent, function: str):
    """AGENT may call FUNCTION of SOURCE (admins grant; the agent appears in the workspace)."""
    require_manager(membership)
    if not agents_visible_in(source.workspace_id).filter(pk=agent.pk).exists():
        raise AgentNotFound("No such agent in this workspace.")
    if function not in {f["name"] for f in source.functions}:
        raise SourceInvalid(
            f"{source.name} has no function {function!r}"
            + ("" if source.functions else " (its tools have not been imported)")
            + ".",
            fields={"function": "unknown"},
        )
    with transaction.atomic():
        grant, made = SourceGrant.objects.get_or_create(
            agent=agent, source=source, function=function
        )
        if made:
            announce_agent_changed(agent)
    return grant


def take_away_function(membership: Membership, source: ToolSource, agent: Agent, function: str):
    """AGENT may no longer call FUNCTION of SOURCE: admins, or the agent's owner."""
    if not (membership.is_manager or is_agent_owner(membership.user, agent)):
        raise NotAllowedHere("Only an admin of this workspace or the agent's owner can do that.")
    with transaction.atomic():
        deleted, _ = SourceGrant.objects.filter(
            agent=agent, source=source, function=function
        ).delete()
        if not deleted:
            raise GrantNotFound()
        announce_agent_changed(agent)


# ---- calls ----------------------------------------------------------------------------------


def auth_headers(source: ToolSource) -> dict:
    """The auth header of SOURCE, from its credential (decrypted only here, never stored)."""
    if source.credential is None:
        return {}
    secret = crypto.decrypt(source.credential.ciphertext)
    value = f"{source.auth_scheme} {secret}" if source.auth_scheme else secret
    return {source.auth_header or "Authorization": value}


def _kind(source: ToolSource) -> str:
    return "MCP server" if source.kind == ToolSource.Kind.MCP else "HTTP API"


def _check_address(source: ToolSource, url: str) -> tuple[str, str, str]:
    """URL pinned to its checked address (web_fetch's rule), or why it may not be reached."""
    try:
        pinned, host_header, server_name = platform_web.checked_target(url)
    except AppError as exc:
        raise SourceUnreachable(
            f"The {_kind(source)} {source.name} could not be reached: {exc.message} Nothing "
            "was done."
        ) from None
    return pinned, host_header, server_name


def _leaf(exc: BaseException) -> BaseException:
    """The first real error inside the task groups' exception groups."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc


class _Guarded(httpx2.AsyncBaseTransport):
    """Every request of the MCP client goes to the address checked for it at that moment: a name
    that resolved to a public address when checked may resolve to the server's own network when
    the client connects (DNS rebinding). No answer is read, inflated, past
    MAX_MCP_ANSWER_BYTES. REFUSED keeps why a request was stopped, for the caller to say."""

    def __init__(self, source: ToolSource):
        self.source = source
        self.refused: AppError | None = None
        self.inner = httpx2.AsyncHTTPTransport(trust_env=False)

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        try:
            pinned, host_header, server_name = await asyncio.to_thread(
                _check_address, self.source, str(request.url)
            )
        except AppError as exc:
            self.refused = exc
            raise httpx2.ConnectError(exc.message, request=request) from None
        headers = request.headers.copy()
        headers["Host"] = host_header
        sent = httpx2.Request(
            request.method, pinned, headers=headers, stream=request.stream,
            extensions={**request.extensions, "sni_hostname": server_name},
        )  # fmt: skip
        response = await self.inner.handle_async_request(sent)
        encoding = response.headers.get("content-encoding", "").strip().lower()
        if encoding not in ("", "identity", "gzip", "x-gzip", "deflate"):
            await response.aclose()
            self.refused = SourceFailed(
                f"The MCP server {self.source.name} answered in an encoding this server cannot "
                f"read ({encoding}); nothing more was read."
            )
            raise httpx2.DecodingError(self.refused.message, request=request)
        # Inflated here, within the limit (httpx would inflate a whole bomb): none left to undo.
        headers = [(k, v) for k, v in response.headers.multi_items() if k.lower() not in (
            "content-encoding", "content-length")]  # fmt: skip
        return httpx2.Response(
            response.status_code, headers=headers, extensions=response.extensions,
            stream=_Capped(self, response.stream, encoding not in ("", "identity")),
        )  # fmt: skip

    async def aclose(self) -> None:
        await self.inner.aclose()


class _Capped(httpx2.AsyncByteStream):
    """An answer's body, inflated when it came compressed, refused past MAX_MCP_ANSWER_BYTES."""

    def __init__(self, guard: _Guarded, stream, compressed: bool):
        self.guard, self.stream = guard, stream
        self.inflate = zlib.decompressobj(zlib.MAX_WBITS | 32) if compressed else None

    async def __aiter__(self):
        read = 0
        async for chunk in self.stream:
            if self.inflate is not None:
                try:
                    chunk = self.inflate.decompress(chunk, MAX_MCP_ANSWER_BYTES + 1 - read)
                except zlib.error:
                    raise httpx2.DecodingError("damaged compressed answer") from None
            read += len(chunk)
            if read > MAX_MCP_ANSWER_BYTES:
                self.guard.refused = SourceFailed(
                    f"The MCP server {self.guard.source.name} answered with more than "
                    f"{MAX_MCP_ANSWER_BYTES // (1024 * 1024)} MB; it was not read further."
                )
                raise httpx2.ReadError(self.guard.refused.message)
            yield chunk

    async def aclose(self) -> None:
        await self.stream.aclose()


def _mcp(source: ToolSource, work):
    """WORK(client) with a client connected to SOURCE (initialized), within its timeout. Runs in
    a worker thread with no event loop (a tool's handler, or an admin's import)."""
    _check_address(source, source.url)
    timeout = source.timeout_seconds
    guard = _Guarded(source)

    async def connected():
        # trust_env off: no proxy from the environment sees the credential or the checks.
        async with httpx2.AsyncClient(
            headers={**auth_headers(source), "Accept-Encoding": "gzip, deflate"},
            timeout=httpx2.Timeout(timeout), trust_env=False, transport=guard,
        ) as http:  # fmt: skip
            client = Client(
                streamable_http_client(source.url, http_client=http),
                read_timeout_seconds=timeout,
                cache=None,
                client_info=Implementation(name="agntchat", version="1"),
            )
            async with client:
                return await work(client)

    unreachable = f"The MCP server {source.name} could not be reached, so nothing was done"
    try:
        return asyncio.run(asyncio.wait_for(connected(), timeout))
    except BaseException as raised:  # noqa: BLE001 - sorted out below
        exc = _leaf(raised)
        if isinstance(exc, (KeyboardInterrupt, SystemExit)):
            raise
        if guard.refused is not None:  # stopped by the guard, however the client reported it
            raise guard.refused from None
        if isinstance(exc, AppError):
            raise exc from None
        if isinstance(exc, MCPError):
            raise SourceFailed(
                f"The MCP server {source.name} refused the request: {exc}."
            ) from None
        if isinstance(exc, (TimeoutError, asyncio.TimeoutError, httpx2.TimeoutException)):
            raise SourceUnreachable(
                f"{unreachable}: it did not answer within {timeout} seconds."
            ) from None
        reason = _reason(exc)
        raise SourceUnreachable(f"{unreachable} ({reason}).") from None


def _reason(exc: BaseException) -> str:
    if isinstance(exc, httpx2.HTTPStatusError):
        return f"it answered HTTP {exc.response.status_code}"
    if isinstance(exc, httpx2.ConnectError):
        return "the connection was refused or failed"
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text[:200]}" if text else type(exc).__name__


def result_text(result) -> str:
    """What the model reads of a tools/call result: its text (other content named, not
    inlined); its structured content as JSON when it has no text (servers are asked to send
    structured content as text too, so the text is usually the same, and shorter)."""
    parts = []
    for block in result.content:
        if block.type == "text":
            parts.append(block.text)
        elif block.type == "resource" and getattr(block.resource, "text", None) is not None:
            parts.append(block.resource.text)
        elif block.type == "resource_link":
            parts.append(f"[{block.name}]({block.uri})")
        else:
            parts.append(f"[{block.type} content, not shown]")
    text = "\n".join(parts)
    if not text.strip() and result.structured_content is not None:
        text = json.dumps(result.structured_content, ensure_ascii=False)
    if len(text) > MAX_OUTPUT_CHARS:
        text = text[:MAX_OUTPUT_CHARS] + f"\n[cut off after {MAX_OUTPUT_CHARS} characters]"
    return text


def call_mcp(source: ToolSource, function: str, arguments: dict):
    async def call(client: Client):
        return await client.call_tool(
            function, arguments, read_timeout_seconds=source.timeout_seconds
        )

    result = _mcp(source, call)
    text = result_text(result)
    if result.is_error:
        raise SourceFailed(
            f"{function} failed on the MCP server {source.name}: {text or '(no message)'}"
        )
    return text


def request_refusal(source: ToolSource, method: str, path: str) -> str | None:
    """Why METHOD PATH may not be sent to SOURCE (None: it may)."""
    if method not in source.methods:
        return (
            f"{method} is not allowed on the {source.name} API (allowed: "
            f"{', '.join(source.methods)}); nothing was sent."
        )
    decoded = unquote(path)
    if (
        not path.startswith("/")
        or any(c in path for c in "?#\\")
        or any(ord(c) <= 32 for c in decoded)
        or "//" in decoded
        or any(part in (".", "..") for part in decoded.split("/"))
    ):
        return (
            f"{path!r} is not a plain path (it starts with /, has no query string, no // and no "
            "dot segments; give query parameters in query); nothing was sent."
        )
    if not any(fnmatch.fnmatchcase(path, pattern) for pattern in source.paths):
        return (
            f"{path} matches none of the paths allowed on the {source.name} API "
            f"({', '.join(source.paths)}); nothing was sent."
        )
    return None


def call_http(source: ToolSource, arguments: dict) -> dict:
    method, path = arguments["method"].upper(), arguments["path"]
    refusal = request_refusal(source, method, path)
    if refusal:
        raise RequestRefused(refusal)
    # The whole call within the source's timeout, from looking the address up on.
    deadline = time.monotonic() + source.timeout_seconds
    # PATH goes after the base URL's path; the base URL's query (an api_key=) with the call's.
    base = urlsplit(source.url)
    target = urlunsplit((base.scheme, base.netloc, base.path.rstrip("/") + path, "", ""))
    params = parse_qsl(base.query, keep_blank_values=True) + list(
        (arguments.get("query") or {}).items()
    )
    pinned, host_header, server_name = _check_address(source, target)
    left = deadline - time.monotonic()
    if left <= 0:
        raise SourceUnreachable(
            f"The HTTP API {source.name} did not answer within {source.timeout_seconds} seconds "
            "(its address took that long to look up), so nothing was done."
        )
    headers = {
        "Host": host_header,
        "User-Agent": platform_web.USER_AGENT,
        "Accept-Encoding": "gzip, deflate",  # what platform_web.read_body undoes
        **auth_headers(source),
    }
    options = {"json": arguments["body"]} if "body" in arguments else {}
    cut_off = platform_web.CutOff(left)
    try:
        # No redirects: a redirect could lead off the allowed paths; the model sees it.
        with httpx.Client(timeout=left, follow_redirects=False, trust_env=False) as client:
            request = client.build_request(
                method, pinned, params=params or None, headers=headers,
                extensions={"sni_hostname": server_name, "trace": cut_off.trace}, **options,
            )  # fmt: skip
            cut_off.timer.start()
            response = client.send(request, stream=True)
            try:
                # Inflated no further than kept: a few KB of gzip can be gigabytes.
                body, cut = platform_web.read_body(response, deadline, MAX_RESPONSE_BYTES)
            finally:
                response.close()
    except (platform_web.FetchRefused, platform_web.FetchFailed) as exc:
        if time.monotonic() < deadline:
            raise SourceUnreachable(
                f"The HTTP API {source.name} answered, but its answer could not be read: {exc}"
            ) from None
        raise SourceUnreachable(
            f"The HTTP API {source.name} did not finish answering within "
            f"{source.timeout_seconds} seconds; whether the request took effect is unknown."
        ) from None
    except httpx.HTTPError as exc:
        if isinstance(exc, httpx.TimeoutException) or time.monotonic() >= deadline:
            raise SourceUnreachable(
                f"The HTTP API {source.name} did not answer within {source.timeout_seconds} "
                "seconds; whether the request took effect is unknown."
            ) from None
        raise SourceUnreachable(
            f"The HTTP API {source.name} could not be reached ({type(exc).__name__}), so "
            "nothing was done."
        ) from None
    finally:
        cut_off.close()
    text = platform_web.decoded(response, body)
    out = {
        "status": response.status_code,
        "content_type": response.headers.get("content-type", ""),
        "body": text[:MAX_RESPONSE_CHARS],
        "truncated": len(text) > MAX_RESPONSE_CHARS or cut,
    }
    if response.is_redirect:
        out["location"] = response.headers.get("location", "")
    return out


def run_function(source_id, function: str, context: ToolContext, arguments: dict):
    """The handler of a source's tool: the source read afresh (its settings as they are now),
    in the workspace the call is made in."""
    source = (
        ToolSource.objects.select_related("credential")
        .filter(pk=source_id, workspace_id=context.workspace.id)
        .first()
    )
    if source is None:
        raise SourceFailed("This tool's source was removed from the workspace; nothing was done.")
    if source.kind == ToolSource.Kind.HTTP:
        return call_http(source, arguments)
    return call_mcp(source, function, arguments)


# ---- the registry's view --------------------------------------------------------------------


def _tool(source: ToolSource, function: dict) -> Tool:
    where = (
        f" (From {source.name}, an outside {_kind(source)} of the workspace "
        f"{source.workspace.name}: it works only in that workspace's conversations.)"
    )
    # An HTTP API's description is made afresh: one stored before showed the whole URL.
    described = http_function(source) if source.kind == ToolSource.Kind.HTTP else function
    return Tool(
        name=function["tool"],
        description=described["description"].strip() + where,
        input_schema=function["input_schema"],
        risk=function["risk"],
        handler=partial(run_function, source.id, function["name"]),
        platform=False,
        timeout_seconds=source.timeout_seconds + TIMEOUT_MARGIN,
        workspace_id=source.workspace_id,
    )


class Sources:
    """The registry's tool source (work.tools.registry.ToolSource) for every workspace's
    outside sources: one query of the agent's grants."""

    def _granted(self, agent: Agent) -> list[Tool]:
        grants = (
            SourceGrant.objects.filter(agent=agent)
            .select_related("source__workspace")
            .order_by("source__created_at", "source_id", "function")
        )
        tools = []
        for grant in grants:
            function = next(
                (f for f in grant.source.functions if f["name"] == grant.function), None
            )
            if function is not None:  # one no longer offered is left out, its grant kept
                tools.append(_tool(grant.source, function))
        return tools

    def tools_for(self, agent: Agent) -> list[Tool]:
        seen: dict[str, Tool] = {}
        for found in self._granted(agent):
            seen.setdefault(found.name, found)
        return list(seen.values())

    def find(self, agent: Agent, name: str, workspace_id=None) -> Tool | None:
        if not TOOL_NAME.match(name) or "__" not in name:
            return None  # never a source's: no query
        matches = [t for t in self._granted(agent) if t.name == name]
        here = [t for t in matches if str(t.workspace_id) == str(workspace_id)]
        return (here or matches or [None])[0]

    def reach(self, agent_ids) -> dict:
        reach: dict = {}
        rows = SourceGrant.objects.filter(agent_id__in=agent_ids).values_list(
            "agent_id", "function", "source__functions"
        )
        for agent_id, function, functions in rows:
            for f in functions:
                if f["name"] == function:
                    reach.setdefault(agent_id, set()).add(f["tool"])
        return reach


SOURCE = register_source(Sources())


def workspace_credentials(membership: Membership):
    """The credentials an admin may pick for a source's auth header (names only are shown)."""
    return Credential.objects.filter(workspace_id=membership.workspace_id).order_by("name")
