"""A change to an agent heard by its socket reaches every item claimed afterwards, including one
claimed by the refill that rides with an ack's write (a trip of its own, beside the frames)."""

import threading

import pytest
from asgiref.sync import sync_to_async

from conversations import actions
from tests.conftest import agent_session
from tests.socket_helpers import (
    agent_communicator,
    change_heard,
    events_sent,
    frames_until,
    next_frame,
    settled,
)
from work import actions as work_actions
from work import gateway
from work.tools.registry import REGISTRY

pytestmark = pytest.mark.django_db(transaction=True)


def tool_names(work: dict) -> list[str]:
    return [t["name"] for t in work["payload"]["directives"]["tools"]]


async def test_a_refill_after_an_ack_claims_with_a_change_heard_meanwhile(
    alice, channel, nova, monkeypatch
):
    # Posted before the socket opens, its wake-up sent: the connect's catch-up claims it, and
    # no wake-up comes later to wait on the claim held below (it would hold the socket up).
    await sync_to_async(actions.post_message)(alice, channel, "one")
    await sync_to_async(events_sent)()
    token = await sync_to_async(agent_session)(nova)
    comm = agent_communicator(token)
    assert (await comm.connect())[0]
    assert (await next_frame(comm))["type"] == "hello"
    first = await next_frame(comm)
    assert "done" in tool_names(first)

    # The ack's trip writes the ack, then claims a refill (the lane was full). Here it is held
    # between the two until the test says so: as a loaded machine may hold it, for as long.
    written, go_on = threading.Event(), threading.Event()
    ack_messages = gateway.ack_messages

    def slow_ack_messages(*args, **kwargs):
        result = ack_messages(*args, **kwargs)
        written.set()
        go_on.wait(timeout=10)
        return result

    monkeypatch.setattr(gateway, "ack_messages", slow_ack_messages)
    await comm.send_json_to({"type": "ack", "id": first["id"]})
    await settled(comm, ack=first["id"])
    assert written.is_set()

    # The owner takes "done" away; the socket hears it before the next message is posted.
    await sync_to_async(work_actions.set_tool_grant)(alice, nova, REGISTRY["done"], False)
    await change_heard(comm)
    await sync_to_async(actions.post_message)(alice, channel, "two")
    go_on.set()  # the refill claims "two" now, after the change was heard

    second = (await frames_until(comm, lambda f: f["type"] == "work"))[-1]
    assert second["payload"]["message"]["body"] == "two"
    assert "done" not in tool_names(second)
    await comm.disconnect()
