"""Approvals whose agent goes: an approved call its bridge can no longer resend, and a deleted
agent's requests, end saying why. Alice owns Nova; Nova works in Team A (#general) and in
Alice's Team C."""

import pytest

from agents import actions as agent_actions
from conversations.actions import create_conversation
from tests.work.tooling import held_message, held_task
from work import actions as work_actions
from work import approvals
from work.models import PermissionRequest, ToolCall
from work.tools.registry import REGISTRY
from workspaces import actions as workspace_actions
from workspaces.models import Membership, Notification

pytestmark = pytest.mark.django_db


@pytest.fixture
def team_c(alice, nova):
    team_c = workspace_actions.create_team_workspace(alice, "Team C")
    create_conversation(alice, team_c, kind="channel", title="c", agent_ids=[nova.id])
    return team_c


def asked(held, alice, nova) -> PermissionRequest:
    """Nova's call to ``done`` from HELD, waiting for a person (Alice set it to ask)."""
    work_actions.set_agent_permission(alice, nova, REGISTRY["done"], "ask")
    answer = held.call("done", {})
    assert answer.pending is not None
    return PermissionRequest.objects.get(pk=answer.pending["request_id"])


def inbox_item(alice, request) -> Notification:
    (item,) = Notification.objects.filter(user=alice, target_id=request.pk)
    return item


def test_an_approved_call_ends_when_its_agent_leaves_before_running_it(
    alice, channel, nova, team_c
):
    request = asked(held_message(nova, channel, alice), alice, nova)
    approvals.decide_permission(alice, request, approve=True)
    # Taken out of Team A before its bridge resent the call: its turn there is dropped, so the
    # call would never be resent, and waited, "approved, running", for ever.
    agent_actions.set_agent_pins(nova, [team_c.id])
    call = ToolCall.objects.get(pk=request.call_id)
    assert call.status == ToolCall.Status.FAILED
    assert call.error_code == "work_out_of_reach"
    assert call.finished_at is not None
    request.refresh_from_db()
    assert request.status == PermissionRequest.Status.APPROVED  # what Alice decided stays
    assert inbox_item(alice, request).text == (
        f"Nova asked to use done: approved by {alice.label}, but not run: its agent no longer "
        "works in this workspace"
    )


def test_an_approved_task_call_waits_through_a_pin_change(alice, team_a, nova, team_c):
    """A task goes on where it was given while its owner belongs (PRO-2): its bridge resends."""
    request = asked(held_task(nova, team_a, alice), alice, nova)
    approvals.decide_permission(alice, request, approve=True)
    agent_actions.set_agent_pins(nova, [team_c.id])
    assert ToolCall.objects.get(pk=request.call_id).status == ToolCall.Status.WAITING


def test_an_approved_task_call_ends_when_its_agents_owner_leaves(alice, bob, team_a):
    rex = agent_actions.create_agent(bob, name="Rex", backend="scripted")
    request = asked(held_task(rex, team_a, bob), bob, rex)
    approvals.decide_permission(bob, request, approve=True)
    workspace_actions.leave_workspace(Membership.objects.get(user=bob, workspace=team_a))
    call = ToolCall.objects.get(pk=request.call_id)
    assert call.status == ToolCall.Status.FAILED and call.error_code == "work_out_of_reach"
    assert inbox_item(bob, request).text.endswith(
        "but not run: its agent's owner left this workspace"
    )


def test_a_deleted_agents_task_call_no_longer_asks(alice, team_a, nova):
    request = asked(held_task(nova, team_a, alice), alice, nova)
    agent_actions.delete_agent(nova)
    item = inbox_item(alice, request)
    assert item.read_at is not None
    assert item.text == "Nova asked to use done: its agent was deleted"


def test_a_deleted_agents_requests_end_where_it_no_longer_appears_too(alice, team_a, nova, team_c):
    """A task call in Team A waits through a pin to Team C; deleting Nova then ends it too,
    not only what waited where it appeared."""
    request = asked(held_task(nova, team_a, alice), alice, nova)
    agent_actions.set_agent_pins(nova, [team_c.id])
    assert approvals.decidable(alice, [request.pk]) == {request.pk}
    agent_actions.delete_agent(nova)
    item = inbox_item(alice, request)
    assert item.read_at is not None
    assert item.text == "Nova asked to use done: its agent was deleted"


def test_a_deleted_agents_approved_call_says_it_was_not_run(alice, channel, nova):
    request = asked(held_message(nova, channel, alice), alice, nova)
    approvals.decide_permission(alice, request, approve=True)
    agent_actions.delete_agent(nova)
    assert inbox_item(alice, request).text == (
        f"Nova asked to use done: approved by {alice.label}, but not run: its agent was deleted"
    )


def test_an_approved_call_ends_when_its_turn_is_stopped_before_running_it(alice, channel, nova):
    """A Stop drops the turn (the bridge acks it), so the call approved in it is never resent."""
    held = held_message(nova, channel, alice)
    request = asked(held, alice, nova)
    approvals.decide_permission(alice, request, approve=True)
    approvals.withdraw_stopped_requests("message", held.item_id)
    call = ToolCall.objects.get(pk=request.call_id)
    assert call.status == ToolCall.Status.FAILED and call.error_code == "work_stopped"
    assert inbox_item(alice, request).text == (
        f"Nova asked to use done: approved by {alice.label}, but not run: its turn was stopped"
    )
