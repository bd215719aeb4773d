"""An open inbox hears when the message a notification quotes is edited or deleted: each person
notified gets one ``notification.updated`` on their own socket, with the new text as REST lists
it (the taken-back words stay on no screen until a reload). Alice writes in #general of team A;
Bob is notified; Dora was too, but has since left team A; Charlie, of team B, has nothing to do
with it. Real sockets, database and Redis."""

import pytest
from asgiref.sync import sync_to_async

from conversations import actions
from tests.conftest import make_person
from tests.socket_helpers import drain, frames_until, live_socket_for
from workspaces import actions as workspace_actions

pytestmark = pytest.mark.django_db(transaction=True)


def inbox(api, person) -> list[dict]:
    return api(person).get("/api/v1/notifications/").json()["results"]


def inbox_frames(frames) -> list[dict]:
    return [f for f in frames if f["type"].startswith("notification.")]


@pytest.fixture
def dora(alice, team_a, channel):  # after #general is made with Bob, team A's one member then
    dora = make_person("dora")
    _, token = workspace_actions.create_invitation(team_a.memberships.get(user=alice))
    workspace_actions.accept_invitation(dora, token)
    return dora


async def test_an_edit_and_a_delete_reach_the_notified_persons_open_inbox_only(
    alice, bob, charlie, dora, team_a, team_b, channel, api
):
    said = await sync_to_async(actions.post_message)(alice, channel, "@bob @dora the code is 4471")
    assert len(await sync_to_async(inbox)(api, dora)) == 1
    owner = await sync_to_async(team_a.memberships.get)(user=alice)
    gone = await sync_to_async(team_a.memberships.get)(user=dora)
    await sync_to_async(workspace_actions.remove_member)(owner, gone)
    sockets = [await live_socket_for(person) for person in (bob, alice, charlie, dora)]
    bobs, others = sockets[0], sockets[1:]

    await sync_to_async(actions.edit_message)(alice, said, "@bob @dora the code is in the vault")
    seen = await frames_until(bobs, lambda f: f["type"] == "notification.updated")
    (shown,) = await sync_to_async(inbox)(api, bob)
    assert seen[-1]["notifications"] == [shown]
    assert shown["text"] == "alice mentioned you in #general: @bob @dora the code is in the vault"

    await sync_to_async(actions.delete_message)(alice, said)
    seen = await frames_until(bobs, lambda f: f["type"] == "notification.updated")
    (shown,) = await sync_to_async(inbox)(api, bob)
    assert seen[-1]["notifications"] == [shown]
    assert shown["text"] == "alice deleted this message."

    # One event per person and change; nobody else hears of Bob's inbox, nor Dora of hers.
    assert inbox_frames(await drain(bobs)) == []
    for comm in others:
        assert inbox_frames(await drain(comm)) == []
    for comm in sockets:
        await comm.disconnect()
