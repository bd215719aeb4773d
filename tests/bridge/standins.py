"""Loopback stand-ins for the Anthropic Messages API and OpenAI chat.completions, speaking the real wire formats."""

from __future__ import annotations

import hashlib
import json
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
    return "".join(block.get("text", "") for block in content or [])


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
        self.cache: set[str] = set()  # prefixes seen: the simulated provider prompt cache
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

    def chunks(self) -> list[str]:
        """The reply split the way a model streams it."""
        words = self.reply.split(" ")
        return [w if i == 0 else " " + w for i, w in enumerate(words)]

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
                # keyed on the exact bytes of those blocks.
                marked = [i for i, b in enumerate(system) if b.get("cache_control")]
                cut = marked[-1] + 1 if marked else 0
                write = read = 0
                if cut:
                    write, read = server._cache_lookup(json.dumps(system[:cut], sort_keys=True))
                rest = _content_text(system[cut:]) + "".join(
                    _content_text(m["content"]) for m in body["messages"]
                )
                usage = {
                    "input_tokens": tokens(rest),
                    "cache_creation_input_tokens": write,
                    "cache_read_input_tokens": read,
                    "output_tokens": 1,
                }
                self._sse_start()
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
                self._send("message_start", {"type": "message_start", "message": message})
                block = {"type": "text", "text": ""}
                self._send(
                    "content_block_start",
                    {"type": "content_block_start", "index": 0, "content_block": block},
                )
                self._send("ping", {"type": "ping"})
                for n, chunk in enumerate(server.chunks()):
                    delta = {"type": "text_delta", "text": chunk}
                    self._send(
                        "content_block_delta",
                        {"type": "content_block_delta", "index": 0, "delta": delta},
                    )
                    if n == 0 and server.midstream_error:
                        return self._send("error", server.midstream_error)
                self._send("content_block_stop", {"type": "content_block_stop", "index": 0})
                out = {"output_tokens": tokens(server.reply)}
                delta = {"stop_reason": "end_turn", "stop_sequence": None}
                self._send("message_delta", {"type": "message_delta", "delta": delta, "usage": out})
                self._send("message_stop", {"type": "message_stop"})

            def _openai(self, body: dict):
                messages = body["messages"]
                # Automatic prefix caching, simulated on the leading system message.
                cached = 0
                if messages and messages[0]["role"] == "system":
                    _, cached = server._cache_lookup("openai:" + messages[0]["content"])
                prompt_tokens = sum(tokens(_content_text(m["content"])) for m in messages)
                base = {
                    "id": "chatcmpl-standin",
                    "object": "chat.completion.chunk",
                    "created": int(time.time()),
                }
                base["model"] = body.get("model")
                self._sse_start()
                first = {"role": "assistant", "content": ""}
                self._send(
                    None, {**base, "choices": [{"index": 0, "delta": first, "finish_reason": None}]}
                )
                for chunk in server.chunks():
                    choice = {"index": 0, "delta": {"content": chunk}, "finish_reason": None}
                    self._send(None, {**base, "choices": [choice]})
                self._send(
                    None, {**base, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}
                )
                if (body.get("stream_options") or {}).get("include_usage"):
                    usage = {
                        "prompt_tokens": prompt_tokens,
                        "completion_tokens": tokens(server.reply),
                        "total_tokens": prompt_tokens + tokens(server.reply),
                    }
                    if not server.omit_usage_details:
                        usage["prompt_tokens_details"] = {
                            "cached_tokens": cached,
                            "audio_tokens": 0,
                        }
                        usage["completion_tokens_details"] = {"reasoning_tokens": 0}
                    self._send(None, {**base, "choices": [], "usage": usage})
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
                rid, mid = (
                    f"resp_standin{len(server.requests)}",
                    f"msg_standin{len(server.requests)}",
                )
                response = {
                    "id": rid,
                    "object": "response",
                    "created_at": int(time.time()),
                    "status": "in_progress",
                    "model": body.get("model"),
                    "output": [],
                    "usage": None,
                }
                self._sse_start()
                self._send("response.created", {"type": "response.created", "response": response})
                item = {
                    "id": mid,
                    "type": "message",
                    "status": "in_progress",
                    "role": "assistant",
                    "content": [],
                }
                self._send(
                    "response.output_item.added",
                    {"type": "response.output_item.added", "output_index": 0, "item": item},
                )
                for chunk in server.chunks():
                    delta = {
                        "type": "response.output_text.delta",
                        "item_id": mid,
                        "output_index": 0,
                        "content_index": 0,
                        "delta": chunk,
                    }
                    self._send("response.output_text.delta", delta)
                part = {"type": "output_text", "text": server.reply, "annotations": []}
                done = {**item, "status": "completed", "content": [part]}
                self._send(
                    "response.output_item.done",
                    {"type": "response.output_item.done", "output_index": 0, "item": done},
                )
                usage = {
                    "input_tokens": prompt_tokens,
                    "input_tokens_details": {"cached_tokens": cached},
                    "output_tokens": tokens(server.reply),
                    "output_tokens_details": {"reasoning_tokens": 0},
                    "total_tokens": prompt_tokens + tokens(server.reply),
                }
                final = {**response, "status": "completed", "output": [done], "usage": usage}
                self._send("response.completed", {"type": "response.completed", "response": final})

        return Handler
