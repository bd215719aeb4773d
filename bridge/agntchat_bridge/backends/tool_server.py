"""The agent's tools as an MCP server, for the CLI backends (claude, codex): Streamable HTTP on
127.0.0.1, one server per bridge process, each turn reachable only with its own bearer token.
The CLI lists and calls the turn's tools natively; each call goes through that turn's
``call_tool`` (the bridge's ``tool.call`` frame), approvals included."""

from __future__ import annotations

import asyncio
import contextlib
import json
import secrets
import socket
from collections.abc import AsyncIterator

import mcp_types as types
import uvicorn
from mcp.server.lowlevel import Server

from .base import Turn

SERVER_NAME = "agntchat"
PATH = "/mcp"


class ToolServer:
    """Serve turns' tools; ``async with server.serving(turn) as (url, token)`` for one turn."""

    def __init__(self):
        self.turns: dict[str, Turn] = {}
        self.url: str | None = None
        self._started: asyncio.Future | None = None

    @contextlib.asynccontextmanager
    async def serving(self, turn: Turn) -> AsyncIterator[tuple[str, str]]:
        await self.start()
        token = secrets.token_urlsafe(32)
        self.turns[token] = turn
        try:
            yield self.url, token
        finally:
            del self.turns[token]

    async def start(self) -> None:
        """Start once, in the running loop; later turns reuse it."""
        if self._started is None:
            self._started = asyncio.get_running_loop().create_future()
            asyncio.create_task(self._serve())
        await asyncio.shield(self._started)

    def turn_of(self, headers) -> Turn | None:
        given = (headers.get("authorization") or "").removeprefix("Bearer ")
        return self.turns.get(given) if given else None

    async def _serve(self) -> None:
        mcp = Server(SERVER_NAME, on_list_tools=self._list_tools, on_call_tool=self._call_tool)
        app = mcp.streamable_http_app(
            streamable_http_path=PATH, stateless_http=True, json_response=True
        )

        async def guarded(scope, receive, send):
            # Only a turn's own token gets in: another local process cannot call its tools.
            if scope["type"] == "http":
                headers = {k.decode().lower(): v.decode() for k, v in scope["headers"]}
                if self.turn_of(headers) is None:
                    body = json.dumps({"error": "unknown or missing bearer token"}).encode()
                    await send({"type": "http.response.start", "status": 401,
                                "headers": [(b"content-type", b"application/json")]})  # fmt: skip
                    await send({"type": "http.response.body", "body": body})
                    return
            await app(scope, receive, send)

        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{sock.getsockname()[1]}{PATH}"
        # The MCP session manager runs here rather than in a lifespan, which would log a
        # traceback when the bridge exits and cancels it.
        config = uvicorn.Config(guarded, log_level="warning", lifespan="off", access_log=False)
        server = uvicorn.Server(config)
        # The bridge handles SIGTERM/SIGINT itself; uvicorn must not take them over.
        server.capture_signals = contextlib.nullcontext
        async with mcp.session_manager.run():
            serving = asyncio.create_task(server.serve(sockets=[sock]))
            while not server.started and not serving.done():
                await asyncio.sleep(0.01)
            if serving.done():
                self._started.set_exception(RuntimeError("the MCP tool server did not start"))
                return
            self._started.set_result(None)
            await serving

    async def _list_tools(self, ctx, params) -> types.ListToolsResult:
        turn = self.turn_of(ctx.request.headers)
        tools = turn.tools if turn is not None else []
        return types.ListToolsResult(
            tools=[
                types.Tool(
                    name=t["name"], description=t["description"], input_schema=t["inputSchema"]
                )
                for t in tools
            ]
        )

    async def _call_tool(self, ctx, params: types.CallToolRequestParams) -> types.CallToolResult:
        turn = self.turn_of(ctx.request.headers)
        if turn is None or turn.call_tool is None:
            outcome_text, ok = "this turn has ended; its tools are no longer available", False
        else:
            outcome = await turn.call_tool(params.name, params.arguments or {}, checkpoint=None)
            outcome_text, ok = outcome.text, outcome.ok
        return types.CallToolResult(
            content=[types.TextContent(text=outcome_text or "(no output)")], is_error=not ok
        )


# One per bridge process: the CLI backends share it.
TOOL_SERVER = ToolServer()
