"""Workspace credentials reach an agent only through a manager's grant, and never an agent whose
owner could not read the credential (a plain member's)."""

import json

import pytest
from asgiref.sync import sync_to_async
from rest_framework.test import APIClient

from agents import actions
from agents.models import CredentialGrant
from conversations.actions import post_message
from tests.conftest import client_for, directives_for
from tests.socket_helpers import agent_communicator, next_frame
from work import directives
from workspaces import actions as workspace_actions

SECRET = "sk-ant-team-a-secret"


def as_person(person, method, path, body=None):
    return getattr(client_for(person), method)(path, body, format="json")


def store_team_key(alice, team_a) -> str:
    response = client_for(alice).post(
        f"/api/v1/workspaces/{team_a.id}/credentials/",
        {"name": "anthropic_api_key", "value": SECRET},
        format="json",
    )
    assert response.status_code == 201
    return response.json()["id"]


def api_agent_talked_to(person, workspace, name) -> tuple[str, str]:
    """What anyone may do through REST: create an API-backed agent, write to it in a direct
    conversation, and open a session for its bridge. Returns (agent id, session token)."""
    client = client_for(person)
    agent = client.post(
        "/api/v1/agents/", {"name": name, "backend": "anthropic_api"}, format="json"
    ).json()
    direct = client.post(
        "/api/v1/conversations/",
        {
            "workspace": str(workspace.id),
            "kind": "direct",
            "participants": [{"type": "agent", "id": agent["id"]}],
        },
        format="json",
    ).json()
    posted = client.post(
        f"/api/v1/conversations/{direct['id']}/messages/", {"body": "hello"}, format="json"
    )
    assert posted.status_code == 201
    key = client.post(f"/api/v1/agents/{agent['id']}/keys/", {}, format="json").json()["key"]
    session = APIClient().post("/api/v1/agent/session/", HTTP_AUTHORIZATION=f"Bearer {key}")
    return agent["id"], session.json()["token"]


async def first_work(token) -> dict:
    comm = agent_communicator(token)
    assert (await comm.connect())[0]
    assert (await next_frame(comm))["type"] == "hello"
    work = await next_frame(comm)
    await comm.disconnect()
    assert work["type"] == "work" and work["kind"] == "message"
    return work


@pytest.mark.django_db(transaction=True)
async def test_a_members_api_agent_is_never_handed_the_workspace_key(alice, bob, team_a):
    credential_id = await sync_to_async(store_team_key)(alice, team_a)
    bobs_view = await sync_to_async(as_person)(
        bob, "get", f"/api/v1/workspaces/{team_a.id}/credentials/"
    )
    assert bobs_view.status_code == 403
    agent_id, token = await sync_to_async(api_agent_talked_to)(bob, team_a, "Leech")
    work = await first_work(token)
    assert work["payload"]["directives"]["apiKey"] is None
    assert SECRET not in json.dumps(work)
    # Not even the owner can hand it to Bob's agent: Bob could read it on his own machine.
    refused = await sync_to_async(as_person)(
        alice,
        "post",
        f"/api/v1/workspaces/{team_a.id}/credentials/{credential_id}/grants/",
        {"agent": agent_id},
    )
    assert refused.status_code == 400
    assert refused.json()["error"]["code"] == "credential_not_for_agent"
    assert not await CredentialGrant.objects.aexists()


@pytest.mark.django_db(transaction=True)
async def test_an_agent_a_manager_granted_gets_the_key_with_its_work(alice, team_a):
    credential_id = await sync_to_async(store_team_key)(alice, team_a)
    agent_id, token = await sync_to_async(api_agent_talked_to)(alice, team_a, "Scribe")
    granted = await sync_to_async(as_person)(
        alice,
        "post",
        f"/api/v1/workspaces/{team_a.id}/credentials/{credential_id}/grants/",
        {"agent": agent_id},
    )
    assert granted.status_code == 201
    assert granted.json()["agentId"] == agent_id
    work = await first_work(token)
    assert work["payload"]["directives"]["apiKey"] == SECRET


@pytest.mark.django_db
def test_the_key_stops_when_the_owner_is_no_longer_a_manager(alice, bob, team_a, channel):
    owner = team_a.memberships.get(user=alice)
    credential = workspace_actions.create_credential(owner, "anthropic_api_key", SECRET)
    bobs = team_a.memberships.get(user=bob)
    workspace_actions.change_role(owner, bobs, "admin")
    agent = actions.create_agent(bob, name="Quill", backend="anthropic_api")
    actions.grant_credential(owner, credential, agent)
    message = post_message(alice, channel, "hi")
    assert directives_for(agent, message)["api_key"] == SECRET
    workspace_actions.change_role(owner, bobs, "member")
    assert directives_for(agent, message)["api_key"] is None
    # The same agent's task directives follow the same rule.
    assert directives.workspace_api_key(agent, team_a.id) is None


@pytest.mark.django_db
class TestGrantEndpoints:
    def url(self, team_a, credential_id, agent_id=None):
        base = f"/api/v1/workspaces/{team_a.id}/credentials/{credential_id}/grants/"
        return base + (f"{agent_id}/" if agent_id else "")

    def test_the_owner_grants_lists_and_revokes(self, alice, team_a, nova, api):
        credential = workspace_actions.create_credential(
            team_a.memberships.get(user=alice), "anthropic_api_key", SECRET
        )
        client = api(alice)
        first = client.post(self.url(team_a, credential.id), {"agent": str(nova.id)}, format="json")
        again = client.post(self.url(team_a, credential.id), {"agent": str(nova.id)}, format="json")
        assert (first.status_code, again.status_code) == (201, 200)
        listing = client.get(self.url(team_a, credential.id)).json()["results"]
        assert [(g["agentId"], g["agentName"], g["grantedById"]) for g in listing] == [
            (str(nova.id), "Nova", str(alice.id))
        ]
        assert SECRET not in json.dumps(listing)
        assert client.delete(self.url(team_a, credential.id, nova.id)).status_code == 204
        assert not CredentialGrant.objects.exists()
        gone = client.delete(self.url(team_a, credential.id, nova.id))
        assert gone.status_code == 404 and gone.json()["error"]["code"] == "agent_not_found"

    def test_it_refuses_agents_and_credentials_from_elsewhere(
        self, alice, charlie, team_a, team_b, api
    ):
        credential = workspace_actions.create_credential(
            team_a.memberships.get(user=alice), "anthropic_api_key", SECRET
        )
        theirs = workspace_actions.create_credential(
            team_b.memberships.get(user=charlie), "anthropic_api_key", "sk-b"
        )
        outsiders_agent = actions.create_agent(charlie, name="Spy", backend="anthropic_api")
        client = api(alice)
        wrong_agent = client.post(
            self.url(team_a, credential.id), {"agent": str(outsiders_agent.id)}, format="json"
        )
        assert wrong_agent.status_code == 404
        assert wrong_agent.json()["error"]["code"] == "agent_not_found"
        wrong_credential = client.get(self.url(team_a, theirs.id))
        assert wrong_credential.status_code == 404
        assert wrong_credential.json()["error"]["code"] == "credential_not_found"
        assert not CredentialGrant.objects.exists()

    def test_a_member_is_refused_and_nothing_changes(self, alice, bob, team_a, nova, api):
        owner = team_a.memberships.get(user=alice)
        credential = workspace_actions.create_credential(owner, "anthropic_api_key", SECRET)
        grant, _ = actions.grant_credential(owner, credential, nova)
        bobs_agent = actions.create_agent(bob, name="Leech", backend="anthropic_api")
        client = api(bob)
        responses = [
            client.get(self.url(team_a, credential.id)),
            client.post(self.url(team_a, credential.id), {"agent": str(nova.id)}, format="json"),
            client.post(
                self.url(team_a, credential.id), {"agent": str(bobs_agent.id)}, format="json"
            ),
            client.delete(self.url(team_a, credential.id, nova.id)),
        ]
        assert [r.status_code for r in responses] == [403, 403, 403, 403]
        assert {r.json()["error"]["code"] for r in responses} == {"not_allowed"}
        assert list(CredentialGrant.objects.values_list("id", flat=True)) == [grant.id]

    def test_another_workspaces_user_gets_not_found(
        self, alice, charlie, team_a, team_b, nova, api
    ):
        owner = team_a.memberships.get(user=alice)
        credential = workspace_actions.create_credential(owner, "anthropic_api_key", SECRET)
        grant, _ = actions.grant_credential(owner, credential, nova)
        spy = actions.create_agent(charlie, name="Spy", backend="anthropic_api")
        client = api(charlie)
        responses = [
            client.get(self.url(team_a, credential.id)),
            client.post(self.url(team_a, credential.id), {"agent": str(spy.id)}, format="json"),
            client.delete(self.url(team_a, credential.id, nova.id)),
        ]
        assert [r.status_code for r in responses] == [404, 404, 404]
        assert {r.json()["error"]["code"] for r in responses} == {"workspace_not_found"}
        assert list(CredentialGrant.objects.values_list("id", flat=True)) == [grant.id]
