"""Hostile input on both sockets of a real daphne: generated frames (random JSON, known types
with fields of the wrong type, huge numbers, unknown types, text that is not JSON, binary)
each get an `error` frame, the socket stays open and nothing is written. A frame past daphne's
message size is refused from its header, before it is read whole (close 1009), and the server
goes on serving."""

import json
import socket
import struct
import time

import pytest
from django.apps import apps
from django.test import Client
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from websockets.sync.client import connect

from agntchat.core.validation import MAX_JSON_DEPTH
from tests.conftest import agent_session
from tests.socket_helpers import Daphne, events_sent
from work.consumers import AgentSocket

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

OUR_APPS = {"workspaces", "agents", "conversations", "artifacts", "work", "routines", "core"}
EXAMPLES = 150
# Types whose frame may be valid with no id of a row in it: left out of the known-type frames,
# which must all be wrong.
MAYBE_VALID = {"heartbeat", "personality.get", "personality.set", "configure", "ping"}

# Values no field of any frame takes: wrong JSON types for every field, numbers past every
# range, text the database cannot store, nesting past the limit.
hostile_values = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=2**40) | st.integers(max_value=-(2**40)),
    st.floats(allow_nan=False, allow_infinity=False).filter(lambda f: not f.is_integer()),
    st.just(10**400),
    st.text(min_size=1).map(lambda t: t + "\x00"),
    st.just("lone\ud800"),
    st.lists(st.integers(), max_size=3),
    st.dictionaries(st.text(max_size=5), st.integers(), max_size=3),
    st.just(json.loads("[" * (MAX_JSON_DEPTH + 2) + "]" * (MAX_JSON_DEPTH + 2))),
)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)


def known_type_frames(types):
    names = st.sampled_from(
        ["id", "conversationId", "body", "ref", "event", "status", "result", "usage", "done",
         "token", "text", "title", "kind", "content", "card", "summary", "callId", "name",
         "input", "replyTo", "prefetch", "tasks"]
    )  # fmt: skip
    return st.builds(
        lambda kind, fields: {"type": kind, **fields},
        st.sampled_from(sorted(set(types) - MAYBE_VALID)),
        st.dictionaries(names, hostile_values, min_size=1, max_size=4),
    )


def frames(types):
    """Text or bytes that no socket can act on."""
    return st.one_of(
        known_type_frames(types).map(json.dumps),
        json_values.filter(lambda v: not (isinstance(v, dict) and v.get("type") in types)).map(
            json.dumps
        ),
        st.builds(
            lambda t, f: {"type": t, **f},
            st.text(max_size=50),
            st.dictionaries(st.text(max_size=8), json_values, max_size=3),
        )
        .filter(lambda f: f["type"] not in types)
        .map(json.dumps),
        st.text(max_size=200).filter(lambda t: not parses(t)),
        st.binary(max_size=200),
        st.just('{"type": "post", "n": ' + "9" * 5000 + "}"),
        st.just('{"type": "post", "x": NaN}'),
    )


def parses(text: str) -> bool:
    try:
        json.loads(text)
    except ValueError:
        return False
    return True


def row_counts() -> dict:
    return {
        model._meta.label: model.objects.count()
        for model in apps.get_models()
        if model._meta.app_label in OUR_APPS
    }


@pytest.fixture(scope="module")
def hostile_server(django_db_setup):
    # The browser's frame rate would answer most of these with rate_limited: still an error
    # frame, but the handlers would not see them.
    daphne = Daphne(
        extra_env={"BROWSER_FRAMES_PER_MINUTE": "1000000", "BROWSER_FRAMES_BURST": "1000000"}
    )
    yield daphne
    daphne.stop()


def fuzz(ws, types, still_alive) -> None:
    @settings(
        max_examples=EXAMPLES,
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(frames(types))
    def one(frame):
        ws.send(frame)
        reply = json.loads(ws.recv(timeout=15))
        assert reply["type"] == "error", (frame[:300], reply)
        assert isinstance(reply["code"], str) and reply["message"], reply

    one()
    still_alive(ws)


def test_generated_frames_on_the_agent_socket_get_error_frames_and_change_nothing(
    nova, channel, hostile_server
):
    token = agent_session(nova)
    before = row_counts()
    with connect(
        f"{hostile_server.ws_url}/ws/agent/",
        additional_headers={"Authorization": f"Bearer {token}"},
        max_size=None,
    ) as ws:
        assert json.loads(ws.recv(timeout=15))["type"] == "hello"

        def still_alive(ws):
            ws.send(json.dumps({"type": "personality.get"}))
            assert json.loads(ws.recv(timeout=15))["type"] == "personality"

        fuzz(ws, set(AgentSocket.handlers), still_alive)
    assert row_counts() == before
    assert "Traceback" not in hostile_server.proc.output()


def test_generated_frames_on_the_browser_socket_get_error_frames_and_change_nothing(
    alice, channel, hostile_server
):
    client = Client()
    client.force_login(alice)
    before = row_counts()
    events_sent()  # the fixtures' (a member joined…): an event is no answer to a frame
    with connect(
        f"{hostile_server.ws_url}/ws/live/",
        additional_headers={"Cookie": f"sessionid={client.cookies['sessionid'].value}"},
        origin=f"http://127.0.0.1:{hostile_server.port}",
        max_size=None,
    ) as ws:
        assert json.loads(ws.recv(timeout=15))["type"] == "hello"

        def still_alive(ws):
            ws.send(json.dumps({"type": "ping"}))
            assert json.loads(ws.recv(timeout=15)) == {"type": "pong"}

        fuzz(ws, {"ping", "typing"}, still_alive)
    assert row_counts() == before
    assert "Traceback" not in hostile_server.proc.output()


def test_a_frame_past_the_message_size_is_refused_before_it_is_read_whole(nova, hostile_server):
    token = agent_session(nova)
    with socket.create_connection(("127.0.0.1", hostile_server.port), timeout=15) as raw:
        raw.sendall(
            b"GET /ws/agent/ HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\n"
            b"Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
            b"Sec-WebSocket-Version: 13\r\nAuthorization: Bearer " + token.encode() + b"\r\n\r\n"
        )
        answer = raw.recv(4096)
        while b"hello" not in answer:
            answer += raw.recv(4096)
        assert answer.startswith(b"HTTP/1.1 101")
        # Only a frame's header, saying 64 MiB follow: autobahn (daphne's WebSocket) refuses
        # on reading the header and drops the connection (its failByDrop; no close frame), so
        # none of the payload is ever waited for.
        mask = b"\x01\x02\x03\x04"
        raw.sendall(b"\x81\xff" + struct.pack("!Q", 64 * 1024 * 1024) + mask + b"abcd")
        started = time.monotonic()
        try:
            while raw.recv(4096):
                pass
        except ConnectionResetError:
            pass
        assert time.monotonic() - started < 10
    # The server goes on serving.
    with connect(
        f"{hostile_server.ws_url}/ws/agent/",
        additional_headers={"Authorization": f"Bearer {token}"},
    ) as ws:
        assert json.loads(ws.recv(timeout=15))["type"] == "hello"


def _answer(raw) -> bytes:
    """All the server sends until it closes the connection (a reset ends it too)."""
    answer = b""
    try:
        while chunk := raw.recv(65536):
            answer += chunk
    except ConnectionResetError:
        pass
    return answer


def test_a_body_declared_too_large_is_refused_before_it_is_sent(hostile_server):
    """Twisted would take in the whole body before Django's limit could speak: 50 MB declared,
    1 KB sent, and the 413 must come at once, in the API's error shape."""
    from agntchat.core.http import largest_body

    with socket.create_connection(("127.0.0.1", hostile_server.port), timeout=15) as raw:
        raw.sendall(
            b"POST /api/v1/auth/token/ HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            b"Content-Type: application/json\r\nContent-Length: 52428800\r\n\r\n"
            + b'{"username": "'
            + b"a" * 1000
        )
        started = time.monotonic()
        answer = _answer(raw)
        assert time.monotonic() - started < 10
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 413"), answer[:200]
    error = json.loads(body)["error"]
    assert error["code"] == "too_large" and str(largest_body()) in error["message"]
    assert "Traceback" not in hostile_server.proc.output()


def test_a_chunked_body_growing_too_large_is_cut_off_and_the_server_goes_on(hostile_server):
    """No length declared: the body is counted as it arrives, and past the limit the server
    stops reading it, long before the client has sent what it meant to."""
    from agntchat.core.http import largest_body

    chunk = b"%x\r\n%s\r\n" % (1024 * 1024, b"x" * 1024 * 1024)
    sent = 0
    with socket.create_connection(("127.0.0.1", hostile_server.port), timeout=15) as raw:
        raw.sendall(
            b"POST /api/v1/auth/token/ HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            b"Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
        )
        try:
            while sent < 4 * largest_body():
                raw.sendall(chunk)
                sent += len(chunk)
        except (BrokenPipeError, ConnectionResetError):
            pass
        _answer(raw)
    assert sent < 4 * largest_body()  # the server hung up on the body
    assert "Traceback" not in hostile_server.proc.output()
    # A request within the limit is still served.
    with socket.create_connection(("127.0.0.1", hostile_server.port), timeout=15) as raw:
        raw.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
        assert _answer(raw).startswith(b"HTTP/1.1 200")


@pytest.mark.slow
def test_a_socket_that_stops_reading_is_dropped_not_buffered(alice):
    """A browser that never reads what it is sent: once more than WEBSOCKET_MAX_UNSENT_BYTES
    wait for it in the server's memory, the server drops it (before, Twisted kept everything
    until daphne's ping timeout, a minute of events later)."""
    import uuid

    from agntchat.core.events import publish_live

    server = Daphne(extra_env={"WEBSOCKET_MAX_UNSENT_BYTES": str(256 * 1024)})
    try:
        client = Client()
        client.force_login(alice)
        cookie = client.cookies["sessionid"].value
        raw = socket.socket()
        raw.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        raw.settimeout(15)
        raw.connect(("127.0.0.1", server.port))
        raw.sendall(
            b"GET /ws/live/ HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nUpgrade: websocket\r\n"
            b"Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
            b"Sec-WebSocket-Version: 13\r\nOrigin: http://127.0.0.1:%d\r\n"
            b"Cookie: sessionid=%s\r\n\r\n" % (server.port, server.port, cookie.encode())
        )
        answer = raw.recv(4096)
        while b"hello" not in answer:
            answer += raw.recv(4096)
        assert answer.startswith(b"HTTP/1.1 101")
        # From here on the client reads nothing; about 16 MB of events are sent its way.
        ids = [str(uuid.uuid4()) for _ in range(2000)]
        for _ in range(200):
            publish_live(
                [f"user.{alice.id}"], "notification.read", notification_ids=ids, unread_count=0
            )
        deadline = time.monotonic() + 60
        while "dropped a socket" not in server.proc.output() and time.monotonic() < deadline:
            time.sleep(0.2)
        assert "dropped a socket" in server.proc.output()
        # What the kernel had taken before the drop can still be read; then the connection ends.
        assert _answer(raw) is not None
        raw.close()
        assert "Traceback" not in server.proc.output()
    finally:
        server.stop()


@pytest.fixture(scope="module")
def impatient_server(django_db_setup):
    daphne = Daphne(extra_env={"HTTP_HEADERS_SECONDS": "2"})
    yield daphne
    daphne.stop()


def test_headers_sent_a_byte_at_a_time_are_timed_out(impatient_server):
    """Twisted's idle timeout restarts at every byte: a client dribbling its headers held its
    connection for as long as it kept dribbling. Past HTTP_HEADERS_SECONDS it gets a 408."""
    head = b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: " + b"a" * 100
    started = time.monotonic()
    answer = b""
    with socket.create_connection(("127.0.0.1", impatient_server.port), timeout=15) as raw:
        raw.settimeout(0.5)
        for byte in head:
            try:
                raw.sendall(bytes([byte]))
            except (BrokenPipeError, ConnectionResetError):
                break
            try:
                answer += raw.recv(65536)
            except TimeoutError:
                continue
            except ConnectionResetError:
                break
            if answer:
                break
        raw.settimeout(15)
        answer += _answer(raw)
    took = time.monotonic() - started
    assert answer.startswith(b"HTTP/1.1 408"), answer[:200]
    assert json.loads(answer.partition(b"\r\n\r\n")[2])["error"]["code"] == "request_timeout"
    assert 2 <= took < 6  # the deadline, 2 s from the first byte
    assert "Traceback" not in impatient_server.proc.output()


def test_a_slow_body_is_not_cut_by_the_headers_deadline(impatient_server):
    """An upload over a poor link: the headers come at once, the body slowly, past the
    deadline. It is answered as usual."""
    body = json.dumps({"username": "nobody", "password": "wrong-password"}).encode()
    with socket.create_connection(("127.0.0.1", impatient_server.port), timeout=15) as raw:
        raw.sendall(
            b"POST /api/v1/auth/token/ HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n"
            b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(body)
        )
        for part in (body[:10], body[10:20], body[20:]):
            time.sleep(1.6)  # 4.8 s in all: well past the deadline
            raw.sendall(part)
        answer = _answer(raw)
    assert answer.startswith(b"HTTP/1.1 4") and not answer.startswith(b"HTTP/1.1 408"), answer
    assert b"request_timeout" not in answer


def test_a_kept_alive_connection_idle_past_the_deadline_still_serves(impatient_server):
    """The deadline runs from a request's first byte, not from the end of the last one: a
    connection kept alive and quiet between requests (within Twisted's idle minute) is fine."""
    request = b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
    with socket.create_connection(("127.0.0.1", impatient_server.port), timeout=15) as raw:
        for _ in range(2):
            raw.sendall(request)
            answer = b""
            while b"\r\n\r\n" not in answer or not answer.endswith(b"}"):
                answer += raw.recv(65536)
            assert answer.startswith(b"HTTP/1.1 200"), answer
            time.sleep(4.5)
        raw.sendall(request + request)  # two at once (pipelined): both answered
        answer = b""
        while answer.count(b"HTTP/1.1 200") < 2:
            chunk = raw.recv(65536)
            assert chunk, answer
            answer += chunk
    assert b"408" not in answer


def test_headers_past_16_kb_get_a_431_that_says_so(hostile_server):
    """Twisted refused them with a bare 400 and no body; now the status and the API's error
    shape say what was wrong, and the server goes on."""
    with socket.create_connection(("127.0.0.1", hostile_server.port), timeout=15) as raw:
        raw.sendall(
            b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Big: " + b"a" * 20000 + b"\r\n\r\n"
        )
        answer = _answer(raw)
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 431"), answer[:200]
    assert json.loads(body)["error"]["code"] == "headers_too_large"
    many = b"".join(b"X-H%d: 1\r\n" % i for i in range(600))  # each short, 500 at most
    with socket.create_connection(("127.0.0.1", hostile_server.port), timeout=15) as raw:
        raw.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n" + many + b"\r\n")
        assert _answer(raw).startswith(b"HTTP/1.1 431")
    with socket.create_connection(("127.0.0.1", hostile_server.port), timeout=15) as raw:
        raw.sendall(b"NOT A REQUEST LINE AT ALL\r\n\r\n")
        answer = _answer(raw)
    assert answer.startswith(b"HTTP/1.1 400"), answer[:200]
    assert json.loads(answer.partition(b"\r\n\r\n")[2])["error"]["code"] == "bad_request"
    with socket.create_connection(("127.0.0.1", hostile_server.port), timeout=15) as raw:
        raw.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
        assert _answer(raw).startswith(b"HTTP/1.1 200")
    assert "Traceback" not in hostile_server.proc.output()
