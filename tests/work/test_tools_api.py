"""REST for tools: an agent's tools (its owner), a workspace's standing permissions (its admins),
the calls agents made (whoever may read where), and decisions. Others get 404; bad input 400;
neither changes anything."""

import pytest

from conversations import actions
from work import gateway
from work.models import ToolCall, ToolGrant, ToolPermission
from work.tools import calls
from work.tools.registry import granted_tools

pytestmark = pytest.mark.django_db


def made_call(agent, channel, author, name="done", arguments=None):
    """A call through the real path: a message claimed by a connection, then the tool call."""
    actions.post_message(author, channel, "over to you")
    (work,) = gateway.claim_work(agent, "conn-1", {"message": 1})
    answer, prepared = calls.call_tool(
        agent, "conn-1", "message", work["id"], "call-1", name, arguments or {}
    )
    if prepared is not None:
        answer = calls.run_prepared(prepared, calls.Guard())
    return ToolCall.objects.get(call_id="call-1"), answer


def test_the_owner_lists_and_changes_an_agents_tools(alice, nova, api):
    client = api(alice)
    listed = client.get(f"/api/v1/agents/{nova.id}/tools/").json()["results"]
    done = next(t for t in listed if t["name"] == "done")
    assert done == {
        "name": "done",
        "description": done["description"],
        "risk": "write",
        "connection": "",
        "platform": True,
        "granted": True,
        "permission": None,
        "defaultPermission": "allow",
    }
    changed = client.patch(
        f"/api/v1/agents/{nova.id}/tools/done/",
        {"granted": False, "permission": "ask"},
        format="json",
    )
    assert changed.status_code == 200
    assert (changed.json()["granted"], changed.json()["permission"]) == (False, "ask")
    assert "done" not in [t.name for t in granted_tools(nova)]
    assert ToolPermission.objects.get(agent=nova, tool="done").decision == "ask"
    # Given back: the default again, no row left.
    client.patch(
        f"/api/v1/agents/{nova.id}/tools/done/",
        {"granted": True, "permission": None},
        format="json",
    )
    assert not ToolGrant.objects.exists() and not ToolPermission.objects.exists()


def test_nobody_else_sees_or_changes_an_agents_tools(bob, charlie, team_b, nova, api):
    for person in (bob, charlie):
        client = api(person)
        assert client.get(f"/api/v1/agents/{nova.id}/tools/").status_code == 404
        response = client.patch(
            f"/api/v1/agents/{nova.id}/tools/done/", {"granted": False}, format="json"
        )
        assert response.status_code == 404
    assert not ToolGrant.objects.exists()


def test_bad_tool_changes_are_refused_and_change_nothing(alice, nova, api):
    client = api(alice)
    url = f"/api/v1/agents/{nova.id}/tools/"
    assert client.patch(url + "no_such_tool/", {"granted": False}, format="json").status_code == 404
    for body in ({}, {"granted": "no"}, {"permission": "sometimes"}, {"granted": False, "x": 1}):
        response = client.patch(url + "done/", body, format="json")
        assert response.status_code == 400, body
    assert not ToolGrant.objects.exists() and not ToolPermission.objects.exists()


def test_workspace_admins_set_standing_permissions_members_read_them(
    alice, bob, charlie, team_a, team_b, api
):
    url = f"/api/v1/workspaces/{team_a.id}/tool-permissions/"
    made = api(alice).post(url, {"risk": "external", "decision": "deny"}, format="json")
    assert made.status_code == 201 and made.json()["risk"] == "external"
    assert [p["decision"] for p in api(bob).get(url).json()["results"]] == ["deny"]
    refused = api(bob).post(url, {"tool": "done", "decision": "deny"}, format="json")
    assert refused.status_code == 403
    assert api(charlie).get(url).status_code == 404
    assert (
        api(charlie).post(url, {"risk": "read", "decision": "deny"}, format="json").status_code
        == 404
    )
    for body in ({"decision": "deny"}, {"tool": "done", "risk": "read", "decision": "deny"},
                 {"tool": "nope", "decision": "deny"}, {"risk": "read", "decision": "maybe"},
                 {"tool": "", "risk": "", "decision": "deny"}, {"risk": "", "decision": "deny"}):  # fmt: skip
        assert api(alice).post(url, body, format="json").status_code == 400, body
    assert ToolPermission.objects.count() == 1
    permission_id = made.json()["id"]
    assert api(bob).delete(f"{url}{permission_id}/").status_code == 403
    assert api(charlie).delete(f"{url}{permission_id}/").status_code == 404
    assert api(alice).delete(f"{url}{permission_id}/").status_code == 204
    assert not ToolPermission.objects.exists()


def test_calls_are_read_where_they_were_made(alice, bob, charlie, team_b, channel, nova, api):
    call, answer = made_call(nova, channel, alice)
    assert answer.ok
    listed = api(bob).get(f"/api/v1/conversations/{channel.id}/tool-calls/").json()["results"]
    assert [(c["tool"], c["status"], c["output"]) for c in listed] == [
        ("done", "succeeded", '{"done": true}')
    ]
    detail = api(bob).get(f"/api/v1/tool-calls/{call.id}/").json()
    assert detail["callId"] == "call-1" and detail["messageId"] == str(call.message_id)
    assert api(charlie).get(f"/api/v1/conversations/{channel.id}/tool-calls/").status_code == 404
    assert api(charlie).get(f"/api/v1/tool-calls/{call.id}/").status_code == 404


def test_a_decision_needs_a_visible_pending_request(alice, charlie, team_b, channel, nova, api):
    api(alice).patch(f"/api/v1/agents/{nova.id}/tools/done/", {"permission": "ask"}, format="json")
    call, answer = made_call(nova, channel, alice)
    assert answer.pending is not None
    url = f"/api/v1/permission-requests/{call.request.id}/decision/"
    assert api(charlie).post(url, {"decision": "approve"}, format="json").status_code == 404
    for body in ({}, {"decision": "yes"}, {"decision": "deny", "always": True}):
        assert api(alice).post(url, body, format="json").status_code == 400, body
    call.request.refresh_from_db()
    assert (
        call.request.status == "pending"
        and not ToolPermission.objects.filter(workspace__isnull=False).exists()
    )
    assert api(alice).post(url, {"decision": "approve"}, format="json").status_code == 200
