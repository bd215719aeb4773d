"""Every entry point goes through access helpers and actions (issue 20, item 2): a user-supplied
id of another workspace or person is not found, whatever the entry point."""

import pytest
from django.db import transaction

from agents import actions as agent_actions
from agents.access import access_agent_key, access_credential_grant
from agents.models import Agent, AgentKey, AgentSession, CredentialGrant
from agntchat.core.exceptions import AppError, NotFound
from conversations import tasks
from conversations.access import may_configure
from conversations.actions import (
    create_conversation,
    open_direct,
    post_message,
    update_channel,
    update_settings,
)
from conversations.models import Conversation, Message
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


class Rollback(Exception):
    pass


def action_allows(change) -> bool:
    """Whether the action lets CHANGE happen (tried, then rolled back)."""
    try:
        with transaction.atomic():
            change()
            raise Rollback
    except Rollback:
        return True
    except AppError:
        return False


class TestOnePredicatePerRule:
    """The pages show a control exactly where the action allows it: both ask one function."""

    def test_who_configures_a_conversation(self, client, alice, bob, team_a, nova, channel):
        dora = make_person("dora")
        owner = team_a.memberships.get(user=alice)
        _, token = workspace_actions.create_invitation(owner, "admin")
        workspace_actions.accept_invitation(dora, token)
        bobs = create_conversation(bob, team_a, kind="channel", title="bobs")
        for person in (alice, bob, dora):
            for conversation in (channel, bobs):
                client.force_login(person)
                page = client.get(f"/w/{team_a.id}/c/{conversation.id}/settings/").content
                shown = b"You can read them." not in page
                allowed = action_allows(
                    lambda p=person, c=conversation: update_settings(p, c, {"fallback_order": []})
                )
                renamed = action_allows(
                    lambda p=person, c=conversation: update_channel(p, c, title="renamed")
                )
                assert shown == allowed == renamed, (person.username, conversation.title)
                expected = person != bob or conversation == bobs
                assert allowed == expected, (person.username, conversation.title)
        other = workspace_actions.create_team_workspace(bob, "Elsewhere").memberships.get(user=bob)
        assert not may_configure(other, bobs)  # a membership of another workspace never does

    def test_who_changes_roles_removes_and_invites_admins(self, client, alice, bob, team_a):
        dora, erin = make_person("dora"), make_person("erin")
        owner = team_a.memberships.get(user=alice)
        for person, role in ((dora, "admin"), (erin, "member")):
            _, token = workspace_actions.create_invitation(owner, role)
            workspace_actions.accept_invitation(person, token)
        people = (alice, bob, dora, erin)
        shown = {}
        for viewer in people:
            client.force_login(viewer)
            page = client.get(f"/w/{team_a.id}/members/").content.decode()
            mine = team_a.memberships.get(user=viewer)
            for target_person in people:
                if target_person == viewer:
                    continue
                target = team_a.memberships.get(user=target_person)
                row = page.split(f'data-member="{target_person.username}"')[1].split("</tr>")[0]
                role_shown = 'data-api="PATCH"' in row
                remove_shown = 'data-api="DELETE"' in row
                shown[viewer.username, target_person.username] = (role_shown, remove_shown)
                new_role = "member" if target.role == "admin" else "admin"
                assert role_shown == action_allows(
                    lambda m=mine, t=target, r=new_role: workspace_actions.change_role(m, t, r)
                ), (viewer.username, target_person.username)
                assert remove_shown == action_allows(
                    lambda m=mine, t=target: workspace_actions.remove_member(m, t)
                ), (viewer.username, target_person.username)
            admin_offered = '<option value="admin">' in page
            assert admin_offered == action_allows(
                lambda m=mine: workspace_actions.create_invitation(m, "admin")
            ), viewer.username
        # The owner changes and removes anyone; an admin removes members only; members nothing.
        assert shown["alice", "dora"] == shown["alice", "bob"] == (True, True)
        assert shown["dora", "erin"] == (False, True) and shown["dora", "alice"] == (False, False)
        assert shown["bob", "erin"] == shown["bob", "dora"] == (False, False)


class TestOneDirectConversationPerSetOfParticipants:
    def url(self):
        return "/api/v1/conversations/"

    def open(self, client, workspace, *participants):
        return client.post(
            self.url(),
            {
                "workspace": str(workspace.id),
                "kind": "direct",
                "participants": [
                    {"type": "agent" if isinstance(p, Agent) else "person", "id": str(p.id)}
                    for p in participants
                ],
            },
            format="json",
        )

    def test_rest_asked_twice_answers_the_same_one(self, alice, bob, team_a, nova, api):
        first = self.open(api(alice), team_a, nova)
        again = self.open(api(alice), team_a, nova)
        assert (first.status_code, again.status_code) == (201, 200)
        assert first.json()["id"] == again.json()["id"]
        # Another set of participants is another conversation; order does not matter.
        group = self.open(api(alice), team_a, nova, bob)
        assert group.status_code == 201 and group.json()["id"] != first.json()["id"]
        same_group = self.open(api(bob), team_a, alice, nova)
        assert (same_group.status_code, same_group.json()["id"]) == (200, group.json()["id"])
        assert Conversation.objects.filter(kind="direct").count() == 2

    def test_the_page_and_rest_reach_the_same_one(self, client, alice, bob, team_a, nova, api):
        client.force_login(alice)
        page = client.post(f"/w/{team_a.id}/direct/", {"person": bob.id})
        rest = self.open(api(bob), team_a, alice)
        assert rest.status_code == 200
        assert page.url == f"/w/{team_a.id}/c/{rest.json()['id']}/"
        with_nova = self.open(api(alice), team_a, nova)
        page = client.post(f"/w/{team_a.id}/direct/", {"agent": nova.id})
        assert page.url == f"/w/{team_a.id}/c/{with_nova.json()['id']}/"
        assert Conversation.objects.filter(kind="direct").count() == 2

    def test_an_agent_opening_one_finds_the_persons(self, alice, team_a, nova):
        mine, created = open_direct(alice, team_a, agent_ids=[nova.id])
        theirs, created_again = open_direct(nova, team_a, user_ids=[alice.id])
        assert (created, created_again) == (True, False) and theirs == mine


class TestAdminChangesGoThroughActions:
    @pytest.fixture
    def staff(self, client):
        person = make_person("stella")
        person.is_staff = person.is_superuser = True
        person.save()
        client.force_login(person)
        return client

    def test_revoking_keys_ends_their_sessions(self, staff, nova):
        key, secret = agent_actions.create_agent_key(nova)
        agent_actions.open_agent_session(secret)
        response = staff.post(
            "/admin/agents/agentkey/",
            {"action": "revoke_keys", "_selected_action": [str(key.id)]},
        )
        assert response.status_code == 302
        assert AgentKey.objects.get(pk=key.pk).revoked_at is not None
        assert not AgentSession.objects.filter(key=key).exists()  # the action's side effect

    def test_rows_written_around_their_actions_are_refused(self, staff, alice, nova, channel):
        message = post_message(alice, channel, "hello")
        key, _ = agent_actions.create_agent_key(nova)
        for path, obj in (
            ("agents/agent", nova),
            ("agents/agentkey", key),
            ("conversations/conversation", channel),
            ("conversations/message", message),
        ):
            url = f"/admin/{path}/{obj.pk}/"
            changed = staff.post(f"{url}change/", {"name": "x", "title": "x", "body": "x"})
            assert changed.status_code in (200, 403), path  # 200: a read-only view, nothing saved
            assert staff.post(f"{url}delete/", {"post": "yes"}).status_code == 403, path
            assert staff.get(f"/admin/{path}/add/").status_code == 403, path
        assert (Agent.objects.get(pk=nova.pk).name, Message.objects.get(pk=message.pk).body) == (
            "Nova",
            "hello",
        )
        assert Conversation.objects.get(pk=channel.pk).title == "general"

    def test_renaming_a_workspace_goes_through_its_action(self, staff, team_a):
        response = staff.post(
            f"/admin/workspaces/workspace/{team_a.id}/change/",
            {
                "name": "Renamed",
                "memberships-TOTAL_FORMS": "0",
                "memberships-INITIAL_FORMS": "0",
                "memberships-MIN_NUM_FORMS": "0",
                "memberships-MAX_NUM_FORMS": "1000",
            },
        )
        assert response.status_code == 302, response.content[:500]
        team_a.refresh_from_db()
        assert team_a.name == "Renamed"
