"""ASGI entry point: HTTP through Django, WebSockets for agents (/ws/agent/) and browsers (/ws/live/)."""

import gc
import os

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "agntchat.settings")

import django  # noqa: E402

django.setup(set_prefix=False)

from agntchat.core.http import (  # noqa: E402
    OneHopDjango,
    daphne_leaves_bodies_to_django,
    daphne_refuses_large_bodies,
    daphne_times_out_slow_requests,
)
from agntchat.core.sockets import NoSuchSocket, daphne_drops_stalled_sockets  # noqa: E402

django_http = OneHopDjango()  # all our views are sync: one hop per request (see core/http.py)
daphne_leaves_bodies_to_django()
daphne_refuses_large_bodies()
daphne_times_out_slow_requests()
daphne_drops_stalled_sockets()

from channels.auth import AuthMiddlewareStack  # noqa: E402
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from django.conf import settings  # noqa: E402
from django.contrib.staticfiles.handlers import ASGIStaticFilesHandler  # noqa: E402
from django.urls import path, re_path  # noqa: E402

from conversations.consumers import LiveSocket  # noqa: E402
from fronts import mcp  # noqa: E402
from fronts import openai as openai_front  # noqa: E402
from work.consumers import AgentSocket  # noqa: E402
from work.host_socket import HostSocket  # noqa: E402

# The fronts answer in streams (server-sent events) and wait on live events: plain ASGI apps of
# their own, each for every path under its prefix (fronts/http.py).
FRONTS: list[tuple[str, object]] = [
    ("/mcp/", mcp.endpoint),  # every visible agent as an MCP tool (docs/mcp.md)
    ("/v1/", openai_front.app),  # the OpenAI-compatible API (docs/openai-front.md)
]


async def http(scope, receive, send):
    path = scope["path"]
    for prefix, front in FRONTS:
        if path == prefix.rstrip("/") or path.startswith(prefix):
            return await front(scope, receive, send)
    return await django_http(scope, receive, send)


application = ProtocolTypeRouter(
    {
        # /static/ from the app's static folders, DEBUG or not (settings.SERVE_STATIC).
        "http": ASGIStaticFilesHandler(http) if settings.SERVE_STATIC else http,
        "websocket": URLRouter(
            [
                # Bridges are not browsers: they authenticate by bearer token, not cookie + origin.
                path("ws/agent/", AgentSocket.as_asgi()),
                # Host supervisors (agntchat-host): bearer token too.
                path("ws/host/", HostSocket.as_asgi()),
                # The browser socket checks its Origin itself (core/origin.py): scheme, host, port.
                path("ws/live/", AuthMiddlewareStack(LiveSocket.as_asgi())),
                re_path(r"", NoSuchSocket.as_asgi()),
            ]
        ),
    }
)

# What is loaded by now lives as long as the process: out of the collector's sight, a full
# collection walks only what requests create. Unfrozen, each gen2 pass over the ~240,000
# startup objects stalled the event loop for 90–130 ms, the tail of a turn (bench/turns.py).
gc.freeze()
