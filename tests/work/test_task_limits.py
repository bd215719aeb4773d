"""How many tasks one person can give: a rate per person, whatever the way in, and a cap on the
tasks waiting for an agent from people other than its owner. Bob, Alice's teammate, cannot bury
her agent Nova under his tasks; Alice's own tasks for Nova are never refused for his.
"""

import pytest
from django.test import override_settings
from mcp import types

from agents import actions as agent_actions
from conversations import tasks
from conversations.models import Message, Task
from fronts import mcp
from tests.work.tooling import claimed

pytestmark = pytest.mark.django_db


def give(client, workspace, agent, text):
    return client.post(
        "/api/v1/tasks/",
        {"workspace": str(workspace.id), "agent": str(agent.id), "instructions": text},
        format="json",
    )


@override_settings(TASKS_PER_MINUTE=60, TASKS_BURST=3)
def test_a_person_over_the_task_rate_gets_429_and_nothing_is_queued(alice, bob, team_a, nova, api):
    for n in range(3):
        assert give(api(bob), team_a, nova, f"Task {n}").status_code == 201
    refused = give(api(bob), team_a, nova, "One too many")
    assert refused.status_code == 429
    assert refused.json() == {
        "error": {"code": "rate_limited", "message": "Too many tasks: try again in 1 second."}
    }
    assert refused["Retry-After"] == "1"
    assert not Task.objects.filter(instructions="One too many").exists()
    assert Task.objects.count() == 3
    # Per person: Alice's own are counted apart from Bob's.
    assert give(api(alice), team_a, nova, "Mine").status_code == 201


@override_settings(TASKS_PER_MINUTE=0, QUEUED_TASKS_FROM_OTHERS=2)
def test_others_queue_at_most_the_cap_and_the_owners_tasks_still_go_in(
    alice, bob, team_a, nova, api
):
    for n in range(2):
        assert give(api(bob), team_a, nova, f"Bob's {n}").status_code == 201
    refused = give(api(bob), team_a, nova, "Bob's third")
    assert refused.status_code == 409
    assert refused.json()["error"] == {
        "code": "task_queue_full",
        "message": "Nova has 2 tasks from others waiting already, the most it takes: "
        "try again once some have started.",
    }
    assert not Task.objects.filter(instructions="Bob's third").exists()
    # Bob's agent gives for Bob: refused too.
    bobs_agent = agent_actions.create_agent(bob, name="Bobby", backend="scripted")
    with pytest.raises(tasks.QueueFull):
        tasks.create_task(bobs_agent, team_a, nova, "From Bobby")
    # Alice's own work for Nova is never held back by others'.
    for n in range(3):
        assert give(api(alice), team_a, nova, f"Alice's {n}").status_code == 201
    # Once one of Bob's has started, there is room for one more.
    claimed(nova, "task")
    assert give(api(bob), team_a, nova, "Bob's third").status_code == 201
    assert give(api(bob), team_a, nova, "Bob's fourth").status_code == 409


@override_settings(TASKS_PER_MINUTE=0, QUEUED_TASKS_FROM_OTHERS=1)
def test_an_mcp_call_goes_through_the_same_cap(alice, bob, team_a, nova):
    """MCP's tools/call gives its task through create_task: past the cap, a clear error result
    and no task."""
    tasks.create_task(bob, team_a, nova, "Already waiting")
    answer = mcp.start_task(
        bob, nova.handle, {"instructions": "Through MCP", "workspace": str(team_a.id)}, None, 1
    )
    assert isinstance(answer, types.CallToolResult) and answer.is_error
    assert answer.content[0].text.startswith("Nova has 1 task from others waiting already")
    assert not Task.objects.filter(instructions="Through MCP").exists()


@override_settings(TASKS_PER_MINUTE=0, QUEUED_TASKS_FROM_OTHERS=1)
def test_a_delegation_past_the_cap_is_refused_whole(alice, bob, team_a, channel, nova, api):
    """``/task @nova …`` in #general gives a task too: past the cap, Bob's post is refused and
    nothing of it is kept (no message, no task)."""
    tasks.create_task(bob, team_a, nova, "Already waiting")
    refused = api(bob).post(
        f"/api/v1/conversations/{channel.id}/messages/",
        {"body": "/task @nova summarise the week"},
        format="json",
    )
    assert refused.status_code == 409
    assert refused.json()["error"]["code"] == "task_queue_full"
    assert not Message.objects.filter(body__contains="summarise the week").exists()
    assert Task.objects.count() == 1
