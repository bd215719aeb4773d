"""Work nobody gave is as private as where it comes from: a conversation summary's task holds the
transcript of the conversation it summarises; a pulse's and a goal loop's hold their owner's
checklist and goal. Alice's agent Nova does them; Bob, her teammate, finds none of them through
REST, search, the work map or live events, though he sees tasks given openly in the workspace.
"""

from datetime import UTC, datetime, timedelta

import pytest
from django.utils import timezone

from agntchat.core import presence
from conversations import tasks
from conversations.actions import create_conversation, post_message
from conversations.models import Task
from routines import actions as routine_actions
from routines import loops
from tests.socket_helpers import TopicInbox
from work import memory
from work.models import ConversationSummary

pytestmark = pytest.mark.django_db

CODEWORD = "zebracanary"
T0 = datetime(2026, 12, 3, 8, 2, tzinfo=UTC)


def long_talk(person, conversation):
    for n in range(memory.SUMMARY_AFTER):
        post_message(person, conversation, f"Private note {n}: the codeword is {CODEWORD}.")


def summarised_with(agent):
    """Run the summary job while AGENT is online (so it is asked to write the summary)."""
    presence.beat(agent.id, "conn-summary")
    try:
        return memory.summarise_conversations()
    finally:
        presence.leave(agent.id, "conn-summary")


def seen_by(client, workspace) -> dict:
    """What CLIENT finds of the workspace's tasks: listed, by search, on the map."""
    listed = client.get(f"/api/v1/tasks/?workspace={workspace.id}").json()["results"]
    found = client.get("/api/v1/search/", {"q": CODEWORD, "type": "task"}).json()["results"]
    graph = client.get(f"/api/v1/workspaces/{workspace.id}/map/?since=all").json()
    return {
        "listed": {t["id"] for t in listed},
        "searched": {h["id"] for h in found},
        "mapped": {n["id"].removeprefix("task:") for n in graph["nodes"] if n["kind"] == "task"},
    }


def test_a_dm_summary_task_is_its_agents_owners_alone(alice, bob, team_a, nova, api):
    dm = create_conversation(alice, team_a, kind="direct", agent_ids=[nova.id])
    long_talk(alice, dm)
    assert summarised_with(nova) == 0  # asked of Nova, not written yet
    task = Task.objects.get(agent=nova)
    assert CODEWORD in task.instructions and task.conversation is None

    mine = {"listed": {str(task.id)}, "searched": {str(task.id)}, "mapped": {str(task.id)}}
    assert seen_by(api(alice), team_a) == mine
    assert seen_by(api(bob), team_a) == {"listed": set(), "searched": set(), "mapped": set()}
    detail = api(bob).get(f"/api/v1/tasks/{task.id}/")
    assert detail.status_code == 404 and detail.json()["error"]["code"] == "task_not_found"


def test_a_dm_with_someone_elses_agent_is_not_summarised_by_that_agent(
    alice, bob, team_a, nova, api
):
    """Bob talks with Alice's Nova alone: Alice cannot read that, so Nova's task (hers to see)
    may not hold it. The summary is written here instead, and no task is made."""
    dm = create_conversation(bob, team_a, kind="direct", agent_ids=[nova.id])
    long_talk(bob, dm)
    assert summarised_with(nova) == 1
    assert not Task.objects.exists()
    assert CODEWORD in ConversationSummary.objects.get(conversation=dm).text
    assert seen_by(api(alice), team_a)["searched"] == set()


def test_pulse_and_loop_tasks_are_their_owners_alone(
    alice, bob, team_a, nova, api, django_capture_on_commit_callbacks
):
    routine_actions.create_routine(
        alice, nova, team_a, name="", instructions="", interval_minutes=60,
        checklist=[f"Check the {CODEWORD} salary sheet"], now=T0,
    )  # fmt: skip
    loops.start_loop(alice, nova, team_a, f"Quietly prepare the {CODEWORD} list")
    workspace_inbox = TopicInbox(f"workspace.{team_a.id}")
    bobs_inbox = TopicInbox(f"user.{bob.id}")
    alices_inbox = TopicInbox(f"user.{alice.id}")
    with django_capture_on_commit_callbacks(execute=True):
        assert routine_actions.run_due_routines(now=T0 + timedelta(hours=1)) == 1
        assert loops.advance_loops(now=timezone.now()) == 1
    pulse_task, loop_task = Task.objects.order_by("created_at")
    assert "salary sheet" in pulse_task.instructions and "list" in loop_task.instructions
    # Given openly, outside any conversation: the workspace's, as before.
    open_task = tasks.create_task(alice, team_a, nova, f"Tidy the {CODEWORD} wiki")

    everything = {str(t.id) for t in (pulse_task, loop_task, open_task)}
    assert seen_by(api(alice), team_a) == {
        "listed": everything,
        "searched": everything,
        "mapped": everything,
    }
    bobs = {str(open_task.id)}
    assert seen_by(api(bob), team_a) == {"listed": bobs, "searched": bobs, "mapped": bobs}
    for hidden in (pulse_task, loop_task):
        assert api(bob).get(f"/api/v1/tasks/{hidden.id}/").status_code == 404
    created = [e["event"]["task"]["id"] for e in alices_inbox.all(quiet=0.5)]
    assert sorted(created) == sorted([str(pulse_task.id), str(loop_task.id)])
    assert [e for e in workspace_inbox.all(quiet=0.2) if "task" in e["event"]] == []
    assert bobs_inbox.all(quiet=0.2) == []
