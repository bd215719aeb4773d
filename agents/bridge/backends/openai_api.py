"""OpenAI chat.completions backend; also serves OpenAI-compatible endpoints (Ollama, OpenRouter)."""

from __future__ import annotations

import os
import time
from collections.abc import AsyncIterator

import openai

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

DEFAULT_MODEL = "gpt-4o-mini"


class OpenAIBackend(Backend):
    """Streams one turn through openai.AsyncOpenAI().chat.completions.create(stream=True)."""

    name = "openai_api"

    def __init__(self, max_tokens: int | None = None, max_retries: int = 2, timeout: float = 600.0):
        self.max_tokens = max_tokens
        self.max_retries = max_retries
        self.timeout = timeout

    def request(self, turn: Turn) -> dict:
        """The chat.completions.create() keyword arguments for a turn (pure)."""
        # Stable first and alone: OpenAI caches by exact prefix, so it must not change between turns.
        messages = [{"role": "system", "content": turn.stable}] if turn.stable else []
        if turn.volatile:
            # "system" rather than "developer": compatible servers (Ollama) know only system.
            messages.append({"role": "system", "content": turn.volatile})
        messages += chat_messages(turn, [turn.prompt])
        kwargs = {
            "model": turn.model or DEFAULT_MODEL,
            "messages": messages,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        if self.max_tokens:
            kwargs["max_completion_tokens"] = self.max_tokens
        return kwargs

    async def run(self, turn: Turn) -> AsyncIterator[Event | Result]:
        start = time.monotonic()
        api_key = turn.api_key or os.environ.get("OPENAI_API_KEY")
        base_url = turn.base_url or os.environ.get("OPENAI_BASE_URL")
        if not api_key:
            if not base_url:
                raise BackendError("OPENAI_API_KEY is not set")
            api_key = "unused"  # Ollama and friends ignore the key but the SDK requires one
        client = openai.AsyncOpenAI(
            api_key=api_key, base_url=base_url, max_retries=self.max_retries, timeout=self.timeout
        )
        parts: list[str] = []
        usage = None
        try:
            stream = await client.chat.completions.create(**self.request(turn))
            async for chunk in stream:
                if chunk.usage is not None:
                    usage = chunk.usage
                for choice in chunk.choices:
                    if choice.delta and choice.delta.content:
                        parts.append(choice.delta.content)
                        yield Event("text_delta", {"text": choice.delta.content})
        except openai.APIStatusError as exc:
            reason = error_message(exc.body, exc.message)
            raise BackendError(f"OpenAI API error {exc.status_code}: {reason}") from None
        except openai.APIConnectionError:
            raise BackendError(f"cannot reach the OpenAI API at {client.base_url}") from None
        except openai.OpenAIError as exc:
            raise BackendError(f"OpenAI API error: {exc}") from None
        finally:
            await client.close()
        result_usage = Usage(latency_ms=elapsed_ms(start))
        if usage is not None:
            # Compatible providers often omit the *_details objects.
            details = getattr(usage, "prompt_tokens_details", None)
            cached = (getattr(details, "cached_tokens", 0) or 0) if details else 0
            result_usage.input_tokens = max((usage.prompt_tokens or 0) - cached, 0)
            result_usage.output_tokens = usage.completion_tokens or 0
            result_usage.cache_read_tokens = cached
        yield Result(text="".join(parts), usage=result_usage)
