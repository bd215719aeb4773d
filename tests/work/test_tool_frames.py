"""Tool calls over the agent socket (docs/protocol.md §4 ``tool.call``): checked against the
registry, run once per call id, answered with one ``tool.result``; refusals change nothing."""

import asyncio
import threading
import time

import pytest
from asgiref.sync import sync_to_async

from agntchat.core.exceptions import AppError
from conversations import actions
from conversations.models import Message, Participant
from tests.conftest import agent_session
from tests.socket_helpers import (
    agent_communicator,
    change_heard,
    frames_until,
    live_socket_for,
    next_frame,
    settled,
)
from tests.waiting import until
from work.models import ToolCall, ToolGrant
from work.tools.calls import MAX_SAME_FAILURES
from work.tools.registry import REGISTRY, Tool, register

pytestmark = pytest.mark.django_db(transaction=True)

post = sync_to_async(actions.post_message)
NOTE = {
    "type": "object",
    "properties": {"text": {"type": "string", "maxLength": 200}},
    "required": ["text"],
    "additionalProperties": False,
}


def note(context, arguments):
    """A tool with an effect one can count: it posts a notice in the turn's conversation."""
    message = actions.post_notice(context.conversation, arguments["text"])
    return {"message_id": str(message.id)}


def failing(context, arguments):
    raise AppError("The thing is broken.", code="broken")


SLOW_STARTED = threading.Event()


def slow_note(context, arguments):
    """Writes, then takes longer than its time limit: the write must not stay."""
    actions.post_notice(context.conversation, arguments["text"])
    SLOW_STARTED.set()
    time.sleep(1.5)
    return "too late"


@pytest.fixture
def test_tools():
    tools = [
        Tool("test_note", "Post a note.", NOTE, "write", note),
        Tool("test_failing", "Always fails.", NOTE, "read", failing),
        Tool("test_slow", "Too slow.", NOTE, "write", slow_note, timeout_seconds=0.5),
    ]
    for t in tools:
        register(t)
    yield tools
    for t in tools:
        REGISTRY.pop(t.name, None)


async def connected(agent):
    token = await sync_to_async(agent_session)(agent)
    comm = agent_communicator(token)
    assert (await comm.connect())[0]
    assert (await next_frame(comm))["type"] == "hello"
    return comm


async def held_message(comm, alice, channel, text="please"):
    await post(alice, channel, text)
    work = await next_frame(comm)
    assert work["type"] == "work"
    return work


async def call(comm, item_id, call_id, name, arguments, timeout=5):
    frame = {
        "type": "tool.call",
        "id": item_id,
        "callId": call_id,
        "name": name,
        "input": arguments,
    }
    await comm.send_json_to(frame)
    seen = await frames_until(
        comm,
        lambda f: f.get("callId") == call_id or f["type"] == "error",
        timeout=timeout,
    )
    return seen[-1]


def notices(channel):
    return list(
        Message.objects.filter(conversation=channel, kind="notice").values_list("body", flat=True)
    )


async def test_it_runs_a_granted_tool_once_per_call_id(alice, channel, nova, test_tools):
    comm = await connected(nova)
    browser = await live_socket_for(alice)
    work = await held_message(comm, alice, channel)
    result = await call(comm, work["id"], "c-1", "test_note", {"text": "hello"})
    assert result["type"] == "tool.result" and result["ok"] is True
    assert await sync_to_async(notices)(channel) == ["hello"]
    # The same call again (a redelivered turn): the stored outcome, not a second run.
    again = await call(comm, work["id"], "c-1", "test_note", {"text": "hello"})
    assert again["output"] == result["output"]
    assert await sync_to_async(notices)(channel) == ["hello"]
    stored = await ToolCall.objects.aget(call_id="c-1")
    assert (stored.status, stored.tool, stored.arguments) == (
        "succeeded",
        "test_note",
        {"text": "hello"},
    )
    assert stored.message_id is not None and stored.conversation_id == channel.id
    # Browsers of the conversation saw it, arguments as given (not camelCased).
    events = await frames_until(browser, lambda f: f["type"] == "tool.updated")
    assert events[-1]["call"]["tool"] == "test_note"
    assert events[-1]["call"]["arguments"] == {"text": "hello"}
    await comm.disconnect()
    await browser.disconnect()


async def test_the_done_tool_marks_the_agent_done_in_the_conversation(alice, channel, nova):
    comm = await connected(nova)
    work = await held_message(comm, alice, channel)
    result = await call(comm, work["id"], "c-done", "done", {})
    assert result["ok"] is True
    participant = await Participant.objects.aget(conversation=channel, agent=nova)
    assert participant.done_at is not None
    await comm.disconnect()


async def test_a_tool_taken_away_is_refused_and_changes_nothing(alice, channel, nova, test_tools):
    await ToolGrant.objects.acreate(agent=nova, tool="test_note", granted=False)
    comm = await connected(nova)
    work = await held_message(comm, alice, channel)
    result = await call(comm, work["id"], "c-2", "test_note", {"text": "hello"})
    assert result["ok"] is False and result["error"]["code"] == "tool_not_granted"
    assert await sync_to_async(notices)(channel) == []
    unknown = await call(comm, work["id"], "c-3", "no_such_tool", {})
    assert unknown["error"]["code"] == "tool_not_granted"
    await comm.disconnect()


async def test_malformed_arguments_are_refused_with_what_is_wrong(alice, channel, nova, test_tools):
    comm = await connected(nova)
    work = await held_message(comm, alice, channel)
    result = await call(comm, work["id"], "c-4", "test_note", {"text": 5, "extra": True})
    assert result["ok"] is False and result["error"]["code"] == "tool_input_invalid"
    message = result["error"]["message"]
    assert "text: 5 is not of type 'string'" in message and "extra" in message
    assert await sync_to_async(notices)(channel) == []
    await comm.disconnect()


async def test_a_handler_past_its_time_is_stopped_and_its_writes_rolled_back(
    alice, channel, nova, test_tools
):
    comm = await connected(nova)
    work = await held_message(comm, alice, channel)
    SLOW_STARTED.clear()
    result = await call(comm, work["id"], "c-5", "test_slow", {"text": "slow"})
    assert result["ok"] is False and result["error"]["code"] == "tool_timeout"
    assert "0.5 seconds" in result["error"]["message"]
    assert SLOW_STARTED.is_set()
    # The handler's thread ends later: its notice is rolled back, its failure recorded.
    failed = await ToolCall.objects.filter(call_id="c-5", status="failed").afirst()
    for _ in range(100):
        if failed is not None:
            break
        await comm.receive_nothing(timeout=0.05)
        failed = await ToolCall.objects.filter(call_id="c-5", status="failed").afirst()
    assert failed is not None and failed.error_code == "tool_timeout"
    assert await sync_to_async(notices)(channel) == []
    await comm.disconnect()


async def test_other_frames_are_answered_while_a_tool_runs(alice, channel, nova, test_tools):
    comm = await connected(nova)
    work = await held_message(comm, alice, channel)
    await comm.send_json_to(
        {"type": "tool.call", "id": work["id"], "callId": "c-6", "name": "test_slow",
         "input": {"text": "slow"}}
    )  # fmt: skip
    await comm.send_json_to({"type": "extend", "id": work["id"]})
    first = await next_frame(comm)
    assert first["type"] == "extended"  # not queued behind the tool
    result = await next_frame(comm, timeout=5)
    assert result["type"] == "tool.result" and result["callId"] == "c-6"
    # Its handler goes on in its thread (past its time: its writes are rolled back then), in a
    # transaction holding the conversation's row: ended before the test's database is emptied.
    await until(
        lambda: ToolCall.objects.filter(call_id="c-6", status="failed").aexists(),
        what="the slow handler's end",
    )
    await comm.disconnect()


def waiting_on_the_network(context, arguments):
    time.sleep(4)  # a page that answers slowly
    return "fetched"


async def test_slow_tool_calls_do_not_hold_up_other_agents_work(
    alice, team_a, channel, nova, test_tools
):
    """Eight slow calls at once (a model fetching pages) take the tools' threads, not the pool
    that claims and acks every socket's work: another agent's message still reaches it."""
    from agents import actions as agent_actions

    register(Tool("test_wait", "Waits on the network.", NOTE, "read", waiting_on_the_network))
    try:
        orbit = await sync_to_async(agent_actions.create_agent)(
            alice, name="Orbit", handle="orbit", backend="scripted"
        )
        direct = await sync_to_async(actions.create_conversation)(
            alice, team_a, kind="direct", agent_ids=[orbit.id]
        )
        comm = await connected(nova)
        other = await connected(orbit)
        work = await held_message(comm, alice, channel)
        for n in range(8):
            await comm.send_json_to(
                {"type": "tool.call", "id": work["id"], "callId": f"w-{n}", "name": "test_wait",
                 "input": {"text": "page"}}
            )  # fmt: skip
        await asyncio.sleep(0.5)  # the calls have their threads
        started = time.monotonic()
        await held_message(other, alice, direct)  # claimed through the shared pool
        assert time.monotonic() - started < 2.5
        answered = set()
        while len(answered) < 8:  # each call is answered once its thread is free
            frame = await next_frame(comm, timeout=20)
            if frame["type"] == "tool.result":
                assert frame["ok"] and frame["output"] == "fetched", frame
                answered.add(frame["callId"])
        await comm.disconnect()
        await other.disconnect()
    finally:
        REGISTRY.pop("test_wait", None)


async def test_the_same_failing_call_is_refused_after_three_failures(
    alice, channel, nova, test_tools
):
    comm = await connected(nova)
    work = await held_message(comm, alice, channel)
    for n in range(MAX_SAME_FAILURES):
        result = await call(comm, work["id"], f"f-{n}", "test_failing", {"text": "x"})
        assert result["error"] == {"code": "broken", "message": "The thing is broken."}
    refused = await call(comm, work["id"], "f-9", "test_failing", {"text": "x"})
    assert refused["error"]["code"] == "tool_repeated_failure"
    assert "3 times" in refused["error"]["message"]
    # Other arguments are another call: it runs (and fails on its own merits).
    other = await call(comm, work["id"], "f-10", "test_failing", {"text": "y"})
    assert other["error"]["code"] == "broken"
    await comm.disconnect()


async def test_a_call_for_an_item_not_held_is_refused(alice, channel, nova, test_tools):
    comm = await connected(nova)
    work = await held_message(comm, alice, channel)
    await comm.send_json_to({"type": "ack", "id": work["id"]})
    result = await call(comm, work["id"], "c-7", "test_note", {"text": "late"})
    assert result["type"] == "error" and result["code"] == "not_held"
    assert await sync_to_async(notices)(channel) == []
    assert not await ToolCall.objects.aexists()
    await comm.disconnect()


async def test_a_bad_tool_call_frame_is_refused(alice, channel, nova):
    comm = await connected(nova)
    work = await held_message(comm, alice, channel)
    await comm.send_json_to(
        {"type": "tool.call", "id": work["id"], "callId": "x" * 65, "name": "done", "input": []}
    )
    error = await next_frame(comm)
    assert error["type"] == "error" and error["code"] == "bad_frame"
    assert set(error["fields"]) == {"callId", "input"}
    assert not await ToolCall.objects.aexists()
    await comm.disconnect()


async def test_an_owners_change_reaches_the_next_work_item(alice, channel, nova, api):
    comm = await connected(nova)
    first = await held_message(comm, alice, channel, "one")
    assert "done" in [t["name"] for t in first["payload"]["directives"]["tools"]]
    assert "- done:" in first["payload"]["directives"]["stable"]
    await comm.send_json_to({"type": "ack", "id": first["id"]})
    await settled(comm, ack=first["id"])
    client = await sync_to_async(api)(alice)
    changed = await sync_to_async(client.patch)(
        f"/api/v1/agents/{nova.id}/tools/done/", {"granted": False}, format="json"
    )
    assert changed.status_code == 200
    await change_heard(comm)
    second = await held_message(comm, alice, channel, "two")
    assert "done" not in [t["name"] for t in second["payload"]["directives"]["tools"]]
    assert "- done:" not in second["payload"]["directives"]["stable"]
    await comm.disconnect()


async def test_a_skill_added_reaches_the_next_work_item_and_loads(alice, channel, nova, api):
    comm = await connected(nova)
    first = await held_message(comm, alice, channel, "one")
    assert "skill_load" not in [t["name"] for t in first["payload"]["directives"]["tools"]]
    await comm.send_json_to({"type": "ack", "id": first["id"]})
    await settled(comm, ack=first["id"])
    client = await sync_to_async(api)(alice)
    skill_md = "---\nname: triage\ndescription: Sort an inbox. More.\n---\nStep one.\n"
    made = await sync_to_async(client.post)(
        "/api/v1/skills/", {"skillMd": skill_md, "agent": str(nova.id)}, format="json"
    )
    assert made.status_code == 201
    await change_heard(comm)
    second = await held_message(comm, alice, channel, "two")
    directives = second["payload"]["directives"]
    assert "skill_load" in [t["name"] for t in directives["tools"]]
    assert "- triage: Sort an inbox.\n" in directives["stable"]
    result = await call(comm, second["id"], "load-1", "skill_load", {"name": "triage"})
    assert result["ok"] and "Step one." in result["output"]
    await comm.disconnect()
