"""The MCP endpoint with the official ``mcp`` client, through a real daphne and a real bridge
(scripted backend): every visible agent is a tool; a call is a real task whose progress and
result come back; the client cancelling a call cancels its task. Both protocol revisions."""

import asyncio
import json

import anyio
import httpx2
import pytest
from asgiref.sync import sync_to_async
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from agents import actions as agent_actions
from artifacts.models import Artifact
from conversations.models import Message, Task
from tests.socket_helpers import Daphne, start_bridge
from tests.waiting import wait_until
from workspaces.actions import issue_api_token
from workspaces.models import Workspace

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

# The handshake era (2025-11-25) and the modern revision, each forced.
MODES = ["legacy", "2026-07-28"]


def connect(server, secret, mode="legacy") -> Client:
    headers = {"Authorization": f"Bearer {secret}"} if secret else {}
    http = httpx2.AsyncClient(headers=headers, timeout=60)
    return Client(streamable_http_client(f"{server.url}/mcp", http_client=http), mode=mode)


def mcp_error(run) -> MCPError:
    """The MCPError RUN raised, out of the exception groups the client's task groups wrap it in."""
    try:
        run()
    except BaseException as exc:  # noqa: BLE001 - looked into below
        found = exc
        while isinstance(found, BaseExceptionGroup):
            found = found.exceptions[0]
        if isinstance(found, MCPError):
            return found
        raise
    raise AssertionError("no MCPError was raised")


def stop(bridge) -> None:
    bridge.terminate()
    output = bridge.communicate(timeout=10)[0]
    assert "Traceback" not in output, output


@pytest.mark.parametrize("mode", [*MODES, "auto"])
def test_tools_are_the_agents_one_can_see(mode, alice, bob, charlie, team_a, nova, server):
    # Bob has an agent with Nova's handle (both visible to him in team A), Charlie a private one.
    agent_actions.create_agent(bob, name="Nova", handle="nova", backend="scripted")
    agent_actions.create_agent(charlie, name="Hidden", backend="scripted")
    _, secret = issue_api_token(bob)

    async def listing():
        async with connect(server, secret, mode) as client:
            # auto probes server/discover first and, answered, speaks the modern revision.
            assert client.protocol_version == ("2025-11-25" if mode == "legacy" else "2026-07-28")
            if mode != "2026-07-28":  # forced: the client assumes instead of asking
                assert client.server_capabilities.tools is not None
                assert client.server_info.name == "agntchat"
            if mode == "legacy":
                await client.session.send_ping()  # ping is gone from the modern revision
            return {tool.name: tool for tool in (await client.list_tools()).tools}

    tools = asyncio.run(listing())
    assert set(tools) == {"nova.alice", "nova.bob"}
    assert "this is the one of alice" in tools["nova.alice"].description
    assert "researcher" in tools["nova.alice"].description
    assert tools["nova.bob"].input_schema["required"] == ["instructions"]
    assert tools["nova.bob"].input_schema["additionalProperties"] is False


@pytest.mark.parametrize("mode", MODES)
def test_a_call_is_a_real_task_with_progress_and_result(
    mode, alice, bob, team_a, nova, server, tmp_path
):
    # The bridge forwards text at most once a second: a pause after the run's start lets the
    # first words through as an event of their own.
    bridge = start_bridge(server, nova, tmp_path, json.dumps({"delay_ms": 1200}))
    _, secret = issue_api_token(bob)
    progress = []

    async def on_progress(value, total, message):
        progress.append((value, message))

    async def call():
        async with connect(server, secret, mode) as client:
            return await client.call_tool(
                "nova", {"instructions": "Summarise the plan"}, progress_callback=on_progress
            )

    try:
        result = asyncio.run(call())
    finally:
        stop(bridge)
    assert result.is_error is False
    assert result.content[0].text == "Echo: Summarise the plan"
    task = Task.objects.get()
    assert result.structured_content["taskId"] == str(task.id)
    assert result.structured_content["status"] == "completed"
    assert result.structured_content["blocks"] == [{"type": "label", "text": "scripted"}]
    # Bob shares only team A with Nova: that is where it runs.
    assert task.created_by_user == bob and task.agent == nova and task.workspace == team_a
    assert task.status == "completed" and task.instructions == "Summarise the plan"
    # The run's events came back as progress, increasing, one per event the task recorded.
    assert len(progress) == task.event_count > 0
    assert [value for value, _ in progress] == list(range(1, len(progress) + 1))
    assert "Echo:" in [message for _, message in progress]


def test_a_call_works_in_a_conversation_of_its_own_and_returns_what_it_published(
    alice, nova, server, tmp_path
):
    # The agent publishes an artifact while it works: the call's answer carries it, and the
    # person who called sees the task's conversation in agntchat, the result posted there.
    bridge = start_bridge(server, nova, tmp_path)
    _, secret = issue_api_token(alice)
    instructions = (
        '[[tool:artifact_publish {"title": "Plan", "kind": "markdown", "content": "# Plan"}]] '
        "Write the plan"
    )

    async def call():
        async with connect(server, secret) as client:
            return await client.call_tool("nova", {"instructions": instructions})

    try:
        result = asyncio.run(call())
    finally:
        stop(bridge)
    assert result.is_error is False, result.content
    task = Task.objects.select_related("work_conversation").get()
    work = task.work_conversation
    assert work is not None and work.kind == "task"
    assert set(work.participants.values_list("user_id", flat=True)) >= {alice.id}
    artifact = Artifact.objects.get(conversation=work)
    assert artifact.title == "Plan" and artifact.created_by_agent_id == nova.id
    assert result.structured_content["artifacts"] == [
        {"id": str(artifact.id), "title": "Plan", "kind": "markdown", "version": 1}
    ]
    assert Message.objects.filter(conversation=work, body=result.content[0].text).exists()


@pytest.mark.parametrize("mode", MODES)
def test_a_call_without_progress_token_still_answers(mode, alice, team_a, nova, server, tmp_path):
    bridge = start_bridge(server, nova, tmp_path, json.dumps({"delay_ms": 500}))
    _, secret = issue_api_token(alice)

    async def call():
        async with connect(server, secret, mode) as client:
            return await client.call_tool("nova", {"instructions": "slowly"})

    try:
        result = asyncio.run(call())
    finally:
        stop(bridge)
    assert result.content[0].text == "Echo: slowly" and not result.is_error
    # Nova appears in both of Alice's workspaces: by default, her personal one.
    assert Task.objects.get().workspace == Workspace.objects.get(owner=alice, kind="personal")


@pytest.mark.parametrize("mode", MODES)
def test_cancelling_a_call_cancels_its_task(mode, alice, nova, server, tmp_path):
    bridge = start_bridge(server, nova, tmp_path, json.dumps({"delay_ms": 20000}))
    _, secret = issue_api_token(alice)
    running = sync_to_async(
        lambda: wait_until(
            lambda: Task.objects.filter(status="running").exists(), what="the task running"
        )
    )

    async def call_and_cancel():
        async with connect(server, secret, mode) as client:
            with anyio.fail_after(30):
                async with anyio.create_task_group() as group:
                    group.start_soon(client.call_tool, "nova", {"instructions": "take your time"})
                    await running()
                    group.cancel_scope.cancel()  # as a client gives up on a call

    try:
        asyncio.run(call_and_cancel())
        task = wait_until(
            lambda: Task.objects.filter(status="cancelled").first(), what="the task cancelled"
        )
    finally:
        stop(bridge)
    assert task.cancel_state == "confirmed" and task.error == "cancelled on request"


@pytest.mark.parametrize("mode", MODES)
def test_a_call_to_an_agent_whose_bridge_is_offline_is_answered_not_waited_on(mode, alice, nova):
    """No bridge of Nova's is connected: after FRONT_START_SECONDS the call is answered with an
    error that says so, and its task is cancelled (before, the call waited for ever, its keep-
    alive comments resetting every client timeout)."""
    server = Daphne(extra_env={"FRONT_START_SECONDS": "2"})
    _, secret = issue_api_token(alice)

    async def call():
        async with connect(server, secret, mode) as client:
            with anyio.fail_after(30):
                return await client.call_tool("nova", {"instructions": "Anyone there?"})

    try:
        result = asyncio.run(call())
    finally:
        server.stop()
    assert result.is_error is True and "bridge is not connected" in result.content[0].text
    (task,) = Task.objects.all()
    assert task.status == "cancelled" and "bridge is not connected" in task.error


@pytest.mark.parametrize("mode", MODES)
def test_an_unknown_tool_is_an_error_and_creates_nothing(mode, alice, charlie, nova, server):
    agent_actions.create_agent(charlie, name="Hidden", backend="scripted")
    _, secret = issue_api_token(alice)

    async def calls():
        async with connect(server, secret, mode) as client:
            for name in ("hidden", "made-up"):
                with pytest.raises(MCPError) as caught:
                    await client.call_tool(name, {"instructions": "do it"})
                assert caught.value.error.code == -32602
                assert caught.value.error.message == f"Unknown tool: {name}"
            bad = await client.call_tool("nova", {"instructions": ""})
            assert bad.is_error and "instructions" in bad.content[0].text

    asyncio.run(calls())
    assert not Task.objects.exists()


@pytest.mark.parametrize("mode", [*MODES, "auto"])
def test_without_a_valid_token_the_client_is_told_to_send_one(mode, alice, nova, server):
    token, secret = issue_api_token(alice)

    async def listing(with_secret):
        async with connect(server, with_secret, mode) as client:
            await client.list_tools()

    for bad in ("", "apt_made-up"):
        error = mcp_error(lambda: asyncio.run(listing(bad)))  # noqa: B023 - run at once
        assert "Authorization: Bearer apt_" in error.message
    asyncio.run(listing(secret))  # the good one works
    token.revoked_at = token.created_at
    token.save()
    assert "Bearer apt_" in mcp_error(lambda: asyncio.run(listing(secret))).message
