"""The browser socket opens only for this site's own pages: same scheme, host and port."""

import json

import pytest
import websockets
from django.test import Client, override_settings

from agntchat.core.origin import origin_allowed


def scope(origin: str | None, host: str = "127.0.0.1:8000", scheme: str = "ws", **headers):
    sent = {"host": host, **headers}
    if origin is not None:
        sent["origin"] = origin
    return {
        "type": "websocket",
        "scheme": scheme,
        "headers": [(k.replace("_", "-").encode(), v.encode()) for k, v in sent.items()],
    }


@pytest.mark.parametrize(
    "origin",
    [
        "http://127.0.0.1:8000",
        "HTTP://127.0.0.1:8000",
    ],
)
def test_it_accepts_the_pages_own_origin(origin):
    assert origin_allowed(scope(origin))


@pytest.mark.parametrize(
    "origin",
    [
        "http://127.0.0.1:9999",  # the same host on another port
        "http://127.0.0.1",  # port 80
        "https://127.0.0.1:8000",  # another scheme
        "http://localhost:8000",  # an allowed host, but not the one the page is served from
        "http://evil.example:8000",
        "http://127.0.0.1.evil.example:8000",
        "http://127.0.0.1:notaport",
        "http://127.0.0.1:99999",
        "file://127.0.0.1:8000",
        "null",  # sandboxed frames and file:// pages
        "",
        None,
    ],
)
def test_it_refuses_every_other_origin(origin):
    assert not origin_allowed(scope(origin))


def test_default_ports_are_the_same_origin_written_or_not():
    assert origin_allowed(scope("http://127.0.0.1", host="127.0.0.1:80"))
    assert origin_allowed(scope("http://127.0.0.1:80", host="127.0.0.1"))
    assert origin_allowed(scope("https://127.0.0.1", host="127.0.0.1", scheme="wss"))
    assert not origin_allowed(scope("https://127.0.0.1", host="127.0.0.1:80"))


def test_it_refuses_a_host_outside_allowed_hosts_even_with_a_matching_origin():
    assert not origin_allowed(scope("http://evil.example:8000", host="evil.example:8000"))


@override_settings(SECURE_PROXY_SSL_HEADER=("HTTP_X_FORWARDED_PROTO", "https"))
def test_behind_a_tls_proxy_the_scheme_is_the_proxys_as_django_reads_it():
    proxied = scope("https://127.0.0.1", host="127.0.0.1", x_forwarded_proto="https")
    assert origin_allowed(proxied)
    assert not origin_allowed(
        scope("http://127.0.0.1", host="127.0.0.1", x_forwarded_proto="https")
    )


@override_settings(
    CSRF_TRUSTED_ORIGINS=["https://app.example.com", "https://*.example.org"],
)
def test_csrf_trusted_origins_are_trusted_with_their_scheme_and_port():
    assert origin_allowed(scope("https://app.example.com"))
    assert origin_allowed(scope("https://chat.example.org"))
    assert not origin_allowed(scope("http://app.example.com"))
    assert not origin_allowed(scope("https://app.example.com:8443"))
    assert not origin_allowed(scope("https://example.com"))
    assert not origin_allowed(scope("https://chat.example.org.evil.example"))


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
async def test_a_real_server_opens_the_socket_for_its_pages_and_closes_4403_for_others(
    alice, server
):
    from asgiref.sync import sync_to_async

    client = Client()
    await sync_to_async(client.force_login)(alice)
    cookie = f"sessionid={client.cookies['sessionid'].value}"

    async def open_with(origin):
        return await websockets.connect(
            f"{server.ws_url}/ws/live/", origin=origin, additional_headers={"Cookie": cookie}
        )

    async with await open_with(server.url) as ws:
        hello = json.loads(await ws.recv())
        assert hello == {"type": "hello", "userId": str(alice.id)}

    port = server.url.rsplit(":", 1)[1]
    for origin in (
        "http://127.0.0.1:9999",
        f"https://127.0.0.1:{port}",
        f"http://localhost:{port}",
        "http://evil.example",
    ):
        async with await open_with(origin) as ws:
            error = json.loads(await ws.recv())
            assert (error["type"], error["code"]) == ("error", "forbidden_origin"), origin
            with pytest.raises(websockets.ConnectionClosed) as closed:
                await ws.recv()
            assert closed.value.rcvd.code == 4403, origin
