"""Deterministic offline backend for tests and demos."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

from .base import Backend, BackendError, Event, Result, Turn, Usage, elapsed_ms


class ScriptedBackend(Backend):
    """Replies from a table: exact prompt (case-insensitive) -> reply, else default with {prompt} filled in."""

    name = "scripted"

    def __init__(
        self,
        replies: dict[str, str] | None = None,
        default: str = "Echo: {prompt}",
        delay_ms: int = 0,
    ):
        self.replies = {k.strip().casefold(): v for k, v in (replies or {}).items()}
        self.default = default
        self.delay_ms = delay_ms

    def reply(self, prompt: str) -> str:
        """The scripted reply text for a prompt."""
        found = self.replies.get(prompt.strip().casefold())
        # replace(), not format(): prompts may contain braces
        return found if found is not None else self.default.replace("{prompt}", prompt)

    async def run(self, turn: Turn) -> AsyncIterator[Event | Result]:
        start = time.monotonic()
        if "[[fail]]" in turn.prompt:
            raise BackendError("scripted failure")
        session_id = turn.session_id or "scripted-session"
        if not turn.session_id:
            yield Event("session", {"session_id": session_id})
        if self.delay_ms:
            await asyncio.sleep(self.delay_ms / 1000)
        text = self.reply(turn.prompt)
        for i, word in enumerate(text.split(" ")):
            yield Event("text_delta", {"text": word if i == 0 else " " + word})
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
