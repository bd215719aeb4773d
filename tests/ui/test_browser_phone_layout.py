"""Layout in a real browser: at phone size (390×844) no page is wider than the screen (tables
scroll or stack inside their box), search is reachable from the ☰ drawer, and a message's action
bar covers neither the message above it nor a notice's time. The new-agent page logs no console
error (its handle pattern compiles under Chromium's ``v`` flag)."""

import os
from pathlib import Path

import pytest
from django.utils import timezone
from playwright.sync_api import expect

from agents import actions as agent_actions
from agntchat.core import claims
from conversations import tasks
from conversations.actions import post_message
from conversations.models import Message, Task
from tests.ui.browser import MARKS, PHONE, WAIT, log_in, nova_in_general

pytestmark = MARKS

# Pictures to look at by eye (the assertions below check the geometry).
PICTURES = Path(os.environ.get("LAYOUT_SHOTS", "/tmp/agntchat-layout"))


def picture(page, name: str) -> None:
    PICTURES.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(PICTURES / f"{name}.png"))


@pytest.fixture
def story(orm):
    def build():
        # Nova has no role: the agent page's header reads "@nova · owned by you", no stray gap.
        team, general, nova = nova_in_general()
        alice = team.owner
        agent_actions.create_agent_key(nova, "laptop")
        asked = post_message(alice, general, "When is high tide on Saturday?")
        post_message(nova, general, "High tide is at 06:12 and again at 18:40.", reply_to=asked)
        post_message(
            alice, general, "Alice chose “Morning” on “Tide walk”", kind=Message.Kind.ACTION
        )
        post_message(nova, general, "Morning it is: meet at the harbour at 05:45.", reply_to=asked)
        task = tasks.create_task(
            alice, team, nova, "Summarise the tide tables for the week ahead, day by day."
        )
        claims.claim(Task, nova.id, "bridge-1", 1, timezone.now(), 60)
        tasks.mark_started(task.id)
        result = {"text": "Saturday 06:12 and 18:40; Sunday 06:58 and 19:21; springs on Tuesday."}
        tasks.record_result(task.id, "completed", connection_id="bridge-1", result=result)
        return team, general, nova

    return orm(build)


def page_width(page) -> tuple[int, int]:
    return page.evaluate("[document.documentElement.scrollWidth, window.innerWidth]")


def fits(page, what: str) -> list[str]:
    width, screen = page_width(page)
    return [] if width <= screen else [f"{what}: the page is {width} px wide on {screen} px"]


def bar_over_another(page, message) -> list[str]:
    """Hovering MESSAGE shows its action bar inside its own box, not over the one above."""
    message.hover()
    bar = message.locator("[data-msg-actions]")
    expect(bar).to_be_visible()
    bar_box, box = bar.bounding_box(), message.bounding_box()
    return [] if bar_box["y"] >= box["y"] - 0.5 else [f"action bar {bar_box} above its {box}"]


def test_phone_pages_fit_the_screen_and_search_is_reachable(story, browser):
    team, general, nova = story
    chromium, server = browser
    page = log_in(chromium, server, "alice", viewport=PHONE)
    problems = []  # all of them at once, each page's picture taken

    page.goto(f"/w/{team.id}/agents/{nova.id}/")
    expect(page.locator("[data-agent-handle]")).to_have_text("@nova")
    picture(page, "phone-agent-top")
    page.locator("#tools-title").scroll_into_view_if_needed()
    picture(page, "phone-agent-tools")
    page.locator("#keys-title").scroll_into_view_if_needed()
    picture(page, "phone-agent-keys")
    problems += fits(page, "agent settings")

    page.goto(f"/w/{team.id}/tasks/")
    row = page.locator("[data-task-id]")
    expect(row).to_contain_text("Saturday 06:12")
    picture(page, "phone-tasks")
    problems += fits(page, "tasks")
    # Stacked: the result and the start time are on the screen, not in an off-screen column.
    right = page.evaluate(
        "Math.max(...[...document.querySelectorAll('[data-task-id] td')]"
        ".map((td) => td.getBoundingClientRect().right))"
    )
    if right > PHONE["width"]:
        problems.append(f"task cells reach {right} px, off the screen")

    page.goto(f"/w/{team.id}/c/{general.id}/")
    replies = page.locator(".msg--agent")
    expect(replies).to_have_count(2)
    picture(page, "phone-conversation")
    problems += fits(page, "conversation")
    # A hidden "↻ Regenerate" takes no line of its own under the agent's name.
    meta = replies.first.locator(".msg__meta")
    height, line = meta.bounding_box()["height"], meta.locator(".msg__author").bounding_box()
    if height > line["height"] + 4:
        problems.append(f"the agent's name line is {height} px tall")
    problems += bar_over_another(page, replies.last)
    picture(page, "phone-conversation-actions")

    # Search: from the ☰ drawer (the header's box is hidden on a phone).
    page.get_by_role("button", name="Open navigation").click()
    search = page.locator("#sidebar").get_by_role("link", name="Search")
    expect(search).to_be_visible()
    page.wait_for_timeout(300)  # the drawer slides in: the picture after it
    picture(page, "phone-drawer")
    search.click()
    page.wait_for_url(f"**/w/{team.id}/search/")
    page.get_by_label("Words").fill("harbour")
    page.get_by_role("button", name="Search", exact=True).click()
    expect(page.locator("[data-hit-id]")).to_have_count(1, timeout=WAIT)
    picture(page, "phone-search")
    problems += fits(page, "search")
    assert not problems, problems


def test_desktop_action_bar_leaves_the_notice_above_readable(story, browser):
    team, general, _ = story
    chromium, server = browser
    page = log_in(chromium, server, "alice")
    page.goto(f"/w/{team.id}/c/{general.id}/")
    after_notice = page.locator(".msg--agent").last
    expect(after_notice).to_contain_text("Morning it is")
    problems = bar_over_another(page, after_notice)
    picture(page, "desktop-conversation-actions")
    assert not problems, problems


def test_new_agent_page_logs_no_console_error(story, browser):
    team, _, _ = story
    chromium, server = browser
    page = log_in(chromium, server, "alice")
    errors = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.goto(f"/w/{team.id}/agents/new/")
    handle = page.get_by_label("Handle")
    handle.fill("bad handle!")
    # The pattern works: the browser itself finds the handle invalid (an invalid pattern is
    # ignored, and the value would count as valid).
    assert handle.evaluate("el => el.validity.patternMismatch")
    handle.fill("tide-bot_2")
    assert handle.evaluate("el => el.validity.valid")
    assert not errors, errors
