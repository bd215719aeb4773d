"""The host socket follows a bulk move of its agents by reading only the agents that changed, a
batch at a time: before, each moved agent re-read every agent served (a move of N agents was N
reads of up to N rows, and N lookups of their work)."""

import asyncio

import pytest
from asgiref.sync import sync_to_async
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext

from agents import hosting
from agents.actions import create_agent
from agents.models import Agent
from agntchat.core.events import publish
from conversations.actions import create_conversation, post_message
from tests.socket_helpers import next_frame
from tests.work.test_host_socket_ends import supervisor

pytestmark = pytest.mark.django_db(transaction=True)

KEY = "-----BEGIN OPENSSH PRIVATE KEY-----\nnot used here\n-----END OPENSSH PRIVATE KEY-----\n"
MANY = 30


def crowded_host(alice, workspace):
    host = hosting.create_host(
        workspace=workspace, name="h1", address="127.0.0.1", ssh_key=KEY, capacity=MANY + 5
    )
    for n in range(MANY):
        hosting.place_agent(create_agent(alice, name=f"A{n:02}", backend="scripted"), host)
    keep = hosting.place_agent(create_agent(alice, name="Zed", backend="scripted"), host)
    return host, keep, hosting.issue_host_token(host)


def move_all_but(host, keep):
    with transaction.atomic():
        for agent in Agent.objects.filter(host=host).exclude(pk=keep.pk):
            hosting.make_agent_local(agent)


async def test_a_bulk_move_off_a_host_rereads_only_the_moved_agents_in_few_queries(alice, team_a):
    host, keep, secret = await sync_to_async(crowded_host)(alice, team_a)
    comm = await supervisor(secret)  # its hello lists all MANY + 1
    # The socket's reads run in sync_to_async's one thread: the queries counted there.
    counted = CaptureQueriesContext(connection)
    await sync_to_async(counted.__enter__)()
    try:
        await asyncio.to_thread(move_all_but, host, keep)  # another thread: not counted
        stops, served = set(), None
        while len(stops) < MANY or served != [{"id": str(keep.id), "name": "Zed"}]:
            frame = await next_frame(comm, timeout=15)
            if frame["type"] == "stop":
                stops.add(frame["agent"])
            elif frame["type"] == "agents":
                served = frame["agents"]
    finally:
        await sync_to_async(counted.__exit__)(None, None, None)
    queries = await sync_to_async(lambda: [q["sql"] for q in counted.captured_queries])()
    assert len(stops) == MANY
    assert len(queries) <= 6, queries
    await comm.disconnect()


def place_with_work(alice, team_a, host):
    vega = create_agent(alice, name="Vega", backend="scripted")
    room = create_conversation(alice, team_a, kind="channel", title="ops", agent_ids=[vega.id])
    post_message(alice, room, "@vega status?")  # waiting while she is set up on the host
    hosting.place_agent(vega, host)
    publish(
        hosting.host_topic(host.pk),
        {"type": "host.bridge", "action": "reload", "agent": str(vega.id)},
    )
    return vega


async def test_an_agent_set_up_on_the_host_is_announced_and_woken_for_its_waiting_work(
    alice, team_a
):
    def host_with_one():
        host = hosting.create_host(workspace=team_a, name="h1", address="127.0.0.1", ssh_key=KEY)
        hosting.place_agent(create_agent(alice, name="Zed", backend="scripted"), host)
        return host, hosting.issue_host_token(host)

    host, secret = await sync_to_async(host_with_one)()
    comm = await supervisor(secret)
    vega = await sync_to_async(place_with_work)(alice, team_a, host)
    served = await next_frame(comm, timeout=15)
    assert served["type"] == "agents"
    assert [a["name"] for a in served["agents"]] == ["Vega", "Zed"]
    assert await next_frame(comm, timeout=15) == {"type": "wake", "agent": str(vega.id)}
    await comm.disconnect()
