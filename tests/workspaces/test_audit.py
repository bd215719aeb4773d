"""The audit log: each security-relevant action writes one row in its own transaction (none when
it fails), read by the workspace's owner and admins only, newest first."""

import pytest
from django.db import transaction

from agents import actions as agent_actions
from tests.conftest import client_for
from workspaces import actions
from workspaces.exceptions import OwnerRule
from workspaces.models import AuditEntry, Role

pytestmark = pytest.mark.django_db


def rows(**filters):
    entries = AuditEntry.objects.filter(**filters).order_by("created_at")
    return list(entries.values_list("action", flat=True))


def test_each_action_writes_one_row(alice, bob, team_a, nova):
    owner = team_a.memberships.get(user=alice)
    bobs = team_a.memberships.get(user=bob)
    AuditEntry.objects.all().delete()  # the fixtures' own tokens and keys
    actions.create_invitation(owner, Role.MEMBER, "dana@example.com")
    actions.change_role(owner, bobs, Role.ADMIN)
    credential = actions.create_credential(owner, "model", "sk-secret")
    grant, _ = agent_actions.grant_credential(owner, credential, nova)
    agent_actions.revoke_credential_grant(owner, grant)
    actions.delete_credential(owner, credential)
    actions.remove_member(owner, bobs)
    assert rows(workspace=team_a) == [
        "invitation.created",
        "member.role_changed",
        "credential.created",
        "credential.granted",
        "credential.grant_revoked",
        "credential.deleted",
        "member.removed",
    ]
    role = AuditEntry.objects.get(action="member.role_changed")
    assert role.actor_user == alice and role.target_label == bob.label
    assert role.details == {"old": "member", "new": "admin"}
    assert "sk-secret" not in str(list(AuditEntry.objects.values()))


def test_keys_and_tokens_are_recorded_in_the_persons_own_workspace(alice, nova):
    personal = alice.owned_workspaces.get(kind="personal")
    AuditEntry.objects.all().delete()
    key, _ = agent_actions.create_agent_key(nova, "laptop")
    agent_actions.revoke_agent_key(key)
    token, _ = actions.issue_api_token(alice, "ci")
    actions.revoke_api_token(token)
    assert rows(workspace=personal) == [
        "agent_key.created",
        "agent_key.revoked",
        "api_token.issued",
        "api_token.revoked",
    ]


def test_a_refused_action_writes_nothing(alice, team_a):
    owner = team_a.memberships.get(user=alice)
    before = AuditEntry.objects.count()
    with pytest.raises(OwnerRule):
        actions.change_role(owner, owner, Role.MEMBER)
    assert AuditEntry.objects.count() == before


def test_a_rolled_back_action_leaves_no_row(alice, team_a):
    owner = team_a.memberships.get(user=alice)
    before = AuditEntry.objects.count()
    with pytest.raises(RuntimeError), transaction.atomic():
        actions.create_credential(owner, "model", "sk-1")
        raise RuntimeError("the surrounding work failed")
    assert AuditEntry.objects.count() == before


def test_owners_read_the_log_newest_first_by_page_and_by_action(alice, team_a):
    owner = team_a.memberships.get(user=alice)
    for n in range(3):
        actions.create_credential(owner, f"c{n}", "v")
    actions.create_invitation(owner)
    api = client_for(alice)
    first = api.get(f"/api/v1/workspaces/{team_a.id}/audit/?limit=2")
    assert first.status_code == 200
    body = first.json()
    assert [e["action"] for e in body["results"]] == ["invitation.created", "credential.created"]
    assert body["hasMore"] is True
    assert body["results"][1]["target"]["label"] == "c2"
    assert body["results"][1]["actor"]["userId"] == str(alice.id)
    rest = api.get(
        f"/api/v1/workspaces/{team_a.id}/audit/?limit=2&before={body['results'][1]['id']}"
    ).json()
    assert [e["target"]["label"] for e in rest["results"]] == ["c1", "c0"]
    only = api.get(f"/api/v1/workspaces/{team_a.id}/audit/?action=invitation.created").json()
    assert only["results"] and {e["action"] for e in only["results"]} == {"invitation.created"}


def test_the_client_address_is_recorded_from_the_request(alice, team_a):
    api = client_for(alice)
    answer = api.post(
        f"/api/v1/workspaces/{team_a.id}/credentials/",
        {"name": "model", "value": "sk-x"},
        format="json",
        REMOTE_ADDR="10.1.2.3",
    )
    assert answer.status_code == 201
    assert AuditEntry.objects.get(action="credential.created").address == "10.1.2.3"


def test_a_member_is_refused_and_another_workspace_is_not_found(alice, bob, charlie, team_a):
    actions.create_invitation(team_a.memberships.get(user=alice))
    member = client_for(bob).get(f"/api/v1/workspaces/{team_a.id}/audit/")
    assert member.status_code == 403 and "results" not in member.json()
    outsider = client_for(charlie).get(f"/api/v1/workspaces/{team_a.id}/audit/")
    assert outsider.status_code == 404


def test_the_settings_page_shows_the_log_to_owners_only(alice, bob, team_a):
    from django.test import Client

    actions.create_credential(team_a.memberships.get(user=alice), "model-key", "v")
    url = f"/w/{team_a.id}/members/"
    owner, member = Client(), Client()
    owner.force_login(alice)
    member.force_login(bob)
    page = owner.get(url).content.decode()
    assert "Audit log" in page and "credential.created" in page and "model-key" in page
    assert "Audit log" not in member.get(url).content.decode()


def test_skills_published_and_unpublished_are_recorded(alice):
    from work import skills

    personal = alice.owned_workspaces.get(kind="personal")
    md = "---\nname: inbox-sort\ndescription: Sort an inbox. Use for email.\n---\n# Steps\n"
    skill = skills.create_skill(alice, skills.parse_skill_md(md))
    AuditEntry.objects.all().delete()
    skills.update_skill(alice, skill, published=True)
    skills.update_skill(alice, skill, published=True)  # already published: nothing new
    skills.update_skill(alice, skill, published=False)
    assert rows(workspace=personal) == ["skill.published", "skill.unpublished"]
    assert AuditEntry.objects.filter(target_label="inbox-sort", actor_user=alice).count() == 2


def test_host_keys_and_tokens_are_recorded(alice, team_a, nova):
    from agents import hosting

    key = (
        "-----BEGIN OPENSSH PRIVATE KEY-----\nsecret-key-text\n-----END OPENSSH PRIVATE KEY-----\n"
    )
    AuditEntry.objects.all().delete()
    host = hosting.create_host(
        workspace=team_a, name="edge-1", address="10.0.0.5", ssh_key=key, by=alice
    )
    hosting.update_host(host, ssh_key=key, by=alice)
    hosting.update_host(host, capacity=3, by=alice)  # not a key: not recorded
    hosting.clear_host_key(host, by=alice)
    hosting.issue_host_token(host)
    hosting.place_agent(nova, host)
    hosting.issue_host_token(host, nova)
    hosting.make_agent_local(nova)
    assert rows(workspace=team_a) == [
        "host.ssh_key_set",
        "host.ssh_key_set",
        "host.host_key_cleared",
        "host_token.issued",
        "host_token.issued",
        "host_token.revoked",
    ]
    issued = AuditEntry.objects.filter(action="host_token.issued").order_by("created_at")
    assert [e.details["kind"] for e in issued] == ["supervisor", "placement"]
    assert issued[1].details["agent_name"] == "Nova"
    assert "secret-key-text" not in str(list(AuditEntry.objects.values()))


def test_host_keys_through_the_api_name_who_set_them(alice, team_a, api, tmp_path):
    from tests.work.sshd import keygen

    keygen(tmp_path / "k")
    key = (tmp_path / "k").read_text()
    AuditEntry.objects.all().delete()
    url = f"/api/v1/workspaces/{team_a.id}/hosts/"
    body = {"name": "edge-2", "address": "edge-2.example.com", "sshKey": key}
    created = api(alice).post(url, body, format="json")
    assert created.status_code == 201, created.content
    host_url = f"{url}{created.json()['id']}/"
    assert api(alice).delete(f"{host_url}host-key/").status_code in (200, 204)
    entries = AuditEntry.objects.filter(workspace=team_a).order_by("created_at")
    assert [(e.action, e.actor_user_id, e.target_label) for e in entries] == [
        ("host.ssh_key_set", alice.id, "edge-2"),
        ("host.host_key_cleared", alice.id, "edge-2"),
    ]


def test_deleting_a_workspace_is_recorded_in_the_owners_own_log(alice, bob, team_a, api):
    """The workspace's log goes with it: the owner's personal one keeps who deleted which, from
    where (a hijacked owner's account deleting a team leaves a trace)."""
    personal = alice.owned_workspaces.get(kind="personal")
    response = api(alice).delete(f"/api/v1/workspaces/{team_a.id}/", REMOTE_ADDR="203.0.113.9")
    assert response.status_code == 204
    entry = AuditEntry.objects.get(action="workspace.deleted")
    assert entry.workspace_id == personal.id and entry.actor_user == alice
    assert (entry.target_id, entry.target_label) == (str(team_a.id), "Team A")
    assert entry.details == {"members": 2} and entry.address == "203.0.113.9"
