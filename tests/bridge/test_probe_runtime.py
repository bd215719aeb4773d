"""The bridge's runtime against a broken or hostile agent socket: a loopback server speaking the
protocol (docs/protocol.md) that answers as the test says, and a real Bridge (no Django)."""

import asyncio
import contextlib
import json
import logging
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import websockets
from agntchat_bridge.backends.openai_api import OpenAIBackend
from agntchat_bridge.backends.scripted import ScriptedBackend
from agntchat_bridge.runtime import Bridge, Config, SessionStore

from tests.waiting import until

from .standins import StandinServer


class FakeSocket:
    """The server's end of the agent socket: records every frame the bridge sends, answers posts,
    results and tool calls as the real one does unless a test says otherwise."""

    def __init__(self):
        self.frames: list[dict] = []
        self.connections = 0
        self.ws = None
        self.answers = True  # answer post/result/tool.call automatically
        self.tool_gate: asyncio.Event | None = None  # tool calls wait for it before answering
        self.tool_answer = {"ok": True, "output": "{}"}  # what a tool.call gets back

    async def start(self):
        self.server = await websockets.serve(self.handler, "127.0.0.1", 0)
        self.url = f"http://127.0.0.1:{self.server.sockets[0].getsockname()[1]}"
        return self

    async def stop(self):
        self.server.close()
        await self.server.wait_closed()

    async def handler(self, ws):
        self.ws = ws
        self.connections += 1
        await ws.send(json.dumps({"type": "hello", "connectionId": f"c{self.connections}"}))
        async for raw in ws:
            frame = json.loads(raw)
            self.frames.append(frame)
            if self.answers:
                asyncio.ensure_future(self.answer(ws, frame))

    async def answer(self, ws, frame):
        kind = frame["type"]
        if kind == "post":
            reply = {"type": "posted", "messageId": f"msg-{frame['ref']}", "ref": frame["ref"]}
        elif kind == "result":
            reply = {"type": "result.accepted", "id": frame["id"]}
        elif kind == "tool.call":
            if self.tool_gate is not None:
                await self.tool_gate.wait()
            reply = {"type": "tool.result", "callId": frame["callId"], "ref": frame["ref"],
                     **self.tool_answer}  # fmt: skip
        else:
            return
        with contextlib.suppress(websockets.ConnectionClosed):
            await ws.send(json.dumps(reply))

    async def send(self, frame):
        await self.ws.send(frame if isinstance(frame, str) else json.dumps(frame))

    def of(self, kind, **match):
        return [
            f
            for f in self.frames
            if f["type"] == kind and all(f.get(k) == v for k, v in match.items())
        ]


def message_work(item_id, prompt, conversation="conv-1", tools=()):
    directives = {"sessionKey": conversation, "stable": "", "volatile": "", "prompt": prompt,
                  "history": [], "tools": list(tools)}  # fmt: skip
    payload = {"message": {"id": f"m-{item_id}"}, "conversation": {"id": conversation},
               "timeLimitSeconds": 60, "directives": directives}  # fmt: skip
    return {"type": "work", "kind": "message", "id": item_id, "trace": f"m-{item_id}",
            "payload": payload}  # fmt: skip


TOOLS = [{"name": "lookup", "description": "Look it up", "inputSchema": {"type": "object"}}]


@pytest.fixture
async def socket():
    s = await FakeSocket().start()
    yield s
    await s.stop()


@pytest.fixture
def run_bridge(tmp_path):
    """Start a Bridge with BACKEND against a FakeSocket, signed in already; stopped after."""
    started = []

    def start(socket, backend, **config):
        config = {"heartbeat_seconds": 3600, "extend_seconds": 3600, "max_backoff": 0.2, **config}
        bridge = Bridge(
            Config(url=socket.url, key="agk_secret", workdir=tmp_path, **config), backend
        )
        bridge.token, bridge.token_expires = "ags_token", time.time() + 3600
        bridge.agent = {"id": "agent-1", "name": "Nova", "backend": backend.name}
        bridge.sessions = SessionStore(tmp_path / "sessions.json")
        (tmp_path / "agent-1").mkdir(exist_ok=True)
        task = asyncio.create_task(bridge.run_forever())
        started.append((bridge, task))
        return bridge, task

    yield start
    for bridge, task in started:
        bridge.stopping.set()
        task.cancel()


async def test_a_frame_that_is_not_json_does_not_end_the_bridge(socket, run_bridge):
    """A broken proxy or a server bug sends a frame the bridge cannot read: it is passed over,
    and the bridge goes on serving. (It ended run_forever: the agent went offline for good.)"""
    bridge, task = run_bridge(socket, ScriptedBackend())
    await until(lambda: socket.ws, what="the connection")
    await socket.send("<html>502 Bad Gateway</html>")
    await socket.send({"type": "work", "id": "no-kind"})
    await socket.send(message_work("i1", "hi"))
    await until(lambda: socket.of("ack", id="i1"), what="the ack")
    assert [f["body"] for f in socket.of("post")] == ["Echo: hi"]
    assert not task.done() and socket.connections == 1


async def test_a_refusal_said_twice_does_not_end_the_bridge(socket, run_bridge):
    """Two error frames for one ref (a refused post said twice, or a task's progress and its
    result both not_held): the second found the waiter's future already failed, and the
    InvalidStateError ended run_forever."""
    socket.answers = False
    bridge, task = run_bridge(socket, ScriptedBackend())
    await until(lambda: socket.ws, what="the connection")
    await socket.send(message_work("i1", "hi"))
    await until(lambda: socket.of("post"), what="the post")
    refused = {"type": "error", "code": "rate_limited", "message": "slow down", "ref": "work:i1"}
    await socket.send(refused)
    await socket.send(refused)
    socket.answers = True
    await socket.send(message_work("i2", "again"))
    await until(lambda: socket.of("ack", id="i2"), what="the next item answered")
    assert not task.done() and socket.connections == 1


def task_work(item_id, prompt, tools=()):
    directives = {"sessionKey": f"task-{item_id}", "stable": "", "volatile": "", "prompt": prompt,
                  "history": [], "tools": list(tools)}  # fmt: skip
    payload = {"task": {"id": item_id}, "timeLimitSeconds": 60, "directives": directives}
    return {"type": "work", "kind": "task", "id": item_id, "trace": item_id, "payload": payload}


async def test_a_long_task_keeps_its_lease_while_it_runs(socket, run_bridge):
    """A task whose turn goes quiet (a CLI running a long build prints nothing) must extend its
    lease as a chat turn does: the server gives a task whose lease ran out to another
    connection of the agent, and it ran twice."""
    bridge, task = run_bridge(socket, ScriptedBackend(delay_ms=600), extend_seconds=0.1)
    await until(lambda: socket.ws, what="the connection")
    await socket.send(task_work("t1", "hi"))
    await until(lambda: socket.of("result", id="t1"), what="the result")
    assert len(socket.of("extend", id="t1")) >= 3
    extends_at_result = len(socket.of("extend"))
    await asyncio.sleep(0.3)  # the behaviour under test: nothing extended once it ended
    assert len(socket.of("extend")) == extends_at_result


async def test_the_same_item_pushed_twice_is_worked_once(socket, run_bridge):
    """An item pushed again to the connection already working on it (its lease ran out while it
    waited, and this connection claimed it back): the model ran a second time beside the first,
    and a Stop reached only one of the two."""
    bridge, task = run_bridge(socket, ScriptedBackend(delay_ms=300))
    await until(lambda: socket.ws, what="the connection")
    await socket.send(message_work("i1", "hi"))
    await until(lambda: "i1" in bridge.running, what="the turn started")
    await socket.send(message_work("i1", "hi"))
    await until(lambda: socket.of("ack", id="i1"), what="the ack")
    await socket.send(message_work("i2", "next"))  # frames are handled in order: i1's are in
    await until(lambda: socket.of("ack", id="i2"), what="the next ack")
    assert [f["body"] for f in socket.of("post")] == ["Echo: hi", "Echo: next"]


async def test_a_turn_stopped_then_cut_off_while_waiting_for_approval_gives_its_lane_back_once(
    socket, run_bridge
):
    """A turn waiting for a person's approval hands its lane back; stopped, it waits to take a
    lane again, and the socket closing then cancelled that wait too: the lane it never took
    back was released all the same, and the bridge ran one turn more at a time than its lanes."""
    socket.tool_answer = {
        "ok": False,
        "pending": {"requestId": "req-1", "expiresAt": "2030-01-01T00:00:00Z"},
    }
    backend = ScriptedBackend(
        replies={
            "go": [{"tool": "lookup", "input": {}}, {"text": "looked"}],
            "slow": [{"progress": "thinking", "sleep_ms": 30_000}, {"text": "thought"}],
        }
    )
    bridge, task = run_bridge(socket, backend, chat_lanes=1)
    await until(lambda: socket.ws, what="the connection")
    await socket.send(message_work("i1", "go", tools=TOOLS))
    await until(lambda: "req-1" in bridge.awaiting, what="the turn waiting for approval")
    await socket.send(message_work("i2", "slow", conversation="conv-2"))
    await until(lambda: bridge.chats.get("i2") is True, what="the second turn in the lane")
    await socket.send({"type": "cancel", "id": "i1"})  # Stop: i1 waits for the lane i2 holds
    lane = bridge.lanes["message"]
    await until(lambda: lane._waiters, what="the stopped turn waiting for the lane")
    await socket.ws.close()
    await until(lambda: socket.connections == 2, what="the reconnect")
    await until(lambda: not bridge.running, what="both turns abandoned")
    await lane.acquire()
    assert lane.locked()  # one lane, as configured


KEY = "sk-team-a-0123456789abcdefghij"  # the workspace's key, handed over with the item


async def test_a_key_a_provider_echoes_is_not_posted(socket, run_bridge):
    """A provider's 401 that quotes the key it was given, or a model that prints its
    environment: the workspace's key went into the conversation, for everyone there to read."""
    model = StandinServer(api_key="another-key").start()
    echo = {
        "error": {"message": f"Incorrect API key provided: {KEY}.", "type": "invalid_request_error"}
    }
    model.errors.append((401, echo))
    try:
        bridge, task = run_bridge(socket, OpenAIBackend(max_retries=0))
        bridge.agent["baseUrl"] = model.url + "/v1"
        await until(lambda: socket.ws, what="the connection")
        work = message_work("i1", "hi")
        work["payload"]["directives"]["apiKey"] = KEY
        await socket.send(work)
        await until(lambda: socket.of("ack", id="i1"), what="the ack")
    finally:
        model.stop()
    [notice] = socket.of("post")
    assert notice["notice"] is True
    assert notice["body"] == (
        "Nova could not answer: OpenAI API error 401: Incorrect API key provided: [redacted]."
    )
    assert KEY not in json.dumps(socket.frames)


async def test_the_agent_key_a_model_prints_is_not_posted(socket, run_bridge):
    bridge, task = run_bridge(
        socket, ScriptedBackend(default="My key is agk_secret_0123456789abcdef")
    )
    bridge.config.key = "agk_secret_0123456789abcdef"
    await until(lambda: socket.ws, what="the connection")
    await socket.send(message_work("i1", "what is your key?"))
    await until(lambda: socket.of("ack", id="i1"), what="the ack")
    assert [f["body"] for f in socket.of("post")] == ["My key is [redacted]"]


async def test_a_sign_in_answered_with_a_page_not_json_is_tried_again(tmp_path):
    """A proxy's maintenance page with status 200 in place of the session endpoint's JSON: the
    ValueError ended run_forever, and the agent stayed offline once the server was back."""
    pages = []

    class Page(BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def do_POST(self):
            pages.append(self.path)
            body = b"<html>Back soon</html>"
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Page)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    config = Config(url=f"http://127.0.0.1:{httpd.server_address[1]}", key="agk_x",
                    workdir=tmp_path, max_backoff=0.05)  # fmt: skip
    bridge = Bridge(config, ScriptedBackend())
    task = asyncio.create_task(bridge.run_forever())
    try:
        await until(lambda: len(pages) >= 3 or task.done(), what="the sign-in tried again")
        assert not task.done(), task
    finally:
        bridge.stopping.set()
        task.cancel()
        httpd.shutdown()
        httpd.server_close()


async def test_a_turn_whose_socket_closes_under_it_is_let_go_without_a_traceback(tmp_path, caplog):
    """The bridge stops (SIGTERM) as a turn sends its ack: the socket is closing, the send
    fails, and the item is redelivered, as designed. It was logged as a failure with a
    traceback, as a bug is."""
    caplog.set_level(logging.INFO, "agntchat.bridge")
    bridge = Bridge(Config(url="http://127.0.0.1:1", key="agk_x", workdir=tmp_path))

    async def acking(frame):
        raise websockets.ConnectionClosedOK(None, None)

    await bridge.in_lane(task_work("t1", "hi"), acking)
    [record] = [r for r in caplog.records if r.name == "agntchat.bridge"]
    assert record.levelname == "INFO" and record.exc_info is None
    assert record.getMessage() == "work item t1 let go with its connection; it will be redelivered"
