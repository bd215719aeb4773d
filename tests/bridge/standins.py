"""Loopback stand-ins for the Anthropic Messages API, OpenAI chat.completions and the Responses
API, speaking the real wire formats, tool calls included.

A stand-in model follows ``tool_script``: a list of steps, one per model response. A step is
{"tool": name, "input": {…}} (one call), {"calls": [{"tool", "input"}, …]} (parallel calls), or
{"text": …}; a tool step may carry "say" (text before the call). Which step answers a request is
read from the request itself: how many tool results it carries since the last person's message.
Past the script, the model replies with ``reply``. Strings in inputs may use {result} or
{result.key} of the latest tool result. Tool names match the ones offered by suffix, so
"done" calls "mcp__agntchat__done" when a CLI offers our tools through MCP."""

from __future__ import annotations

import hashlib
import json
import re
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

ANTHROPIC_401 = {
    "type": "error",
    "error": {"type": "authentication_error", "message": "invalid x-api-key"},
    "request_id": "req_011CStandin401",
}
ANTHROPIC_500 = {
    "type": "error",
    "error": {"type": "api_error", "message": "Internal server error"},
}
ANTHROPIC_OVERLOADED = {
    "type": "error",
    "error": {"type": "overloaded_error", "message": "Overloaded"},
}
OPENAI_401 = {
    "error": {
        "message": "Incorrect API key provided: wrong. You can find your API key at https://platform.openai.com/account/api-keys.",
        "type": "invalid_request_error",
        "param": None,
        "code": "invalid_api_key",
    }
}


def tokens(text: str) -> int:
    """Rough token count (4 characters per token), enough to make the numbers move."""
    return max(1, len(text) // 4) if text else 0


def responses_prompt_tokens(body: dict) -> int:
    """Input tokens the stand-in reports for one Responses API request."""
    return tokens(json.dumps(body.get("input") or []) + (body.get("instructions") or ""))


def _content_text(content) -> str:
    if isinstance(content, str):
        return content
    return "".join(
        block.get("text", "")
        if block.get("type") != "tool_result"
        else _content_text(block.get("content"))
        for block in content or []
    )


def with_result(value, result: str | None):
    """VALUE with {result} / {result.key} in its strings filled from RESULT (a tool's output)."""
    if isinstance(value, dict):
        return {k: with_result(v, result) for k, v in value.items()}
    if isinstance(value, list):
        return [with_result(v, result) for v in value]
    if not isinstance(value, str) or result is None:
        return value
    try:
        data = json.loads(result)
    except ValueError:
        data = None

    def one(match: re.Match) -> str:
        if match.group(1) is None:
            return result
        return str(data.get(match.group(1), "")) if isinstance(data, dict) else ""

    return re.sub(r"\{result(?:\.([A-Za-z0-9_]+))?\}", one, value)


def anthropic_results(messages: list[dict]) -> list[str]:
    """The tool results since the last person's message, oldest first."""
    results = []
    for message in messages:
        blocks = message["content"] if isinstance(message["content"], list) else []
        found = [b for b in blocks if b.get("type") == "tool_result"]
        if message["role"] == "user" and not found:
            results = []
        results += [_tool_result_text(b.get("content")) for b in found]
    return results


def _tool_result_text(content) -> str:
    # Claude Code appends its own <system-reminder> blocks; the tool's text is the first.
    if isinstance(content, list):
        return content[0].get("text", "") if content else ""
    return content or ""


def openai_results(messages: list[dict]) -> list[str]:
    results = []
    for message in messages:
        if message["role"] == "user":
            results = []
        elif message["role"] == "tool":
            results.append(_content_text(message.get("content")))
    return results


def responses_tool_names(tools: list[dict]) -> list:
    """The function names a Responses request offers; a namespaced one as (namespace, name)."""
    names = []
    for tool in tools:
        if tool.get("type") == "namespace":
            names += [(tool["name"], t["name"]) for t in tool.get("tools") or []]
        elif tool.get("name"):
            names.append(tool["name"])
    return names


def responses_results(items: list[dict]) -> list[str]:
    results = []
    for item in items:
        if item.get("role") == "user":
            results = []
        elif item.get("type") == "function_call_output":
            output = item.get("output")
            if not isinstance(output, str):
                # codex sends an MCP tool's result as text blocks, its own header first
                # ("Wall time: … Output:"); the tool's text is the last one.
                output = (output or [{}])[-1].get("text", "")
            results.append(output)
    return results


class StandinServer:
    """One ThreadingHTTPServer on 127.0.0.1:<random> serving both APIs; records every request."""

    def __init__(self, api_key: str = "test-key", reply: str = "Hello from the stand-in."):
        self.api_key = api_key
        self.reply = reply
        self.requests: list[dict] = []  # {"path", "headers", "raw", "json"}
        self.errors: list[tuple[int, dict]] = []  # queued (status, body) answers, consumed first
        self.midstream_error: dict | None = (
            None  # anthropic: send this SSE error event after one delta
        )
        self.omit_usage_details = False  # openai: mimic compatible servers that omit *_details
        self.null_choices = False  # openai: the usage chunk says "choices": null, as some do
        self.cache: set[str] = set()  # prefixes seen: the simulated provider prompt cache
        self.tool_script: list[dict] = []
        self.stream_tool_input = True  # stream a call's input in pieces (else in one piece)
        self.chunk_seconds = 0.0  # a pause before each streamed piece of text: a slow model
        # When set to an Event: a request carrying tool results waits for it (the model "thinks"
        # after a tool ran, long enough for a test to kill the bridge there).
        self.after_tools_gate: threading.Event | None = None
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, args=(0.05,), daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._httpd.server_address[1]}"

    def start(self) -> StandinServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()

    def chunks(self, text: str | None = None) -> list[str]:
        """TEXT (by default the reply) split the way a model streams it."""
        words = (self.reply if text is None else text).split(" ")
        return [w if i == 0 else " " + w for i, w in enumerate(words)] if words != [""] else []

    def pause(self) -> None:
        """Before a streamed piece of text: a model that writes slowly."""
        if self.chunk_seconds:
            time.sleep(self.chunk_seconds)

    def input_pieces(self, arguments: dict) -> list[str]:
        """A call's input as JSON text, in the pieces a model streams it in."""
        text = json.dumps(arguments)
        if not self.stream_tool_input:
            return [text]
        return [text[i : i + 7] for i in range(0, len(text), 7)] or [""]

    def step(self, results: list[str], offered: list[str]) -> dict:
        """This request's answer: {"say": text, "calls": [{"id", "name", "input"}]}. RESULTS are
        the tool results the request carries; OFFERED the tool names it offers."""
        if results and self.after_tools_gate is not None:
            self.after_tools_gate.wait(60)
        done = len(results)
        for step in self.tool_script:
            calls = step.get("calls") or ([step] if "tool" in step else [])
            if not calls:
                return {"say": step["text"], "calls": []}
            if done >= len(calls):
                done -= len(calls)
                continue
            last = results[-1] if results else None
            seed = hashlib.sha1(json.dumps(results).encode()).hexdigest()[:12]
            return {
                "say": step.get("say", ""),
                "calls": [
                    {
                        "id": f"{seed}{len(results) + n}",
                        "name": self._offered_name(call["tool"], offered),
                        "input": with_result(call.get("input") or {}, last),
                    }
                    for n, call in enumerate(calls)
                ],
            }
        return {"say": self.reply, "calls": []}

    @staticmethod
    def _offered_name(name: str, offered: list):
        for candidate in offered:
            bare = candidate[1] if isinstance(candidate, tuple) else candidate
            if bare == name or bare.endswith("__" + name):
                return candidate
        return name

    def _cache_lookup(self, prefix: str) -> tuple[int, int]:
        """(cache_write, cache_read) tokens for a cacheable prefix, updating the simulated cache."""
        key = hashlib.sha256(prefix.encode()).hexdigest()
        if key in self.cache:
            return 0, tokens(prefix)
        self.cache.add(key)
        return tokens(prefix), 0

    def _handler(self):
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # keep pytest output clean
                pass

            def do_GET(self):
                # Codex first tries a WebSocket on /v1/responses; refuse it in HTTP/1.1 (an HTTP/1.0
                # refusal reads as a protocol error) so it falls back to the SSE POST.
                self.protocol_version = "HTTP/1.1"
                self.close_connection = True
                self._json(
                    404,
                    {"error": {"message": "no websockets here", "type": "invalid_request_error"}},
                )

            def do_POST(self):
                raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                body = json.loads(raw or b"{}")
                path = self.path.split("?")[0]
                server.requests.append(
                    {"path": path, "headers": dict(self.headers), "raw": raw, "json": body}
                )
                is_openai = path.endswith(("/chat/completions", "/responses"))
                if server.errors:
                    return self._json(*server.errors.pop(0))
                if not self._authorized():
                    return self._json(401, OPENAI_401 if is_openai else ANTHROPIC_401)
                if path == "/v1/messages":
                    return self._anthropic(body)
                if path.endswith("/responses"):
                    return self._responses(body)
                if is_openai:
                    return self._openai(body)
                self._json(
                    404, {"type": "error", "error": {"type": "not_found_error", "message": path}}
                )

            def _authorized(self) -> bool:
                given = self.headers.get("x-api-key") or self.headers.get(
                    "Authorization", ""
                ).removeprefix("Bearer ")
                return given == server.api_key

            def _json(self, status: int, body: dict):
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _sse_start(self):
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Cache-Control", "no-cache")
                self.end_headers()

            def _send(self, event: str | None, data):
                text = data if isinstance(data, str) else json.dumps(data)
                head = f"event: {event}\n" if event else ""
                self.wfile.write(f"{head}data: {text}\n\n".encode())
                self.wfile.flush()

            def _anthropic(self, body: dict):
                system = body.get("system") or []
                if isinstance(system, str):
                    system = [{"type": "text", "text": system}]
                # The cached prefix runs up to and including the last block marked cache_control,
                # keyed on the exact bytes of what precedes it: the tools, then the system blocks.
                marked = [i for i, b in enumerate(system) if b.get("cache_control")]
                cut = marked[-1] + 1 if marked else 0
                write = read = 0
                if cut:
                    prefix = [body.get("tools") or [], system[:cut]]
                    write, read = server._cache_lookup(json.dumps(prefix, sort_keys=True))
                rest = _content_text(system[cut:]) + "".join(
                    _content_text(m["content"]) for m in body["messages"]
                )
                offered = [t["name"] for t in body.get("tools") or []]
                answer = server.step(anthropic_results(body["messages"]), offered)
                content = [{"type": "text", "text": answer["say"]}] if answer["say"] else []
                content += [
                    {
                        "type": "tool_use",
                        "id": "toolu_" + c["id"],
                        "name": c["name"],
                        "input": c["input"],
                    }
                    for c in answer["calls"]
                ]
                stop = "tool_use" if answer["calls"] else "end_turn"
                usage = {
                    "input_tokens": tokens(rest),
                    "cache_creation_input_tokens": write,
                    "cache_read_input_tokens": read,
                    "output_tokens": 1,
                }
                output_tokens = (
                    tokens(json.dumps(content)) if answer["calls"] else tokens(answer["say"])
                )
                message = {
                    "id": f"msg_standin{len(server.requests)}",
                    "type": "message",
                    "role": "assistant",
                    "model": body.get("model"),
                    "content": [],
                    "stop_reason": None,
                    "stop_sequence": None,
                    "usage": usage,
                }
                if not body.get("stream"):
                    final = {**message, "content": content, "stop_reason": stop}
                    return self._json(
                        200, {**final, "usage": {**usage, "output_tokens": output_tokens}}
                    )
                self._sse_start()
                self._send("message_start", {"type": "message_start", "message": message})
                for index, block in enumerate(content):
                    empty = (
                        {**block, "text": ""} if block["type"] == "text" else {**block, "input": {}}
                    )
                    self._send(
                        "content_block_start",
                        {"type": "content_block_start", "index": index, "content_block": empty},
                    )
                    if index == 0:
                        self._send("ping", {"type": "ping"})
                    if block["type"] == "text":
                        deltas = [
                            {"type": "text_delta", "text": c} for c in server.chunks(block["text"])
                        ]
                    else:
                        deltas = [
                            {"type": "input_json_delta", "partial_json": piece}
                            for piece in server.input_pieces(block["input"])
                        ]
                    for n, delta in enumerate(deltas):
                        if delta["type"] == "text_delta":
                            server.pause()
                        self._send(
                            "content_block_delta",
                            {"type": "content_block_delta", "index": index, "delta": delta},
                        )
                        if n == 0 and server.midstream_error:
                            return self._send("error", server.midstream_error)
                    self._send("content_block_stop", {"type": "content_block_stop", "index": index})
                delta = {"stop_reason": stop, "stop_sequence": None}
                out = {"output_tokens": output_tokens}
                self._send("message_delta", {"type": "message_delta", "delta": delta, "usage": out})
                self._send("message_stop", {"type": "message_stop"})

            def _openai(self, body: dict):
                messages = body["messages"]
                # Automatic prefix caching, simulated on the leading system message and the tools.
                cached = 0
                if messages and messages[0]["role"] == "system":
                    head = (json.dumps(body["tools"]) if body.get("tools") else "") + messages[0][
                        "content"
                    ]
                    _, cached = server._cache_lookup("openai:" + head)
                prompt_tokens = sum(tokens(_content_text(m.get("content"))) for m in messages)
                offered = [t["function"]["name"] for t in body.get("tools") or []]
                answer = server.step(openai_results(messages), offered)
                calls = [
                    {"id": "call_" + c["id"], "type": "function",
                     "function": {"name": c["name"], "arguments": json.dumps(c["input"])}}
                    for c in answer["calls"]
                ]  # fmt: skip
                finish = "tool_calls" if calls else "stop"
                completion_tokens = tokens(answer["say"] + json.dumps(calls) * bool(calls))
                usage = {
                    "prompt_tokens": prompt_tokens,
                    "completion_tokens": completion_tokens,
                    "total_tokens": prompt_tokens + completion_tokens,
                }
                if not server.omit_usage_details:
                    usage["prompt_tokens_details"] = {"cached_tokens": cached, "audio_tokens": 0}
                    usage["completion_tokens_details"] = {"reasoning_tokens": 0}
                base = {
                    "id": "chatcmpl-standin",
                    "created": int(time.time()),
                    "model": body.get("model"),
                }
                if not body.get("stream"):
                    reply = {"role": "assistant", "content": answer["say"] or None}
                    if calls:
                        reply["tool_calls"] = calls
                    choice = {"index": 0, "message": reply, "finish_reason": finish}
                    return self._json(
                        200,
                        {**base, "object": "chat.completion", "choices": [choice], "usage": usage},
                    )
                base["object"] = "chat.completion.chunk"
                self._sse_start()

                def delta(d: dict, finish_reason=None):
                    choice = {"index": 0, "delta": d, "finish_reason": finish_reason}
                    self._send(None, {**base, "choices": [choice]})

                delta({"role": "assistant", "content": ""})
                for chunk in server.chunks(answer["say"]):
                    server.pause()
                    delta({"content": chunk})
                for index, call in enumerate(calls):
                    first = {
                        **call,
                        "index": index,
                        "function": {**call["function"], "arguments": ""},
                    }
                    delta({"tool_calls": [first]})
                    for piece in server.input_pieces(json.loads(call["function"]["arguments"])):
                        delta({"tool_calls": [{"index": index, "function": {"arguments": piece}}]})
                delta({}, finish)
                if (body.get("stream_options") or {}).get("include_usage"):
                    choices = None if server.null_choices else []
                    self._send(None, {**base, "choices": choices, "usage": usage})
                self._send(None, "[DONE]")

            def _responses(self, body: dict):
                # The Responses API stream, as the Codex CLI consumes it (it falls back to this SSE
                # after its WebSocket attempt on the same path fails).
                items = body.get("input") or []
                prompt_tokens = responses_prompt_tokens(body)
                # Prefix caching simulated on the leading instructions (codex sends a developer message).
                head = body.get("instructions") or (
                    json.dumps(items[0], sort_keys=True) if items else ""
                )
                _, cached = server._cache_lookup("responses:" + head)
                n = len(server.requests)
                offered = responses_tool_names(body.get("tools") or [])
                answer = server.step(responses_results(items), offered)
                response = {
                    "id": f"resp_standin{n}",
                    "object": "response",
                    "created_at": int(time.time()),
                    "status": "in_progress",
                    "model": body.get("model"),
                    "output": [],
                    "usage": None,
                }
                self._sse_start()
                self._send("response.created", {"type": "response.created", "response": response})
                output = []

                def added(item: dict):
                    event = {
                        "type": "response.output_item.added",
                        "output_index": len(output),
                        "item": item,
                    }
                    self._send("response.output_item.added", event)

                def done(item: dict):
                    event = {
                        "type": "response.output_item.done",
                        "output_index": len(output),
                        "item": item,
                    }
                    self._send("response.output_item.done", event)
                    output.append(item)

                if answer["say"]:
                    item = {"id": f"msg_standin{n}", "type": "message", "status": "in_progress",
                            "role": "assistant", "content": []}  # fmt: skip
                    added(item)
                    for chunk in server.chunks(answer["say"]):
                        server.pause()
                        delta = {
                            "type": "response.output_text.delta",
                            "item_id": item["id"],
                            "output_index": len(output),
                            "content_index": 0,
                            "delta": chunk,
                        }
                        self._send("response.output_text.delta", delta)
                    part = {"type": "output_text", "text": answer["say"], "annotations": []}
                    done({**item, "status": "completed", "content": [part]})
                for call in answer["calls"]:
                    name, namespace = call["name"], None
                    if isinstance(name, tuple):
                        namespace, name = name
                    arguments = json.dumps(call["input"])
                    item = {"id": "fc_" + call["id"], "type": "function_call", "status": "in_progress",
                            "call_id": "call_" + call["id"], "name": name, "arguments": ""}  # fmt: skip
                    if namespace:
                        item["namespace"] = namespace
                    added(item)
                    for piece in server.input_pieces(call["input"]):
                        event = {"type": "response.function_call_arguments.delta",
                                 "item_id": item["id"], "output_index": len(output), "delta": piece}  # fmt: skip
                        self._send("response.function_call_arguments.delta", event)
                    event = {"type": "response.function_call_arguments.done",
                             "item_id": item["id"], "output_index": len(output), "arguments": arguments}  # fmt: skip
                    self._send("response.function_call_arguments.done", event)
                    done({**item, "status": "completed", "arguments": arguments})
                out_tokens = tokens(json.dumps(output))
                usage = {
                    "input_tokens": prompt_tokens,
                    "input_tokens_details": {"cached_tokens": cached},
                    "output_tokens": out_tokens,
                    "output_tokens_details": {"reasoning_tokens": 0},
                    "total_tokens": prompt_tokens + out_tokens,
                }
                final = {**response, "status": "completed", "output": output, "usage": usage}
                self._send("response.completed", {"type": "response.completed", "response": final})

        return Handler
