"""Tools end to end: a real bridge process (scripted model) against a real daphne server. The
model's tool calls go through the socket, approvals through REST and the claim, and a bridge
killed while its call waits finishes the turn after a restart."""

import json
import os
import signal
from datetime import timedelta

import pytest
from django.utils import timezone

from conversations.actions import post_message
from conversations.models import Message, Participant
from tests.socket_helpers import agent_replies, start_bridge
from tests.waiting import wait_until
from work import actions as work_actions
from work import approvals
from work.models import PermissionRequest, ToolCall
from work.tools.registry import REGISTRY

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

SCRIPT = json.dumps(
    {"replies": {"wrap up": [{"tool": "done", "input": {}}, {"text": "Wrapped up."}]}}
)


def stop(bridge) -> str:
    bridge.terminate()
    output = bridge.communicate(timeout=10)[0]
    assert "Traceback" not in output, output
    return output


def ask_before(alice, nova, tool="done"):
    work_actions.set_agent_permission(alice, nova, REGISTRY[tool], "ask")


def pending_request():
    return wait_until(
        lambda: PermissionRequest.objects.filter(status="pending").first(),
        what="a permission request",
    )


def reply_bodies(channel, nova):
    return [m.body for m in agent_replies(channel, nova)]


def test_a_model_acts_through_its_tools(alice, channel, nova, server, tmp_path):
    bridge = start_bridge(server, nova, tmp_path, SCRIPT)
    try:
        question = post_message(alice, channel, "wrap up")
        # A restarted bridge is a new Python process: on a loaded machine it takes a while.
        wait_until(
            lambda: reply_bodies(channel, nova) == ["Wrapped up."], what="the reply", timeout=60
        )
        call = ToolCall.objects.get()
        assert (call.tool, call.status, call.message_id) == ("done", "succeeded", question.id)
        assert Participant.objects.get(conversation=channel, agent=nova).done_at is not None
    finally:
        stop(bridge)


def test_an_approved_call_lets_the_turn_finish(alice, channel, nova, server, tmp_path, api):
    ask_before(alice, nova)
    bridge = start_bridge(server, nova, tmp_path, SCRIPT)
    try:
        post_message(alice, channel, "wrap up")
        request = pending_request()
        assert reply_bodies(channel, nova) == []
        response = api(alice).post(
            f"/api/v1/permission-requests/{request.id}/decision/",
            {"decision": "approve"},
            format="json",
        )
        assert response.status_code == 200
        # A restarted bridge is a new Python process: on a loaded machine it takes a while.
        wait_until(
            lambda: reply_bodies(channel, nova) == ["Wrapped up."], what="the reply", timeout=60
        )
        assert ToolCall.objects.get().status == "succeeded"
        wait_until(
            lambda: PermissionRequest.objects.filter(acked_at__isnull=False).exists(),
            what="the decision acked",
        )
    finally:
        stop(bridge)


def test_a_denied_call_reaches_the_model(alice, channel, nova, server, tmp_path, api):
    ask_before(alice, nova)
    bridge = start_bridge(server, nova, tmp_path)
    try:
        post_message(alice, channel, "[[tool:done]]")
        request = pending_request()
        approvals.decide_permission(alice, request, approve=False)
        (body,) = wait_until(lambda: reply_bodies(channel, nova), what="the reply")
        assert (
            body
            == "Used done (failed: alice denied this call to done. Do not try it again; go on without it or ask what they would like instead.)."
        )
        assert Participant.objects.get(conversation=channel, agent=nova).done_at is None
    finally:
        stop(bridge)


def test_an_expired_request_fails_the_call(alice, channel, nova, server, tmp_path):
    ask_before(alice, nova)
    bridge = start_bridge(server, nova, tmp_path)
    try:
        post_message(alice, channel, "[[tool:done]]")
        pending_request()
        assert approvals.expire_permission_requests(timezone.now() + timedelta(minutes=16)) == 1
        (body,) = wait_until(lambda: reply_bodies(channel, nova), what="the reply")
        assert body.startswith("Used done (failed: approval expired: nobody approved")
    finally:
        stop(bridge)


def test_a_bridge_killed_while_its_call_waits_finishes_the_turn_after_a_restart(
    alice, channel, nova, server, tmp_path, api
):
    ask_before(alice, nova)
    bridge = start_bridge(server, nova, tmp_path, SCRIPT)
    post_message(alice, channel, "wrap up")
    request = pending_request()

    # The request is written before the bridge hears of it and parks the turn on disk.
    def parked_keys():
        files = list(tmp_path.glob("*/sessions.json"))
        return files and [k for k in json.loads(files[0].read_text()) if k.startswith("parked:")]

    parked = wait_until(parked_keys, what="the turn parked on disk")
    sessions = next(tmp_path.glob("*/sessions.json"))
    os.kill(bridge.pid, signal.SIGKILL)
    bridge.wait()
    response = api(alice).post(
        f"/api/v1/permission-requests/{request.id}/decision/",
        {"decision": "approve"},
        format="json",
    )
    assert response.status_code == 200
    restarted = start_bridge(server, nova, tmp_path, SCRIPT)
    try:
        # A restarted bridge is a new Python process: on a loaded machine it takes a while.
        wait_until(
            lambda: reply_bodies(channel, nova) == ["Wrapped up."], what="the reply", timeout=60
        )
        assert ToolCall.objects.count() == 1 and ToolCall.objects.get().status == "succeeded"
        assert Message.objects.filter(conversation=channel, kind="notice").count() == 0
        wait_until(
            lambda: not any(k in json.loads(sessions.read_text()) for k in parked),
            what="the parked turn cleared",
        )
    finally:
        stop(restarted)
