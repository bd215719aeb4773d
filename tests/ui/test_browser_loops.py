"""Goal loops in a real browser: Alice (in Lisbon) starts a loop for Nova from its page (a
deadline in the past is refused in the server's words), sees it listed, pauses and resumes it;
then its iterations run (driven server-side, as the bridge and the sweep would) until the
no-progress guardrail stops it, and she reads why, and each iteration, on the loop's page.
Database work goes through ``orm`` (tests/ui/browser.py)."""

from datetime import datetime, time, timedelta
from zoneinfo import ZoneInfo

import pytest
from django.utils import timezone
from playwright.sync_api import expect

from routines import loops
from routines.models import Loop
from tests.routines.test_loops import iterate
from tests.ui.browser import (
    MARKS,
    PHONE,
    WAIT,
    log_in,
    tide_lab_in_lisbon,
)
from tests.ui.browser import shot as save_shot
from tests.ui.test_browser_routines import scroll_to

pytestmark = MARKS

LISBON = ZoneInfo("Europe/Lisbon")


def shot(page, name):
    save_shot(page, name)


@pytest.fixture
def story(orm):
    return orm(tide_lab_in_lisbon)


def two_iterations_without_progress(nova):
    """The sweep starts the first iteration; Nova reports progress twice but gives the same
    output both times, so the no-progress guardrail (a limit of 2) stops the loop."""
    now = timezone.now()
    loops.advance_loops(now=now)
    iterate(nova, now, progress="Charts for 3 of 8 ports", text="Same draft.", tokens=350)
    iterate(nova, now, progress="Charts for 5 of 8 ports", text="Same draft.", tokens=300)


def test_a_goal_loop_started_paused_resumed_and_stopped_by_a_guardrail(orm, story, browser):
    team, nova = story
    chromium, server = browser
    alice = log_in(chromium, server, "alice")
    alice.on("dialog", lambda dialog: dialog.accept())

    # Starting one: a deadline in the past is refused in the server's words.
    alice.goto(f"/w/{team.id}/agents/{nova.id}/")
    section = alice.locator("section", has=alice.get_by_role("heading", name="Goal loops"))
    expect(section).to_contain_text("No goal loop here yet.")
    starting = section.locator("form.add-loop")
    starting.get_by_label("Goal").fill("Publish a tide table for every harbour in the region.")
    expect(starting.get_by_label("Every (minutes)")).to_be_hidden()  # continuous by default
    starting.get_by_label("Max iterations").fill("6")
    starting.get_by_label("Token budget").fill("1000")
    starting.get_by_label("No-progress limit").fill("2")
    yesterday = (timezone.now() - timedelta(days=1)).astimezone(LISBON).date()
    starting.get_by_label("Deadline").fill(f"{yesterday.isoformat()}T09:00")
    starting.get_by_role("button", name="Start the loop").click()
    expect(starting.locator("[data-form-error]")).to_have_text(
        "The deadline has passed.", timeout=WAIT
    )
    expect(starting.locator(".field-error")).to_have_text("In the past.")
    assert orm(Loop.objects.count) == 0
    scroll_to(section.get_by_role("heading", name="Goal loops"))
    shot(alice, "loops-01-bad-deadline")
    day = (timezone.now() + timedelta(days=5)).astimezone(LISBON).date()
    starting.get_by_label("Deadline").fill(f"{day.isoformat()}T18:30")
    starting.get_by_role("button", name="Start the loop").click()

    # Listed: running, none of its iterations yet, its budget and its deadline (in Lisbon).
    row = section.locator("tr[data-loop]", has_text="Publish a tide table")
    expect(row.locator("[data-loop-status]")).to_have_text("Running", timeout=WAIT)
    expect(row.locator("[data-iterations]")).to_have_text("0 of 6")
    expect(row.locator("[data-tokens]")).to_have_text("0 of 1000")
    expect(row).to_contain_text(f"{day:%a} {day.day} {day:%b}, 18:30")
    made = orm(lambda: Loop.objects.get())
    assert made.deadline.astimezone(LISBON) == datetime.combine(day, time(18, 30), LISBON)
    assert (made.interval_minutes, made.max_iterations, made.token_budget) == (None, 6, 1000)
    assert made.no_progress_limit == 2

    # Paused, then resumed.
    row.get_by_role("button", name="Pause").click()
    expect(row.locator("[data-loop-status]")).to_have_text("Paused", timeout=WAIT)
    expect(row.get_by_role("button", name="Pause")).to_have_count(0)
    assert orm(lambda: Loop.objects.get().status) == "paused"
    scroll_to(section.get_by_role("heading", name="Goal loops"))
    shot(alice, "loops-02-paused")
    row.get_by_role("button", name="Resume").click()
    expect(row.locator("[data-loop-status]")).to_have_text("Running", timeout=WAIT)
    expect(row.get_by_role("button", name="Stop")).to_be_visible()
    assert orm(lambda: Loop.objects.get().status) == "running"

    # Two iterations with the same output: the guardrail stops it, and the page says why.
    orm(two_iterations_without_progress, nova)
    alice.reload()
    row = section.locator("tr[data-loop]", has_text="Publish a tide table")
    expect(row.locator("[data-loop-status]")).to_have_text("Stopped")
    expect(row.locator("[data-stop-reason]")).to_have_text(
        "stopped: No progress in its last 2 iterations."
    )
    expect(row.locator("[data-iterations]")).to_have_text("2 of 6")
    expect(row.locator("[data-tokens]")).to_have_text("650 of 1000")
    expect(row.get_by_role("button")).to_have_count(0)  # finished: nothing to pause or stop
    scroll_to(section.get_by_role("heading", name="Goal loops"))
    shot(alice, "loops-03-stopped")

    # The loop's page: its guardrails and each iteration, newest first.
    row.get_by_role("link", name="Publish a tide table").click()
    expect(alice.locator("[data-stop-reason]")).to_have_text(
        "stopped: No progress in its last 2 iterations."
    )
    expect(alice.locator("[data-guard] [data-iterations]")).to_have_text("2 of 6")
    expect(alice.locator("[data-no-progress]")).to_have_text("2 of 2")
    iterations = alice.locator("tr[data-iteration]")
    expect(iterations).to_have_count(2)
    expect(iterations.first).to_contain_text("Charts for 5 of 8 ports")
    expect(iterations.first.locator(".outcome")).to_have_text("Continue")
    expect(iterations.last).to_contain_text("Charts for 3 of 8 ports")
    expect(iterations.last).to_contain_text("350")
    shot(alice, "loops-04-loop-page")
    iterations.first.get_by_role("link", name="Task of iteration 2").click()
    expect(alice.locator(".pre-wrap").first).to_contain_text("iteration 2 of at most 6")

    # Bob sees Nova's page, and none of this.
    bob = log_in(chromium, server, "bob")
    bob.goto(f"/w/{team.id}/agents/{nova.id}/")
    expect(bob.get_by_role("heading", name="About Nova")).to_be_visible()
    expect(bob.get_by_role("heading", name="Goal loops")).to_have_count(0)

    # On a phone.
    phone = chromium.new_context(
        viewport=PHONE, base_url=server.url, storage_state=alice.context.storage_state()
    ).new_page()
    phone.goto(f"/w/{team.id}/agents/{nova.id}/loops/{made.id}/")
    expect(phone.locator("[data-no-progress]")).to_have_text("2 of 2")
    shot(phone, "loops-05-phone")
    phone.context.close()
