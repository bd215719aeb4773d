"""Tool settings in the pages: an agent's tools for its owner, a workspace's tool permissions and
approval expiry for its admins. Alice owns team A and Nova; Bob is a member; Charlie, an outsider
with team B, sees and changes nothing."""

import pytest

from work.models import ToolGrant, ToolPermission

pytestmark = pytest.mark.django_db


def test_the_owner_sees_the_agents_tools_and_others_do_not(client, alice, bob, team_a, nova):
    url = f"/w/{team_a.id}/agents/{nova.id}/"
    client.force_login(alice)
    page = client.get(url).content.decode()
    assert 'id="tools-title"' in page
    assert f'action="/api/v1/agents/{nova.id}/tools/artifact_publish/"' in page
    assert "Publish a document" in page  # the description
    client.force_login(bob)
    assert 'id="tools-title"' not in client.get(url).content.decode()


def test_an_agents_tool_settings_show_what_was_set(client, alice, team_a, nova, api):
    owner = api(alice)
    url = f"/api/v1/agents/{nova.id}/tools/artifact_publish/"
    assert (
        owner.patch(url, {"granted": False, "permission": "deny"}, format="json").status_code == 200
    )
    client.force_login(alice)
    page = client.get(f"/w/{team_a.id}/agents/{nova.id}/").content.decode()
    row = page.split('data-tool="artifact_publish"')[1].split("</tr>")[0]
    assert 'name="granted"' in row and "checked" not in row.split('name="granted"')[1].split(">")[0]
    assert '<option value="deny" selected>' in row


def test_an_outsider_cannot_see_or_change_an_agents_tools(
    client, charlie, team_a, team_b, nova, api
):
    client.force_login(charlie)
    assert client.get(f"/w/{team_a.id}/agents/{nova.id}/").status_code == 404
    assert client.get(f"/w/{team_b.id}/agents/{nova.id}/").status_code == 404
    response = api(charlie).patch(
        f"/api/v1/agents/{nova.id}/tools/artifact_publish/", {"granted": False}, format="json"
    )
    assert response.status_code == 404
    assert not ToolGrant.objects.exists()


def test_bad_tool_settings_are_refused_and_change_nothing(alice, nova, api):
    owner = api(alice)
    url = f"/api/v1/agents/{nova.id}/tools/artifact_publish/"
    for body in ({"permission": "sometimes"}, {"granted": "perhaps"}, {}):
        assert owner.patch(url, body, format="json").status_code == 400, body
    assert (
        owner.patch(
            f"/api/v1/agents/{nova.id}/tools/no_such_tool/", {"granted": True}, format="json"
        ).status_code
        == 404
    )
    assert not ToolGrant.objects.exists() and not ToolPermission.objects.exists()


def test_workspace_tool_permissions_are_for_admins_only(client, alice, bob, team_a, api):
    url = f"/w/{team_a.id}/members/"
    client.force_login(alice)
    page = client.get(url).content.decode()
    assert 'id="tool-permissions-title"' in page
    assert 'name="approvalExpiryMinutes"' in page
    for risk in ("read", "write", "external", "destructive"):
        assert f'data-risk="{risk}"' in page
    client.force_login(bob)
    page = client.get(url).content.decode()
    assert 'id="tool-permissions-title"' not in page and "approvalExpiryMinutes" not in page
    response = api(bob).post(
        f"/api/v1/workspaces/{team_a.id}/tool-permissions/",
        {"risk": "external", "decision": "allow"},
        format="json",
    )
    assert response.status_code == 403
    assert not ToolPermission.objects.exists()


def test_a_workspace_permission_set_shows_with_a_reset(client, alice, team_a, api):
    created = api(alice).post(
        f"/api/v1/workspaces/{team_a.id}/tool-permissions/",
        {"risk": "external", "decision": "deny"},
        format="json",
    )
    assert created.status_code == 201
    client.force_login(alice)
    page = client.get(f"/w/{team_a.id}/members/").content.decode()
    row = page.split('data-risk="external"')[1].split("</tr>")[0]
    assert '<option value="deny" selected>' in row
    assert f"/tool-permissions/{created.json()['id']}/" in row  # its reset


def test_an_outsider_cannot_change_workspace_tool_settings(charlie, team_a, api):
    outsider = api(charlie)
    posted = outsider.post(
        f"/api/v1/workspaces/{team_a.id}/tool-permissions/",
        {"risk": "external", "decision": "allow"},
        format="json",
    )
    patched = outsider.patch(
        f"/api/v1/workspaces/{team_a.id}/", {"approvalExpiryMinutes": 5}, format="json"
    )
    assert posted.status_code == patched.status_code == 404
    team_a.refresh_from_db()
    assert team_a.approval_expiry_minutes == 15 and not ToolPermission.objects.exists()


def test_a_bad_expiry_is_refused_and_changes_nothing(alice, team_a, api):
    for minutes in (0, 100000, "soon"):
        response = api(alice).patch(
            f"/api/v1/workspaces/{team_a.id}/", {"approvalExpiryMinutes": minutes}, format="json"
        )
        assert response.status_code == 400, minutes
    team_a.refresh_from_db()
    assert team_a.approval_expiry_minutes == 15
