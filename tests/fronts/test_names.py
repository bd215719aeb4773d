"""The names agents go by on the fronts (an MCP tool, an OpenAI model): one name, one agent.

Alice owns team A. Dan (``mcp_dan``) joins it and has an agent ``helper``; then someone else
joins with a username that differs in one character (``mcp+dan``) and an agent of the same
handle. Before, both were ``helper.mcp_dan`` and Dan's name reached the other agent."""

import json
import re

import httpx
import pytest
from asgiref.sync import async_to_sync
from channels.testing import HttpCommunicator

from agents import actions as agent_actions
from agntchat.asgi import application
from conversations.models import Message
from fronts.targets import NAME_LENGTH, Ambiguous, agent_named, id_name, qualified_name
from tests.conftest import make_person
from workspaces import actions as workspace_actions

pytestmark = pytest.mark.django_db(transaction=True)

TOOL_NAME = re.compile(r"[A-Za-z0-9_.-]{1,128}")


def join_with_helper(team, username: str):
    """USERNAME joins TEAM and makes an agent with the handle ``helper``."""
    person = make_person(username)
    _, invitation = workspace_actions.create_invitation(team.memberships.get(role="owner"))
    workspace_actions.accept_invitation(person, invitation)
    return agent_actions.create_agent(person, name="Helper", backend="scripted")


def models(token: str) -> list[dict]:
    async def go():
        transport = httpx.ASGITransport(app=application)
        async with httpx.AsyncClient(transport=transport, base_url="http://testserver") as c:
            return await c.get("/v1/models", headers={"authorization": f"Bearer {token}"})

    return async_to_sync(go)().json()["data"]


def tool_names(token: str) -> list[str]:
    meta = {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {},
    }
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {"_meta": meta}}
    headers = [
        (b"content-type", b"application/json"),
        (b"accept", b"application/json"),
        (b"authorization", f"Bearer {token}".encode()),
        (b"mcp-protocol-version", b"2026-07-28"),
        (b"mcp-method", b"tools/list"),
    ]
    communicator = HttpCommunicator(
        application, "POST", "/mcp", body=json.dumps(body).encode(), headers=headers
    )
    response = async_to_sync(communicator.get_response)(timeout=10)
    return [tool["name"] for tool in json.loads(response["body"])["result"]["tools"]]


@pytest.fixture
def token(alice):
    return workspace_actions.issue_api_token(alice)[1]


def test_a_username_differing_in_a_replaced_character_gets_a_name_of_its_own(alice, team_a, token):
    dans = join_with_helper(team_a, "mcp_dan")
    other = join_with_helper(team_a, "mcp+dan")
    # The plain username keeps the name clients were configured with.
    assert qualified_name(dans) == "helper.mcp_dan"
    assert qualified_name(other).startswith("helper.mcp_dan-")
    listed = {m["id"]: m["owned_by"] for m in models(token)}
    assert listed == {"helper.mcp_dan": "mcp_dan", qualified_name(other): "mcp+dan"}
    assert sorted(tool_names(token)) == sorted(listed)
    assert agent_named(alice, "helper.mcp_dan").agent == dans
    assert agent_named(alice, qualified_name(other)).agent == other


def test_long_usernames_that_share_their_start_get_different_names_that_fit(alice, team_a):
    start = "d" * 140
    first = join_with_helper(team_a, start + "1234567890")
    second = join_with_helper(team_a, start + "0987654321")
    names = {qualified_name(first), qualified_name(second)}
    assert len(names) == 2
    assert all(TOOL_NAME.fullmatch(name) and len(name) <= NAME_LENGTH for name in names)
    assert agent_named(alice, qualified_name(second)).agent == second


def test_a_name_two_visible_agents_go_by_is_refused_never_given_to_one(alice, team_a, token):
    """Any tool name is also some plain username: one can be made to equal another agent's
    qualified name. That name is then refused, naming each agent's own name, and both are
    listed by id: two tools never share a name."""
    victim = join_with_helper(team_a, "mcp+dan")
    copied = qualified_name(victim).removeprefix("helper.")
    impostor = join_with_helper(team_a, copied)
    assert qualified_name(impostor) == qualified_name(victim)
    with pytest.raises(Ambiguous) as refused:
        agent_named(alice, qualified_name(victim))
    assert f"`{id_name(victim)}` (of mcp+dan)" in str(refused.value)
    assert f"`{id_name(impostor)}` (of {copied})" in str(refused.value)
    assert sorted(tool_names(token)) == sorted([id_name(impostor), id_name(victim)])
    assert agent_named(alice, id_name(victim)).agent == victim

    # Through the front: a 400 naming the choices, nothing posted to either agent.
    async def complete():
        transport = httpx.ASGITransport(app=application)
        async with httpx.AsyncClient(transport=transport, base_url="http://testserver") as c:
            return await c.post(
                "/v1/chat/completions",
                headers={"authorization": f"Bearer {token}"},
                json={
                    "model": qualified_name(victim),
                    "messages": [{"role": "user", "content": "the confidential plan"}],
                },
            )

    answer = async_to_sync(complete)()
    assert answer.status_code == 400 and answer.json()["error"]["code"] == "model_ambiguous"
    assert not Message.objects.exists()
