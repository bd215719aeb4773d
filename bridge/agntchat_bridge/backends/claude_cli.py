"""Claude Code CLI backend: `claude -p ... --output-format stream-json --verbose`, one process per turn."""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from collections.abc import AsyncIterator
from contextlib import aclosing

from .base import (
    Backend,
    BackendError,
    Event,
    JsonlProcess,
    Result,
    Turn,
    Usage,
    cli_env,
    safe_positional,
    transcript,
)
from .tool_server import SERVER_NAME, TOOL_SERVER

# How long the CLI waits on one of our tools: a call may wait for a person's approval, which
# expires on the server's schedule (and pauses the turn's time limit meanwhile).
MCP_TOOL_TIMEOUT_MS = 24 * 3600 * 1000


def _text_event(text: str, state: dict) -> Event:
    """text_delta for a new chunk, separated from earlier assistant messages of the same turn."""
    sep = "\n\n" if state.get("texted") and state.get("new_message", True) else ""
    state["texted"], state["new_message"] = True, False
    return Event("text_delta", {"text": sep + text})


def parse_claude_line(line: dict, state: dict) -> list[Event | Result]:
    """Translate one stream-json line into Events/Result; raises BackendError on an error result."""
    kind = line.get("type")
    if line.get("session_id"):
        state["session_id"] = line["session_id"]
    if kind == "system":
        if line.get("subtype") == "init":
            return [Event("session", {"session_id": line.get("session_id")})]
        return []
    if kind == "stream_event":  # only with --include-partial-messages
        event = line.get("event") or {}
        delta = event.get("delta") or {}
        if event.get("type") == "message_start":
            state["new_message"] = True  # its first delta is set apart from the last message's
        if event.get("type") == "content_block_delta" and delta.get("type") == "text_delta":
            state["streamed"] = (
                True  # the full assistant message will repeat this text; skip it then
            )
            return [_text_event(delta.get("text", ""), state)]
        return []
    if kind == "assistant":
        out: list[Event | Result] = []
        for block in (line.get("message") or {}).get("content") or []:
            if block.get("type") == "text" and block.get("text") and not state.get("streamed"):
                state["new_message"] = True  # without partial messages: each block set apart
                out.append(_text_event(block["text"], state))
            elif block.get("type") == "tool_use":
                data = {
                    "name": block.get("name"),
                    "input": block.get("input") or {},
                    "id": block.get("id"),
                }
                out.append(Event("tool", data))
        return out
    if kind == "result":
        if line.get("is_error") or line.get("subtype") != "success":
            reasons = [str(e) for e in line.get("errors") or []] or [line.get("result") or ""]
            reason = "; ".join(r for r in reasons if r) or "no details"
            raise BackendError(f"the claude CLI failed ({line.get('subtype')}): {reason}")
        u = line.get("usage") or {}
        usage = Usage(
            input_tokens=u.get("input_tokens") or 0,
            output_tokens=u.get("output_tokens") or 0,
            cache_read_tokens=u.get("cache_read_input_tokens") or 0,
            cache_write_tokens=u.get("cache_creation_input_tokens") or 0,
            cost_usd=line.get("total_cost_usd"),
        )
        return [
            Result(text=line.get("result") or "", usage=usage, session_id=state.get("session_id"))
        ]
    return []  # user lines (tool results), status lines, anything new


class ClaudeCLIBackend(Backend):
    """Runs the claude CLI in turn.workdir; auth is whatever the CLI has (subscription login or API key)."""

    name = "claude_cli"

    def __init__(
        self,
        executable: str | None = None,
        permission_mode: str = "acceptEdits",
        allowed_tools: list[str] | None = None,
        extra_args: list[str] | None = None,
    ):
        self.executable = executable or os.environ.get("CLAUDE_BIN") or "claude"
        # acceptEdits: nobody can answer a permission prompt in -p mode, so file edits in the
        # agent's own workdir are pre-approved; other tools (Bash...) only via allowed_tools.
        self.permission_mode = permission_mode
        self.allowed_tools = allowed_tools or []
        self.extra_args = extra_args or []

    def argv(self, turn: Turn, mcp_config: str | None = None) -> list[str]:
        """The full command line for a turn (pure); MCP_CONFIG is the file naming our tool server."""
        # The volatile context rides in the user prompt, not the system prompt: the system prompt
        # precedes the resumed history, so changing it every turn would defeat the prompt cache.
        parts = [turn.volatile]
        if not turn.session_id and turn.history:  # a resumed session already holds the history
            parts.append("Conversation so far:\n" + transcript(turn))
        parts.append(turn.prompt)
        prompt = "\n\n".join(p for p in parts if p) or "(no message)"
        argv = [self.executable, "-p", safe_positional(prompt)]
        # Partial messages: the text streams token by token (a chat turn's draft grows live).
        argv += ["--output-format", "stream-json", "--verbose", "--include-partial-messages"]
        argv += ["--permission-mode", self.permission_mode]
        if turn.stable:
            argv += ["--append-system-prompt", turn.stable]
        allowed = list(self.allowed_tools)
        if mcp_config:
            # Our tools and no other MCP server the user configured; the server checks each
            # call's grant and permission, so the CLI need not ask.
            argv += ["--mcp-config", mcp_config, "--strict-mcp-config"]
            allowed.append(f"mcp__{SERVER_NAME}")
        if allowed:
            argv += ["--allowedTools", ",".join(allowed)]
        if turn.model:
            argv += ["--model", turn.model]
        if turn.session_id:
            argv += ["--resume", turn.session_id]
        return argv + self.extra_args

    async def run(self, turn: Turn) -> AsyncIterator[Event | Result]:
        env = {"ANTHROPIC_API_KEY": turn.api_key, "ANTHROPIC_BASE_URL": turn.base_url}
        async with contextlib.AsyncExitStack() as stack:
            config = None
            if turn.tools:
                url, token = await stack.enter_async_context(TOOL_SERVER.serving(turn))
                config = stack.enter_context(mcp_config_file(url, token))
                # Every tool of ours offered up front, not behind the CLI's tool search.
                env.update(MCP_TOOL_TIMEOUT=str(MCP_TOOL_TIMEOUT_MS), ENABLE_TOOL_SEARCH="false")
            proc = await JsonlProcess.start(
                self.argv(turn, config), "claude", turn.workdir, cli_env(env)
            )
            # aclosing: closing this generator must close the CLI's at once (and kill the process).
            async with aclosing(
                proc.drive(parse_claude_line, {"session_id": turn.session_id})
            ) as items:
                async for item in items:
                    yield item


@contextlib.contextmanager
def mcp_config_file(url: str, token: str):
    """The --mcp-config file for one turn: readable by this user only (it holds the turn's
    token, which a command line would show to everyone on the machine), removed after."""
    server = {"type": "http", "url": url, "headers": {"Authorization": f"Bearer {token}"}}
    fd, path = tempfile.mkstemp(prefix="agntchat-mcp-", suffix=".json")  # mode 0600
    try:
        with os.fdopen(fd, "w") as out:
            json.dump({"mcpServers": {SERVER_NAME: server}}, out)
        yield path
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
