"""Probes of outside tool sources as an attacker would try them: an MCP server's name that
resolves to a public address when checked and to the server's own network when connected (DNS
rebinding), and an MCP server that answers with more than anyone should read."""

import socket
import threading
import time
from typing import Annotated

import pytest
import uvicorn
from mcp.server.mcpserver import MCPServer
from pydantic import Field
from starlette.middleware.gzip import GZipMiddleware

from integrations import sources
from tests.integrations.test_sources import McpStandin, add_crm

PUBLIC = "93.184.215.14"  # an address on the internet, never reached: the check only sees it


@pytest.fixture
def rebinding_dns(monkeypatch):
    """A resolver for ``rebind.example`` that answers a public address the first time and
    127.0.0.1 after (the attacker's DNS server, with a zero TTL); other names as usual."""
    real = socket.getaddrinfo
    asked = []

    def getaddrinfo(host, port, *args, **kwargs):
        if host not in ("rebind.example", b"rebind.example"):  # anyio asks in bytes
            return real(host, port, *args, **kwargs)
        asked.append(host)
        address = PUBLIC if len(asked) == 1 else "127.0.0.1"
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (address, int(port or 80)))]

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    return asked


@pytest.fixture
def crm():
    server = McpStandin().start()
    yield server
    server.stop()


def test_a_name_rebound_to_a_private_address_after_the_check_reaches_nothing(
    alice, team_a, crm, rebinding_dns, settings
):
    settings.WEB_FETCH_ALLOW_PRIVATE = False
    port = crm.url.split(":")[2].split("/")[0]
    source = add_crm(alice, team_a, f"http://rebind.example:{port}/mcp")
    assert crm.headers == []  # nothing reached the server's own network
    assert source.functions == []
    assert "private or reserved address (127.0.0.1)" in source.problem


class HugeAnswers:
    """An MCP server (the official SDK's, answering plain JSON rather than a stream, gzipped as
    a proxy in front of it would) whose one tool answers 32 MB of text: 32 KB on the wire."""

    def __init__(self):
        server = MCPServer("huge-standin")

        @server.tool()
        def dump() -> str:
            """Everything at once."""
            return "x" * (32 << 20)

        @server.tool()
        def sprawl(query: Annotated[str, Field(description="y" * 200_000)]) -> str:
            """A tool whose input schema is 200 KB: every model request would carry it."""
            return query

        app = GZipMiddleware(server.streamable_http_app(json_response=True), minimum_size=10)
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}/mcp"
        config = uvicorn.Config(app, log_level="warning", lifespan="on", access_log=False)
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(
            target=self.server.run, kwargs={"sockets": [self.sock]}, daemon=True
        )
        self.thread.start()
        deadline = time.monotonic() + 10
        while not self.server.started:
            assert time.monotonic() < deadline, "the MCP stand-in did not start"
            time.sleep(0.02)

    def stop(self):
        self.server.should_exit = True
        self.thread.join(10)
        self.sock.close()


@pytest.fixture
def huge(settings):
    settings.WEB_FETCH_ALLOW_PRIVATE = True
    server = HugeAnswers()
    yield server
    server.stop()


def test_an_mcp_answer_or_schema_too_large_is_refused_clearly(alice, team_a, huge):
    source = add_crm(alice, team_a, huge.url, name="huge")
    assert [f["name"] for f in source.functions] == ["dump"]
    assert "sprawl" in source.problem and "too large" in source.problem
    with pytest.raises(sources.SourceFailed) as refused:
        sources.call_mcp(source, "dump", {})
    assert "more than" in refused.value.message and "huge" in refused.value.message


class TricklingApi:
    """An HTTP API that answers its status line at once, then its headers a byte at a time:
    every read arrives well within a read timeout, the whole answer never within the source's."""

    def __init__(self, seconds: float):
        self.listener = socket.socket()
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(4)
        self.url = f"http://127.0.0.1:{self.listener.getsockname()[1]}/api"
        self.seconds = seconds
        threading.Thread(target=self.serve, daemon=True).start()

    def serve(self):
        try:
            peer, _ = self.listener.accept()
        except OSError:
            return
        with peer:
            peer.recv(65536)
            peer.sendall(b"HTTP/1.1 200 OK\r\n")
            started = time.monotonic()
            try:
                while time.monotonic() - started < self.seconds:
                    peer.sendall(b"X")
                    time.sleep(0.1)
                peer.sendall(b"-Slow: 1\r\nContent-Length: 2\r\n\r\n{}")
            except OSError:  # the caller hung up: what the test wants
                pass

    def stop(self):
        self.listener.close()


@pytest.fixture
def trickling(settings):
    settings.WEB_FETCH_ALLOW_PRIVATE = True
    server = TricklingApi(seconds=8)
    yield server
    server.stop()


def test_an_http_api_trickling_its_headers_is_cut_off_at_the_sources_timeout(
    alice, team_a, trickling
):
    membership = team_a.memberships.get(user=alice)
    source = sources.add_source(
        membership, kind="http", name="slow", url=trickling.url, methods=["GET"],
        paths=["/v1/*"], timeout_seconds=1,
    )  # fmt: skip
    started = time.monotonic()
    with pytest.raises(sources.SourceUnreachable) as cut:
        sources.call_http(source, {"method": "GET", "path": "/v1/items"})
    assert time.monotonic() - started < 4
    assert "did not answer within 1 seconds" in cut.value.message


def test_an_mcp_server_trickling_its_answer_is_cut_off_at_the_sources_timeout(
    alice, team_a, trickling
):
    """A guard (this held already): the MCP client's whole exchange runs within the timeout."""
    membership = team_a.memberships.get(user=alice)
    source = sources.add_source(
        membership, kind="mcp", name="slow", url=trickling.url, timeout_seconds=1
    )
    started = time.monotonic()
    source = sources.import_tools(membership, source)
    assert time.monotonic() - started < 4
    assert "did not answer within 1 seconds" in source.problem
