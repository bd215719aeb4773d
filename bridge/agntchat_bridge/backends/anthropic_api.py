"""Anthropic Messages API backend: a prompt-cached stable block, native tool calling."""

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

DEFAULT_MODEL = (
    "claude-sonnet-4-6"  # claude-sonnet-4-5 reaches end-of-life 2026-11-30 (SDK deprecation table)
)


class AnthropicBackend(Backend):
    """One turn through anthropic.AsyncAnthropic().messages, streamed by default, with the
    agent's tools: tool_use blocks run through the bridge and go back as tool_result blocks."""

    name = "anthropic_api"

    def __init__(
        self,
        max_tokens: int = 4096,
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
        """The messages API keyword arguments for a turn, with EXCHANGE (the tool rounds so far)
        after its opening messages (pure; tests read it too)."""
        system = []
        if turn.stable:
            # The cached prefix is tools, then system, up to this mark: both stay byte-identical
            # from turn to turn, and the volatile part goes to the user side (RUN-4).
            system.append(
                {"type": "text", "text": turn.stable, "cache_control": {"type": "ephemeral"}}
            )
        kwargs = {
            "model": turn.model or DEFAULT_MODEL,
            "max_tokens": self.max_tokens,
            "messages": self.opening(turn) + list(exchange),
        }
        if system:
            kwargs["system"] = system
        if turn.tools:
            kwargs["tools"] = [
                {"name": t["name"], "description": t["description"], "input_schema": t["inputSchema"]}
                for t in turn.tools
            ]  # fmt: skip
            if last:
                kwargs["tool_choice"] = {"type": "none"}
        return kwargs

    @staticmethod
    def opening(turn: Turn) -> list[dict]:
        return chat_messages(turn, [turn.volatile, turn.prompt])

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

        async def respond(exchange: list[dict], last: bool):
            kwargs = self.request(turn, exchange, last)
            if self.stream:
                async with client.messages.stream(**kwargs) as stream:
                    async for text in stream.text_stream:
                        yield Event("text_delta", {"text": text})
                    final = await stream.get_final_message()
                if final.stop_reason is None:
                    # The stream closed before its end (a proxy gave up): half an answer is not one.
                    raise BackendError("the Anthropic API's answer broke off before its end")
            else:
                final = await client.messages.create(**kwargs)
                text = "".join(b.text for b in final.content if b.type == "text")
                if text:
                    yield Event("text_delta", {"text": text})
            yield round_of(final)

        try:
            async for item in tool_loop(turn, respond, tool_results, self.max_tool_rounds):
                if isinstance(item, Result):
                    item.usage.latency_ms = elapsed_ms(start)
                yield item
        except anthropic.APIStatusError as exc:
            reason = error_message(exc.body, exc.message)
            raise BackendError(f"Anthropic API error {exc.status_code}: {reason}") from None
        except anthropic.APITimeoutError:  # reached, then quiet (a connection error, subclassed)
            quiet = duration(self.timeout)
            raise BackendError(
                f"the Anthropic API went {quiet} without answering ({client.base_url})"
            ) from None
        except anthropic.APIConnectionError:
            raise BackendError(f"cannot reach the Anthropic API at {client.base_url}") from None
        except anthropic.AnthropicError as exc:
            raise BackendError(f"Anthropic API error: {exc}") from None
        finally:
            await client.close()


CUT_INPUT = (
    "not run: your reply reached its token limit before this call's input was complete; "
    "make the input shorter (split the work into several calls)"
)


def round_of(message) -> Round:
    """A Messages API answer as a tool-loop Round."""
    u = message.usage
    usage = Usage(
        input_tokens=u.input_tokens or 0,
        output_tokens=u.output_tokens or 0,
        cache_read_tokens=u.cache_read_input_tokens or 0,
        cache_write_tokens=u.cache_creation_input_tokens or 0,
    )
    blocks, calls = [], []
    # A tool call the token limit cut off has an input the model never finished (the SDK reads
    # it as far as it goes): it is not run, and the model hears why.
    cut = message.content[-1] if message.stop_reason == "max_tokens" and message.content else None
    for block in message.content:
        if block.type == "text":
            blocks.append({"type": "text", "text": block.text})
        elif block.type == "tool_use":
            arguments = block.input if isinstance(block.input, dict) else {}
            blocks.append(
                {"type": "tool_use", "id": block.id, "name": block.name, "input": arguments}
            )
            error = CUT_INPUT if block is cut else ""
            calls.append(ToolUse(block.id, block.name, arguments, error=error))
    text = "".join(b["text"] for b in blocks if b["type"] == "text")
    return Round(text, calls, usage, {"role": "assistant", "content": blocks})


def tool_results(calls: list[ToolUse], outcomes: list[ToolOutcome]) -> list[dict]:
    """The user message that answers a round's tool_use blocks, one tool_result each."""
    content = [
        {"type": "tool_result", "tool_use_id": call.id, "content": outcome.text or "(no output)",
         **({} if outcome.ok else {"is_error": True})}
        for call, outcome in zip(calls, outcomes, strict=True)
    ]  # fmt: skip
    return [{"role": "user", "content": content}]
