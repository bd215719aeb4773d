"""A slow client (headers, then a body byte a second; or headers a byte a second) is given up
on within a bounded time by the balancer in front of daphne: daphne alone would wait as long
as bytes keep coming (Twisted's idle timeout restarts at every byte; its --http-timeout starts
only once the request is read whole). The balancer's configuration is bench/multi_node.py's,
the same as deploy/haproxy.cfg's."""

import socket
import time

import pytest

from bench.multi_node import _which, free_port, haproxy_config, missing_programs, wait_for_port
from tests.socket_helpers import LoggedProcess

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.slow,
    pytest.mark.skipif(bool(missing_programs()), reason="needs haproxy (apt-get install haproxy)"),
]

GIVES_UP_WITHIN = 20  # seconds: `timeout http-request 10s`, and room for a loaded machine


@pytest.fixture
def balancer(tmp_path, server):
    port = free_port()
    config = tmp_path / "haproxy.cfg"
    config.write_text(haproxy_config(port, {"a": server.port}, tmp_path / "haproxy.sock"))
    proc = LoggedProcess([_which("haproxy"), "-db", "-f", str(config)])
    try:
        wait_for_port(port, proc, "haproxy", config)
        yield port
    finally:
        proc.terminate()
        proc.communicate(timeout=10)


def trickle(port: int, first: bytes, rest: bytes) -> tuple[float, bytes]:
    """Send FIRST, then REST a byte a second until the other side answers or closes: the
    seconds that took and what it answered."""
    started = time.monotonic()
    with socket.create_connection(("127.0.0.1", port), timeout=GIVES_UP_WITHIN * 2) as conn:
        conn.sendall(first)
        conn.settimeout(1)
        for byte in rest:
            try:
                answer = conn.recv(4096)
                return time.monotonic() - started, answer  # an answer, or b"" (closed)
            except TimeoutError:
                pass
            try:
                conn.sendall(bytes([byte]))
            except OSError:
                return time.monotonic() - started, b""
    raise AssertionError("the whole slow request was taken")


def test_a_body_trickling_in_a_byte_a_second_is_given_up_on(balancer):
    body = b'{"username": "someone", "password": "x"}' * 4
    head = (
        b"POST /api/v1/auth/login/ HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        b"Content-Type: application/json\r\nContent-Length: "
        + str(len(body)).encode()
        + b"\r\n\r\n"
    )
    seconds, answer = trickle(balancer, head, body)
    assert seconds < GIVES_UP_WITHIN
    assert answer == b"" or answer.startswith(b"HTTP/1.1 408"), answer[:200]


def test_headers_trickling_in_a_byte_a_second_are_given_up_on(balancer):
    seconds, answer = trickle(balancer, b"GET /healthz HTTP/1.1\r\n", b"X-Slow: " + b"a" * 100)
    assert seconds < GIVES_UP_WITHIN
    assert answer == b"" or answer.startswith(b"HTTP/1.1 408"), answer[:200]
