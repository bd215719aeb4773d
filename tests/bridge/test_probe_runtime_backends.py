"""The API backends against a model server that breaks off: a stream cut before its end, a tool
call's input cut by the token limit. A stand-in that speaks the real SSE formats, through the
real SDK clients."""

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from agntchat_bridge.backends import BackendError, ToolOutcome, Turn, make_backend, run_to_result
from agntchat_bridge.backends.base import MAX_TOOL_RESULT_CHARS

from .standins import StandinServer

MESSAGE = {"id": "msg_1", "type": "message", "role": "assistant", "model": "m", "content": [],
           "stop_reason": None, "stop_sequence": None,
           "usage": {"input_tokens": 3, "output_tokens": 1}}  # fmt: skip
CHUNK = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": "m"}
TOOLS = [{"name": "publish", "description": "Publish a plan", "inputSchema": {"type": "object"}}]


class BreakingModel:
    """A model server on 127.0.0.1 that answers with the events SCRIPT gives for each request
    (a function of the request's JSON body), then closes the connection (HTTP/1.0: the close
    ends the body, as a proxy that gives up mid-answer leaves it)."""

    def __init__(self, script):
        model = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                model.requests.append(body)
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.end_headers()
                for event, data in script(body):
                    head = f"event: {event}\n" if event else ""
                    self.wfile.write(f"{head}data: {json.dumps(data)}\n\n".encode())

        self.requests: list[dict] = []
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


def anthropic_text_cut(body):
    yield "message_start", {"type": "message_start", "message": MESSAGE}
    yield "content_block_start", {"type": "content_block_start", "index": 0,
                                  "content_block": {"type": "text", "text": ""}}  # fmt: skip
    yield "content_block_delta", {"type": "content_block_delta", "index": 0,
                                  "delta": {"type": "text_delta", "text": "The plan is to"}}  # fmt: skip
    # …and the connection closes: no content_block_stop, message_delta or message_stop.


def openai_text_cut(body):
    yield None, {**CHUNK, "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""},
                                       "finish_reason": None}]}  # fmt: skip
    yield None, {**CHUNK, "choices": [{"index": 0, "delta": {"content": "The plan is to"},
                                       "finish_reason": None}]}  # fmt: skip


@pytest.fixture
def model(request):
    server = BreakingModel(request.param)
    yield server
    server.close()


@pytest.mark.parametrize(
    "model, backend, path",
    [(anthropic_text_cut, "anthropic_api", ""), (openai_text_cut, "openai_api", "/v1")],
    indirect=["model"],
)
async def test_an_answer_cut_off_mid_stream_fails_rather_than_passing_for_the_reply(
    model, backend, path
):
    """The stream ended before the model finished (no stop event, no finish_reason): the half
    sentence was posted as the agent's whole reply, and nobody could tell it was cut."""
    turn = Turn("", "", "What is the plan?", [], base_url=model.url + path, api_key="k")
    with pytest.raises(BackendError, match="broke off before its end"):
        await run_to_result(make_backend(backend, max_retries=0), turn, time_limit=20)


def anthropic_tool_input_cut(body):
    """A tool call whose input reaches max_tokens half written; once told, a short reply."""
    yield "message_start", {"type": "message_start", "message": MESSAGE}
    answered = any(isinstance(m["content"], list) for m in body["messages"][1:])
    if answered:
        block, deltas, stop = {"type": "text", "text": ""}, [
            {"type": "text_delta", "text": "Too long; I will split it."}], "end_turn"  # fmt: skip
    else:
        block = {"type": "tool_use", "id": "toolu_1", "name": "publish", "input": {}}
        deltas = [{"type": "input_json_delta",
                   "partial_json": '{"title": "Plan", "content": "Step one. Step tw'}]  # fmt: skip
        stop = "max_tokens"
    yield "content_block_start", {"type": "content_block_start", "index": 0,
                                  "content_block": block}  # fmt: skip
    for delta in deltas:
        yield "content_block_delta", {"type": "content_block_delta", "index": 0, "delta": delta}
    yield "content_block_stop", {"type": "content_block_stop", "index": 0}
    yield "message_delta", {"type": "message_delta", "usage": {"output_tokens": 9},
                            "delta": {"stop_reason": stop, "stop_sequence": None}}  # fmt: skip
    yield "message_stop", {"type": "message_stop"}


@pytest.mark.parametrize("model", [anthropic_tool_input_cut], indirect=True)
async def test_a_tool_call_cut_off_by_the_token_limit_is_not_run(model):
    """The SDK reads a half-written tool input as far as it goes ({"title": "Plan"}): the tool
    ran with arguments the model never finished (half an artifact published). It is not run;
    the model hears why."""
    calls = []

    async def call_tool(name, arguments, *, checkpoint=None):
        calls.append((name, arguments))
        return ToolOutcome(True, output="{}")

    turn = Turn("", "", "Publish the plan", [], base_url=model.url, api_key="k", tools=TOOLS)
    turn.call_tool = call_tool
    result = await run_to_result(make_backend("anthropic_api", max_retries=0), turn, time_limit=20)
    assert calls == []
    assert result.text == "Too long; I will split it."
    told = model.requests[1]["messages"][-1]["content"][0]
    assert told["type"] == "tool_result" and told["is_error"] is True
    assert "token limit" in told["content"]


@pytest.mark.parametrize("backend, path", [("anthropic_api", ""), ("openai_api", "/v1")])
async def test_a_tool_result_too_large_for_the_context_reaches_the_model_cut(backend, path):
    """A tool (an outside API, a fetched page) answers with 200,000 characters, about 50,000
    tokens: sent whole, a few such calls filled the model's context and the turn failed with
    the provider's 400. It goes to the model cut, saying so, as the CLIs cut an MCP result."""
    server = StandinServer().start()
    server.tool_script = [{"tool": "lookup", "input": {}}]
    huge = "x" * 200_000

    async def call_tool(name, arguments, *, checkpoint=None):
        return ToolOutcome(True, output=huge)

    turn = Turn("", "", "Look it up", [], base_url=server.url + path, api_key="test-key",
                tools=[{**TOOLS[0], "name": "lookup"}])  # fmt: skip
    turn.call_tool = call_tool
    try:
        result = await run_to_result(make_backend(backend), turn, time_limit=20)
    finally:
        server.stop()
    assert result.text == server.reply
    sent = json.dumps(server.requests[-1]["json"]["messages"])
    assert "x" * MAX_TOOL_RESULT_CHARS not in sent and "x" * 90_000 in sent
    assert "[cut: 200,000 characters" in sent
