"""Shared interface of the model backends: one Turn in, Events then one Result out."""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import json
import logging
import os
import shutil
import signal
import time
from abc import ABC, abstractmethod
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

log = logging.getLogger("agntchat.bridge")


@dataclass
class Usage:
    """Per-turn usage. input_tokens is the UNCACHED input; total input = input + cache_read + cache_write."""

    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    cost_usd: float | None = None
    latency_ms: int = 0


# The most of one tool result the model reads (about 25,000 tokens, Claude Code's own cut of an
# MCP tool's result).
MAX_TOOL_RESULT_CHARS = 100_000


@dataclass
class ToolOutcome:
    """What one tool call gave: OUTPUT is the text the model reads (JSON text when the tool
    returns data); ERROR, when OK is false, says plainly what went wrong so the model can
    correct itself."""

    ok: bool
    output: str = ""
    error: str = ""

    @property
    def text(self) -> str:
        """What goes back to the model as the tool's result: cut past MAX_TOOL_RESULT_CHARS,
        saying so (a few whole pages filled the model's context, and the turn failed)."""
        text = self.output if self.ok else self.error
        if len(text) <= MAX_TOOL_RESULT_CHARS:
            return text
        note = f"\n\n[cut: {len(text):,} characters, over the {MAX_TOOL_RESULT_CHARS:,} a result holds]"
        return clip(text, MAX_TOOL_RESULT_CHARS - len(note)) + note


class ToolCaller(Protocol):
    """How a backend calls one of the agent's tools (the bridge sends a ``tool.call`` frame).

    CHECKPOINT is JSON data from which the backend could resume the turn at this very call:
    when the call waits for a person's approval, the bridge stores it with the work item, and
    if the turn is redelivered (the bridge restarted meanwhile) the backend gets it back as
    ``Turn.resume`` instead of starting the turn over."""

    def __call__(
        self, name: str, arguments: dict, *, checkpoint: dict | None = None
    ) -> Awaitable[ToolOutcome]: ...


# The most a failure's reason says: a CLI's stderr line or an API's error page can be any size.
REASON_CHARS = 1000


class Deadline:
    """The turn's time limit, which can be paused: waiting for a person's decision on a tool
    call does not count toward it. run_to_result sets one on every Turn it runs."""

    def __init__(self, timeout: asyncio.Timeout | None = None):
        self.timeout = timeout

    @asynccontextmanager
    async def paused(self):
        """No limit while inside; afterwards, the time that was left when it paused."""
        when = self.timeout.when() if self.timeout is not None else None
        if when is None:
            yield
            return
        loop = asyncio.get_running_loop()
        remaining = when - loop.time()
        self.timeout.reschedule(None)
        try:
            yield
        finally:
            self.timeout.reschedule(loop.time() + remaining)


@dataclass
class Turn:
    """Everything a backend needs for one turn."""

    stable: str  # byte-identical across turns -> provider prompt cache
    volatile: str  # per-turn context, kept out of the cached block
    prompt: str  # the triggering message text
    history: list[dict]  # [{"role": "user"|"assistant", "author": str, "text": str}], oldest first
    model: str = ""
    session_id: str | None = None  # CLI session/thread id from the previous turn (resume)
    workdir: str = "."
    base_url: str | None = None
    api_key: str | None = None  # falls back to env ANTHROPIC_API_KEY / OPENAI_API_KEY
    cli_state: dict = field(default_factory=dict)  # opaque: pass back the previous Result.cli_state
    # The agent's tools, as the model should see them: [{"name", "description", "inputSchema"}]
    # in a stable order (part of the cached prefix), and how to call one.
    tools: list[dict] = field(default_factory=list)
    call_tool: ToolCaller | None = None
    # A turn parked at a tool call that waited for approval, redelivered: the CHECKPOINT the
    # backend gave with that call ({"checkpoint": …, "name", "arguments"}). The backend resumes
    # from it, calling that tool again first (the same call: the server answers it once).
    resume: dict | None = None
    deadline: Deadline = field(default_factory=Deadline)


@dataclass
class Event:
    """Streamed progress: text_delta {text}, tool {name, input|command, ...}, progress {message}, session {session_id}."""

    kind: str
    data: dict


@dataclass
class Result:
    """Final outcome of a turn."""

    text: str
    usage: Usage
    session_id: str | None = None
    blocks: list = field(default_factory=list)
    cli_state: dict = field(
        default_factory=dict
    )  # store it and hand it to the next Turn of this session


class BackendError(Exception):
    """Short human-readable reason, e.g. 'the claude CLI is not installed' or 'ANTHROPIC_API_KEY is not set'."""


class Backend(ABC):
    """A model backend; run() is an async generator yielding Events then exactly one Result."""

    name: str

    @abstractmethod
    def run(self, turn: Turn) -> AsyncIterator[Event | Result]: ...


@dataclass
class ToolUse:
    """A tool call the model asked for. ERROR is set when its input could not be read (the
    model hears of it instead of the call running)."""

    id: str
    name: str
    arguments: dict
    error: str = ""


@dataclass
class Round:
    """One answer of the model inside a tool loop: its text, the calls it asks for, its usage,
    and REPLY, the assistant message to send back with the next request, in the API's format."""

    text: str
    calls: list[ToolUse]
    usage: Usage
    reply: dict


def add_usage(total: Usage, more: Usage) -> None:
    total.input_tokens += more.input_tokens
    total.output_tokens += more.output_tokens
    total.cache_read_tokens += more.cache_read_tokens
    total.cache_write_tokens += more.cache_write_tokens


async def tool_loop(
    turn: Turn,
    respond: Callable[[list[dict], bool], AsyncIterator[Event | Round]],
    results: Callable[[list[ToolUse], list[ToolOutcome]], list[dict]],
    max_rounds: int,
) -> AsyncIterator[Event | Result]:
    """The API backends' turn: the model answers (RESPOND(exchange, last) yields Events, then one
    Round; EXCHANGE is the rounds so far, to send after the turn's opening messages); when it asks for tools they run through turn.call_tool, RESULTS turns their outcomes
    into messages, and it answers again, until it replies without a call. Past MAX_ROUNDS
    rounds of calls, the last request (last=True) asks for text only. Yields Events, then one
    Result: every round's text, usage summed.

    Each call's checkpoint is the exchange so far (the model's replies and the tool results;
    the opening is rebuilt from the redelivered item) plus the round being worked, so a turn parked at an approval resumes at that call."""
    exchange: list[dict] = []
    pending = None
    checkpoint = (turn.resume or {}).get("checkpoint")
    if isinstance(checkpoint, dict) and "exchange" in checkpoint:
        exchange = checkpoint["exchange"]
        pending = (
            checkpoint["reply"],
            [ToolUse(**c) for c in checkpoint["calls"]],
            [ToolOutcome(**o) for o in checkpoint["outcomes"]],
        )
    total, texts = Usage(), []
    for number in range(max_rounds + 1):
        last = number == max_rounds
        if pending is None:
            answer = None
            apart = bool(texts)  # this round's text follows an earlier round's, as in the Result
            async for item in respond(exchange, last):
                if isinstance(item, Round):
                    answer = item
                    continue
                if apart and item.kind == "text_delta" and item.data.get("text"):
                    item = Event("text_delta", {**item.data, "text": "\n\n" + item.data["text"]})
                    apart = False
                yield item
            add_usage(total, answer.usage)
            if answer.text:
                texts.append(answer.text)
            if last and answer.calls:
                # It asked for more tools where it was told to answer (a server that ignores
                # tool_choice): said, or a turn that only acted would end with nothing posted.
                texts.append(f"(Stopped after {max_rounds} rounds of tool calls, a turn's limit.)")
            if not answer.calls or last:
                break
            pending = (answer.reply, answer.calls, [])
        reply, calls, outcomes = pending
        pending = None
        for call in calls[len(outcomes) :]:
            if call.error:
                outcome = ToolOutcome(False, error=call.error)
            elif turn.call_tool is None:
                outcome = ToolOutcome(False, error=f"no tool named {call.name} is available")
            else:
                saved = {
                    "exchange": exchange,
                    "reply": reply,
                    "calls": [c.__dict__ for c in calls],
                    "outcomes": [o.__dict__ for o in outcomes],
                }
                outcome = await turn.call_tool(call.name, call.arguments, checkpoint=saved)
            outcomes.append(outcome)
            yield Event("tool", {"name": call.name, "input": call.arguments, "ok": outcome.ok})
        exchange = [*exchange, reply, *results(calls, outcomes)]
    yield Result(text="\n\n".join(texts), usage=total)


def elapsed_ms(start: float) -> int:
    """Milliseconds since a time.monotonic() reading."""
    return int((time.monotonic() - start) * 1000)


def error_message(body: object, fallback: str) -> str:
    """Pull the human message out of an Anthropic/OpenAI error body ({"error": {"message"}} or {"message"})."""
    if isinstance(body, dict):
        inner = body.get("error", body)
        if isinstance(inner, dict) and inner.get("message"):
            return str(inner["message"])
    return fallback


def make_backend(name: str, **options) -> Backend:
    """Instantiate a backend by name with its options."""
    # Imported here so base.py stays importable without the SDKs loaded.
    from . import anthropic_api, claude_cli, codex_cli, openai_api, scripted

    classes = {
        "anthropic_api": anthropic_api.AnthropicBackend,
        "openai_api": openai_api.OpenAIBackend,
        "claude_cli": claude_cli.ClaudeCLIBackend,
        "codex_cli": codex_cli.CodexCLIBackend,
        "scripted": scripted.ScriptedBackend,
    }
    if name not in classes:
        raise BackendError(f"unknown backend {name!r} (known: {', '.join(classes)})")
    try:
        return classes[name](**options)
    except TypeError as exc:
        raise BackendError(f"bad options for backend {name!r}: {exc}") from None


async def run_to_result(
    backend: Backend,
    turn: Turn,
    on_event: Callable[[Event], object] | None = None,
    time_limit: float | None = None,
) -> Result:
    """Drive backend.run(), pass each Event to on_event (sync or async), return the single final
    Result. Past TIME_LIMIT seconds the turn is cancelled, which kills a CLI's whole process
    group or aborts an API call, and a BackendError says so."""
    start = time.monotonic()
    result: Result | None = None
    gen = backend.run(turn)
    try:
        async with asyncio.timeout(time_limit) as deadline:
            turn.deadline = Deadline(deadline)
            try:
                async for item in gen:
                    if result is not None:
                        raise BackendError(
                            f"the {backend.name} backend yielded more after its result"
                        )
                    if isinstance(item, Result):
                        result = item
                    elif isinstance(item, Event):
                        if on_event is not None:
                            maybe = on_event(item)
                            if inspect.isawaitable(maybe):
                                await maybe
                    else:
                        raise BackendError(
                            f"the {backend.name} backend yielded {type(item).__name__}"
                        )
            finally:
                await gen.aclose()
    except TimeoutError:
        if not deadline.expired():
            raise
        raise BackendError(
            f"the turn ran past its time limit of {duration(time_limit)} and was stopped"
        ) from None
    if result is None:
        raise BackendError(f"the {backend.name} backend ended without a result")
    if not result.usage.latency_ms:
        result.usage.latency_ms = elapsed_ms(start)
    return result


def duration(seconds: float) -> str:
    """'10 minutes', '1 minute', '90 seconds', '0.5 seconds'."""
    if seconds >= 60 and seconds % 60 == 0:
        minutes = int(seconds // 60)
        return f"{minutes} minute{'s' if minutes != 1 else ''}"
    return f"{seconds:g} second{'s' if seconds != 1 else ''}"


def _history(turn: Turn) -> list[dict]:
    """turn.history minus a trailing copy of the prompt (callers often include the trigger in both)."""
    history = list(turn.history)
    if history and history[-1].get("role") == "user" and history[-1].get("text") == turn.prompt:
        history.pop()
    return history


def chat_messages(turn: Turn, final_parts: list[str]) -> list[dict]:
    """History plus a last user message made of final_parts, as strictly alternating user/assistant messages."""
    messages: list[dict] = []

    def add(role: str, text: str) -> None:
        if messages and messages[-1]["role"] == role:
            messages[-1]["content"] += "\n\n" + text
        else:
            messages.append({"role": role, "content": text})

    for item in _history(turn):
        role = "assistant" if item.get("role") == "assistant" else "user"
        text = item.get("text", "")
        # Every other speaker is "user" to the model, so name them; the agent's own turns stay
        # bare so the model does not learn to start its replies with its own name.
        if role == "user" and item.get("author"):
            text = f"{item['author']}: {text}"
        add(role, text)
    add("user", "\n\n".join(p for p in final_parts if p) or "(no message)")
    if (
        messages[0]["role"] == "assistant"
    ):  # Anthropic requires the first message to be from the user
        messages.insert(0, {"role": "user", "content": "(earlier conversation)"})
    return messages


def transcript(turn: Turn) -> str:
    """History as plain 'Author: text' lines, for CLIs that take one prompt string."""
    lines = []
    for item in _history(turn):
        author = item.get("author") or ("you" if item.get("role") == "assistant" else "someone")
        lines.append(f"{author}: {item.get('text', '')}")
    return "\n".join(lines)


class JsonlProcess:
    """A CLI subprocess whose stdout is one JSON object per line; killed (with its children) on close()."""

    LINE_LIMIT = (
        32 * 1024 * 1024
    )  # init lines and tool results can be far above asyncio's 64 KiB default
    # How long a CLI may take to exit once it printed its result: some versions never do
    # (anthropics/claude-code#25629), and the turn has its answer.
    EXIT_GRACE = 2.0

    def __init__(self, proc: asyncio.subprocess.Process, cli: str):
        self.proc = proc
        self.cli = cli
        self.stderr_tail: deque[str] = deque(maxlen=20)
        self._drain = asyncio.create_task(self._read_stderr())

    @classmethod
    async def start(cls, argv: list[str], cli: str, cwd: str, env: dict[str, str]) -> JsonlProcess:
        """Spawn argv (argv[0] looked up on PATH); BackendError if it is missing or cannot start."""
        exe = shutil.which(argv[0])
        if exe is None:
            raise BackendError(f"the {cli} CLI is not installed (looked for {argv[0]!r} on PATH)")
        if not os.path.isdir(cwd):
            raise BackendError(f"the working directory {cwd} does not exist")
        try:
            proc = await asyncio.create_subprocess_exec(
                exe,
                *argv[1:],
                cwd=cwd,
                env=env,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                limit=cls.LINE_LIMIT,
                start_new_session=True,  # own process group, so close() also kills tools it spawned
            )
        except OSError as exc:
            raise BackendError(f"cannot start the {cli} CLI: {exc.strerror or exc}") from None
        return cls(proc, cli)

    @staticmethod
    async def _readline(stream: asyncio.StreamReader) -> bytes:
        """The next line; one past LINE_LIMIT is skipped (the reader drops what it holds of it
        and its rest reads as a line of its own), so reading never stops on it."""
        while True:
            try:
                return await stream.readline()
            except ValueError:
                continue

    async def _read_stderr(self) -> None:
        # Read to the end whatever comes: a CLI blocked on a full stderr pipe would hang.
        while raw := await self._readline(self.proc.stderr):
            text = raw.decode(errors="replace").strip()
            if text:
                self.stderr_tail.append(clip(text, REASON_CHARS))

    async def next_line(self) -> dict | None:
        """The next JSON object from stdout; None once stdout is closed and the process exited."""
        while True:
            raw = await self._readline(self.proc.stdout)
            if not raw:
                await self.proc.wait()
                await self._drain
                return None
            try:
                obj = json.loads(raw)
            except ValueError:
                continue  # CLIs occasionally print plain-text warnings on stdout
            if isinstance(obj, dict):
                return obj

    def failure(self, last_error: str | None = None) -> BackendError:
        """The error to raise when the CLI ended without a result (last error event, else last stderr line)."""
        rc = self.proc.returncode
        last = clip(last_error or (self.stderr_tail[-1] if self.stderr_tail else ""), REASON_CHARS)
        if rc:
            return BackendError(
                f"the {self.cli} CLI failed (exit {rc})" + (f": {last}" if last else "")
            )
        return BackendError(
            f"the {self.cli} CLI ended without a result" + (f": {last}" if last else "")
        )

    async def drive(self, parse: Callable[[dict, dict], list], state: dict) -> AsyncIterator:
        """Parse each output line with PARSE; yield the events, then the one Result (or raise
        the CLI's failure when it printed none). The process is closed in every case."""
        result = None
        try:
            while result is None and (line := await self.next_line()) is not None:
                try:
                    items = parse(line, state)
                except (AttributeError, TypeError, KeyError, ValueError):
                    # A known type in a shape we do not know (a newer CLI): passed over, as an
                    # unknown type is. Raised, it was no BackendError: the item came back and
                    # the CLI ran again, every lease.
                    log.warning("a %s CLI line of an unknown shape passed over", self.cli)
                    continue
                for item in items:
                    if isinstance(item, Result):
                        result = item
                    else:
                        yield item
        finally:
            await self.close(grace=self.EXIT_GRACE if result is not None else 0)
        if result is None:
            raise self.failure(state.get("last_error"))
        yield result

    async def close(self, grace: float = 0) -> None:
        """Kill the process group if still running (after GRACE seconds to exit) and reap it."""
        try:
            if grace and self.proc.returncode is None:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self.proc.wait(), grace)
        finally:  # cancelled while it had its grace (the time limit): killed all the same
            if self.proc.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.proc.pid, signal.SIGKILL)
                try:
                    await asyncio.wait_for(self.proc.wait(), 5)
                except TimeoutError:
                    pass  # a descendant that left the process group still holds our pipes; don't hang on it
            self._drain.cancel()


# Set by the host supervisor on a multi-tenant host: the agent's private directory for CLI homes.
OWN_CLI_HOME = "AGNTCHAT_OWN_CLI_HOME"


def cli_env(extra: dict[str, str | None]) -> dict[str, str]:
    """os.environ plus the non-empty extra values."""
    env = dict(os.environ)
    # Claude Code refuses to start inside another Claude Code session when this is inherited.
    env.pop("CLAUDECODE", None)
    # The bridge's own key stays with it: a model given a shell (claude's Bash) reads this env.
    env.pop("AGNTCHAT_AGENT_KEY", None)
    own = env.pop(OWN_CLI_HOME, None)
    if own and any(v for k, v in extra.items() if k.endswith("_API_KEY")):
        # With a key of its own the agent needs the machine's shared login for nothing, and the
        # CLIs keep their transcripts where its home is: out of other agents' reach.
        for cli, variable in (("claude", "CLAUDE_CONFIG_DIR"), ("codex", "CODEX_HOME")):
            home = Path(own) / cli
            home.mkdir(mode=0o700, parents=True, exist_ok=True)
            env[variable] = str(home)
    env.update({k: v for k, v in extra.items() if v})
    return env


def clip(text: str, limit: int) -> str:
    """TEXT cut to at most LIMIT characters, an ellipsis marking a cut."""
    return text if len(text) <= limit else text[: limit - 1] + "…"


def safe_positional(text: str) -> str:
    """Keep a prompt from being parsed as a CLI flag (or as codex's '-' = read stdin), or a
    one-word one as a subcommand (``codex exec help`` prints its help, and no answer)."""
    return " " + text if text.startswith("-") or text.isalnum() else text
