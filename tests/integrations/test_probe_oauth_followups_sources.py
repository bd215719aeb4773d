"""Follow-ups of the sources probe: a secret in a source URL's query string is not shown to
models or to the agent's owner, and still sent; an HTTP API call is bounded by the source's
timeout as a whole (a TLS handshake trickled a byte at a time, a slow name lookup)."""

import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from integrations import sources
from integrations.models import ToolSource
from tests.conftest import client_for
from tests.integrations.test_probe_connections_sources import TricklingApi

pytestmark = pytest.mark.django_db(transaction=True)

SECRET = "sekrit-key-123"


class EchoApi:
    """An HTTP API answering every GET with the path and query it was asked."""

    def __init__(self):
        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_GET(self):
                body = self.path.encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def stop(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def echo(settings):
    settings.WEB_FETCH_ALLOW_PRIVATE = True
    server = EchoApi()
    yield server
    server.stop()


def keyed_source(alice, team_a, echo) -> ToolSource:
    membership = team_a.memberships.get(user=alice)
    return sources.add_source(
        membership, kind="http", name="weather", url=f"{echo.url}/v1?api_key={SECRET}",
        methods=["GET"], paths=["/items*"],
    )  # fmt: skip


def test_a_source_urls_query_string_is_not_shown_to_models_or_agent_owners(
    alice, bob, team_a, nova, echo
):
    source = keyed_source(alice, team_a, echo)
    sources.grant_function(team_a.memberships.get(user=alice), source, nova, "request")
    (tool,) = sources.SOURCE.tools_for(nova)
    assert SECRET not in tool.description and "api_key" not in tool.description
    assert f"{echo.url}/v1" in tool.description
    # A description stored before (with the whole URL) is not what the model reads either.
    ToolSource.objects.filter(pk=source.pk).update(
        functions=[source.functions[0] | {"description": f"API at {source.url}"}]
    )
    (tool,) = sources.SOURCE.tools_for(nova)
    assert SECRET not in tool.description
    # The agent's owner reads its tools' descriptions (not an admin there: any member).
    listed = client_for(alice).get(f"/api/v1/agents/{nova.id}/tools/")
    assert listed.status_code == 200 and SECRET not in listed.content.decode()


def test_a_source_urls_query_string_is_still_sent_with_each_request(alice, team_a, echo):
    source = keyed_source(alice, team_a, echo)
    answer = sources.call_http(source, {"method": "GET", "path": "/items", "query": {"q": "x"}})
    assert answer["status"] == 200
    assert answer["body"] == f"/v1/items?api_key={SECRET}&q=x"


class SlowTls:
    """A TLS server slow at everything before the request: its accept queue is full when the
    client's first SYN comes (dropped; the kernel sends it again a second later), then it
    trickles its handshake, a byte every 0.2 s. Python bounds the TCP connect and the whole
    handshake each by the connect timeout; only the source's own deadline bounds both."""

    def __init__(self, seconds: float):
        self.listener = socket.socket()
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(0)
        address = self.listener.getsockname()
        self.filler = socket.create_connection(address)  # fills the accept queue
        self.url = f"https://127.0.0.1:{address[1]}/api"
        self.seconds = seconds
        threading.Thread(target=self.serve, daemon=True).start()

    def serve(self):
        try:
            time.sleep(0.5)  # the client's first SYN is dropped meanwhile
            self.listener.accept()[0].close()  # the filler: room for the SYN sent again
            peer, _ = self.listener.accept()
        except OSError:
            return
        with peer:
            started = time.monotonic()
            try:
                peer.recv(65536)  # the ClientHello
                peer.sendall(b"\x16\x03\x03\x40\x00")  # a 16 KB handshake record follows...
                while time.monotonic() - started < self.seconds:
                    peer.sendall(b"\x00")
                    time.sleep(0.2)
            except OSError:  # the caller hung up: what the test wants
                pass

    def stop(self):
        self.filler.close()
        self.listener.close()


def test_an_http_api_slow_to_connect_and_handshake_is_cut_off_at_the_sources_timeout(
    alice, team_a, settings
):
    settings.WEB_FETCH_ALLOW_PRIVATE = True
    server = SlowTls(seconds=8)
    try:
        source = sources.add_source(
            team_a.memberships.get(user=alice), kind="http", name="slow", url=server.url,
            methods=["GET"], paths=["/v1/*"], timeout_seconds=2,
        )  # fmt: skip
        started = time.monotonic()
        with pytest.raises(sources.SourceUnreachable) as cut:
            sources.call_http(source, {"method": "GET", "path": "/v1/items"})
        assert time.monotonic() - started < 2.6
        assert "within 2 seconds" in cut.value.message
    finally:
        server.stop()


def test_a_slow_name_lookup_counts_within_the_sources_timeout(alice, team_a, settings, monkeypatch):
    """The address is looked up (and checked) before connecting: that time is the call's too."""
    settings.WEB_FETCH_ALLOW_PRIVATE = True
    server = TricklingApi(seconds=8)
    real = socket.getaddrinfo

    def slow_getaddrinfo(host, *args, **kwargs):
        if host == "slow.example":
            time.sleep(1.5)
            host = "127.0.0.1"
        return real(host, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", slow_getaddrinfo)
    port = server.url.split(":")[2].split("/")[0]
    try:
        source = sources.add_source(
            team_a.memberships.get(user=alice), kind="http", name="slow",
            url=f"http://slow.example:{port}/api", methods=["GET"], paths=["/v1/*"],
            timeout_seconds=2,
        )  # fmt: skip
        started = time.monotonic()
        with pytest.raises(sources.SourceUnreachable) as cut:
            sources.call_http(source, {"method": "GET", "path": "/v1/items"})
        assert time.monotonic() - started < 2.8
        assert "within 2 seconds" in cut.value.message
    finally:
        server.stop()


def test_a_user_name_or_password_in_a_source_url_is_refused_pointing_at_credentials(alice, team_a):
    """A guard (this held already): userinfo is refused, the admin told to use a credential."""
    answer = client_for(alice).post(
        f"/api/v1/workspaces/{team_a.id}/tool-sources/",
        {"kind": "http", "name": "weather", "url": "https://me:pw@api.example.com/v1",
         "methods": ["GET"], "paths": ["/items"]},
        format="json",
    )  # fmt: skip
    assert answer.status_code == 400
    assert answer.json()["error"]["code"] == "tool_source_invalid"
    assert "credential" in answer.json()["error"]["message"]
    assert not ToolSource.objects.exists()
