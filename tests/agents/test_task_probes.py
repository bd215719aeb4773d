"""Probes of the task contract's edges: results and events a bridge sends that the task system
must take without losing or doubling work."""

import pytest
from asgiref.sync import sync_to_async

from conversations import actions, tasks
from conversations.models import Message, Task, TaskEvent
from tests.agents.test_tasks import connect, create_via_rest
from tests.conftest import agent_session
from tests.socket_helpers import frames_until, next_frame

pytestmark = pytest.mark.django_db(transaction=True)


async def test_a_result_longer_than_a_message_is_recorded_and_relayed_cut_short(
    alice, bob, team_a, channel, nova
):
    created = await sync_to_async(create_via_rest)(bob, nova, team_a, conversation=channel)
    comm = await connect(await sync_to_async(agent_session)(nova))
    work = await next_frame(comm)
    text = "x" * 30_000
    await comm.send_json_to(
        {"type": "result", "id": work["id"], "status": "completed", "result": {"text": text}}
    )
    answer = await next_frame(comm)
    assert answer == {"type": "result.accepted", "id": work["id"]}, answer
    task = await Task.objects.aget(pk=created["id"])
    assert task.status == "completed" and task.result == {"text": text}
    relayed = [m.body async for m in Message.objects.filter(conversation=channel)]
    assert relayed == ["x" * (actions.MAX_BODY - 1) + "…"]
    await comm.disconnect()


async def test_a_result_for_a_task_asked_in_a_channel_archived_since_is_recorded(
    alice, bob, team_a, channel, nova
):
    created = await sync_to_async(create_via_rest)(bob, nova, team_a, conversation=channel)
    comm = await connect(await sync_to_async(agent_session)(nova))
    work = await next_frame(comm)
    await sync_to_async(actions.update_channel)(alice, channel, archived=True)
    await comm.send_json_to(
        {"type": "result", "id": work["id"], "status": "completed", "result": {"text": "done"}}
    )
    answer = await next_frame(comm)
    assert answer == {"type": "result.accepted", "id": work["id"]}, answer
    task = await Task.objects.aget(pk=created["id"])
    assert task.status == "completed" and task.result == {"text": "done"}
    await comm.disconnect()


def test_violations_kept_on_a_task_are_bounded(alice, team_a, nova):
    """A bridge repeating an event after the terminal result (a frame loop) records each as a
    violation: the task keeps the latest MAX_PROTOCOL_ERRORS, not a list rewritten ever longer."""
    task = tasks.request_cancel(tasks.create_task(alice, team_a, nova, "the numbers"))
    for _ in range(tasks.MAX_PROTOCOL_ERRORS + 5):
        with pytest.raises(tasks.ProtocolError):
            tasks.record_event(task.id, {"message": "still going"})
    errors = Task.objects.get(pk=task.pk).protocol_errors
    assert len(errors) == tasks.MAX_PROTOCOL_ERRORS
    assert errors[-1]["error"] == "event after the terminal result"


def test_a_tasks_events_are_bounded_in_number_and_size(alice, team_a, nova, monkeypatch):
    """Progress is for watching, not storage: an event too large keeps what is shown of it, and
    past MAX_EVENTS a task's events are no longer stored (its run goes on)."""
    monkeypatch.setattr(tasks, "MAX_EVENTS", 3)
    task = tasks.create_task(alice, team_a, nova, "the numbers")
    big = tasks.record_event(
        task.id,
        {"kind": "tool", "name": "write_file", "input": {"content": "x" * 500_000}},
    )
    assert big.data == {"kind": "tool", "name": "write_file", "cut": True}
    long_text = tasks.record_event(task.id, {"kind": "text_delta", "text": "y" * 100_000})
    assert long_text.data["text"] == "y" * 2000 and long_text.data["cut"] is True
    tasks.record_event(task.id, {"kind": "progress", "message": "third"})
    assert tasks.record_event(task.id, {"kind": "progress", "message": "fourth"}) is None
    task = Task.objects.get(pk=task.pk)
    assert task.event_count == 3 and task.status == "queued"
    assert TaskEvent.objects.filter(task=task).count() == 3


async def test_a_connection_closing_on_a_task_another_has_taken_since_leaves_it_alone(
    alice, team_a, nova
):
    """A's lease on a task ran out and B took it over; a cancel is asked. A's socket closing
    then (release_work: record_missing_result with A's connection) is not the run ending: the
    task stays B's to answer, and no violation is laid on B's run."""
    from datetime import timedelta

    from django.conf import settings
    from django.db.models import F

    from tests.socket_helpers import agent_communicator

    created = await sync_to_async(create_via_rest)(alice, nova, team_a)
    token = await sync_to_async(agent_session)(nova)
    first = agent_communicator(token, "tasks=1")
    assert (await first.connect())[0]
    assert (await next_frame(first))["type"] == "hello"
    assert (await next_frame(first))["id"] == created["id"]
    await Task.objects.filter(pk=created["id"]).aupdate(
        lease_expires_at=F("lease_expires_at") - timedelta(seconds=settings.CLAIM_LEASE_SECONDS)
    )
    second = await connect(token, "tasks=1")
    again = await next_frame(second)
    assert again["id"] == created["id"] and again["payload"]["attempt"] == 2
    await sync_to_async(tasks.request_cancel)(await Task.objects.aget(pk=created["id"]))
    await first.disconnect()  # its socket's end releases what it held (gateway.release_work)
    task = await Task.objects.aget(pk=created["id"])
    assert (task.status, task.cancel_state, task.protocol_errors) == ("running", "requested", [])
    await second.send_json_to({"type": "result", "id": created["id"], "status": "cancelled"})
    frames = await frames_until(second, lambda frame: frame["type"] != "cancel")
    assert frames[-1] == {"type": "result.accepted", "id": created["id"]}, frames
    task = await Task.objects.aget(pk=created["id"])
    assert (task.status, task.cancel_state) == ("cancelled", "confirmed")
    await second.disconnect()


def test_tasks_given_by_tasks_stop_at_a_depth_and_keep_their_parents_privacy(
    alice, bob, team_a, nova, api, settings
):
    """A pulse's task (private: nobody gave it) whose run asks for more work: the sub-task is its
    child, private as it is (Bob, a member, does not see it), and a chain of tasks asking for
    tasks stops MAX_DEPTH deep, asking nothing more."""
    from django.utils import timezone

    from agents import actions as agent_actions
    from tests.work.tooling import claimed

    orbit = agent_actions.create_agent(alice, name="Orbit", handle="orbit", backend="scripted")
    pulse = tasks.create_task(None, team_a, nova, "Look around.")
    held = claimed(nova, "task")
    sub = Task.objects.get(
        pk=held.output("task_create", {"agent": "orbit", "instructions": "Dig deeper."})["id"]
    )
    assert (sub.parent, sub.depth, sub.private, sub.agent) == (pulse, 1, True, orbit)
    assert api(bob).get(f"/api/v1/tasks/{sub.id}/").status_code == 404
    assert api(alice).get(f"/api/v1/tasks/{sub.id}/").status_code == 200
    # A person's task is no one's secret; its sub-tasks neither.
    given = tasks.create_task(bob, team_a, nova, "Plan the offsite.")
    child = tasks.create_task(nova, team_a, orbit, "Book rooms.", parent=given)
    assert (child.depth, child.private) == (1, False)
    assert api(bob).get(f"/api/v1/tasks/{child.id}/").status_code == 200
    # Five deep and no further.
    deepest = given
    for _ in range(tasks.MAX_DEPTH):
        deepest = tasks.create_task(nova, team_a, orbit, "And again.", parent=deepest)
    assert deepest.depth == tasks.MAX_DEPTH
    # Nova's connection holds the deepest one (the others done).
    Task.objects.exclude(pk=deepest.pk).update(status="completed", acked_at=timezone.now())
    Task.objects.filter(pk=deepest.pk).update(agent=nova)
    refused = claimed(nova, "task").error("task_create", {"instructions": "And again."})
    assert refused["code"] == "task_chain_too_long"
    assert not Task.objects.filter(depth__gt=tasks.MAX_DEPTH).exists()


def test_an_agent_giving_tasks_is_held_to_the_task_rate(alice, team_a, channel, nova, settings):
    from tests.work.tooling import held_message

    settings.TASKS_PER_MINUTE, settings.TASKS_BURST = 2, 2
    held = held_message(nova, channel, alice)
    for n in range(2):
        held.output("task_create", {"agent": "nova", "instructions": f"Part {n}."})
    refused = held.error("task_create", {"agent": "nova", "instructions": "Part 3."})
    assert refused["code"] == "rate_limited"
    assert Task.objects.filter(created_by_agent=nova).count() == 2


def test_a_long_result_is_not_sent_whole_to_every_browser(
    alice, team_a, nova, api, django_capture_on_commit_callbacks
):
    """task.finished goes to every browser that may read the task, and pages fetch what they
    show: a result of a megabyte was sent whole to each. REST has it whole."""
    from tests.socket_helpers import TopicInbox

    task = tasks.create_task(alice, team_a, nova, "Write the long report")
    Task.objects.filter(pk=task.pk).update(claimed_by="conn-1", status=Task.Status.RUNNING)
    inbox = TopicInbox(f"workspace.{team_a.id}")
    long = "word " * 20_000
    with django_capture_on_commit_callbacks(execute=True):
        tasks.record_result(task.id, "completed", connection_id="conn-1", result={"text": long})
    (finished,) = [
        e["event"] for e in inbox.all(quiet=0.5) if e["event"]["type"] == "task.finished"
    ]
    assert finished["task"]["result"] is None and finished["task"]["resultTruncated"] is True
    detail = api(alice).get(f"/api/v1/tasks/{task.id}/").json()
    assert detail["result"]["text"] == long and "resultTruncated" not in detail
