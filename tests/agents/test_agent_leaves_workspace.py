"""An agent that stops appearing in a workspace (AGT-1) gets nothing more of it: its owner pins
it elsewhere, leaves the workspace or is removed from it, and at that moment what it was still
to answer there is dropped (never claimed later, with the workspace's text in it), a turn it
held passes to the next agent instead of stalling the channel (TURN-1). Its tasks there go on
while its owner is a member (PRO-2: work given or set up there is done there); once the owner
leaves, they are cancelled, saying why.

The cast: Alice's team A with Bob; #room there with Bob's finance agent Rex and Alice's
generalist Gus, where a budget question queues Rex, then Gus."""

import pytest
from asgiref.sync import sync_to_async

from agents import actions as agent_actions
from conversations.actions import add_agent_to_conversation, post_message
from conversations.models import Delivery, Task, TurnDecision
from conversations.tasks import TaskNotFound, access_task, create_task
from tests.conftest import agent_session
from tests.socket_helpers import agent_communicator, frames_until, next_frame
from work.gateway import ack_work, claim_work
from work.tools.platform import own_tasks
from workspaces import actions as workspace_actions

pytestmark = pytest.mark.django_db

BUDGET = "Please review the budget numbers"


def personal(person):
    return person.owned_workspaces.get(kind="personal")


def claims(agent, kind="message") -> list:
    """What a connection of AGENT is given now, as the agent socket claims it."""
    return claim_work(agent, f"conn-{agent.handle}", {kind: 5})


def turn_of(message) -> TurnDecision:
    return TurnDecision.objects.get(message=message)


def open_delivery(message, agent):
    return Delivery.objects.filter(message=message, agent=agent, acked_at__isnull=True).first()


def test_pinned_away_its_queued_message_is_dropped_and_its_turn_passes_on(alice, bob, budget_room):
    conversation, rex, gus = budget_room
    asked = post_message(alice, conversation, BUDGET)
    assert [e["name"] for e in turn_of(asked).queue] == ["Rex", "Gus"]

    agent_actions.set_agent_pins(rex, [personal(bob).id])

    # Never handed out: the claim would send team A's text to an agent no longer in it.
    assert open_delivery(asked, rex) is None
    assert claims(rex) == []
    # Gus has the turn now, instead of waiting for Rex's ack that never comes.
    assert open_delivery(asked, gus).holds_turn
    assert turn_of(asked).position == 1


@pytest.mark.parametrize("how", ["left", "removed"])
def test_an_owner_who_leaves_takes_their_agents_work_with_them(
    alice, bob, team_a, budget_room, how
):
    conversation, rex, gus = budget_room
    asked = post_message(alice, conversation, BUDGET)
    bobs = team_a.memberships.get(user=bob)

    if how == "left":
        workspace_actions.leave_workspace(bobs)
    else:
        workspace_actions.remove_member(team_a.memberships.get(user=alice), bobs)

    assert open_delivery(asked, rex) is None
    assert claims(rex) == []
    assert open_delivery(asked, gus).holds_turn


def test_two_agents_of_one_owner_in_a_queue_both_give_way(alice, bob, team_a, budget_room):
    conversation, rex, gus = budget_room
    rita = agent_actions.create_agent(bob, name="Rita", capabilities=["tax"], backend="scripted")
    add_agent_to_conversation(bob, conversation, rita)
    asked = post_message(alice, conversation, "@Rex @Rita @Gus the budget, please")
    assert [e["name"] for e in turn_of(asked).queue] == ["Rex", "Rita", "Gus"]

    workspace_actions.leave_workspace(team_a.memberships.get(user=bob))

    # Rita no longer appears either: the turn goes past her to Gus, not to nobody.
    assert open_delivery(asked, gus).holds_turn
    assert turn_of(asked).position == 2
    assert not Delivery.objects.filter(message=asked, agent=rita).exists()


def test_an_agent_pinned_away_while_waiting_for_its_turn_is_skipped(alice, budget_room):
    conversation, rex, gus = budget_room
    asked = post_message(alice, conversation, BUDGET)
    agent_actions.set_agent_pins(gus, [personal(alice).id])
    (work,) = claims(rex)

    ack_work(work["id"], f"conn-{rex.handle}")

    # Rex was the last agent still appearing: the queue is finished, Gus never woken there.
    assert turn_of(asked).finished_at is not None
    assert not Delivery.objects.filter(message=asked, agent=gus).exists()


def test_its_tasks_there_go_on_when_pinned_away_and_end_when_its_owner_leaves(
    alice, bob, team_a, budget_room
):
    conversation, rex, gus = budget_room
    running = create_task(alice, team_a, rex, "Check the Q3 budget", conversation=conversation)
    claims(rex, "task")
    queued = create_task(alice, team_a, rex, "Then the Q4 budget", conversation=conversation)
    at_home = create_task(bob, personal(bob), rex, "Sort my receipts")

    # Pinned away, Rex is found there for no new work, but what it was given is done (PRO-2).
    agent_actions.set_agent_pins(rex, [personal(bob).id])
    assert {t.status for t in Task.objects.filter(pk__in=[running.pk, queued.pk])} == {
        Task.Status.RUNNING,
        Task.Status.QUEUED,
    }

    workspace_actions.leave_workspace(team_a.memberships.get(user=bob))

    running.refresh_from_db()
    queued.refresh_from_db()
    for task, outcome in ((running, Task.Cancel.UNKNOWN), (queued, Task.Cancel.CONFIRMED)):
        assert (task.status, task.cancel_state) == (Task.Status.CANCELLED, outcome)
        assert task.acked_at is not None
        assert task.error == "Cancelled: the owner of Rex left this workspace."
    # Where it still appears, its work goes on.
    (work,) = claims(rex, "task")
    assert work["id"] == str(at_home.id)
    at_home.refresh_from_db()
    assert at_home.status == Task.Status.RUNNING


def test_once_its_owner_left_the_workspaces_tasks_are_no_longer_its_to_read(
    alice, bob, team_a, budget_room
):
    conversation, rex, gus = budget_room
    given = create_task(alice, team_a, rex, "Check the Q3 budget", conversation=conversation)
    asked = create_task(rex, team_a, gus, "Add up the receipts")
    at_home = create_task(bob, personal(bob), rex, "Sort my receipts")
    agent_actions.set_agent_pins(rex, [personal(bob).id])
    # Pinned away, it still reads what it was given there and finishes it (PRO-2).
    assert access_task(rex, given.id) == given
    assert set(own_tasks(rex)) == {given, asked, at_home}

    workspace_actions.leave_workspace(team_a.memberships.get(user=bob))

    # Cancelled, and no longer Bob's to read through Rex's session.
    with pytest.raises(TaskNotFound):
        access_task(rex, given.id)
    assert list(own_tasks(rex)) == [at_home]


@pytest.mark.django_db(transaction=True)
async def test_its_bridge_is_told_to_stop_a_running_task_and_its_lane_frees_up(alice, bob, team_a):
    rex = await sync_to_async(agent_actions.create_agent)(bob, name="Rex", backend="scripted")
    home = await sync_to_async(personal)(bob)
    comm = agent_communicator(await sync_to_async(agent_session)(rex))
    assert (await comm.connect())[0]
    assert (await next_frame(comm))["type"] == "hello"
    await sync_to_async(create_task)(alice, team_a, rex, "Check the Q3 budget")
    work = await next_frame(comm)
    assert work["kind"] == "task"

    bobs = await sync_to_async(team_a.memberships.get)(user=bob)
    await sync_to_async(workspace_actions.leave_workspace)(bobs)

    assert await next_frame(comm) == {"type": "cancel", "id": work["id"]}
    at_home = await sync_to_async(create_task)(bob, home, rex, "Sort my receipts")
    # The bridge's answer comes after the task ended: refused, and its lane takes the next.
    await comm.send_json_to({"type": "result", "id": work["id"], "status": "cancelled"})
    next_work, refused = await frames_until(comm, lambda f: f["type"] == "error")
    assert refused["code"] == "protocol_error"
    assert (next_work["type"], next_work["id"]) == ("work", str(at_home.id))
    await comm.disconnect()


def test_pinning_it_where_it_already_appears_drops_nothing(alice, bob, team_a, budget_room):
    conversation, rex, gus = budget_room
    asked = post_message(alice, conversation, BUDGET)
    task = create_task(alice, team_a, rex, "Check the Q3 budget")

    agent_actions.set_agent_pins(rex, [team_a.id, personal(bob).id])

    (work,) = claims(rex)
    assert work["payload"]["message"]["id"] == str(asked.id)
    (work,) = claims(rex, "task")
    assert work["id"] == str(task.id)


def test_deleting_the_workspace_takes_its_queues_with_it(alice, team_a, budget_room):
    conversation, rex, gus = budget_room
    post_message(alice, conversation, BUDGET)
    create_task(alice, team_a, rex, "Check the Q3 budget")

    workspace_actions.delete_workspace(team_a.memberships.get(user=alice))

    assert claims(rex) == [] and claims(rex, "task") == []
    assert not Delivery.objects.exists() and not Task.objects.exists()
