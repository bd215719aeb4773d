"""Deleting an agent in a real browser: Alice opens Scout's page, presses "Delete agent", accepts
the confirmation, and lands on her agents list without Scout; the message Scout wrote in her
channel is still there, shown as a deleted author's. Database work goes through ``orm``."""

import pytest
from playwright.sync_api import expect

from agents import actions as agent_actions
from agents.models import Agent
from conversations.actions import create_conversation, post_message
from tests.ui.browser import MARKS, WAIT, log_in, person, scroll_to, shot
from workspaces.models import Workspace

pytestmark = MARKS


@pytest.fixture
def story(orm):
    def build():
        alice = person("alice", "Alice Martin")
        scout = agent_actions.create_agent(alice, name="Scout", role="research assistant")
        home = Workspace.objects.get(owner=alice, kind=Workspace.Kind.PERSONAL)
        room = create_conversation(alice, home, kind="channel", title="research")
        post_message(scout, room, "Three sources agree on the date.")
        return home, room, scout

    return orm(build)


def test_delete_an_agent_from_its_page(orm, story, browser):
    home, room, scout = story
    chromium, server = browser
    alice = log_in(chromium, server, "alice")
    alice.goto(f"/w/{home.id}/agents/{scout.id}/")
    button = alice.get_by_role("button", name="Delete agent")
    scroll_to(button)
    shot(alice, "agent-delete-zone")
    alice.once("dialog", lambda dialog: dialog.accept())
    button.click()
    alice.wait_for_url(f"**/w/{home.id}/agents/?deleted=Scout", timeout=WAIT)
    expect(alice.locator(".banner--success")).to_have_text(
        "Scout is deleted. What it said stays in its conversations."
    )
    expect(alice.locator("[data-region=agents] table")).to_have_count(0)
    shot(alice, "agent-deleted-banner")
    assert not orm(lambda: Agent.objects.filter(pk=scout.pk).exists())

    alice.goto(f"/w/{home.id}/c/{room.id}/")
    message = alice.locator("li.msg", has_text="Three sources agree on the date.")
    expect(message.locator(".msg__author")).to_have_text("Deleted author")
    shot(alice, "agent-deleted-message")
