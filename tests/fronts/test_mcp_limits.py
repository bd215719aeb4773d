"""What one person can make the MCP endpoint keep and do, through the ASGI application itself:
a session keeps a short line of the client's info, a person has a bounded number of sessions,
a call counts as a post under the person's limit, an id is bounded and forgotten once its call
ends, and a call's task is given up by the worker even when nobody waits on it any more."""

import ast
import json
from datetime import timedelta
from importlib import import_module

import pytest
from asgiref.sync import sync_to_async
from channels.testing import HttpCommunicator
from django.conf import settings as django_settings
from django_q.models import Schedule

from agntchat.asgi import application
from agntchat.core.presence import client as redis
from conversations import tasks
from conversations.models import Task
from fronts import live, mcp
from tests.fronts.test_mcp_refusals import INIT, post
from tests.waiting import until
from workspaces.actions import issue_api_token

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("no_mcp_sessions")]


def call_keys(session: str = "*") -> list:
    return redis().keys(f"{django_settings.REDIS_PREFIX}:mcp:call:{session}:*")


def in_session(session: str) -> list:
    return [("mcp-session-id", session), ("mcp-protocol-version", "2025-11-25")]


def calling(request_id=7, instructions="wait for me") -> dict:
    return {
        "jsonrpc": "2.0",
        "id": request_id,
        "method": "tools/call",
        "params": {"name": "nova", "arguments": {"instructions": instructions}},
    }


async def open_session(token: str) -> str:
    answer = await post(INIT, token)
    assert answer["status"] == 200
    return answer["headers"]["mcp-session-id"]


async def listing_status(token: str, session: str) -> int:
    listing = {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}
    return (await post(listing, token, in_session(session)))["status"]


async def call_streaming(token: str, session: str) -> HttpCommunicator:
    """A tools/call sent in SESSION, its answer taken as a stream, not waited for here."""
    headers = [
        (b"host", b"localhost"),
        (b"content-type", b"application/json"),
        (b"accept", b"application/json, text/event-stream"),
        (b"authorization", f"Bearer {token}".encode()),
    ] + [(k.encode(), v.encode()) for k, v in in_session(session)]
    client = HttpCommunicator(application, "POST", "/mcp", headers=headers)
    await client.send_input({"type": "http.request", "body": json.dumps(calling()).encode()})
    return client


async def test_a_session_keeps_only_a_short_line_of_the_client_s_info(token):
    """The client chooses the size of its clientInfo (the body limit is megabytes), and a
    session lives a day in the Redis everyone shares."""
    info = {"name": "A" * 100_000, "version": "1", "pad": "B" * 100_000}
    answer = await post({**INIT, "params": {**INIT["params"], "clientInfo": info}}, token)
    assert answer["status"] == 200
    key = f"{django_settings.REDIS_PREFIX}:mcp:session:{answer['headers']['mcp-session-id']}"
    assert redis().hget(key, "client") == b"A" * mcp.CLIENT_CHARS
    assert redis().memory_usage(key) < 1024


async def test_past_the_cap_the_session_used_least_lately_is_ended(alice, bob, token, settings):
    settings.MCP_SESSIONS_PER_PERSON = 2
    first = await open_session(token)
    second = await open_session(token)
    assert await listing_status(token, first) == 200  # used since: second is the idlest now
    _, bobs = await sync_to_async(issue_api_token)(bob)
    bob_session = await open_session(bobs)  # counted as his, not hers
    third = await open_session(token)
    assert await listing_status(token, second) == 404
    assert await listing_status(token, first) == 200
    assert await listing_status(token, third) == 200
    assert await listing_status(bobs, bob_session) == 200
    assert redis().zcard(mcp._sessions_key(alice.id)) == 2


async def test_a_call_counts_under_the_person_s_task_rate(alice, team_a, nova, token, settings):
    """The same limit every way of giving tasks shares: her one task of the minute given over
    REST, a call is refused with 429 and when to come back, and makes no task."""
    settings.TASKS_PER_MINUTE = settings.TASKS_BURST = 1
    settings.FRONT_START_SECONDS = 0  # were it let through, it would be answered at once
    await sync_to_async(tasks.create_task)(alice, team_a, nova, "Sort the receipts")
    session = await open_session(token)
    answer = await post(calling(), token, in_session(session) + [("accept", "application/json")])
    assert answer["status"] == 429
    error = answer["json"]["error"]
    assert error["code"] == mcp.RATE_LIMITED and error["message"].startswith("Too many tasks")
    assert error["data"]["code"] == "rate_limited"
    assert error["data"]["retryAfter"] == int(answer["headers"]["retry-after"]) >= 1
    assert await sync_to_async(Task.objects.count)() == 1


async def test_a_person_waits_on_a_bounded_number_of_calls_at_once(alice, token, monkeypatch):
    """Each waiting call holds a live subscription and reads its task every few seconds, up to
    the agent's turn limit (a day at most); the task rate let hundreds wait at once. Past
    WAITS_PER_PERSON (shared with the OpenAI front), a 429 and no task; a call that ends frees
    its place."""
    monkeypatch.setattr(live, "WAITS_PER_PERSON", 1)
    session = await open_session(token)
    waiting = await call_streaming(token, session)
    await until(sync_to_async(lambda: Task.objects.exists()), what="the first call's task")

    refused = await post(calling(8), token, in_session(session) + [("accept", "application/json")])
    assert refused["status"] == 429
    assert refused["json"]["error"]["message"].startswith("Too many answers waited on at once")
    assert await sync_to_async(Task.objects.count)() == 1

    await waiting.send_input({"type": "http.disconnect"})
    await waiting.wait(timeout=10)
    await until(lambda: not redis().zcard(live._waits_key(alice.id)), what="its place")


async def test_an_overlong_id_is_refused_and_a_call_s_id_is_forgotten_once_it_ends(token, settings):
    settings.FRONT_START_SECONDS = 0  # no bridge: the call is answered at once
    session = await open_session(token)
    headers = in_session(session) + [("accept", "application/json")]
    answer = await post(calling("x" * (mcp.MAX_ID_CHARS + 1)), token, headers)
    assert answer["status"] == 400
    assert answer["json"]["id"] is None and answer["json"]["error"]["code"] == -32600
    assert await sync_to_async(Task.objects.count)() == 0
    # An id in bounds is kept while its call runs (a cancel finds its task by it), not after.
    answer = await post(calling("y" * mcp.MAX_ID_CHARS), token, headers)
    assert answer["status"] == 200 and answer["json"]["result"]["isError"] is True
    # This session's: another test's call may still be ending.
    await until(lambda: call_keys(session) == [], what="the call's id to be forgotten")


async def test_a_call_whose_client_left_is_given_up_all_the_same(token):
    """Handshake era: a dropped connection is not a cancellation, so the task stays queued
    while nobody waits on it any more; FRONT_START_SECONDS after the call, the worker cancels
    it if no bridge has taken it, saying why. Nothing runs later behind the caller's back."""
    session = await open_session(token)
    client = await call_streaming(token, session)
    task = await until(sync_to_async(lambda: Task.objects.first()), what="the task")
    await client.send_input({"type": "http.disconnect"})
    await client.wait(timeout=10)
    task = await sync_to_async(Task.objects.get)()
    assert task.status == "queued"
    assert call_keys(session) == []

    give_up = await sync_to_async(Schedule.objects.get)(func="fronts.jobs.give_up_unstarted")
    assert give_up.next_run == task.created_at + timedelta(
        seconds=django_settings.FRONT_START_SECONDS
    )
    # What the worker does when it comes (django-q2's scheduler, then a worker process).
    module, name = give_up.func.rsplit(".", 1)
    job = getattr(import_module(module), name)
    assert await sync_to_async(job)(*ast.literal_eval(give_up.args)) is True
    task = await sync_to_async(Task.objects.get)()
    assert task.status == "cancelled" and "bridge is not connected" in task.error
    assert await sync_to_async(job)(str(task.id)) is False  # idempotent
