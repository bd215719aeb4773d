"""core.http: Django's HTTP side served in one hop under ASGI (what daphne runs)."""

import json
import os
import subprocess
import sys

import pytest
from channels.testing import HttpCommunicator

from agntchat.asgi import application
from agntchat.core.http import wsgi_environ
from workspaces.actions import issue_api_token

pytestmark = pytest.mark.django_db(transaction=True)


def test_the_environ_carries_path_query_headers_and_body():
    scope = {
        "type": "http",
        "method": "POST",
        "path": "/app/api/v1/x/",
        "root_path": "/app",
        "query_string": b"a=1&b=2",
        "http_version": "1.1",
        "server": ("example.org", 443),
        "client": ("10.0.0.7", 5555),
        "scheme": "https",
        "headers": [
            (b"content-type", b"application/json"),
            (b"content-length", b"2"),
            (b"x-forwarded-for", b"1.1.1.1"),
            (b"x-forwarded-for", b"2.2.2.2"),
        ],
    }
    environ = wsgi_environ(scope, body=b"{}")
    assert (environ["SCRIPT_NAME"], environ["PATH_INFO"]) == ("/app", "/api/v1/x/")
    assert environ["QUERY_STRING"] == "a=1&b=2" and environ["wsgi.url_scheme"] == "https"
    assert (environ["CONTENT_TYPE"], environ["CONTENT_LENGTH"]) == ("application/json", "2")
    assert environ["HTTP_X_FORWARDED_FOR"] == "1.1.1.1,2.2.2.2"
    assert (environ["SERVER_NAME"], environ["SERVER_PORT"], environ["REMOTE_ADDR"]) == (
        "example.org",
        "443",
        "10.0.0.7",
    )


async def test_a_post_through_the_asgi_application_stores_and_answers(alice, channel):
    from asgiref.sync import sync_to_async

    _, secret = await sync_to_async(issue_api_token)(alice)
    communicator = HttpCommunicator(
        application,
        "POST",
        f"/api/v1/conversations/{channel.id}/messages/",
        body=b'{"body": "through daphne\'s door"}',
        headers=[
            (b"host", b"localhost"),
            (b"authorization", f"Bearer {secret}".encode()),
            (b"content-type", b"application/json"),
        ],
    )
    response = await communicator.get_response(timeout=10)
    assert response["status"] == 201, response["body"]
    assert b"through daphne's door" in response["body"]
    headers = dict(response["headers"])
    assert headers[b"content-type"] == b"application/json"


async def test_a_page_sets_its_cookies_and_a_bad_request_gets_a_clear_4xx(db):
    page = await HttpCommunicator(
        application, "GET", "/login/", headers=[(b"host", b"localhost")]
    ).get_response(timeout=10)
    assert page["status"] == 200
    assert any(name == b"set-cookie" and b"csrftoken" in value for name, value in page["headers"])
    bad = await HttpCommunicator(
        application,
        "POST",
        "/api/v1/conversations/",
        body=b"{not json",
        headers=[(b"host", b"localhost"), (b"content-type", b"application/json")],
    ).get_response(timeout=10)
    assert 400 <= bad["status"] < 500


async def test_a_body_sent_in_chunks_without_a_length_arrives_whole(alice, channel):
    from asgiref.sync import sync_to_async

    _, secret = await sync_to_async(issue_api_token)(alice)
    chunks = [
        {"type": "http.request", "body": b'{"body": "first half, ', "more_body": True},
        {"type": "http.request", "body": b'second half"}', "more_body": False},
    ]
    sent = []

    async def receive():
        return chunks.pop(0)

    async def send(message):
        sent.append(message)

    scope = {
        "type": "http",
        "method": "POST",
        "path": f"/api/v1/conversations/{channel.id}/messages/",
        "query_string": b"",
        "http_version": "1.1",
        "headers": [
            (b"host", b"localhost"),
            (b"authorization", f"Bearer {secret}".encode()),
            (b"content-type", b"application/json"),
            (b"transfer-encoding", b"chunked"),
        ],
    }
    await application(scope, receive, send)
    assert sent[0]["status"] == 201, sent
    assert b"first half, second half" in sent[1]["body"]


async def test_requests_are_served_side_by_side(monkeypatch):
    """One request waiting (on the database, here at a barrier that opens only once all four
    are waiting at it) does not hold up the others."""
    import asyncio
    import threading

    from agntchat.core.http import OneHopDjango

    real_respond = OneHopDjango.respond
    threads = set()
    # Served one after another, the first would wait alone until the timeout breaks the barrier.
    all_four_in = threading.Barrier(4, timeout=10)

    def slow_respond(self, *args):
        threads.add(threading.current_thread().name)
        all_four_in.wait()
        return real_respond(self, *args)

    monkeypatch.setattr(OneHopDjango, "respond", slow_respond)

    async def healthz():
        communicator = HttpCommunicator(
            application, "GET", "/healthz", headers=[(b"host", b"localhost")]
        )
        return (await communicator.get_response(timeout=10))["status"]

    statuses = await asyncio.gather(*(healthz() for _ in range(4)))
    assert statuses == [200] * 4
    assert len(threads) == 4 and all(name.startswith("http") for name in threads)


@pytest.mark.parametrize(
    ("body", "status", "code"),
    [
        (b'{"body": ' + b"[" * 50_000 + b"]" * 50_000 + b"}", 400, "too_deep"),
        (b'{"body": "' + b"x" * 3_000_000 + b'"}', 413, "too_large"),
        (b'{"body": "unterminated', 400, "parse_error"),
    ],
    ids=["nested too deeply", "over the size limit", "malformed"],
)
async def test_bad_bodies_through_the_asgi_application_get_the_json_error_shape(
    alice, channel, body, status, code
):
    from asgiref.sync import sync_to_async

    _, secret = await sync_to_async(issue_api_token)(alice)
    communicator = HttpCommunicator(
        application,
        "POST",
        f"/api/v1/conversations/{channel.id}/messages/",
        body=body,
        headers=[
            (b"host", b"localhost"),
            (b"authorization", f"Bearer {secret}".encode()),
            (b"content-type", b"application/json"),
        ],
    )
    response = await communicator.get_response(timeout=10)
    assert response["status"] == status, response["body"][:300]
    assert dict(response["headers"])[b"content-type"] == b"application/json"
    assert json.loads(response["body"])["error"]["code"] == code


def test_the_asgi_app_freezes_what_it_loaded_at_startup():
    """What daphne loads: Django, the apps, the routes. Frozen, the collector's full passes
    skip them (each took 90-130 ms of the event loop unfrozen)."""
    frozen = subprocess.run(
        [sys.executable, "-c", "import gc, agntchat.asgi; print(gc.get_freeze_count())"],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "DJANGO_SETTINGS_MODULE": "agntchat.settings"},
        timeout=60,
    )
    assert int(frozen.stdout.strip()) > 100_000


def test_daphne_leaves_a_form_body_to_django():
    """Twisted would parse a form or multipart POST into request.args on the event loop (a
    10 MB upload: 0.75 s of every socket of the process held still); under our application
    daphne's requests pass the body on untouched."""
    from daphne.http_protocol import WebRequest
    from twisted.web.test.requesthelper import DummyChannel

    channel = DummyChannel()
    channel.factory = type("Factory", (), {"server": type("S", (), {})()})()
    channel.factory.server.protocol_connected = lambda request: None
    request = WebRequest(channel)
    request.process = lambda: None  # daphne's hand-off to the application: not under test
    request.requestHeaders.setRawHeaders(b"content-type", [b"application/x-www-form-urlencoded"])
    request.gotLength(7)
    request.handleContentChunk(b"a=1&b=2")
    request.requestReceived(b"POST", b"/api/v1/x", b"HTTP/1.1")
    assert request.args == {}
    assert request.content.read() == b"a=1&b=2"


def test_a_refused_body_is_never_passed_on_even_when_its_end_came_in_the_same_read():
    """Past the limit the server stops reading, but what one read brought is still parsed: a
    chunked body's last chunk may be in it. The request it ends is not handed to the app."""
    from daphne.http_protocol import WebRequest
    from twisted.web.test.requesthelper import DummyChannel

    from agntchat.core.http import largest_body

    channel = DummyChannel()
    channel.factory = type("Factory", (), {"server": type("S", (), {})()})()
    channel.factory.server.protocol_connected = lambda request: None
    request = WebRequest(channel)
    handed_on = []
    request.process = lambda: handed_on.append(request)  # daphne's hand-off to the application
    request.gotLength(None)  # chunked: no length declared
    request.handleContentChunk(b"x" * (largest_body() + 1))
    request.requestReceived(b"POST", b"/api/v1/x", b"HTTP/1.1")
    assert channel.transport.written.getvalue().startswith(b"HTTP/1.1 413")
    assert handed_on == []
