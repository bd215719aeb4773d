"""Probes of the browser live socket and its events: who hears what, and what a hostile or
careless client can make the server do. Alice owns Nova and team A, where Bob is a member;
Charlie has team B."""

import pytest
from asgiref.sync import sync_to_async
from channels.layers import get_channel_layer

from agntchat.core.events import group_name, json_bytes, publish_live
from conversations import consumers, tasks
from conversations.actions import create_conversation, post_message
from tests.conftest import client_for
from tests.socket_helpers import (
    TopicInbox,
    drain,
    events_sent,
    frames_until,
    live_socket_for,
    next_frame,
)
from workspaces.actions import remove_member

pytestmark = pytest.mark.django_db(transaction=True)


def heard_by(user, workspace) -> TopicInbox:
    """What USER's browser hears about WORKSPACE: their own topic and the workspace's."""
    events_sent()  # what the fixtures published is not heard
    return TopicInbox(f"user.{user.id}", f"workspace.{workspace.id}")


def test_a_private_tasks_sub_task_is_heard_by_its_agents_owner_only(alice, bob, team_a, nova):
    """A task nobody gave (a loop's, a pulse's) is private, and so is what its run delegates:
    Bob may not read it over REST, and his browser must not hear its instructions live."""
    parent = tasks.create_task(None, team_a, nova, "private: plan Alice's surprise party")
    alices, bobs = heard_by(alice, team_a), heard_by(bob, team_a)
    sub = tasks.create_task(nova, team_a, nova, "book the venue for Alice's party", parent=parent)
    assert sub.private
    heard = alices.next()
    assert (heard["event"]["type"], heard["event"]["task"]["id"]) == ("task.created", str(sub.id))
    assert client_for(bob).get(f"/api/v1/tasks/{sub.id}/").status_code == 404
    assert bobs.all(quiet=0.5) == []


async def test_a_member_removed_hears_nothing_posted_after_the_removal(alice, bob, team_a):
    """Bob's open tab follows his removal from team A (member.removed): what is posted there
    the moment after must not reach it, though it was on its way while his socket was still
    leaving the workspace's topic."""
    room = await sync_to_async(create_conversation)(alice, team_a, kind="channel", title="room")
    await sync_to_async(events_sent)()
    alice_live, bob_live = await live_socket_for(alice), await live_socket_for(bob)

    def remove_bob_then_post():
        memberships = team_a.memberships.select_related("user", "workspace")
        remove_member(memberships.get(user=alice), memberships.get(user=bob))
        for n in range(20):
            post_message(alice, room, f"after Bob left: {n}")

    await sync_to_async(remove_bob_then_post)()
    seen = await frames_until(bob_live, lambda f: f.get("type") == "member.removed")
    assert [f for f in seen if f.get("type") != "member.removed"] == []
    # What it dropped on the way out may have been his (his own topic's): a hello makes his
    # page reload, as after a reconnect. Then the socket goes on, hearing team A no more.
    assert await drain(bob_live, quiet=1) == [{"type": "hello", "userId": str(bob.id)}]
    # Alice stays in team A: her socket hears every post.
    heard = await frames_until(
        alice_live, lambda f: f.get("message", {}).get("body") == "after Bob left: 19"
    )
    assert len([f for f in heard if f["type"] == "message.created"]) == 20
    await sync_to_async(post_message)(alice, room, "later still")
    assert await bob_live.receive_nothing(timeout=0.5)
    await bob_live.send_json_to({"type": "ping"})
    assert await next_frame(bob_live) == {"type": "pong"}
    for comm in (alice_live, bob_live):
        await comm.disconnect()


async def test_a_removal_while_the_socket_is_joining_its_topics_is_not_missed(
    alice, bob, team_a, monkeypatch
):
    """Bob's socket reads his workspaces, and his removal from team A commits and is announced
    before it has joined team A's topic: it never hears member.removed, and must not stay on
    that topic for good."""
    room = await sync_to_async(create_conversation)(alice, team_a, kind="channel", title="room")
    await sync_to_async(events_sent)()
    read_workspaces = consumers._workspace_ids

    def remove_bob():
        memberships = team_a.memberships.select_related("user", "workspace")
        remove_member(memberships.get(user=alice), memberships.get(user=bob))
        events_sent()  # announced, to nobody of Bob's yet

    async def removed_right_after_the_read(user):
        ids = await read_workspaces(user)
        if str(team_a.id) in ids:
            await sync_to_async(remove_bob)()
        return ids

    monkeypatch.setattr(consumers, "_workspace_ids", removed_right_after_the_read)
    bob_live = await live_socket_for(bob)
    await sync_to_async(post_message)(alice, room, "Bob is gone")
    assert await drain(bob_live, quiet=1) == []
    await bob_live.disconnect()


async def test_a_socket_whose_fence_is_lost_hangs_up_rather_than_go_deaf(
    alice, bob, team_a, monkeypatch
):
    """After leaving team A's topic, Bob's socket drops events until its fence comes back. The
    channel layer may lose that fence (at-most-once): then it must not drop his events for ever,
    but hang up as one that fell behind (4503), so his page reconnects and reloads."""
    monkeypatch.setattr(consumers, "FENCE_SECONDS", 0.5)
    await sync_to_async(events_sent)()
    bob_live = await live_socket_for(bob)
    layer = get_channel_layer()._get_layer()
    (bobs,) = layer.groups[layer._get_group_channel_name(group_name(f"user.{bob.id}"))]
    await layer._get_shard(bobs).unsubscribe(bobs)  # what is sent to his socket alone is lost

    def remove_bob():
        memberships = team_a.memberships.select_related("user", "workspace")
        remove_member(memberships.get(user=alice), memberships.get(user=bob))

    await sync_to_async(remove_bob)()
    assert (await next_frame(bob_live))["type"] == "member.removed"
    assert await bob_live.receive_nothing(timeout=0.7)  # past FENCE_SECONDS, no fence back
    await sync_to_async(publish_live)(
        [f"user.{bob.id}"], "notification.read", notification_ids=[], unread_count=0
    )
    assert (await next_frame(bob_live))["code"] == "fell_behind"
    assert await bob_live.receive_output(timeout=5) == {"type": "websocket.close", "code": 4503}


async def test_workspace_news_that_ends_no_membership_reads_no_memberships(
    alice, bob, charlie, team_a, monkeypatch
):
    """A rename, a role changed or someone joining reaches every socket of the workspace, and
    changes none of their topics: 1,000 sockets re-reading their person's memberships at each
    one, behind the node's one thread for the database, would stall its requests."""
    from workspaces import actions as workspace_actions

    read_workspaces, reads = consumers._workspace_ids, []

    async def counted(user):
        reads.append(user.pk)
        return await read_workspaces(user)

    await sync_to_async(events_sent)()
    bob_live = await live_socket_for(bob)
    monkeypatch.setattr(consumers, "_workspace_ids", counted)

    def news():
        owner = team_a.memberships.select_related("user", "workspace").get(user=alice)
        workspace_actions.rename_workspace(owner, "Team Alpha")
        workspace_actions.change_role(owner, team_a.memberships.get(user=bob), "admin")
        _, token = workspace_actions.create_invitation(owner)
        workspace_actions.accept_invitation(charlie, token)

    await sync_to_async(news)()
    heard = await frames_until(bob_live, lambda f: f.get("type") == "member.joined")
    assert [f["type"] for f in heard] == [
        "workspace.renamed",
        "member.role_changed",
        "member.joined",
    ]
    assert reads == []
    await bob_live.disconnect()


def test_a_calls_huge_arguments_are_not_sent_to_every_browser(alice, bob, channel, nova, api):
    """Nova calls a tool with half a megabyte of arguments (refused: they fit no schema). Every
    browser of team A hears of the call, and only needs to know it changed: the arguments go no
    further than the call's own REST read, as its long output does."""
    from work import gateway
    from work.tools import calls

    post_message(alice, channel, "please")
    (work,) = gateway.claim_work(nova, "conn-1", {"message": 1})
    bobs = heard_by(bob, channel.workspace)
    huge = {"notes": "x" * 500_000}
    calls.call_tool(nova, "conn-1", "message", work["id"], "c-1", "done", huge)
    (heard,) = [e["event"] for e in bobs.all(quiet=0.5) if e["event"]["type"] == "tool.updated"]
    assert len(json_bytes(heard)) < 20_000
    assert heard["call"]["arguments"] is None and heard["call"]["argumentsTruncated"]
    listed = api(bob).get(f"/api/v1/conversations/{channel.id}/tool-calls/").json()["results"]
    assert listed == [heard["call"]]
    detail = api(bob).get(f"/api/v1/tool-calls/{heard['call']['id']}/").json()
    assert detail["arguments"] == huge and detail["argumentsTruncated"] is False


def test_a_refusal_quoting_huge_arguments_is_not_sent_to_every_browser(
    alice, bob, channel, nova, api
):
    """The schema's words for a half-megabyte query quote it whole ("'xxx…' is too long"): the
    call's error, as its output, reaches browsers as its start only."""
    from work import gateway
    from work.tools import calls

    post_message(alice, channel, "please")
    (work,) = gateway.claim_work(nova, "conn-1", {"message": 1})
    bobs = heard_by(bob, channel.workspace)
    huge = {"query": "x" * 500_000}
    calls.call_tool(nova, "conn-1", "message", work["id"], "c-1", "workspace_search", huge)
    (heard,) = [e["event"] for e in bobs.all(quiet=0.5) if e["event"]["type"] == "tool.updated"]
    assert heard["call"]["errorCode"] == "tool_input_invalid"
    assert len(json_bytes(heard)) < 20_000
    assert heard["call"]["error"].startswith("The arguments for workspace_search do not fit")
    listed = api(bob).get(f"/api/v1/conversations/{channel.id}/tool-calls/").json()["results"]
    assert listed == [heard["call"]]
