"""Anthropic Messages API backend with a prompt-cached stable system block."""

from __future__ import annotations

import os
import time
from collections.abc import AsyncIterator

import anthropic

from .base import (
    Backend,
    BackendError,
    Event,
    Result,
    Turn,
    Usage,
    chat_messages,
    elapsed_ms,
    error_message,
)

DEFAULT_MODEL = (
    "claude-sonnet-4-6"  # claude-sonnet-4-5 reaches end-of-life 2026-11-30 (SDK deprecation table)
)


class AnthropicBackend(Backend):
    """Streams one turn through anthropic.AsyncAnthropic().messages.stream()."""

    name = "anthropic_api"

    def __init__(self, max_tokens: int = 4096, max_retries: int = 2, timeout: float = 600.0):
        self.max_tokens = max_tokens
        self.max_retries = max_retries
        self.timeout = timeout

    def request(self, turn: Turn) -> dict:
        """The messages.stream() keyword arguments for a turn (pure; tests read it too)."""
        system = []
        if turn.stable:
            # Only the stable block is cached; the volatile part goes to the user side so this
            # prefix stays byte-identical from turn to turn (RUN-4).
            system.append(
                {"type": "text", "text": turn.stable, "cache_control": {"type": "ephemeral"}}
            )
        kwargs = {
            "model": turn.model or DEFAULT_MODEL,
            "max_tokens": self.max_tokens,
            "messages": chat_messages(turn, [turn.volatile, turn.prompt]),
        }
        if system:
            kwargs["system"] = system
        return kwargs

    async def run(self, turn: Turn) -> AsyncIterator[Event | Result]:
        start = time.monotonic()
        api_key = turn.api_key or os.environ.get("ANTHROPIC_API_KEY")
        base_url = turn.base_url or os.environ.get("ANTHROPIC_BASE_URL")
        if not api_key:
            if not base_url:
                raise BackendError("ANTHROPIC_API_KEY is not set")
            api_key = "unused"  # keyless local gateways still need a value for the SDK
        client = anthropic.AsyncAnthropic(
            api_key=api_key, base_url=base_url, max_retries=self.max_retries, timeout=self.timeout
        )
        try:
            async with client.messages.stream(**self.request(turn)) as stream:
                async for text in stream.text_stream:
                    yield Event("text_delta", {"text": text})
                final = await stream.get_final_message()
        except anthropic.APIStatusError as exc:
            reason = error_message(exc.body, exc.message)
            raise BackendError(f"Anthropic API error {exc.status_code}: {reason}") from None
        except anthropic.APIConnectionError:
            raise BackendError(f"cannot reach the Anthropic API at {client.base_url}") from None
        except anthropic.AnthropicError as exc:
            raise BackendError(f"Anthropic API error: {exc}") from None
        finally:
            await client.close()
        u = final.usage
        usage = Usage(
            input_tokens=u.input_tokens or 0,
            output_tokens=u.output_tokens or 0,
            cache_read_tokens=u.cache_read_input_tokens or 0,
            cache_write_tokens=u.cache_creation_input_tokens or 0,
            latency_ms=elapsed_ms(start),
        )
        text = "".join(b.text for b in final.content if b.type == "text")
        yield Result(text=text, usage=usage)
