"""OpenAI chat.completions backend, native tool calling included; it serves any
OpenAI-compatible endpoint (Ollama, vLLM, OpenRouter) through the agent's base URL."""

from __future__ import annotations

import json
import os
import time
from collections.abc import AsyncIterator

import openai

from .base import (
    Backend,
    BackendError,
    Event,
    Result,
    Round,
    ToolOutcome,
    ToolUse,
    Turn,
    Usage,
    chat_messages,
    duration,
    elapsed_ms,
    error_message,
    tool_loop,
)

DEFAULT_MODEL = "gpt-4o-mini"


class OpenAIBackend(Backend):
    """One turn through openai.AsyncOpenAI().chat.completions.create(), streamed by default
    (stream=False for servers that cannot stream tool calls), with the agent's tools."""

    name = "openai_api"

    def __init__(
        self,
        max_tokens: int | None = None,
        max_retries: int = 2,
        timeout: float = 600.0,
        max_tool_rounds: int = 20,
        stream: bool = True,
    ):
        self.max_tokens = max_tokens
        self.max_retries = max_retries
        self.timeout = timeout
        self.max_tool_rounds = max_tool_rounds
        self.stream = stream

    def request(self, turn: Turn, exchange: list[dict] = (), last: bool = False) -> dict:
        """The chat.completions.create() keyword arguments for a turn (pure)."""
        kwargs = {
            "model": turn.model or DEFAULT_MODEL,
            "messages": self.opening(turn) + list(exchange),
        }
        if self.stream:
            kwargs.update(stream=True, stream_options={"include_usage": True})
        if self.max_tokens:
            kwargs["max_completion_tokens"] = self.max_tokens
        if turn.tools:
            kwargs["tools"] = [
                {"type": "function", "function": {
                    "name": t["name"], "description": t["description"], "parameters": t["inputSchema"]}}
                for t in turn.tools
            ]  # fmt: skip
            if last:
                kwargs["tool_choice"] = "none"
        return kwargs

    @staticmethod
    def opening(turn: Turn) -> list[dict]:
        # Stable first and alone: OpenAI caches by exact prefix (the tools, then the messages),
        # so it must not change between turns.
        messages = [{"role": "system", "content": turn.stable}] if turn.stable else []
        if turn.volatile:
            # "system" rather than "developer": compatible servers (Ollama) know only system.
            messages.append({"role": "system", "content": turn.volatile})
        return messages + chat_messages(turn, [turn.prompt])

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

        async def respond(exchange: list[dict], last: bool):
            kwargs = self.request(turn, exchange, last)
            if not self.stream:
                completion = await client.chat.completions.create(**kwargs)
                choice = completion.choices[0].message if completion.choices else None
                text = (choice.content or "") if choice else ""
                if text:
                    yield Event("text_delta", {"text": text})
                raw = [
                    {"id": c.id, "name": c.function.name, "arguments": c.function.arguments or ""}
                    for c in (choice.tool_calls or [] if choice else [])
                ]
                yield round_of(text, raw, completion.usage)
                return
            parts: list[str] = []
            calls: dict[int, dict] = {}  # streamed by index, the arguments in pieces
            usage, finished = None, False
            stream = await client.chat.completions.create(**kwargs)
            async for chunk in stream:
                if chunk.usage is not None:
                    usage = chunk.usage
                for choice in chunk.choices or []:  # null from some compatible servers
                    finished = finished or bool(choice.finish_reason)
                    delta = choice.delta
                    if delta and delta.content:
                        parts.append(delta.content)
                        yield Event("text_delta", {"text": delta.content})
                    for piece in (delta.tool_calls or []) if delta else []:
                        call = calls.setdefault(
                            piece.index, {"id": "", "name": "", "arguments": ""}
                        )
                        call["id"] = piece.id or call["id"]
                        if piece.function is not None:
                            call["name"] += piece.function.name or ""
                            call["arguments"] += piece.function.arguments or ""
            if not finished:
                # The stream closed before its end (a proxy gave up): half an answer is not one.
                raise BackendError("the OpenAI API's answer broke off before its end")
            yield round_of("".join(parts), [calls[i] for i in sorted(calls)], usage)

        try:
            async for item in tool_loop(turn, respond, tool_results, self.max_tool_rounds):
                if isinstance(item, Result):
                    item.usage.latency_ms = elapsed_ms(start)
                yield item
        except openai.APIStatusError as exc:
            reason = error_message(exc.body, exc.message)
            raise BackendError(f"OpenAI API error {exc.status_code}: {reason}") from None
        except openai.APITimeoutError:  # reached, then quiet (a connection error, subclassed)
            quiet = duration(self.timeout)
            raise BackendError(
                f"the OpenAI API went {quiet} without answering ({client.base_url})"
            ) from None
        except openai.APIConnectionError:
            raise BackendError(f"cannot reach the OpenAI API at {client.base_url}") from None
        except openai.OpenAIError as exc:
            raise BackendError(f"OpenAI API error: {exc}") from None
        finally:
            await client.close()


def round_of(text: str, raw_calls: list[dict], usage) -> Round:
    """A completion's text, its tool calls ({id, name, arguments as JSON text}) and usage as a
    tool-loop Round."""
    calls = []
    for n, raw in enumerate(raw_calls):
        # Some compatible servers leave ids out; the tool message must still name its call.
        raw["id"] = raw["id"] or f"call_{n}"
        try:
            arguments = json.loads(raw["arguments"] or "{}")
        except ValueError as exc:
            calls.append(
                ToolUse(
                    raw["id"], raw["name"], {}, error=f"the arguments are not valid JSON ({exc})"
                )
            )
            continue
        if not isinstance(arguments, dict):
            calls.append(
                ToolUse(raw["id"], raw["name"], {}, error="the arguments must be a JSON object")
            )
            continue
        calls.append(ToolUse(raw["id"], raw["name"], arguments))
    reply: dict = {"role": "assistant", "content": text or None}
    if raw_calls:
        reply["tool_calls"] = [
            {"id": r["id"], "type": "function", "function": {"name": r["name"], "arguments": r["arguments"]}}
            for r in raw_calls
        ]  # fmt: skip
    result_usage = Usage()
    if usage is not None:
        # Compatible providers often omit the *_details objects.
        details = getattr(usage, "prompt_tokens_details", None)
        cached = (getattr(details, "cached_tokens", 0) or 0) if details else 0
        result_usage.input_tokens = max((usage.prompt_tokens or 0) - cached, 0)
        result_usage.output_tokens = usage.completion_tokens or 0
        result_usage.cache_read_tokens = cached
    return Round(text, calls, result_usage, reply)


def tool_results(calls: list[ToolUse], outcomes: list[ToolOutcome]) -> list[dict]:
    """One role "tool" message per call of a round."""
    return [
        {"role": "tool", "tool_call_id": call.id, "content": outcome.text or "(no output)"}
        for call, outcome in zip(calls, outcomes, strict=True)
    ]
