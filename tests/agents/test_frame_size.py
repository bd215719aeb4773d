"""The 1 MiB frame limit, counted in bytes of UTF-8 on both sides: a bigger frame gets the
documented `error` frame instead of a dropped connection, and the bridge sends non-ASCII
unescaped, so a legal artifact fits. Real daphne, started as the Procfile starts it."""

import asyncio
import json

import pytest
import websockets
from agntchat_bridge.runtime import Bridge, Config, FrameTooLarge
from asgiref.sync import sync_to_async

from agents import actions as agent_actions
from agntchat.core import presence
from agntchat.core.sockets import MAX_FRAME_BYTES
from artifacts.actions import MAX_CONTENT_BYTES
from artifacts.models import Artifact
from tests.conftest import agent_session
from tests.waiting import until

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


def post_of_size(channel, size: int, char: str = "a") -> str:
    """A post frame's text of exactly SIZE bytes of UTF-8, its body made of CHAR."""
    empty = json.dumps({"type": "post", "conversationId": str(channel.id), "body": ""})
    count, rest = divmod(size - len(empty.encode()), len(char.encode()))
    text = json.dumps(
        {"type": "post", "conversationId": str(channel.id), "body": char * count + "a" * rest},
        ensure_ascii=False,
    )
    assert len(text.encode()) == size
    return text


async def test_a_frame_over_the_limit_gets_an_error_frame_and_the_socket_stays_open(
    channel, nova, server
):
    token = await sync_to_async(agent_session)(nova)
    async with websockets.connect(
        f"{server.ws_url}/ws/agent/", additional_headers={"Authorization": f"Bearer {token}"}
    ) as ws:
        assert json.loads(await ws.recv())["type"] == "hello"
        # Bytes, not characters: fewer than 400,000 characters, over a million bytes.
        over = post_of_size(channel, MAX_FRAME_BYTES + 1, char="日")
        assert len(over) < 400_000
        await ws.send(over)
        error = json.loads(await ws.recv())
        assert error == {
            "type": "error",
            "code": "too_large",
            "message": f"JSON can be at most {MAX_FRAME_BYTES} bytes; this is {MAX_FRAME_BYTES + 1}.",
        }
        # A frame of exactly the limit is read (its body is then too long for a message).
        await ws.send(post_of_size(channel, MAX_FRAME_BYTES, char="日"))
        error = json.loads(await ws.recv())
        assert (error["code"], list(error["fields"])) == ("bad_frame", ["body"])
        await ws.send(json.dumps({"type": "configure", "prefetch": 2}))
        assert json.loads(await ws.recv()) == {"type": "configured", "prefetch": 2, "tasks": 1}


async def test_the_bridge_sends_a_legal_non_ascii_artifact_within_the_limit(
    channel, nova, server, tmp_path
):
    _, key = await sync_to_async(agent_actions.create_agent_key)(nova)
    bridge = Bridge(Config(url=server.url, key=key, workdir=tmp_path))
    running = asyncio.create_task(bridge.run_forever())
    try:
        online = sync_to_async(presence.is_online)
        # The server marks the agent online before the bridge's handshake returns.
        await until(lambda: online(nova.id), timeout=15, what="the bridge online")
        socket = await until(lambda: bridge.ws, timeout=15, what="the bridge's socket")
        # The largest content an artifact may have, all of it two-byte characters: escaped as
        # \uXXXX (six bytes each) it would be half as large again as the frame limit.
        content = "é" * (MAX_CONTENT_BYTES // 2)
        frame = {
            "type": "artifact.publish",
            "conversationId": str(channel.id),
            "title": "Notes",
            "kind": "markdown",
            "content": content,
        }
        assert len(json.dumps(frame).encode()) > 1.4 * MAX_FRAME_BYTES
        await bridge.send(frame)
        await until(Artifact.objects.aexists, timeout=10, what="the artifact stored")
        stored = await Artifact.objects.aget()
        assert await sync_to_async(lambda: stored.versions.get().content)() == content
        # What the server would refuse is not sent at all, and the socket carries on.
        with pytest.raises(FrameTooLarge):
            await bridge.send({**frame, "content": content * 3})
        assert bridge.ws is socket
    finally:
        await bridge.stop()
        await asyncio.wait_for(running, 10)
