"""Tasks and the task contract (TASK-1, TASK-3) through REST and the agent socket."""

from datetime import timedelta

import pytest
from asgiref.sync import sync_to_async
from django.utils import timezone

from conversations import tasks
from conversations.models import Message, Task, TaskEvent, TurnUsage
from tests.conftest import agent_session, client_for
from tests.socket_helpers import agent_communicator, drain, next_frame

pytestmark = pytest.mark.django_db(transaction=True)


async def connect(token, query=""):
    comm = agent_communicator(token, query)
    assert (await comm.connect())[0]
    assert (await next_frame(comm))["type"] == "hello"
    return comm


def create_via_rest(
    user, agent, workspace, instructions="Summarise the quarter", conversation=None
):
    body = {"agent": str(agent.id), "workspace": str(workspace.id), "instructions": instructions}
    if conversation:
        body["conversation"] = str(conversation.id)
    response = client_for(user).post("/api/v1/tasks/", body, format="json")
    assert response.status_code == 201, response.json()
    return response.json()


async def test_a_task_runs_streams_events_and_ends_with_one_result(
    alice, bob, team_a, channel, nova
):
    created = await sync_to_async(create_via_rest)(bob, nova, team_a, conversation=channel)
    assert created["status"] == "queued"
    comm = await connect(await sync_to_async(agent_session)(nova))
    work = await next_frame(comm)
    assert work["kind"] == "task" and work["id"] == created["id"]
    assert work["payload"]["task"]["instructions"] == "Summarise the quarter"
    assert "Summarise the quarter" in work["payload"]["directives"]["volatile"]
    assert (await Task.objects.aget(pk=created["id"])).status == "running"
    for step in ("reading", "writing"):
        await comm.send_json_to(
            {"type": "event", "id": work["id"], "event": {"kind": "progress", "message": step}}
        )
    await comm.send_json_to(
        {
            "type": "result",
            "id": work["id"],
            "status": "completed",
            "result": {"text": "Revenue up 4%."},
            "usage": {
                "input_tokens": 120,
                "output_tokens": 30,
                "cache_read_tokens": 100,
                "latency_ms": 900,
            },
        }
    )
    assert await next_frame(comm) == {"type": "result.accepted", "id": work["id"]}
    task = await Task.objects.aget(pk=created["id"])
    assert (
        task.status == "completed"
        and task.result == {"text": "Revenue up 4%."}
        and task.protocol_errors == []
    )
    assert [
        e.data["message"] async for e in TaskEvent.objects.filter(task=task).order_by("seq")
    ] == ["reading", "writing"]
    usage = await TurnUsage.objects.aget(task=task)
    assert (usage.input_tokens, usage.output_tokens, usage.cache_read_tokens, usage.latency_ms) == (
        120,
        30,
        100,
        900,
    )
    # Only the final result is relayed back to the conversation where it was asked.
    relayed = [m.body async for m in Message.objects.filter(conversation=channel)]
    assert relayed == ["Revenue up 4%."]
    # Visible through the API, with its events and usage.
    detail = await sync_to_async(lambda: client_for(bob).get(f"/api/v1/tasks/{task.id}/").json())()
    assert [e["data"]["message"] for e in detail["events"]] == ["reading", "writing"]
    assert detail["usage"][0]["cacheReadTokens"] == 100
    # The latest events only (a task keeps thousands): the count says how many there were.
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr("work.api.EVENTS_SHOWN", 1)
        detail = await sync_to_async(
            lambda: client_for(bob).get(f"/api/v1/tasks/{task.id}/").json()
        )()
    assert [e["data"]["message"] for e in detail["events"]] == ["writing"]
    assert detail["eventCount"] == 2
    await comm.disconnect()


async def test_contract_violations_are_recorded_and_never_change_the_terminal_state(
    alice, team_a, nova
):
    created = await sync_to_async(create_via_rest)(alice, nova, team_a)
    comm = await connect(await sync_to_async(agent_session)(nova))
    work = await next_frame(comm)
    await comm.send_json_to(
        {"type": "result", "id": work["id"], "status": "failed", "error": "no data"}
    )
    assert (await next_frame(comm))["type"] == "result.accepted"
    await comm.send_json_to(
        {"type": "result", "id": work["id"], "status": "completed", "result": {"text": "late"}}
    )
    second = await next_frame(comm)
    assert second["type"] == "error" and second["code"] == "protocol_error"
    await comm.send_json_to(
        {"type": "event", "id": work["id"], "event": {"message": "after the end"}}
    )
    third = await next_frame(comm)
    assert third["code"] == "protocol_error"
    task = await Task.objects.aget(pk=created["id"])
    assert task.status == "failed" and task.error == "no data"
    assert [e["error"] for e in task.protocol_errors] == [
        "second terminal result (completed) after failed",
        "event after the terminal result",
    ]
    assert await TaskEvent.objects.acount() == 0
    await comm.send_json_to({"type": "result", "id": work["id"], "status": "done"})
    assert (await next_frame(comm))["code"] in {"bad_frame", "protocol_error"}
    await comm.disconnect()


async def test_a_missing_result_is_a_recorded_violation_and_the_task_is_retried(
    alice, team_a, nova
):
    created = await sync_to_async(create_via_rest)(alice, nova, team_a)
    token = await sync_to_async(agent_session)(nova)
    first = await connect(token)
    assert (await next_frame(first))["id"] == created["id"]
    await first.disconnect()
    task = await Task.objects.aget(pk=created["id"])
    assert task.status == "running" and len(task.protocol_errors) == 1
    assert "closed before the terminal result" in task.protocol_errors[0]["error"]
    second = await connect(token)
    again = await next_frame(second)
    assert again["id"] == created["id"] and again["payload"]["attempt"] == 2
    await second.send_json_to(
        {"type": "result", "id": again["id"], "status": "completed", "result": {"text": "ok"}}
    )
    assert (await next_frame(second))["type"] == "result.accepted"
    await second.disconnect()


async def test_cancelling_a_running_task_is_requested_then_confirmed(alice, team_a, nova):
    created = await sync_to_async(create_via_rest)(alice, nova, team_a)
    comm = await connect(await sync_to_async(agent_session)(nova))
    work = await next_frame(comm)
    response = await sync_to_async(
        lambda: client_for(alice).post(f"/api/v1/tasks/{created['id']}/cancel/")
    )()
    assert response.status_code == 202 and response.json()["cancelState"] == "requested"
    assert await next_frame(comm) == {"type": "cancel", "id": work["id"]}
    await comm.send_json_to({"type": "result", "id": work["id"], "status": "cancelled"})
    assert (await next_frame(comm))["type"] == "result.accepted"
    task = await Task.objects.aget(pk=created["id"])
    assert (task.status, task.cancel_state) == ("cancelled", "confirmed")
    again = await sync_to_async(
        lambda: client_for(alice).post(f"/api/v1/tasks/{created['id']}/cancel/")
    )()
    assert again.status_code == 409
    await comm.disconnect()


async def test_a_cancel_nobody_answers_ends_unknown(alice, team_a, nova):
    created = await sync_to_async(create_via_rest)(alice, nova, team_a)
    comm = await connect(await sync_to_async(agent_session)(nova))
    await next_frame(comm)
    task = await sync_to_async(tasks.request_cancel)(await Task.objects.aget(pk=created["id"]))
    assert await next_frame(comm) == {"type": "cancel", "id": created["id"]}
    assert await sync_to_async(tasks.settle_cancellations)(timezone.now()) == 0  # not yet
    later = task.cancel_requested_at + tasks.CANCEL_DEADLINE + timedelta(seconds=1)
    assert await sync_to_async(tasks.settle_cancellations)(later) == 1
    task = await Task.objects.aget(pk=created["id"])
    assert (task.status, task.cancel_state) == ("cancelled", "unknown")
    # The bridge answering now is too late: a protocol error, state unchanged.
    await comm.send_json_to({"type": "result", "id": created["id"], "status": "completed"})
    assert (await next_frame(comm))["code"] == "protocol_error"
    assert (await Task.objects.aget(pk=created["id"])).status == "cancelled"
    await comm.disconnect()


async def test_a_queued_task_is_cancelled_at_once(alice, team_a, nova):
    created = await sync_to_async(create_via_rest)(alice, nova, team_a)
    response = await sync_to_async(
        lambda: client_for(alice).post(f"/api/v1/tasks/{created['id']}/cancel/")
    )()
    assert response.status_code == 200 and response.json()["status"] == "cancelled"
    comm = await connect(await sync_to_async(agent_session)(nova))
    assert await comm.receive_nothing(timeout=0.3)
    await comm.disconnect()


async def test_lanes_keep_chat_moving_while_a_long_task_runs(alice, team_a, channel, nova):
    from conversations.actions import post_message

    await sync_to_async(create_via_rest)(alice, nova, team_a, "long research")
    comm = await connect(await sync_to_async(agent_session)(nova), "prefetch=1&tasks=1")
    task_work = await next_frame(comm)
    assert task_work["kind"] == "task"
    await sync_to_async(post_message)(alice, channel, "quick question")
    chat = await next_frame(comm)
    assert chat["kind"] == "message" and chat["payload"]["message"]["body"] == "quick question"
    # A second task waits for the task lane, not the chat lane.
    await sync_to_async(create_via_rest)(alice, nova, team_a, "another long one")
    assert await comm.receive_nothing(timeout=0.3)
    await comm.send_json_to({"type": "ack", "id": chat["id"]})
    await comm.send_json_to(
        {"type": "result", "id": task_work["id"], "status": "completed", "result": {"text": "x"}}
    )
    frames = await drain(comm)
    assert [f["type"] for f in frames] == ["result.accepted", "work"] and frames[1][
        "kind"
    ] == "task"
    await comm.disconnect()


def test_task_endpoints_reject_bad_input_and_outsiders(alice, charlie, team_a, team_b, nova, api):
    client = api(alice)
    for body in [
        {},
        {"agent": str(nova.id), "workspace": str(team_a.id)},
        {"agent": str(nova.id), "workspace": str(team_a.id), "instructions": "  "},
        {"agent": "x", "workspace": str(team_a.id), "instructions": "y"},
    ]:
        assert client.post("/api/v1/tasks/", body, format="json").status_code == 400
    # Nova does not appear in Charlie's workspace, and Charlie cannot see Alice's workspace or tasks.
    outsider = api(charlie)
    assert (
        outsider.post(
            "/api/v1/tasks/",
            {"agent": str(nova.id), "workspace": str(team_b.id), "instructions": "y"},
            format="json",
        ).status_code
        == 404
    )
    task = tasks.create_task(alice, team_a, nova, "private work")
    assert outsider.get(f"/api/v1/tasks/{task.id}/").status_code == 404
    assert outsider.post(f"/api/v1/tasks/{task.id}/cancel/").status_code == 404
    assert outsider.get(f"/api/v1/tasks/?workspace={team_a.id}").status_code == 404
    assert str(task.id) not in outsider.get("/api/v1/tasks/").content.decode()
    assert Task.objects.get(pk=task.pk).status == "queued"


def test_a_member_cannot_cancel_work_someone_else_gave_someone_elses_agent(
    alice, bob, charlie, team_a, nova, api
):
    """Bob sees the task Alice gave her agent, and cannot stop it; Alice, who gave it and owns
    Nova, can; so can an admin of the workspace (Bob, once made one)."""
    from workspaces.models import Membership, Role

    task = tasks.create_task(alice, team_a, nova, "the quarterly numbers")
    refused = api(bob).post(f"/api/v1/tasks/{task.id}/cancel/")
    assert refused.status_code == 403 and refused.json()["error"]["code"] == "not_allowed"
    assert Task.objects.get(pk=task.pk).status == "queued"
    from django.test import Client

    browser = Client()
    browser.force_login(bob)
    page = browser.get(f"/w/{team_a.id}/tasks/{task.id}/")
    assert page.status_code == 200 and b"Cancel task" not in page.content
    browser.force_login(alice)
    assert b"Cancel task" in browser.get(f"/w/{team_a.id}/tasks/{task.id}/").content
    Membership.objects.filter(workspace=team_a, user=bob).update(role=Role.ADMIN)
    assert api(bob).post(f"/api/v1/tasks/{task.id}/cancel/").status_code == 200
    other = tasks.create_task(alice, team_a, nova, "another")
    assert api(alice).post(f"/api/v1/tasks/{other.id}/cancel/").status_code == 200
