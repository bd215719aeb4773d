"""Every live event an action emits, applied to a browser's state, gives what a fresh REST read
gives (as zulip's test_events does), and carries exactly what LIVE_EVENTS lists for its type."""

from datetime import datetime

import pytest

from agents import actions as agent_actions
from agntchat.core.events import LIVE_EVENTS, camel, publish_many
from artifacts import actions as artifact_actions
from conversations import actions, tasks, threads
from conversations.models import Conversation
from tests.conftest import client_for
from tests.socket_helpers import TopicInbox
from work import gateway
from workspaces import actions as workspace_actions
from workspaces import notifications

pytestmark = pytest.mark.django_db(transaction=True)


def later(a: str | None, b: str | None) -> str | None:
    return max((t for t in (a, b) if t), key=datetime.fromisoformat, default=None)


class Browser:
    """What a person's browser keeps from live events about one workspace: its conversations,
    their messages, its tasks, artifacts and comments, and its members."""

    def __init__(self, user, workspace):
        self.api, self.workspace_id = client_for(user), str(workspace.id)
        topics = [f"user.{user.id}", f"workspace.{workspace.id}"]
        self.inbox = TopicInbox(*topics)
        self.marker_topic = topics[0]
        self.marks = 0
        self.seen: set[str] = set()
        self.conversations = {c["id"]: c for c in self.read_conversations()}
        self.messages = {cid: self.read_messages(cid) for cid in self.conversations}
        self.tasks = {t["id"]: {**t, "events": []} for t in self.read_tasks()}
        self.artifacts: dict[str, dict] = {}
        self.comments: dict[str, set] = {}
        self.members = self.read_members()
        self.notifications, self.unread = self.read_notifications()

    # ---- fresh reads --------------------------------------------------------------------
    def get(self, path: str):
        response = self.api.get(f"/api/v1/{path}")
        assert response.status_code == 200, (path, response.content)
        return response.json()

    def read_conversations(self) -> list[dict]:
        return [
            c
            for c in self.get("conversations/")["results"]
            if c["workspaceId"] == self.workspace_id
        ]

    def read_messages(self, conversation_id) -> list[dict]:
        return self.get(f"conversations/{conversation_id}/messages/?limit=200")["results"]

    def read_tasks(self) -> list[dict]:
        return self.get(f"tasks/?workspace={self.workspace_id}")["results"]

    def read_members(self):
        return self.get(f"workspaces/{self.workspace_id}/members/")

    def read_notifications(self) -> tuple[dict, int]:
        """The inbox, read or not (a browser keeps only whether), and its unread count."""
        page = self.get("notifications/?limit=200")
        shown = {n["id"]: {**n, "readAt": n["readAt"] is not None} for n in page["results"]}
        return shown, page["unreadCount"]

    # ---- events -------------------------------------------------------------------------
    def catch_up(self) -> list[dict]:
        """Apply every event published so far: a marker sent after them comes last."""
        self.marks += 1
        publish_many([self.marker_topic], {"type": "test.marker", "mark": self.marks})
        events = []
        while True:
            message = self.inbox.next()
            if message["type"] == "test.marker" and message["mark"] == self.marks:
                return events
            assert message["type"] in ("live.event", "live.regroup"), message
            event = message["event"]
            spec = LIVE_EVENTS[event["type"]]
            assert message["type"] == ("live.regroup" if spec.regroups else "live.event")
            # The schema: exactly what the registry says it carries, converted by wire().
            assert set(event) == {"type", *map(camel, spec.carries)}, event
            self.apply(event)
            self.seen.add(event["type"])
            events.append(event)

    def apply(self, event: dict) -> None:
        kind = event["type"]
        if kind == "conversation.created":
            self.follow(event["conversationId"])
        elif kind == "conversation.updated":
            conversation = event["conversation"]
            if conversation["id"] in self.conversations:
                self.conversations[conversation["id"]] = conversation
        elif kind == "conversation.capped":
            conversation = self.conversations[event["conversationId"]]
            conversation["capped"] = True
        elif kind in ("message.created", "message.updated"):
            message = event["message"]
            if message["conversationId"] not in self.messages:
                # A side thread just opened: its first message is how a browser learns of it.
                assert event["conversationKind"] == "thread", event
                self.follow(message["conversationId"])
            shown = self.messages[message["conversationId"]]
            if kind == "message.created":
                shown.append(message)
                conversation = self.conversations[message["conversationId"]]
                conversation["lastMessageAt"] = later(
                    conversation["lastMessageAt"], message["createdAt"]
                )
                if (message["author"] or {}).get("type") == "person":
                    conversation["capped"] = False  # a person speaking lifts the loop guard
            else:
                shown[:] = [message if m["id"] == message["id"] else m for m in shown]
        elif kind in ("task.created", "task.started", "task.cancel_requested", "task.finished"):
            events = self.tasks.get(event["task"]["id"], {}).get("events", [])
            self.tasks[event["task"]["id"]] = {**event["task"], "events": events}
        elif kind == "task.progress":
            task = self.tasks[event["taskId"]]
            task["events"].append({"seq": event["seq"], "data": event["data"]})
            task["eventCount"] = event["seq"]
        elif kind in ("artifact.updated", "artifact.commented"):
            self.artifacts[event["artifact"]["id"]] = event["artifact"]
            if kind == "artifact.commented":
                self.comments.setdefault(event["artifact"]["id"], set()).add(event["commentId"])
        elif kind == "notification.created":
            notification = event["notification"]
            self.notifications[notification["id"]] = {
                **notification,
                "readAt": notification["readAt"] is not None,
            }
            self.unread = event["unreadCount"]
        elif kind == "notification.updated":
            for notification in event["notifications"]:
                self.notifications[notification["id"]] = {
                    **notification,
                    "readAt": notification["readAt"] is not None,
                }
        elif kind == "notification.read":
            for notification_id in event["notificationIds"]:
                self.notifications[notification_id]["readAt"] = True
            self.unread = event["unreadCount"]
        elif kind.startswith(("member.", "workspace.")):
            self.members = self.read_members()  # the event says: read again
        else:
            raise AssertionError(f"no client rule for {kind}")

    def follow(self, conversation_id) -> None:
        """A conversation new to this browser: read it, with no messages yet."""
        conversation = self.get(f"conversations/{conversation_id}/")
        conversation.pop("participants")
        self.conversations[conversation["id"]] = conversation
        self.messages[conversation["id"]] = []

    # ---- the comparison -----------------------------------------------------------------
    def matches_a_fresh_read(self) -> None:
        fresh = {c["id"]: c for c in self.read_conversations()}
        assert set(self.conversations) == set(fresh)
        for conversation_id, conversation in self.conversations.items():
            # Not the agents' streak: each agent post moves it and no event says so; browsers
            # show only its consequence, the cap (conversation.capped).
            differs = {
                k
                for k in fresh[conversation_id]
                if k != "agentStreak" and conversation.get(k) != fresh[conversation_id][k]
            }
            assert not differs, (differs, conversation, fresh[conversation_id])
        for conversation_id, shown in self.messages.items():
            assert shown == self.read_messages(conversation_id), conversation_id
        fresh_tasks = {t["id"]: t for t in self.read_tasks()}
        assert set(self.tasks) == set(fresh_tasks)
        for task_id, task in self.tasks.items():
            detail = self.get(f"tasks/{task_id}/")
            events = [{"seq": e["seq"], "data": e["data"]} for e in detail.pop("events")]
            detail.pop("usage")
            assert {k: v for k, v in task.items() if k != "events"} == detail
            assert task["events"] == events
        for artifact_id, ref in self.artifacts.items():
            detail = self.get(f"artifacts/{artifact_id}/")
            assert ref == {
                "id": detail["id"],
                "title": detail["title"],
                "kind": detail["kind"],
                "version": detail["version"]["number"],
            }
            comments = self.get(f"artifacts/{artifact_id}/comments/")["results"]
            assert self.comments.get(artifact_id, set()) == {c["id"] for c in comments}
        assert self.members == self.read_members()
        assert (self.notifications, self.unread) == self.read_notifications()


def step(browser: Browser, *expected: str) -> None:
    """After an action: the events it emitted include EXPECTED, and applied to the browser's
    state they give what REST reads now."""
    got = [e["type"] for e in browser.catch_up()]
    assert set(expected) <= set(got), got
    browser.matches_a_fresh_read()


def test_every_live_event_keeps_a_browser_equal_to_a_fresh_read(alice, bob, charlie, team_a, nova):
    bob_sees = Browser(bob, team_a)
    owner = team_a.memberships.get(user=alice)

    channel = actions.create_conversation(
        alice, team_a, kind="channel", title="plans", agent_ids=[nova.id]
    )
    step(bob_sees, "conversation.created")

    actions.post_message(alice, channel, "hello @Nova")
    step(bob_sees, "message.created")

    channel = actions.update_settings(
        alice, channel, {"loop_guard": {"direct_cap": 2, "group_cap": 2}}
    )
    step(bob_sees, "conversation.updated")

    actions.post_message(nova, channel, "first")
    actions.post_message(nova, channel, "second")
    step(bob_sees, "message.created", "conversation.capped")
    actions.post_message(bob, channel, "carry on")
    step(bob_sees, "message.created")
    look = actions.post_message(alice, channel, "@bob have a look")
    step(bob_sees, "message.created", "notification.created")
    notifications.mark_all_notifications_read(bob)
    step(bob_sees, "notification.read")
    actions.edit_message(alice, look, "@bob have a look, please")
    step(bob_sees, "message.updated", "notification.updated")

    orion = agent_actions.create_agent(alice, name="Orion", role="critic", backend="scripted")
    actions.add_agent_to_conversation(alice, channel, orion)
    step(bob_sees, "conversation.updated")
    origin = actions.post_message(nova, channel, 'Asking. <dm target="Orion">a word?</dm>')
    step(bob_sees, "message.created")
    thread = Conversation.objects.get(parent_message=origin)
    threads.resolve_thread(alice, thread, "sorted")  # she owns the agents in it
    step(bob_sees, "message.updated", "conversation.updated")

    task = tasks.create_task(alice, team_a, nova, "compare the offers", conversation=channel)
    step(bob_sees, "task.created")
    gateway.claim_work(nova, "connection-1", {"task": 1})  # as the agent's socket claims it
    tasks.mark_started(task.id)
    step(bob_sees, "task.started")
    tasks.record_event(task.id, {"step": "reading"})
    step(bob_sees, "task.progress")
    tasks.request_cancel(task)
    step(bob_sees, "task.cancel_requested")
    tasks.record_result(task.id, "cancelled", connection_id="connection-1")
    step(bob_sees, "task.finished")

    artifact = artifact_actions.publish_artifact(alice, channel, "Plan", "markdown", "# one")
    step(bob_sees, "message.created")
    artifact_actions.update_artifact(bob, artifact, "# two", note="second")
    step(bob_sees, "artifact.updated")
    artifact_actions.comment_on_artifact(bob, artifact, "Looks good")
    step(bob_sees, "artifact.commented")

    _, token = workspace_actions.create_invitation(owner)
    joined = workspace_actions.accept_invitation(charlie, token)
    step(bob_sees, "member.joined")
    workspace_actions.change_role(owner, joined, "admin")
    step(bob_sees, "member.role_changed")
    workspace_actions.remove_member(owner, joined)
    step(bob_sees, "member.removed")
    workspace_actions.rename_workspace(owner, "Team A+")
    step(bob_sees, "workspace.renamed")

    # Heard elsewhere, by sockets and on the way out: typing and agent.presence
    # (tests/conversations/test_live.py, tests/agents/test_gateway.py), member.left and
    # workspace.deleted (tests/workspaces/test_workspaces.py).
    # tool.updated: tests/work/test_tool_live_events.py. message.draft (ephemeral, from the agent
    # socket): tests/work/test_streaming.py.
    elsewhere = {"typing", "agent.presence", "member.left", "workspace.deleted", "tool.updated"}
    elsewhere.add("message.draft")
    assert bob_sees.seen == set(LIVE_EVENTS) - elsewhere
