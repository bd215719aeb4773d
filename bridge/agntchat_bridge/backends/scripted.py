"""Deterministic offline backend for tests and demos, tools included."""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections.abc import AsyncIterator

from .base import Backend, BackendError, Event, Result, ToolOutcome, Turn, Usage, elapsed_ms

# A tool call written into a prompt: [[tool:NAME]] or [[tool:NAME {"json": "arguments"}]].
TOOL_MARK = re.compile(r"\[\[tool:([A-Za-z0-9_.-]+)\s*")
# {result} or {result.key}: the last tool's output (or one key of it, when it is JSON).
RESULT_REF = re.compile(r"\{result(?:\.([A-Za-z0-9_]+))?\}")


def prompt_steps(prompt: str) -> tuple[list[dict], str]:
    """The tool calls written in PROMPT, in order, and the prompt without them."""
    steps, text, at = [], [], 0
    decoder = json.JSONDecoder()
    while (mark := TOOL_MARK.search(prompt, at)) is not None:
        text.append(prompt[at : mark.start()])
        arguments, end = {}, mark.end()
        if prompt.startswith("{", end):
            try:
                arguments, end = decoder.raw_decode(prompt, end)
            except ValueError:
                arguments = {"unparsed": prompt[end:]}
        close = prompt.find("]]", end)
        at = len(prompt) if close < 0 else close + 2
        steps.append({"tool": mark.group(1), "input": arguments})
    text.append(prompt[at:])
    return steps, "".join(text).strip()


def with_results(value, last: ToolOutcome | None):
    """VALUE with {result} / {result.key} in its strings replaced from the LAST outcome."""
    if isinstance(value, dict):
        return {k: with_results(v, last) for k, v in value.items()}
    if isinstance(value, list):
        return [with_results(v, last) for v in value]
    if not isinstance(value, str) or last is None:
        return value
    try:
        data = json.loads(last.text)
    except ValueError:
        data = None

    def one(match: re.Match) -> str:
        key = match.group(1)
        if key is None:
            return last.text
        return str(data.get(key, "")) if isinstance(data, dict) else ""

    return RESULT_REF.sub(one, value)


class ScriptedBackend(Backend):
    """Replies from a table: exact prompt (case-insensitive) → a reply, or a list of steps
    ({"tool": name, "input": {…}}, {"text": …}, or {"progress": message, "sleep_ms": n}, a
    progress event after a pause); else the first of RULES ([regex, reply]) found in the
    prompt; else DEFAULT with {prompt} filled in. Tool calls can also be written in the prompt
    itself as [[tool:NAME {…}]]. Strings in steps may use {result} or {result.key} of the
    previous tool's output."""

    name = "scripted"

    def __init__(
        self,
        replies: dict[str, str | list] | None = None,
        default: str = "Echo: {prompt}",
        delay_ms: int = 0,
        rules: list | None = None,
        word_ms: int = 0,
    ):
        self.replies = {k.strip().casefold(): v for k, v in (replies or {}).items()}
        self.rules = [(re.compile(pattern, re.I), reply) for pattern, reply in (rules or [])]
        self.default = default
        self.delay_ms = delay_ms
        self.word_ms = word_ms  # a pause before each word: a model that writes slowly

    def found(self, prompt: str):
        """The table's reply for PROMPT: exact first, then the first rule that matches."""
        found = self.replies.get(prompt.strip().casefold())
        if found is None:
            found = next((reply for rule, reply in self.rules if rule.search(prompt)), None)
        return found

    def reply(self, prompt: str) -> str:
        """The scripted reply text for a prompt with no steps."""
        found = self.found(prompt)
        # replace(), not format(): prompts may contain braces
        return found if isinstance(found, str) else self.default.replace("{prompt}", prompt)

    def steps(self, prompt: str) -> list[dict]:
        found = self.found(prompt)
        if isinstance(found, list):
            return found
        steps, rest = prompt_steps(prompt)
        if steps and rest:
            steps.append({"text": self.default.replace("{prompt}", rest)})
        return steps

    async def run(self, turn: Turn) -> AsyncIterator[Event | Result]:
        start = time.monotonic()
        if "[[fail]]" in turn.prompt:
            raise BackendError("scripted failure")
        session_id = turn.session_id or "scripted-session"
        if not turn.session_id:
            yield Event("session", {"session_id": session_id})
        if self.delay_ms:
            await asyncio.sleep(self.delay_ms / 1000)
        steps = self.steps(turn.prompt)
        if steps:
            parts = []
            async for item in self.act(turn, steps, parts):
                yield item
            text = "\n\n".join(p for p in parts if p)
        else:
            text = self.reply(turn.prompt)
            async for event in self.words(text):
                yield event
        usage = Usage(
            input_tokens=len(f"{turn.stable} {turn.volatile} {turn.prompt}".split()),
            output_tokens=len(text.split()),
            cost_usd=0.0,
            latency_ms=elapsed_ms(start),
        )
        yield Result(
            text=text,
            usage=usage,
            session_id=session_id,
            blocks=[{"type": "label", "text": "scripted"}],
        )

    async def words(self, text: str, lead: str = ""):
        """TEXT as text_delta events, a word at a time (after LEAD), as a model streams."""
        for i, word in enumerate(text.split(" ")):
            if self.word_ms:
                await asyncio.sleep(self.word_ms / 1000)
            yield Event("text_delta", {"text": (lead if i == 0 else " ") + word})

    async def act(self, turn: Turn, steps: list[dict], parts: list[str]):
        """Run STEPS: tool calls through turn.call_tool, texts into PARTS. A turn resumed at
        a parked call starts at that call's step."""
        first, last = 0, None
        if turn.resume and isinstance(turn.resume.get("checkpoint"), dict):
            first = turn.resume["checkpoint"].get("step", 0)
            saved = turn.resume["checkpoint"].get("last")
            last = ToolOutcome(**saved) if saved else None
        used = []
        for index, step in enumerate(steps[first:], start=first):
            if "progress" in step:
                await asyncio.sleep(step.get("sleep_ms", 0) / 1000)
                yield Event("progress", {"message": step["progress"]})
                continue
            if "text" in step:
                parts.append(with_results(step["text"], last))
                async for event in self.words(parts[-1], "\n\n" if len(parts) > 1 else ""):
                    yield event
                continue
            if turn.call_tool is None:
                raise BackendError(f"scripted step calls {step['tool']} but the agent has no tools")
            arguments = with_results(step.get("input") or {}, last)
            checkpoint = {"step": index, "last": last.__dict__ if last else None}
            last = await turn.call_tool(step["tool"], arguments, checkpoint=checkpoint)
            used.append((step["tool"], last))
            yield Event("tool", {"name": step["tool"], "input": arguments, "ok": last.ok})
        if not parts and used:
            parts.append(
                "Used "
                + ", ".join(n if o.ok else f"{n} (failed: {o.error})" for n, o in used)
                + "."
            )
