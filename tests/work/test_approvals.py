"""Tool calls that wait for a person (TOOL-5, TOOL-6): asked, shown live, decided by those who
may, expired by the sweep, and the decision claimed by the agent's connection like any work
(MSG-6), so an offline bridge gets it on reconnect."""

import pytest
from asgiref.sync import sync_to_async
from django.utils import timezone

from conversations import actions
from conversations.models import Message
from tests.conftest import agent_session
from tests.socket_helpers import agent_communicator, frames_until, live_socket_for
from tests.work.test_tool_frames import NOTE, call, connected, held_message, note, notices
from work import approvals
from work.models import PermissionRequest, ToolCall, ToolPermission
from work.tools.registry import REGISTRY, Tool, register
from workspaces import actions as workspace_actions
from workspaces.models import AuditEntry

pytestmark = pytest.mark.django_db(transaction=True)

post = sync_to_async(actions.post_message)


@pytest.fixture
def outside_tool():
    """A tool that reaches outside: it waits for a person by default."""
    tool = register(Tool("test_outside", "Post a note, from outside.", NOTE, "external", note))
    yield tool
    REGISTRY.pop(tool.name, None)


async def decide(api, user, request_id, decision, always=False):
    """POST a decision as USER, over REST (in a thread: these tests run in an event loop)."""

    def send():
        return api(user).post(
            f"/api/v1/permission-requests/{request_id}/decision/",
            {"decision": decision, "always": always},
            format="json",
        )

    return await sync_to_async(send)()


async def pending_call(comm, alice, channel, call_id="a-1", text="outside"):
    work = await held_message(comm, alice, channel)
    answer = await call(comm, work["id"], call_id, "test_outside", {"text": text})
    assert answer["ok"] is False and set(answer["pending"]) == {"requestId", "expiresAt"}
    return work, answer["pending"]["requestId"]


async def decision_frame(comm):
    frames = await frames_until(comm, lambda f: f.get("kind") == "permission")
    return frames[-1]


async def test_an_approved_call_runs_once_the_agent_claims_the_decision(
    alice, bob, charlie, team_b, channel, nova, outside_tool, api
):
    comm = await connected(nova)
    browser = await live_socket_for(bob)
    work, request_id = await pending_call(comm, alice, channel)
    assert await sync_to_async(notices)(channel) == []
    shown = await frames_until(browser, lambda f: f["type"] == "tool.updated")
    assert shown[-1]["call"]["status"] == "waiting"
    assert shown[-1]["call"]["request"]["status"] == "pending"
    # A member who is neither the agent's owner nor an admin sees it but may not decide; an
    # outsider does not even find it.
    refused = await decide(api, bob, request_id, "approve")
    assert refused.status_code == 403 and refused.json()["error"]["code"] == "not_a_decider"
    hidden = await decide(api, charlie, request_id, "approve")
    assert hidden.status_code == 404
    assert (await PermissionRequest.objects.aget(pk=request_id)).status == "pending"

    approved = await decide(api, alice, request_id, "approve")
    assert approved.status_code == 200 and approved.json()["request"]["status"] == "approved"
    decision = await decision_frame(comm)
    assert decision["payload"]["requestId"] == request_id
    assert decision["payload"]["status"] == "approved" and decision["payload"]["callId"] == "a-1"
    await comm.send_json_to({"type": "ack", "id": decision["id"]})
    result = await call(comm, work["id"], "a-1", "test_outside", {"text": "outside"})
    assert result["ok"] is True
    assert await sync_to_async(notices)(channel) == ["outside"]
    again = await call(comm, work["id"], "a-1", "test_outside", {"text": "outside"})
    assert again["ok"] is True and await sync_to_async(notices)(channel) == ["outside"]
    assert (await PermissionRequest.objects.aget(pk=request_id)).acked_at is not None
    await comm.disconnect()
    await browser.disconnect()


async def test_a_workspace_admin_may_decide_and_a_denial_reaches_the_model(
    alice, bob, team_a, channel, nova, outside_tool, api
):
    owner = await team_a.memberships.aget(user=alice)
    bobs = await team_a.memberships.aget(user=bob)
    await sync_to_async(workspace_actions.change_role)(owner, bobs, "admin")
    comm = await connected(nova)
    work, request_id = await pending_call(comm, alice, channel)
    denied = await decide(api, bob, request_id, "deny")
    assert denied.status_code == 200
    decision = await decision_frame(comm)
    assert decision["payload"]["status"] == "denied"
    result = await call(comm, work["id"], "a-1", "test_outside", {"text": "outside"})
    assert result["error"]["code"] == "approval_denied"
    assert result["error"]["message"].startswith("bob denied this call to test_outside")
    assert await sync_to_async(notices)(channel) == []
    twice = await decide(api, alice, request_id, "approve")
    assert twice.status_code == 409 and twice.json()["error"]["code"] == "approval_decided"
    # The decision is in the workspace's audit log, once (the refused second one wrote nothing).
    entries = [
        (e.action, e.actor_user_id, e.workspace_id, e.target_label)
        async for e in AuditEntry.objects.filter(action__startswith="approval.")
    ]
    assert entries == [("approval.denied", bob.id, team_a.id, "test_outside")]
    await comm.disconnect()


async def test_an_unanswered_request_expires_and_a_late_approval_is_refused(
    alice, team_a, channel, nova, outside_tool, api, clock
):
    # Two minutes here: the agent's session (15 minutes) must outlive the request.
    await type(team_a).objects.filter(pk=team_a.pk).aupdate(approval_expiry_minutes=2)
    comm = await connected(nova)
    work, request_id = await pending_call(comm, alice, channel)
    assert await sync_to_async(approvals.expire_permission_requests)(timezone.now()) == 0
    clock.advance(2 * 60 + 1)
    assert await sync_to_async(approvals.expire_permission_requests)() == 1
    decision = await decision_frame(comm)
    assert decision["payload"]["status"] == "expired"
    late = await decide(api, alice, request_id, "approve")
    assert late.status_code == 409 and late.json()["error"]["code"] == "approval_expired"
    result = await call(comm, work["id"], "a-1", "test_outside", {"text": "outside"})
    assert result["error"]["code"] == "approval_expired"
    assert result["error"]["message"].startswith("approval expired")
    assert await sync_to_async(notices)(channel) == []
    await comm.disconnect()


async def test_a_late_approval_after_the_time_is_refused_before_the_sweep(
    alice, channel, nova, outside_tool, api, clock
):
    comm = await connected(nova)
    _, request_id = await pending_call(comm, alice, channel)
    request = await PermissionRequest.objects.aget(pk=request_id)
    assert round((request.expires_at - request.created_at).total_seconds()) == 15 * 60
    clock.advance(16 * 60)
    late = await decide(api, alice, request_id, "approve")
    assert late.status_code == 409 and late.json()["error"]["code"] == "approval_expired"
    assert (await PermissionRequest.objects.aget(pk=request_id)).status == "pending"
    await comm.disconnect()


async def test_always_allow_writes_a_standing_permission(
    alice, channel, team_a, nova, outside_tool, api
):
    comm = await connected(nova)
    work, request_id = await pending_call(comm, alice, channel)
    approved = await decide(api, alice, request_id, "approve", always=True)
    assert approved.status_code == 200 and approved.json()["request"]["always"] is True
    permission = await ToolPermission.objects.aget(agent=nova, workspace=team_a)
    assert (permission.tool, permission.decision) == ("test_outside", "allow")
    # Another call to the same tool in this workspace runs at once.
    result = await call(comm, work["id"], "a-2", "test_outside", {"text": "second"})
    assert result["ok"] is True
    assert await sync_to_async(notices)(channel) == ["second"]
    await comm.disconnect()


async def test_a_workspace_deny_wins_over_the_agents_own_allow(
    alice, channel, team_a, nova, outside_tool, api
):
    client = await sync_to_async(api)(alice)
    await sync_to_async(client.patch)(
        f"/api/v1/agents/{nova.id}/tools/test_outside/", {"permission": "allow"}, format="json"
    )
    comm = await connected(nova)
    work = await held_message(comm, alice, channel)
    allowed = await call(comm, work["id"], "w-1", "test_outside", {"text": "one"})
    assert allowed["ok"] is True
    made = await sync_to_async(client.post)(
        f"/api/v1/workspaces/{team_a.id}/tool-permissions/",
        {"risk": "external", "decision": "deny"},
        format="json",
    )
    assert made.status_code == 201
    refused = await call(comm, work["id"], "w-2", "test_outside", {"text": "two"})
    assert refused["error"]["code"] == "tool_denied"
    assert await sync_to_async(notices)(channel) == ["one"]
    await comm.disconnect()


async def test_an_offline_bridge_gets_the_decision_when_it_reconnects(
    alice, channel, nova, outside_tool, api
):
    comm = await connected(nova)
    work, request_id = await pending_call(comm, alice, channel)
    await comm.disconnect()  # the bridge goes away while the call waits
    approved = await decide(api, alice, request_id, "approve")
    assert approved.status_code == 200
    back = await connected(nova)
    frames = await frames_until(back, lambda f: f.get("kind") == "permission")
    redelivered = [f for f in frames if f.get("kind") == "message"]
    assert [f["id"] for f in redelivered] == [work["id"]]
    assert frames[-1]["payload"]["requestId"] == request_id
    result = await call(back, work["id"], "a-1", "test_outside", {"text": "outside"})
    assert result["ok"] is True and await sync_to_async(notices)(channel) == ["outside"]
    assert await ToolCall.objects.filter(call_id="a-1").acount() == 1
    await back.disconnect()


async def test_the_workspace_sets_how_long_requests_wait(
    alice, team_a, channel, nova, outside_tool, api
):
    client = await sync_to_async(api)(alice)
    changed = await sync_to_async(client.patch)(
        f"/api/v1/workspaces/{team_a.id}/", {"approvalExpiryMinutes": 3}, format="json"
    )
    assert changed.status_code == 200 and changed.json()["approvalExpiryMinutes"] == 3
    comm = await connected(nova)
    _, request_id = await pending_call(comm, alice, channel)
    request = await PermissionRequest.objects.aget(pk=request_id)
    assert round((request.expires_at - request.created_at).total_seconds()) == 3 * 60
    await comm.disconnect()


async def test_no_message_is_posted_for_a_waiting_call(alice, channel, nova, outside_tool):
    comm = await connected(nova)
    await pending_call(comm, alice, channel)
    assert await Message.objects.filter(conversation=channel).acount() == 1
    assert await comm.receive_nothing(timeout=0.2)
    await comm.disconnect()


async def test_an_approved_call_resent_from_other_work_does_not_run_there(
    alice, channel, team_a, nova, outside_tool, api
):
    """An approval is for the call as it was asked: the same call id sent from another item
    (another conversation, possibly another workspace with its own rules) is refused and runs
    nothing; from its own item it runs once."""
    other = await sync_to_async(actions.create_conversation)(
        alice, team_a, kind="channel", title="elsewhere", agent_ids=[nova.id]
    )
    token = await sync_to_async(agent_session)(nova)
    comm = agent_communicator(token, "prefetch=2")
    assert (await comm.connect())[0]
    assert (await frames_until(comm, lambda f: f["type"] == "hello"))[-1]["type"] == "hello"
    work, request_id = await pending_call(comm, alice, channel)
    elsewhere = await held_message(comm, alice, other)
    assert (await decide(api, alice, request_id, "approve")).status_code == 200
    decision = await decision_frame(comm)
    await comm.send_json_to({"type": "ack", "id": decision["id"]})
    moved = await call(comm, elsewhere["id"], "a-1", "test_outside", {"text": "outside"})
    assert moved["ok"] is False and moved["error"]["code"] == "call_id_reused", moved
    assert await sync_to_async(notices)(other) == [] and await sync_to_async(notices)(channel) == []
    ran = await call(comm, work["id"], "a-1", "test_outside", {"text": "outside"})
    assert ran["ok"] is True and await sync_to_async(notices)(channel) == ["outside"]
    await comm.disconnect()


async def test_a_deny_set_while_a_call_waited_wins_over_its_approval(
    alice, channel, team_a, nova, outside_tool, api
):
    comm = await connected(nova)
    work, request_id = await pending_call(comm, alice, channel)
    assert (await decide(api, alice, request_id, "approve")).status_code == 200
    decision = await decision_frame(comm)
    await comm.send_json_to({"type": "ack", "id": decision["id"]})
    client = await sync_to_async(api)(alice)
    made = await sync_to_async(client.post)(
        f"/api/v1/workspaces/{team_a.id}/tool-permissions/",
        {"tool": "test_outside", "decision": "deny"},
        format="json",
    )
    assert made.status_code == 201, made.content
    refused = await call(comm, work["id"], "a-1", "test_outside", {"text": "outside"})
    assert refused["ok"] is False and refused["error"]["code"] == "tool_denied"
    assert await sync_to_async(notices)(channel) == []
    await comm.disconnect()


async def test_a_stopped_turn_withdraws_what_it_waited_to_have_approved(
    alice, bob, channel, nova, outside_tool, api
):
    """Stop while a call waits: its request ends (expired) at once, a late Approve is refused and
    runs nothing, and the deciders' inbox items say the turn was stopped instead of asking."""
    comm = await connected(nova)
    work, request_id = await pending_call(comm, alice, channel)
    stop = await sync_to_async(
        lambda: api(alice).post(
            f"/api/v1/conversations/{channel.id}/stop/", {"work": work["id"]}, format="json"
        )
    )()
    assert stop.status_code == 202
    decision = await decision_frame(comm)  # the cancel, then the request's end, claimed
    assert decision["payload"]["status"] == "expired"
    late = await decide(api, alice, request_id, "approve")
    assert late.status_code == 409 and late.json()["error"]["code"] == "approval_expired"
    request = await PermissionRequest.objects.aget(pk=request_id)
    assert request.status == "expired" and request.decided_by_id is None
    texts = await sync_to_async(
        lambda: list(alice.notifications.filter(kind="approval").values_list("text", "read_at"))
    )()
    assert [(text, read is not None) for text, read in texts] == [
        ("Nova asked to use test_outside: its turn was stopped", True)
    ]
    await comm.disconnect()


async def test_a_cancelled_task_withdraws_what_it_waited_to_have_approved(
    alice, team_a, nova, outside_tool, api
):
    """As a Stop does for a chat turn: the request ends (expired) at once, a late Approve is
    refused, and the inbox item says the task was cancelled instead of asking."""
    from conversations import tasks

    comm = await connected(nova)
    task = await sync_to_async(tasks.create_task)(alice, team_a, nova, "Post a note outside.")
    (work,) = await frames_until(comm, lambda f: f.get("kind") == "task")
    answer = await call(comm, work["id"], "t-1", "test_outside", {"text": "outside"})
    request_id = answer["pending"]["requestId"]
    cancelled = await sync_to_async(
        lambda: api(alice).post(f"/api/v1/tasks/{task.id}/cancel/", format="json")
    )()
    assert cancelled.status_code in (200, 202), cancelled.content
    decision = await decision_frame(comm)  # the cancel, then the request's end, claimed
    assert decision["payload"]["status"] == "expired"
    late = await decide(api, alice, request_id, "approve")
    assert late.status_code == 409 and late.json()["error"]["code"] == "approval_expired"
    texts = await sync_to_async(
        lambda: list(alice.notifications.filter(kind="approval").values_list("text", flat=True))
    )()
    assert texts == ["Nova asked to use test_outside: its task was cancelled"]
    await comm.disconnect()
