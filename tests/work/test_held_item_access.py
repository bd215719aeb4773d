"""A work item held by an agent's connection lets it act only while the agent still takes part
where the item is: its tool calls (work.tools.calls.held_item) and the frames that keep its
lease (``extend``, ``event``) are refused once it no longer reads the message's conversation or
its owner is no longer a member of the task's workspace (pinned away, a task given or set up
there is still done there: PRO-2).

Taken out through an action, the agent's work there is dropped at once
(tests/agents/test_agent_leaves_workspace.py). These checks stand behind that, for an item the
drop missed: here access goes by a write that tells nobody, as a post or claim racing the
change would leave it. Nova holds the items; Alice (team A) gives them."""

import pytest
from asgiref.sync import sync_to_async
from django.db import connection

from agents.models import Agent
from conversations.models import Participant, Task
from conversations.tasks import create_task
from tests.conftest import agent_session
from tests.socket_helpers import agent_communicator, next_frame
from tests.work.tooling import held_message, held_task
from work.models import ToolCall
from workspaces.models import Membership

pytestmark = pytest.mark.django_db


def pinned_nowhere(agent) -> None:
    """AGENT appears in no workspace now; nothing was told (no pin change, no drop)."""
    Agent.objects.filter(pk=agent.pk).update(visibility=Agent.Visibility.PINNED)


def owner_gone(agent, workspace) -> None:
    """AGENT's owner is no member of WORKSPACE now; nothing was told (no signal, no drop)."""
    with connection.cursor() as cursor:
        cursor.execute(
            f"DELETE FROM {Membership._meta.db_table} WHERE workspace_id = %s AND user_id = %s",
            [workspace.id, agent.owner_id],
        )


def test_a_tool_call_on_a_message_is_refused_once_the_agent_no_longer_reads_there(
    alice, channel, nova
):
    held = held_message(nova, channel, alice, "The launch date is secret.")
    assert held.call("conversation_history").ok

    Participant.objects.filter(conversation=channel, agent=nova).delete()

    error = held.error("conversation_history")
    assert error["code"] == "work_out_of_reach"
    assert "no longer take part" in error["message"]
    # Not even recorded: the record would show in a conversation Nova no longer reads.
    assert ToolCall.objects.count() == 1


def test_a_tool_call_on_a_task_is_refused_once_its_owner_left_the_workspace(
    alice, bob, team_a, nova
):
    held = held_task(nova, team_a, bob, "Find what we said about the budget.")
    assert held.call("workspace_search", {"query": "budget"}).ok
    pinned_nowhere(nova)  # pinned away: what it was given there is still done there
    assert held.call("workspace_search", {"query": "budget"}).ok

    owner_gone(nova, team_a)

    assert held.error("workspace_search", {"query": "budget"})["code"] == "work_out_of_reach"
    assert ToolCall.objects.count() == 2


async def connect(agent):
    comm = agent_communicator(await sync_to_async(agent_session)(agent))
    assert (await comm.connect())[0]
    assert (await next_frame(comm))["type"] == "hello"
    return comm


@pytest.mark.django_db(transaction=True)
async def test_a_held_task_cannot_be_kept_once_its_owner_left_the_workspace(
    alice, bob, team_a, nova
):
    comm = await connect(nova)
    await sync_to_async(create_task)(bob, team_a, nova, "Summarise the quarter")
    work = await next_frame(comm)
    assert work["kind"] == "task"
    await comm.send_json_to({"type": "extend", "id": work["id"]})
    assert (await next_frame(comm))["type"] == "extended"

    await sync_to_async(owner_gone)(nova, team_a)

    # Neither frame keeps its lease (the reference bridge keeps a task's with its events).
    await comm.send_json_to({"type": "extend", "id": work["id"]})
    assert (await next_frame(comm)).get("code") == "work_out_of_reach"
    event = {"kind": "progress", "message": "still at it"}
    await comm.send_json_to({"type": "event", "id": work["id"], "event": event})
    assert (await next_frame(comm)).get("code") == "work_out_of_reach"
    assert (await Task.objects.aget(pk=work["id"])).event_count == 0
    await comm.disconnect()
