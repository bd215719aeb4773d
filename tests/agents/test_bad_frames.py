"""Frames that once crashed the agent socket (closing it as failed) now get an `error` frame: text REST
refuses (NUL, unpaired surrogates), JSON nested too deep, numbers out of every sane range,
fields of the wrong type. The socket stays open, keeps what it holds, and nothing is stored.
And when a handler does fail unexpectedly, what the socket held is released at once."""

import json

import pytest
from asgiref.sync import sync_to_async

from agents.models import PersonalityRevision
from agntchat.core import presence
from agntchat.core.validation import MAX_JSON_DEPTH
from artifacts.models import Artifact
from conversations import tasks
from conversations.actions import post_message
from conversations.models import Delivery, Message, Task, TaskEvent, TurnUsage
from tests.conftest import agent_session
from tests.socket_helpers import agent_communicator, next_frame
from work import gateway

pytestmark = pytest.mark.django_db(transaction=True)

NUL, LONE = "nul\x00here", "lone\ud800here"


def nested(depth: int):
    value: object = "bottom"
    for _ in range(depth):
        value = [value]
    return value


def frame(frame_type, **fields):
    return {"type": frame_type, **fields}


# Each case builds its frame from the items the connection holds (see Held).
CASES = {
    "post body with NUL": lambda c: frame("post", conversationId=c.conv, body=NUL),
    "post body with a lone surrogate": lambda c: frame("post", conversationId=c.conv, body=LONE),
    "post ref with NUL": lambda c: frame("post", conversationId=c.conv, body="hi", ref=NUL),
    "post body not text": lambda c: frame("post", conversationId=c.conv, body={"a": 1}),
    "post with a deeply nested extra": lambda c: frame(
        "post", conversationId=c.conv, body="hi", extra=nested(MAX_JSON_DEPTH + 5)
    ),
    "post with a NUL key": lambda c: frame("post", conversationId=c.conv, body="hi", **{NUL: 1}),
    "artifact title with a lone surrogate": lambda c: frame(
        "artifact.publish", conversationId=c.conv, title=LONE, kind="markdown", content="x"
    ),
    "artifact content with NUL": lambda c: frame(
        "artifact.publish", conversationId=c.conv, title="t", kind="markdown", content=NUL
    ),
    "artifact kind unknown": lambda c: frame(
        "artifact.publish", conversationId=c.conv, title="t", kind="exe", content="x"
    ),
    "card with NUL deep inside": lambda c: frame(
        "card.post", conversationId=c.conv, card={"type": "list", "items": [{"title": NUL}]}
    ),
    "thread summary with NUL": lambda c: frame(
        "thread.resolve", conversationId=c.conv, summary=NUL
    ),
    "personality with a lone surrogate": lambda c: frame("personality.set", text=LONE),
    "task event with NUL": lambda c: frame("event", id=c.task, event={"message": NUL}),
    "task event with a lone surrogate key": lambda c: frame("event", id=c.task, event={LONE: "x"}),
    "task event nested too deep": lambda c: frame(
        "event", id=c.task, event={"x": nested(MAX_JSON_DEPTH)}
    ),
    "task event not an object": lambda c: frame("event", id=c.task, event=[1, 2]),
    "task event with a huge number": lambda c: frame("event", id=c.task, event={"n": 10**30}),
    "task result error with NUL": lambda c: frame("result", id=c.task, status="failed", error=NUL),
    "task result text not text": lambda c: frame(
        "result", id=c.task, status="completed", result={"text": 5}
    ),
    "task result status unknown": lambda c: frame("result", id=c.task, status="exploded"),
    "ack usage cost past the column": lambda c: frame(
        "ack", id=c.delivery, usage={"cost_usd": 1e300}
    ),
    "ack usage negative tokens": lambda c: frame("ack", id=c.delivery, usage={"input_tokens": -5}),
    "ack usage tokens past 64 bits": lambda c: frame(
        "ack", id=c.delivery, usage={"output_tokens": 2**70}
    ),
    "ack id not text": lambda c: frame("ack", id={"id": c.delivery}),
    "configure prefetch fractional": lambda c: frame("configure", prefetch=2.5),
    "configure prefetch huge": lambda c: frame("configure", prefetch=10**30),
    "heartbeat with unknown fields": lambda c: frame("heartbeat", extra=1),
}
# Text no JSON encoder writes: Python's parser reads it all the same.
RAW = {
    "configure prefetch infinite": '{"type": "configure", "prefetch": 1e400}',
    "ack usage cost NaN": '{"type": "ack", "id": "%(delivery)s", "usage": {"cost_usd": NaN}}',
    "task event with Infinity": '{"type": "event", "id": "%(task)s", "event": {"n": -Infinity}}',
    "nested beyond the parser": '{"type": "post", "x": ' + "[" * 100_000 + "]" * 100_000 + "}",
}


class Held:
    """A connection holding one message delivery and one task of Nova's."""

    def __init__(self, comm, conv, delivery, task):
        self.comm, self.conv, self.delivery, self.task = comm, conv, delivery, task


@pytest.fixture
async def held(alice, team_a, channel, nova):
    await sync_to_async(tasks.create_task)(alice, team_a, nova, "Summarise", conversation=channel)
    await sync_to_async(post_message)(alice, channel, "Hello @nova")
    comm = agent_communicator(await sync_to_async(agent_session)(nova), "prefetch=1&tasks=1")
    assert (await comm.connect())[0]
    assert (await next_frame(comm))["type"] == "hello"
    work = {f["kind"]: f["id"] for f in [await next_frame(comm), await next_frame(comm)]}
    yield Held(comm, str(channel.id), work["message"], work["task"])
    await comm.disconnect()


async def nothing_changed(nova):
    assert await Message.objects.filter(author_agent=nova).acount() == 0
    assert await Artifact.objects.acount() == 0
    assert await PersonalityRevision.objects.acount() == 0
    assert await TaskEvent.objects.acount() == 0
    assert await TurnUsage.objects.acount() == 0
    assert await Task.objects.filter(status="running").acount() == 1
    assert await Delivery.objects.filter(acked_at__isnull=True).acount() == 1


# Nesting is measured on the text, before the parser: the shared JSON limit's own code.
TOO_DEEP = {
    "post with a deeply nested extra",
    "task event nested too deep",
    "nested beyond the parser",
}


@pytest.mark.parametrize("name", [*CASES, *RAW])
async def test_a_bad_frame_gets_an_error_frame_and_changes_nothing(name, held, nova):
    if name in CASES:
        text = json.dumps(CASES[name](held))
    else:
        text = RAW[name] % {"delivery": held.delivery, "task": held.task}
    await held.comm.send_to(text_data=text)
    error = await next_frame(held.comm)
    code = "too_deep" if name in TOO_DEEP else "bad_frame"
    assert error["type"] == "error" and error["code"] == code, error
    await nothing_changed(nova)
    # Still open, still holding both items: a good frame is answered as usual.
    await held.comm.send_json_to({"type": "configure", "prefetch": 1})
    assert await next_frame(held.comm) == {"type": "configured", "prefetch": 1, "tasks": 1}
    assert await held.comm.receive_nothing(timeout=0.1)


async def test_a_refused_field_is_named_and_the_frame_id_echoed(held):
    await held.comm.send_json_to(
        {"type": "ack", "id": held.delivery, "usage": {"input_tokens": -5}}
    )
    error = await next_frame(held.comm)
    assert error == {
        "type": "error",
        "code": "bad_frame",
        "message": "Some fields are invalid.",
        "id": held.delivery,
        "fields": {"usage": {"inputTokens": "Ensure this value is greater than or equal to 0."}},
    }


async def test_a_handler_that_fails_unexpectedly_releases_what_the_socket_held(
    alice, channel, nova, held, monkeypatch
):
    other = agent_communicator(await sync_to_async(agent_session)(nova), "prefetch=1&tasks=1")
    assert (await other.connect())[0]
    assert (await next_frame(other))["type"] == "hello"

    def broken(*args, **kwargs):
        raise RuntimeError("a bug")

    monkeypatch.setattr(gateway, "extend_work", broken)
    await held.comm.send_json_to({"type": "extend", "id": held.delivery})
    assert await held.comm.receive_output(timeout=3) == {"type": "websocket.close", "code": 4500}
    # Released on the spot, not when (if ever) the disconnect arrives, nor after the lease.
    redelivered = {(await next_frame(other))["id"], (await next_frame(other))["id"]}
    assert redelivered == {held.delivery, held.task}
    await other.disconnect()
    assert not await sync_to_async(presence.is_online)(nova.id)
