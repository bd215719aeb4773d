"""``tool.updated``, applied to a browser's state, gives what a fresh REST read of the
conversation's tool calls gives, through a call's whole life: run, wait, decided, run, expired
(as tests/test_live_events.py does for the other events)."""

from datetime import timedelta

import pytest
from django.utils import timezone

from agntchat.core.events import LIVE_EVENTS, camel, publish_many
from conversations import actions
from tests.conftest import client_for
from tests.socket_helpers import TopicInbox
from work import approvals, gateway
from work.models import PermissionRequest
from work.tools import calls

pytestmark = pytest.mark.django_db(transaction=True)


class Browser:
    """The tool calls a browser keeps for one channel, from live events only."""

    def __init__(self, user, channel):
        self.api, self.channel = client_for(user), channel
        self.inbox = TopicInbox(f"user.{user.id}", f"workspace.{channel.workspace_id}")
        self.topic, self.marks = f"user.{user.id}", 0
        self.calls = {c["id"]: c for c in self.read()}

    def read(self) -> list[dict]:
        response = self.api.get(f"/api/v1/conversations/{self.channel.id}/tool-calls/")
        assert response.status_code == 200
        return response.json()["results"]

    def step(self, expect: set[str]) -> None:
        """Apply what was published since the last step, then compare with a fresh read."""
        self.marks += 1
        publish_many([self.topic], {"type": "test.marker", "mark": self.marks})
        seen = []
        while True:
            message = self.inbox.next()
            if message["type"] == "test.marker":
                break
            event = message["event"]
            assert set(event) == {"type", *map(camel, LIVE_EVENTS[event["type"]].carries)}
            if event["type"] == "tool.updated":
                self.calls[event["call"]["id"]] = event["call"]
            seen.append(event["type"])
        assert expect <= set(seen), seen
        assert sorted(self.calls.values(), key=lambda c: c["createdAt"]) == self.read()


def call_once(agent, delivery_id, call_id, name="done"):
    answer, prepared = calls.call_tool(agent, "conn-1", "message", delivery_id, call_id, name, {})
    return calls.run_prepared(prepared, calls.Guard()) if prepared is not None else answer


def test_every_state_of_a_call_reaches_the_browser_as_a_fresh_read(alice, bob, channel, nova, api):
    browser = Browser(bob, channel)
    actions.post_message(alice, channel, "please")
    (work,) = gateway.claim_work(nova, "conn-1", {"message": 1})
    browser.step(set())

    assert call_once(nova, work["id"], "c-1").ok
    browser.step({"tool.updated"})

    api(alice).patch(f"/api/v1/agents/{nova.id}/tools/done/", {"permission": "ask"}, format="json")
    waiting = call_once(nova, work["id"], "c-2")
    assert waiting.pending is not None
    browser.step({"tool.updated"})

    request_id = waiting.pending["request_id"]
    approvals.decide_permission(alice, PermissionRequest.objects.get(pk=request_id), True)
    browser.step({"tool.updated"})
    assert call_once(nova, work["id"], "c-2").ok
    browser.step({"tool.updated"})

    expiring = call_once(nova, work["id"], "c-3")
    browser.step({"tool.updated"})
    approvals.expire_permission_requests(timezone.now() + timedelta(days=1))
    browser.step({"tool.updated"})
    assert call_once(nova, work["id"], "c-3").error["code"] == "approval_expired"
    browser.step({"tool.updated"})
    assert [c["status"] for c in browser.calls.values()] == ["succeeded", "succeeded", "failed"]
    assert expiring.pending is not None
