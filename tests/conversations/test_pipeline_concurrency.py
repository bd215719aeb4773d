"""The pipeline under real concurrency: real daphne processes, real WebSockets, real Redis,
several connections, hundreds of messages, killed clients and a killed server."""

import asyncio
import json
import os
import signal
import subprocess
import sys
import textwrap
from datetime import timedelta

import httpx
import pytest
import websockets
from asgiref.sync import sync_to_async
from django.conf import settings
from django.db.models import F

from conversations.models import Delivery, Message
from tests.conftest import agent_session
from tests.socket_helpers import Daphne
from tests.waiting import until
from workspaces.actions import issue_api_token

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

# Hundreds of posts by one person within seconds, far past what the posting limit lets a person
# send: these tests are about the pipeline, the limit has its own (tests/test_rate_limits.py).
NO_POST_LIMIT = {"PERSON_POSTS_PER_MINUTE": "0"}


@pytest.fixture(scope="module")
def server(django_db_setup):
    daphne = Daphne(extra_env=NO_POST_LIMIT)
    yield daphne
    daphne.stop()


async def open_agent_socket(server, token, prefetch=1):
    ws = await websockets.connect(
        f"{server.ws_url}/ws/agent/?prefetch={prefetch}",
        additional_headers={"Authorization": f"Bearer {token}"},
    )
    hello = json.loads(await ws.recv())
    assert hello["type"] == "hello"
    return ws


async def post_many(server, token, conversation_id, count, concurrency=8):
    headers = {"Authorization": f"Bearer {token}"}
    queue = asyncio.Queue()
    for i in range(count):
        queue.put_nowait(i)

    async with httpx.AsyncClient(base_url=server.url, headers=headers, timeout=30) as client:

        async def worker():
            while not queue.empty():
                i = queue.get_nowait()
                response = await client.post(
                    f"/api/v1/conversations/{conversation_id}/messages/", json={"body": f"m{i}"}
                )
                assert response.status_code == 201, response.text

        await asyncio.gather(*(worker() for _ in range(concurrency)))


async def test_every_delivery_reaches_exactly_one_of_four_connections(alice, channel, nova, server):
    total = 500
    agent_token = await sync_to_async(agent_session)(nova)
    _, person_token = await sync_to_async(issue_api_token)(alice)
    sockets = [await open_agent_socket(server, agent_token, prefetch=5) for _ in range(4)]
    received: list[list[str]] = [[] for _ in sockets]
    done = asyncio.Event()

    async def consume(index, ws):
        async for raw in ws:
            frame = json.loads(raw)
            if frame["type"] == "work":
                received[index].append(frame["id"])
                await ws.send(json.dumps({"type": "ack", "id": frame["id"]}))
                if sum(len(r) for r in received) >= total:
                    done.set()
            elif frame["type"] == "error":
                raise AssertionError(frame)

    consumers = [asyncio.create_task(consume(i, ws)) for i, ws in enumerate(sockets)]
    await post_many(server, person_token, channel.id, total)
    await asyncio.wait_for(done.wait(), timeout=90)

    # Acks are processed after the frame is read: once all are written, nothing is left to send.
    async def all_acked():
        return not await Delivery.objects.filter(acked_at__isnull=True).aexists()

    await until(all_acked, what="every ack written")
    for ws in sockets:
        await ws.close()
    for task in consumers:
        task.cancel()

    everything = [item for per_connection in received for item in per_connection]
    assert len(everything) == len(set(everything)) == total  # none twice, none lost
    expected = {
        str(i)
        for i in await sync_to_async(lambda: list(Delivery.objects.values_list("id", flat=True)))()
    }
    assert set(everything) == expected
    assert await Message.objects.acount() == total
    # The work was really shared, not all taken by one connection.
    assert sum(1 for r in received if r) >= 2, [len(r) for r in received]
    # Each claimed once: no lease ran out, nothing was offered twice.
    attempts = Delivery.objects.values_list("attempts", flat=True).distinct()
    assert [a async for a in attempts] == [1]


CLIENT = textwrap.dedent(
    """
    import asyncio, json, sys, websockets
    async def main(url, token):
        async with websockets.connect(url, additional_headers={"Authorization": "Bearer " + token}) as ws:
            async for raw in ws:
                frame = json.loads(raw)
                if frame["type"] == "hello":
                    print("connected", flush=True)
                elif frame["type"] == "work":
                    print(frame["id"], flush=True)  # took it, never acks: killed mid-turn
    asyncio.run(main(sys.argv[1], sys.argv[2]))
    """
)


async def test_a_killed_bridge_process_loses_nothing(alice, channel, nova, server):
    token = await sync_to_async(agent_session)(nova)
    url = f"{server.ws_url}/ws/agent/?prefetch=3"
    bridge = subprocess.Popen(
        [sys.executable, "-c", CLIENT, url, token], stdout=subprocess.PIPE, text=True
    )
    connected = await asyncio.wait_for(asyncio.to_thread(bridge.stdout.readline), 10)
    assert connected == "connected\n"
    for i in range(3):
        await sync_to_async(_post)(alice, channel, f"m{i}")
    taken = [
        await asyncio.wait_for(asyncio.to_thread(bridge.stdout.readline), 10) for _ in range(3)
    ]
    os.kill(bridge.pid, signal.SIGKILL)
    bridge.wait()
    survivor = await open_agent_socket(server, token, prefetch=3)
    got = [json.loads(await asyncio.wait_for(survivor.recv(), 5))["id"] for _ in range(3)]
    assert sorted(got) == sorted(t.strip() for t in taken)
    await survivor.close()


async def test_work_held_by_a_killed_server_is_redelivered_after_the_lease(alice, channel, nova):
    server = Daphne()  # its own: this one is killed
    token = await sync_to_async(agent_session)(nova)
    ws = await open_agent_socket(server, token)
    await sync_to_async(_post)(alice, channel, "in flight when the node died")
    work = json.loads(await asyncio.wait_for(ws.recv(), 5))
    server.proc.send_signal(signal.SIGKILL)  # the node dies without releasing anything
    server.proc.wait()
    with pytest.raises(websockets.ConnectionClosed):
        await asyncio.wait_for(ws.recv(), 5)
    second_node = Daphne()
    try:
        fresh = await open_agent_socket(second_node, token)
        assert await no_frame(fresh)  # still leased to the dead node
        # A lease's time passes. The servers keep their own clocks, so the lease is moved back
        # by its length instead, as if the time had passed.
        await Delivery.objects.filter(pk=work["id"]).aupdate(
            lease_expires_at=F("lease_expires_at") - timedelta(seconds=settings.CLAIM_LEASE_SECONDS)
        )
        await fresh.send(json.dumps({"type": "heartbeat"}))
        again = json.loads(await asyncio.wait_for(fresh.recv(), 5))
        assert again["id"] == work["id"] and again["payload"]["attempt"] == 2
        await fresh.send(json.dumps({"type": "ack", "id": again["id"]}))
        await fresh.close()
    finally:
        second_node.stop()


async def no_frame(ws, quiet: float = 0.3) -> bool:
    """Nothing arrives on WS for QUIET seconds."""
    try:
        await asyncio.wait_for(ws.recv(), quiet)
    except TimeoutError:
        return True
    return False


def _post(user, conversation, body):
    from conversations.actions import post_message

    return post_message(user, conversation, body)
