"""A front's work no bridge took within FRONT_START_SECONDS is given up saying why, as presence
tells it: the agent's bridge is not connected, or it is connected but busy with other work."""

import pytest

from agntchat.core import presence
from conversations.tasks import create_task
from fronts.jobs import give_up_unstarted

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize(
    ("connected", "why"),
    [(False, "its bridge is not connected"), (True, "connected but busy with other work")],
)
def test_a_task_no_bridge_took_says_whether_the_agent_is_offline_or_busy(
    alice, team_a, nova, connected, why
):
    task = create_task(alice, team_a, nova, "Summarise the week.")
    if connected:
        presence.beat(nova.id, "a-busy-bridge")
    try:
        assert give_up_unstarted(str(task.id)) is True
    finally:
        presence.leave(nova.id, "a-busy-bridge")
    task.refresh_from_db()
    assert task.status == "cancelled" and why in task.error, task.error
