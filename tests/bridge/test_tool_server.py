"""The bridge's MCP tool server, through the official mcp client: a turn's own token lists and
calls that turn's tools; no token, or another turn's, gets nothing of it."""

import json
import os
import stat

import httpx
import pytest
from agntchat_bridge.backends import ToolOutcome, Turn
from agntchat_bridge.backends.claude_cli import ClaudeCLIBackend, mcp_config_file
from agntchat_bridge.backends.codex_cli import CodexCLIBackend
from agntchat_bridge.backends.tool_server import ToolServer
from mcp import Client
from mcp.client.streamable_http import streamable_http_client


def turn_with(tools, calls, fail=()):
    async def call(name, arguments, *, checkpoint=None):
        calls.append((name, arguments))
        if name in fail:
            return ToolOutcome(False, error=f"{name} failed: no such artifact")
        return ToolOutcome(True, output=f'{{"ran": "{name}"}}')

    listed = [
        {"name": n, "description": f"The {n} tool.", "inputSchema": {"type": "object"}}
        for n in tools
    ]
    return Turn("", "", "p", [], tools=listed, call_tool=call)


async def test_a_turn_lists_and_calls_its_own_tools_only():
    server = ToolServer()
    bo_calls, cy_calls = [], []
    bo = turn_with(["done", "artifact_publish"], bo_calls, fail={"artifact_publish"})
    cy = turn_with(["task_list"], cy_calls)
    async with server.serving(bo) as (url, bo_token), server.serving(cy) as (same_url, cy_token):
        assert url == same_url and url.startswith("http://127.0.0.1:") and bo_token != cy_token
        async with httpx.AsyncClient(headers={"Authorization": f"Bearer {bo_token}"}) as http:
            async with Client(streamable_http_client(url, http_client=http)) as client:
                listed = await client.list_tools()
                assert [t.name for t in listed.tools] == ["done", "artifact_publish"]
                ok = await client.call_tool("done", {"note": "x"})
                failed = await client.call_tool("artifact_publish", {})
        assert (ok.is_error, ok.content[0].text) == (False, '{"ran": "done"}')
        assert (failed.is_error, failed.content[0].text) == (
            True,
            "artifact_publish failed: no such artifact",
        )
        assert bo_calls == [("done", {"note": "x"}), ("artifact_publish", {})] and cy_calls == []

        async with httpx.AsyncClient() as http:
            body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
            for headers in ({}, {"Authorization": "Bearer not-a-turn"}):
                response = await http.post(url, json=body, headers=headers)
                assert response.status_code == 401
    # A turn that ended: its token no longer opens anything.
    async with httpx.AsyncClient() as http:
        response = await http.post(url, json=body, headers={"Authorization": f"Bearer {bo_token}"})
        assert response.status_code == 401


def test_the_clis_are_pointed_at_the_tool_server_with_the_least_they_need(tmp_path):
    turn = Turn("stable", "", "hi", [], workdir=str(tmp_path))
    with mcp_config_file("http://127.0.0.1:1/mcp", "secret-token") as path:
        argv = ClaudeCLIBackend(allowed_tools=["Read"]).argv(turn, path)
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
        config = json.loads(open(path).read())
        assert config == {"mcpServers": {"agntchat": {"type": "http", "url": "http://127.0.0.1:1/mcp",
                                                      "headers": {"Authorization": "Bearer secret-token"}}}}  # fmt: skip
    assert not os.path.exists(path)
    assert argv[argv.index("--mcp-config") + 1] == path and "--strict-mcp-config" in argv
    assert argv[argv.index("--allowedTools") + 1] == "Read,mcp__agntchat"
    assert "secret-token" not in " ".join(argv)
    assert "--mcp-config" not in ClaudeCLIBackend().argv(turn)

    codex = CodexCLIBackend().argv(turn, "http://127.0.0.1:1/mcp")
    overrides = [codex[i + 1] for i, a in enumerate(codex) if a == "-c"]
    assert 'mcp_servers.agntchat.url="http://127.0.0.1:1/mcp"' in overrides
    assert 'mcp_servers.agntchat.bearer_token_env_var="AGNTCHAT_MCP_TOKEN"' in overrides
    assert 'mcp_servers.agntchat.default_tools_approval_mode="approve"' in overrides
    assert 'approval_policy="never"' in overrides  # the CLI's own tools stay under its policy
    assert not any("mcp_servers" in a for a in CodexCLIBackend().argv(turn))


@pytest.fixture(autouse=True)
def _no_proxy(monkeypatch):
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy"):
        monkeypatch.delenv(name, raising=False)
