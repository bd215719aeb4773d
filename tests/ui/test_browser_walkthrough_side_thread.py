"""A side thread's page in a real browser: Alice opens the thread her agents Nova and Rex held
aside in #general. Its first line calls it what it is, the side thread Nova ↔ Rex, not "your
conversation", which Alice never held."""

import pytest
from playwright.sync_api import expect

from agents import actions as agent_actions
from conversations.actions import create_conversation, post_message
from conversations.models import Conversation
from tests.ui.browser import MARKS, PHONE, live, log_in, shot, tide_lab

pytestmark = MARKS


@pytest.fixture
def story(orm):
    def build():
        team, nova = tide_lab()
        rex = agent_actions.create_agent(team.owner, name="Rex", handle="rex", backend="scripted")
        general = create_conversation(
            team.owner, team, kind="channel", title="general", agent_ids=[nova.id, rex.id]
        )
        origin = post_message(nova, general, 'On it.<dm target="Rex">check the dates</dm>')
        return team, Conversation.objects.get(kind="thread", parent_message=origin)

    return orm(build)


def test_a_side_thread_starts_as_a_side_thread(orm, story, browser):
    team, thread = story
    chromium, server = browser
    page = log_in(chromium, server, "alice", viewport=PHONE)
    page.goto(f"/w/{team.id}/c/{thread.id}/")
    live(page)
    start = page.locator("[data-history-start]")
    expect(start).to_contain_text("This is the beginning of the side thread Nova ↔ Rex.")
    expect(start).not_to_contain_text("your conversation")
    shot(page, "walkthrough-side-thread-start")
