"""Many sockets opening or closing at once on one daphne (a balancer restart, a network blip):
every channel-layer subscription they made is gone from Redis afterwards, the agents are
offline, and the server logs no error. Once, 2,000 sockets closing together ran the channel
layer's Redis connection pool dry and left 613 group memberships behind ("Too many
connections")."""

import asyncio
import json
import os

import pytest
import redis
import websockets
from asgiref.sync import sync_to_async
from django.conf import settings
from django.db import transaction
from django.test import Client, override_settings

from agntchat.core import presence
from tests.conftest import agent_session, make_person
from tests.socket_helpers import Daphne
from tests.waiting import until

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

# Sockets of each kind: as many as open, close and get checked in well under a minute here.
N = int(os.environ.get("MASS_SOCKETS", 300))
# The server's own Redis prefix: every group key under it belongs to this test's daphne. As
# settings do, the server adds a pytest-xdist worker's name to the REDIS_PREFIX it is given.
PREFIX_GIVEN = f"{settings.REDIS_PREFIX}-mass-{os.getpid()}"
PREFIX = PREFIX_GIVEN + os.environ.get("PYTEST_XDIST_WORKER", "")


@transaction.atomic  # one commit: the cast is built in seconds
@override_settings(AGENTS_PER_PERSON=0)  # one person's N agents, past the cap on a person's
def build_cast(n: int):
    """N agents with a live session each, and N logged-in browser sessions of one person."""
    alice = make_person("alice")
    tokens, agent_ids = [], []
    for i in range(n):
        agent = _agent(alice, i)
        agent_ids.append(agent.id)
        tokens.append(agent_session(agent))
    cookies = []
    for _ in range(n):
        client = Client()
        client.force_login(alice)
        cookies.append(f"sessionid={client.cookies['sessionid'].value}")
    return tokens, agent_ids, cookies


def _agent(owner, i):
    from agents import actions as agent_actions

    return agent_actions.create_agent(owner, name=f"Agent {i}", backend="scripted")


def subscriptions() -> list[str]:
    """The channel-layer channels under the server's prefix that someone subscribes to: each
    socket's own channel, and each group the server's sockets are in (once per process)."""
    client = redis.Redis.from_url(settings.REDIS_URL)
    return [c.decode() for c in client.pubsub_channels(f"{PREFIX}:asgi:*")]


def clear_prefix() -> None:
    client = redis.Redis.from_url(settings.REDIS_URL)
    keys = list(client.scan_iter(match=f"{PREFIX}:*", count=1000))
    if keys:
        client.delete(*keys)


async def open_agent(server, token):
    ws = await websockets.connect(
        f"{server.ws_url}/ws/agent/",
        additional_headers={"Authorization": f"Bearer {token}"},
        open_timeout=60,
    )
    assert json.loads(await asyncio.wait_for(ws.recv(), 60))["type"] == "hello"
    return ws


async def open_browser(server, cookie):
    ws = await websockets.connect(
        f"{server.ws_url}/ws/live/",
        additional_headers={"Cookie": cookie},
        origin=f"http://127.0.0.1:{server.port}",
        open_timeout=60,
    )
    assert json.loads(await asyncio.wait_for(ws.recv(), 60))["type"] == "hello"
    return ws


def errors_in(log: str) -> list[str]:
    return [
        line
        for line in log.splitlines()
        if '"level": "ERROR"' in line or "Traceback" in line or "Too many connections" in line
    ]


@pytest.fixture
def mass_server(django_db_setup):
    clear_prefix()
    # Every browser socket is one person's here (the cap on a person's sockets, far past).
    daphne = Daphne(extra_env={"REDIS_PREFIX": PREFIX_GIVEN, "BROWSER_MAX_CONNECTIONS": "100000"})
    yield daphne
    daphne.stop()
    clear_prefix()


async def test_a_burst_of_connects_then_a_mass_disconnect_leaves_nothing_stale(mass_server):
    tokens, agent_ids, cookies = await sync_to_async(build_cast)(N)

    # All at once, as after a balancer restart: every socket connects in the same moment.
    sockets = await asyncio.gather(
        *(open_agent(mass_server, t) for t in tokens),
        *(open_browser(mass_server, c) for c in cookies),
    )
    with override_settings(REDIS_PREFIX=PREFIX):
        online = await sync_to_async(presence.online)(agent_ids)
    assert all(online.values()), f"{sum(not v for v in online.values())} agents not online"
    channels = subscriptions()
    # Each socket's own channel, and each agent's topic and session (one per agent here).
    assert len([c for c in channels if "__group__" not in c]) == 2 * N
    assert len([c for c in channels if "__group__" in c]) >= 2 * N
    assert errors_in(mass_server.proc.output()) == []

    # All at once again: half say goodbye (a balancer restart), half just vanish (a blip).
    for ws in sockets[1::2]:
        ws.transport.abort()
    await asyncio.gather(*(ws.close() for ws in sockets[::2]))

    await until(lambda: not subscriptions(), timeout=30, what="every subscription gone")

    def all_offline():
        with override_settings(REDIS_PREFIX=PREFIX):
            return not any(presence.online(agent_ids).values())

    await until(sync_to_async(all_offline), timeout=30, what="every agent offline")
    assert errors_in(mass_server.proc.output()) == []
