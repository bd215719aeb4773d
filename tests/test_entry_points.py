"""Every entry point goes through access helpers and actions (issue 20, item 2): a user-supplied
id of another workspace or person is not found, whatever the entry point."""

import pytest

from agents import actions as agent_actions
from agents.access import access_agent_key, access_credential_grant
from agents.models import AgentKey, CredentialGrant
from agntchat.core.exceptions import NotFound
from conversations import tasks
from conversations.models import Conversation
from tests.conftest import make_person
from workspaces import actions as workspace_actions
from workspaces.access import access_api_token, access_member
from workspaces.models import ApiToken

pytestmark = pytest.mark.django_db


def refused(response, code):
    assert response.status_code == 404, (response.status_code, response.content[:300])
    assert response.json()["error"]["code"] == code


class TestAnotherWorkspacesIdsAreNotFound:
    def test_api_tokens(self, alice, charlie, api):
        token, _ = workspace_actions.issue_api_token(alice, "laptop")
        refused(api(charlie).delete(f"/api/v1/auth/tokens/{token.id}/"), "token_not_found")
        assert ApiToken.objects.get(pk=token.pk).revoked_at is None
        with pytest.raises(NotFound):
            access_api_token(charlie, token.id)

    def test_members(self, alice, bob, charlie, team_a, team_b, api):
        # Bob is a member of team A, not of Charlie's team B.
        w = f"/api/v1/workspaces/{team_b.id}"
        refused(
            api(charlie).patch(f"{w}/members/{bob.id}/", {"role": "admin"}, format="json"),
            "member_not_found",
        )
        refused(api(charlie).delete(f"{w}/members/{bob.id}/"), "member_not_found")
        assert team_a.memberships.get(user=bob).role == "member"
        with pytest.raises(NotFound):
            access_member(team_b.memberships.get(user=charlie), bob.id)

    def test_agent_keys(self, alice, charlie, nova, api):
        key, _ = agent_actions.create_agent_key(nova)
        spy = agent_actions.create_agent(charlie, name="Spy", backend="scripted")
        refused(api(charlie).delete(f"/api/v1/agents/{spy.id}/keys/{key.id}/"), "key_not_found")
        assert AgentKey.objects.get(pk=key.pk).revoked_at is None
        with pytest.raises(NotFound):
            access_agent_key(spy, key.id)

    def test_credentials_and_their_grants(self, alice, charlie, team_a, team_b, nova, api):
        credential = workspace_actions.create_credential(
            team_a.memberships.get(user=alice), "anthropic_api_key", "sk-a"
        )
        agent_actions.grant_credential(team_a.memberships.get(user=alice), credential, nova)
        refused(
            api(charlie).delete(
                f"/api/v1/workspaces/{team_b.id}/credentials/{credential.id}/grants/{nova.id}/"
            ),
            "credential_not_found",
        )
        refused(
            api(charlie).delete(f"/api/v1/workspaces/{team_b.id}/credentials/{credential.id}/"),
            "credential_not_found",
        )
        assert CredentialGrant.objects.filter(credential=credential, agent=nova).exists()
        theirs = workspace_actions.create_credential(
            team_b.memberships.get(user=charlie), "other", "sk-b"
        )
        with pytest.raises(NotFound):
            access_credential_grant(theirs, nova.id)

    def test_people_on_the_direct_message_page(self, client, alice, charlie, team_a, team_b):
        client.force_login(charlie)
        assert client.post(f"/w/{team_b.id}/direct/", {"person": alice.id}).status_code == 404
        client.force_login(alice)
        assert client.post(f"/w/{team_a.id}/direct/", {"person": charlie.id}).status_code == 404
        assert not Conversation.objects.filter(kind="direct").exists()

    def test_tasks_named_by_an_agent(self, alice, charlie, team_a, nova):
        task = tasks.create_task(alice, team_a, nova, "Look into it")
        spy = agent_actions.create_agent(charlie, name="Spy", backend="scripted")
        assert tasks.access_task(nova, task.id) == task
        with pytest.raises(NotFound):
            tasks.access_task(spy, task.id)
        stranger = make_person("dora")
        with pytest.raises(NotFound):
            tasks.access_task(stranger, task.id)
