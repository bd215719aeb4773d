"""Codex CLI backend: `codex exec --json ...`, resuming the thread with `exec resume <id>`."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
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

# The environment variable codex reads our tool server's per-turn token from (kept off the
# command line, which everyone on the machine can read).
TOKEN_ENV = "AGNTCHAT_MCP_TOKEN"
# How long codex waits on one of our tools: a call may wait for a person's approval.
MCP_TOOL_TIMEOUT_SECONDS = 24 * 3600

OUTPUT_TAIL = 2000  # command output can be huge; events only carry its end


def usage_delta(cumulative: dict, previous: dict | None) -> dict:
    """Per-turn usage from codex's cumulative thread totals (reported that way on resumed threads)."""
    if not previous:
        return dict(cumulative)
    delta = {k: (v or 0) - (previous.get(k) or 0) for k, v in cumulative.items()}
    if any(
        v < 0 for v in delta.values()
    ):  # totals went down: not the same thread, trust the raw numbers
        return dict(cumulative)
    return delta


def _codex_usage(u: dict) -> Usage:
    """Codex/OpenAI usage -> Usage; OpenAI counts cached tokens inside input_tokens, we report them apart."""
    cached = u.get("cached_input_tokens") or 0
    written = u.get("cache_write_input_tokens") or 0
    return Usage(
        input_tokens=max((u.get("input_tokens") or 0) - cached - written, 0),
        output_tokens=u.get("output_tokens") or 0,
        cache_read_tokens=cached,
        cache_write_tokens=written,
    )


def _item_events(item: dict, completed: bool, state: dict) -> list[Event]:
    kind = item.get("type")
    if kind == "agent_message" and completed:
        text = item.get("text") or ""
        sep = "\n\n" if state.get("last_text") else ""
        state["last_text"] = text  # codex's final answer is its last agent message
        return [Event("text_delta", {"text": sep + text})] if text else []
    if kind == "command_execution":
        if not completed:
            return [Event("progress", {"message": f"running: {item.get('command')}"})]
        data = {
            "name": "command",
            "command": item.get("command"),
            "exit_code": item.get("exit_code"),
            "status": item.get("status"),
            "output": (item.get("aggregated_output") or "")[-OUTPUT_TAIL:],
        }
        return [Event("tool", data)]
    if kind == "mcp_tool_call" and completed:
        data = {
            "name": f"{item.get('server')}.{item.get('tool')}",
            "input": item.get("arguments") or {},
            "status": item.get("status"),
        }
        if item.get("error"):
            data["error"] = item["error"]
        return [Event("tool", data)]
    if kind == "file_change" and completed:
        return [
            Event(
                "tool",
                {
                    "name": "file_change",
                    "changes": item.get("changes") or [],
                    "status": item.get("status"),
                },
            )
        ]
    if kind == "web_search" and completed:
        return [Event("tool", {"name": "web_search", "input": {"query": item.get("query")}})]
    if kind == "error":  # non-fatal warnings arrive as error items
        return [Event("progress", {"message": item.get("message") or ""})]
    return []


def parse_codex_line(line: dict, state: dict) -> list[Event | Result]:
    """Translate one `codex exec --json` line; state["previous_usage"] = cumulative usage of the thread so far."""
    kind = line.get("type")
    if kind == "thread.started":
        state["thread_id"] = line.get("thread_id")
        return [Event("session", {"session_id": line.get("thread_id")})]
    if kind in ("item.started", "item.completed"):
        return _item_events(line.get("item") or {}, kind == "item.completed", state)
    if kind == "turn.completed":
        cumulative = line.get("usage") or {}
        usage = _codex_usage(usage_delta(cumulative, state.get("previous_usage")))
        cli_state = {"thread_id": state.get("thread_id"), "cumulative_usage": cumulative}
        return [
            Result(
                text=state.get("last_text") or "",
                usage=usage,
                session_id=state.get("thread_id"),
                cli_state=cli_state,
            )
        ]
    if kind == "turn.failed":
        error = line.get("error")
        message = (error.get("message") if isinstance(error, dict) else error) or "no details"
        raise BackendError(f"the codex CLI failed: {message}")
    if (
        kind == "error"
    ):  # transient (reconnects); fatal problems end in turn.failed or a non-zero exit
        state["last_error"] = line.get("message")
        return [Event("progress", {"message": line.get("message") or ""})]
    return []


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


class CodexCLIBackend(Backend):
    """Runs the codex CLI in turn.workdir. Pass Result.cli_state back as Turn.cli_state for correct usage."""

    name = "codex_cli"

    def __init__(
        self,
        executable: str | None = None,
        sandbox: str = "workspace-write",
        extra_args: list[str] | None = None,
    ):
        self.executable = executable or os.environ.get("CODEX_BIN") or "codex"
        self.sandbox = sandbox
        self.extra_args = extra_args or []

    def argv(self, turn: Turn, mcp_url: str | None = None) -> list[str]:
        """The full command line for a turn (pure); MCP_URL is our tool server's, if any."""
        # codex exec has no system-prompt flag, so the stable block opens the thread's first prompt;
        # on resume it is already in the (prefix-cached) thread and is re-sent only if it changed.
        parts = []
        if not turn.session_id or turn.cli_state.get("stable_sha") != _sha(turn.stable):
            parts.append(turn.stable)
        parts.append(turn.volatile)
        if not turn.session_id and turn.history:
            parts.append("Conversation so far:\n" + transcript(turn))
        parts.append(turn.prompt)
        prompt = "\n\n".join(p for p in parts if p) or "(no message)"
        argv = [self.executable, "exec", "--json", "--skip-git-repo-check", "-C", turn.workdir]
        # Nobody can approve commands mid-turn; the sandbox is what bounds the agent.
        argv += ["-s", self.sandbox, "-c", 'approval_policy="never"']
        if turn.model:
            argv += ["-m", turn.model]
        if turn.base_url:
            argv += ["-c", f"openai_base_url={json.dumps(turn.base_url)}"]  # a TOML string
        if mcp_url:
            server = f"mcp_servers.{SERVER_NAME}"
            argv += ["-c", f"{server}.url={json.dumps(mcp_url)}"]
            argv += ["-c", f"{server}.bearer_token_env_var={json.dumps(TOKEN_ENV)}"]
            argv += ["-c", f"{server}.tool_timeout_sec={MCP_TOOL_TIMEOUT_SECONDS}"]
            # With approval_policy "never", codex refuses every MCP call it would ask about;
            # our server's tools are pre-approved (and only they): the server checks each
            # call's grant and permission, and asks a person when the agent's policy says so.
            argv += ["-c", f'{server}.default_tools_approval_mode="approve"']
        argv += self.extra_args
        if turn.session_id:
            argv += ["resume", turn.session_id]
        return argv + [safe_positional(prompt)]

    async def run(self, turn: Turn) -> AsyncIterator[Event | Result]:
        env = {"CODEX_API_KEY": turn.api_key}
        async with contextlib.AsyncExitStack() as stack:
            url = None
            if turn.tools:
                url, env[TOKEN_ENV] = await stack.enter_async_context(TOOL_SERVER.serving(turn))
            argv = self.argv(turn, url)
            proc = await JsonlProcess.start(argv, "codex", turn.workdir, cli_env(env))
            state: dict = {"thread_id": turn.session_id}
            if turn.session_id and turn.cli_state.get("thread_id") == turn.session_id:
                state["previous_usage"] = turn.cli_state.get("cumulative_usage")
            async with aclosing(proc.drive(parse_codex_line, state)) as items:
                async for item in items:
                    if isinstance(item, Result):
                        item.cli_state["stable_sha"] = _sha(turn.stable)
                    yield item
