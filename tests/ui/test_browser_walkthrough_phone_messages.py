"""Alice's messages on her phone, in a real browser: her second message in a row (shown without
her name again) uses the width of the screen, not a line shortened by the room kept for the
hover toolbar, which a phone shows only on a tap."""

import pytest
from playwright.sync_api import expect

from conversations.actions import post_message
from tests.ui.browser import MARKS, PHONE, live, log_in, nova_in_general, shot

pytestmark = MARKS
SECOND = "Check the launch date with Nova"


@pytest.fixture
def story(orm):
    def build():
        team, general, nova = nova_in_general()
        post_message(team.owner, general, "Morning! The venue wrote back about the spring launch.")
        post_message(team.owner, general, SECOND)
        return team, general

    return orm(build)


def test_a_second_message_in_a_row_uses_the_whole_line(orm, story, browser):
    team, general = story
    chromium, server = browser
    page = log_in(chromium, server, "alice", viewport=PHONE)
    page.goto(f"/w/{team.id}/c/{general.id}/")
    live(page)
    second = page.locator("li.msg.is-cont", has_text=SECOND)
    expect(second).to_be_visible()
    shot(page, "walkthrough-phone-second-message")
    lines = second.locator(".msg__text p").evaluate(
        "p => Math.round(p.getBoundingClientRect().height / parseFloat(getComputedStyle(p).lineHeight))"
    )
    assert lines == 1
    # A tap still brings its actions.
    second.locator(".msg__text").click()
    expect(second.get_by_role("button", name="Reply in thread")).to_be_visible()
    shot(page, "walkthrough-phone-second-message-tapped")
