"""Races around a waiting call (probe): decisions sent at the same instant by the agent's owner
and a workspace admin, and an approved call resent several times at once. One decision wins
whole; the call runs once."""

import pytest

from tests.concurrency import run_together
from tests.work.tooling import held_message
from work import actions as work_actions
from work import approvals
from work.models import MemoryItem, PermissionRequest, ToolCall, ToolPermission
from work.tools import calls
from work.tools.registry import REGISTRY
from workspaces import actions as workspace_actions
from workspaces.models import AuditEntry

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def waiting(alice, bob, team_a, channel, nova):
    """Nova's memory_remember in #general, waiting for a person; Bob is an admin of Team A."""
    owner = team_a.memberships.get(user=alice)
    workspace_actions.change_role(owner, team_a.memberships.get(user=bob), "admin")
    work_actions.set_agent_permission(alice, nova, REGISTRY["memory_remember"], "ask")
    held = held_message(nova, channel, alice)
    answer, prepared = calls.call_tool(
        nova, held.connection_id, held.kind, held.item_id, "race-1", "memory_remember",
        {"content": "Friday is release day"},
    )  # fmt: skip
    assert prepared is None and answer.pending is not None
    return held, PermissionRequest.objects.get(pk=answer.pending["request_id"])


def test_decisions_at_once_one_wins_whole(alice, bob, api, waiting):
    _, request = waiting
    url = f"/api/v1/permission-requests/{request.id}/decision/"
    bodies = [
        (alice, {"decision": "approve", "always": True}),
        (bob, {"decision": "deny"}),
        (alice, {"decision": "approve"}),
        (bob, {"decision": "approve", "always": True}),
    ]
    answers = run_together(
        lambda user, body: api(user).post(url, body, format="json"),
        bodies,
        prepare=lambda user, body: (user, body),
    )
    codes = sorted(a.status_code for a in answers)
    assert codes == [200, 409, 409, 409], [a.content for a in answers]
    assert {a.json()["error"]["code"] for a in answers if a.status_code == 409} == {
        "approval_decided"
    }
    request.refresh_from_db()
    (winner,) = [body for (_, body), a in zip(bodies, answers, strict=True) if a.status_code == 200]
    assert request.status == ("approved" if winner["decision"] == "approve" else "denied")
    assert AuditEntry.objects.filter(action__startswith="approval.").count() == 1
    always = ToolPermission.objects.filter(workspace__isnull=False, agent__isnull=False)
    assert always.count() == (1 if winner.get("always") else 0)


def test_an_approved_call_resent_at_once_runs_once(alice, nova, waiting):
    held, request = waiting
    approvals.decide_permission(alice, request, approve=True)

    def resend():
        answer, prepared = calls.call_tool(
            nova, held.connection_id, held.kind, held.item_id, "race-1", "memory_remember",
            {"content": "Friday is release day"},
        )  # fmt: skip
        if prepared is not None:
            answer = calls.run_prepared(prepared, calls.Guard())
        return answer

    answers = run_together(resend, [()] * 4)
    assert [a.ok for a in answers] == [True] * 4
    assert len({a.output for a in answers}) == 1
    assert MemoryItem.objects.filter(content="Friday is release day").count() == 1
    assert ToolCall.objects.get(call_id="race-1").status == "succeeded"
