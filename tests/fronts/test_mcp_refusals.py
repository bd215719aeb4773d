"""The MCP endpoint's refusals, through the ASGI application itself (no server process): each
answers with the right status and a JSON-RPC error, and creates nothing."""

import asyncio
import json
import time

import pytest
from asgiref.sync import sync_to_async
from channels.testing import HttpCommunicator
from django.conf import settings

from agntchat.asgi import application
from agntchat.core.presence import client as redis
from conversations.models import Task
from tests.fronts.conftest import mcp_keys
from tests.waiting import loop_stalls
from workspaces.actions import issue_api_token

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("no_mcp_sessions")]

INIT = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-11-25",
        "capabilities": {},
        "clientInfo": {"name": "test", "version": "1"},
    },
}


async def post(body, token=None, headers=(), method="POST", path="/mcp"):
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    head = [(b"host", b"localhost"), (b"content-type", b"application/json")]
    if not any(k == "accept" for k, _ in headers):
        head.append((b"accept", b"application/json, text/event-stream"))
    if token:
        head.append((b"authorization", f"Bearer {token}".encode()))
    head += [(k.encode(), v.encode()) for k, v in headers]
    communicator = HttpCommunicator(application, method, path, body=raw, headers=head)
    response = await communicator.get_response(timeout=10)
    response["headers"] = {k.decode().lower(): v.decode() for k, v in response["headers"]}
    response["json"] = json.loads(response["body"]) if response["body"] else None
    return response


async def nothing_created():
    assert await sync_to_async(Task.objects.count)() == 0
    assert mcp_keys() == []


async def test_no_token_or_a_revoked_one_is_401_saying_what_to_send(alice):
    answer = await post(INIT)
    assert answer["status"] == 401
    assert answer["headers"]["www-authenticate"].startswith("Bearer")
    assert "Authorization: Bearer apt_" in answer["json"]["error"]["message"]
    token, secret = await sync_to_async(issue_api_token)(alice)
    token.revoked_at = token.created_at
    await sync_to_async(token.save)()
    assert (await post(INIT, secret))["status"] == 401
    assert (await post(INIT, "ags_not-a-person-token"))["status"] == 401
    await nothing_created()


async def test_bad_json_is_400_parse_error(token):
    answer = await post(b'{"jsonrpc": "2.0", "id": 1, "method": ', token)
    assert answer["status"] == 400 and answer["json"]["error"]["code"] == -32700
    # JSON, but not one request object: batches were removed in 2025-06-18.
    for body in (b"[]", b'[{"jsonrpc": "2.0", "id": 1, "method": "ping"}]', b"5"):
        answer = await post(body, token)
        assert answer["status"] == 400 and answer["json"]["error"]["code"] == -32600, body
    # Text PostgreSQL cannot store is refused before anything is stored (it was a 500).
    nul = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "x\x00"}}
    answer = await post(nul, token)
    assert answer["status"] == 400 and answer["json"]["error"]["code"] == -32600
    answer = await post({"id": 1, "method": "ping"}, token)  # not JSON-RPC 2.0
    assert answer["status"] == 400 and answer["json"]["error"]["code"] == -32600
    await nothing_created()


async def test_an_oversized_body_is_413(token):
    big = {**INIT, "params": {**INIT["params"], "pad": "x" * settings.DATA_UPLOAD_MAX_MEMORY_SIZE}}
    answer = await post(big, token)
    assert answer["status"] == 413
    await nothing_created()


async def test_an_unsupported_protocol_version_is_400_naming_the_supported_ones(token):
    answer = await post(
        {"jsonrpc": "2.0", "id": 2, "method": "tools/list"},
        token,
        headers=[("mcp-protocol-version", "1999-01-01"), ("mcp-session-id", "whatever")],
    )
    assert answer["status"] == 400
    error = answer["json"]["error"]
    assert error["code"] == -32022 and "2025-11-25" in error["data"]["supported"]
    await nothing_created()


async def test_an_unknown_session_is_404_and_a_missing_one_400(token):
    call = {
        "jsonrpc": "2.0",
        "id": 2,
        "method": "tools/call",
        "params": {"name": "nova", "arguments": {"instructions": "hi"}},
    }
    answer = await post(
        call, token, headers=[("mcp-session-id", "nope"), ("mcp-protocol-version", "2025-11-25")]
    )
    assert answer["status"] == 404
    assert (await post(call, token))["status"] == 400
    # Only ping is allowed before initialize, so only ping is answered without a session.
    pong = await post({"jsonrpc": "2.0", "id": 3, "method": "ping"}, token)
    assert pong["status"] == 200 and pong["json"] == {"jsonrpc": "2.0", "id": 3, "result": {}}
    await nothing_created()


async def test_a_session_is_its_person_s_alone(token, bob):
    answer = await post(INIT, token)
    assert answer["status"] == 200
    session = answer["headers"]["mcp-session-id"]
    assert answer["json"]["result"]["protocolVersion"] == "2025-11-25"
    _, bobs = await sync_to_async(issue_api_token)(bob)
    listing = {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}
    headers = [("mcp-session-id", session), ("mcp-protocol-version", "2025-11-25")]
    assert (await post(listing, bobs, headers))["status"] == 404
    mine = await post(listing, token, headers)
    assert [t["name"] for t in mine["json"]["result"]["tools"]] == ["nova"]
    # DELETE ends it; after that it is unknown.
    assert (await post(b"", token, headers, method="DELETE"))["status"] == 204
    assert (await post(listing, token, headers))["status"] == 404


async def test_a_foreign_origin_is_403(token):
    answer = await post(INIT, token, headers=[("origin", "https://evil.example")])
    assert answer["status"] == 403
    # A page of this site itself may.
    same = await post(INIT, token, headers=[("origin", "http://localhost")])
    assert same["status"] == 200
    redis().delete(*mcp_keys())
    await nothing_created()


async def test_get_is_405_and_an_unknown_method_32601(token):
    assert (await post(b"", token, method="GET"))["status"] == 405
    session = (await post(INIT, token))["headers"]["mcp-session-id"]
    answer = await post(
        {"jsonrpc": "2.0", "id": 3, "method": "resources/list"},
        token,
        headers=[("mcp-session-id", session)],
    )
    assert answer["status"] == 200 and answer["json"]["error"]["code"] == -32601


async def test_calling_an_agent_one_cannot_see_creates_nothing(token, charlie):
    from agents.actions import create_agent

    await sync_to_async(create_agent)(charlie, name="Secret", backend="scripted")
    session = (await post(INIT, token))["headers"]["mcp-session-id"]
    headers = [("mcp-session-id", session)]
    for name in ("secret", "made-up"):
        answer = await post(
            {
                "jsonrpc": "2.0",
                "id": 4,
                "method": "tools/call",
                "params": {"name": name, "arguments": {"instructions": "do it"}},
            },
            token,
            headers=headers,
        )
        assert answer["json"]["error"] == {"code": -32602, "message": f"Unknown tool: {name}"}
    # Arguments that do not fit are an error result the model can correct, not a task either.
    answer = await post(
        {
            "jsonrpc": "2.0",
            "id": 5,
            "method": "tools/call",
            "params": {"name": "nova", "arguments": {"instructions": "x", "extra": 1}},
        },
        token,
        headers=headers,
    )
    result = answer["json"]["result"]
    assert result["isError"] is True and "extra" in result["content"][0]["text"]
    assert await sync_to_async(Task.objects.count)() == 0


async def test_modern_requests_are_checked_against_their_headers(token):
    meta = {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {},
    }
    listing = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {"_meta": meta}}
    good = [("mcp-protocol-version", "2026-07-28"), ("mcp-method", "tools/list")]
    answer = await post(listing, token, headers=good)
    assert answer["status"] == 200
    result = answer["json"]["result"]
    assert result["cacheScope"] == "private" and "ttlMs" in result
    assert result["resultType"] == "complete"
    wrong = [("mcp-protocol-version", "2026-07-28"), ("mcp-method", "tools/call")]
    answer = await post(listing, token, headers=wrong)
    assert answer["status"] == 400 and answer["json"]["error"]["code"] == -32020
    unknown = {**listing, "method": "resources/list"}
    answer = await post(unknown, token, headers=[good[0], ("mcp-method", "resources/list")])
    assert answer["status"] == 404 and answer["json"]["error"]["code"] == -32601
    # No sessions in this revision.
    assert (await post(b"", token, headers=[good[0], ("mcp-session-id", "x")], method="DELETE"))[
        "status"
    ] == 405
    await nothing_created()


async def test_a_client_taking_only_json_gets_the_end_of_the_task_as_one_answer(token):
    """No stream when the client accepts none: one JSON answer once the task ends; a task
    cancelled in agntchat (here while still queued) is an error result naming it."""
    from conversations import tasks

    session = (await post(INIT, token))["headers"]["mcp-session-id"]
    call = {
        "jsonrpc": "2.0",
        "id": 7,
        "method": "tools/call",
        "params": {"name": "nova", "arguments": {"instructions": "wait for me"}},
    }

    def cancel_once_created():
        from tests.waiting import wait_until

        task = wait_until(lambda: Task.objects.first(), what="the task")
        return tasks.request_cancel(task)

    answer, task = await asyncio.gather(
        post(call, token, headers=[("mcp-session-id", session), ("accept", "application/json")]),
        sync_to_async(cancel_once_created, thread_sensitive=False)(),
    )
    assert answer["status"] == 200 and answer["headers"]["content-type"] == "application/json"
    result = answer["json"]["result"]
    assert result["isError"] is True
    assert result["structuredContent"] == {
        "taskId": str(task.id),
        "status": "cancelled",
        "agentId": str(task.agent_id),
        "workspaceId": str(task.workspace_id),
        "error": "cancelled",
    }


async def test_a_large_body_is_checked_without_stalling_the_event_loop(token):
    """Every stream and socket of a server process shares its event loop. Checking a body of
    megabytes (a million numbers) took it for most of a second per request, which any person
    with a token could repeat at will (both fronts check bodies the same way, fronts/http.py)."""
    from fronts.http import parse_json_object

    zeros = b",".join([b"0"] * (settings.DATA_UPLOAD_MAX_MEMORY_SIZE // 2 - 40))
    body = b'{"jsonrpc": "2.0", "id": 1, "method": "ping", "pad": [' + zeros + b"]}"
    started = time.perf_counter()
    await asyncio.to_thread(parse_json_object, body)
    checking = time.perf_counter() - started  # what the check costs on this machine
    stalls = []
    for _ in range(3):  # a loaded machine may pause the process at any time: the best of three
        async with loop_stalls() as longest:
            answer = await post(body, token)
        assert answer["status"] == 200 and answer["json"]["result"] == {}
        stalls.append(longest[0])
    assert min(stalls) < checking / 2, (stalls, checking)
