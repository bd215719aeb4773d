"""A demanding new user in a real browser, at a laptop's width and a phone's: what the pages say
and where their controls sit. Dana, just signed up, finds how to start a team on her first page;
Alice's agent's tool permissions are on the phone's screen, not in a column off it; a search
refused for its rate says to wait, not "fix the filters"; a page whose server went away says so
above the page until it is back; and tabbing out of the phone's drawer closes it."""

import pytest
from playwright.sync_api import expect, sync_playwright

from tests.socket_helpers import Daphne
from tests.ui.browser import (
    CHROMIUM,
    CHROMIUM_ARGS,
    LAPTOP,
    MARKS,
    PHONE,
    WAIT,
    live,
    log_in,
    nova_in_general,
    shot,
)
from tests.ui.conftest import watch_for_csp_violations

pytestmark = MARKS
VIEWPORTS = pytest.mark.parametrize("viewport", [LAPTOP, PHONE], ids=["laptop", "phone"])


@pytest.fixture
def story(orm):
    return orm(nova_in_general)


@pytest.fixture
def browser(story):
    """As conftest's, with a server that allows one search in a burst (the second is refused);
    the server is in a list, for a test to stop it and start another on its port."""
    limits = {
        "SEARCHES_BURST": "1",
        "SEARCHES_PER_MINUTE": "1",
        "SIGNUPS_PER_HOUR_PER_ADDRESS": "99",
    }
    servers = [Daphne(extra_env=limits)]
    try:
        with sync_playwright() as playwright:
            chromium = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            violations = watch_for_csp_violations(chromium)
            yield chromium, servers
            chromium.close()
    finally:
        for server in servers:
            server.stop()
    assert not violations, "\n".join(violations)


def name_of(viewport) -> str:
    return "phone" if viewport == PHONE else "laptop"


@VIEWPORTS
def test_a_new_person_finds_how_to_start_a_team_after_signing_up(orm, story, browser, viewport):
    chromium, (server,) = browser
    page = chromium.new_context(viewport=viewport, base_url=server.url).new_page()
    page.goto("/signup/")
    page.get_by_label("Username").fill("dana")
    page.get_by_label("Email").fill("dana@example.com")
    page.get_by_label("Password", exact=True).fill("pw-new-user-55120")
    page.get_by_label("Password confirmation").fill("pw-new-user-55120")
    page.get_by_role("button", name="Create account").click()
    expect(page.locator(".flash")).to_have_text(
        "We sent a link to dana@example.com: open it to receive emails there."
    )
    expect(page.get_by_role("heading", name="Your personal workspace")).to_be_visible()
    # Working with others is one click from the first page, not only in the switcher's menu.
    start = page.get_by_role("link", name="Start a team workspace")
    expect(start).to_be_visible()
    shot(page, f"newuser-first-page-{name_of(viewport)}")
    start.click()
    page.get_by_label("Name").fill("Harbour crew")
    page.get_by_role("button", name="Create workspace").click()
    expect(page.get_by_role("heading", name="Harbour crew has no channels yet")).to_be_visible()
    expect(page.get_by_role("link", name="Invite people")).to_be_visible()


@VIEWPORTS
def test_every_tool_permission_is_on_the_screen(orm, story, browser, viewport):
    team, _, nova = story
    chromium, (server,) = browser
    page = log_in(chromium, server, "alice", viewport=viewport)
    page.goto(f"/w/{team.id}/agents/{nova.id}/")
    tools = page.locator('[data-region="agent-tools"]')
    tools.scroll_into_view_if_needed()
    shot(page, f"newuser-agent-tools-{name_of(viewport)}")
    # Each tool's permission and grant sit inside the screen, beside a word saying what they are.
    outside = page.evaluate(
        """width => [...document.querySelectorAll('[data-tool] select, [data-tool] input')]
          .map((el) => [el.closest('[data-tool]').dataset.tool, el.getBoundingClientRect()])
          .filter(([, box]) => box.left < 0 || box.right > width)
          .map(([tool, box]) => `${tool}: ${Math.round(box.left)}..${Math.round(box.right)}`)""",
        viewport["width"],
    )
    assert outside == [], outside
    row = tools.locator('tr[data-tool="artifact_publish"]')
    expect(row.get_by_label("Permission for artifact_publish")).to_be_visible()
    if viewport == PHONE:
        expect(row.get_by_text("Granted", exact=True)).to_be_visible()
    else:  # the columns' headings say it
        expect(tools.get_by_role("columnheader", name="Granted")).to_be_visible()
        expect(row.get_by_text("Granted", exact=True)).to_be_hidden()


@VIEWPORTS
def test_a_search_refused_for_its_rate_says_to_wait(orm, story, browser, viewport):
    team, _, _ = story
    chromium, (server,) = browser
    page = log_in(chromium, server, "alice", viewport=viewport)
    assert page.goto(f"/w/{team.id}/search/?q=tide").status == 200
    refused = page.goto(f"/w/{team.id}/search/?q=tide")
    assert refused.status == 429
    results = page.locator('[data-region="search-results"]')
    expect(results.get_by_role("heading")).to_have_text("Searching paused for a moment")
    expect(results).to_contain_text("Too many searches: try again in")
    expect(results).to_contain_text("Your words and filters are kept")
    # Not the words' fault, nor the filters': none of the wording of a bad query.
    expect(page.locator("main")).not_to_contain_text("Nothing found")
    expect(page.locator("main")).not_to_contain_text("Fix the filters")
    expect(page.locator(".field-error")).to_have_count(0)
    expect(page.get_by_label("Words")).to_have_value("tide")
    shot(page, f"newuser-search-rate-limited-{name_of(viewport)}")


@VIEWPORTS
def test_a_page_says_its_server_is_gone_until_it_is_back(orm, story, browser, viewport):
    team, general, _ = story
    chromium, servers = browser
    server = servers[0]
    page = log_in(chromium, server, "alice", viewport=viewport)
    page.goto(f"/w/{team.id}/c/{general.id}/")
    live(page)
    banner = page.locator("[data-live-banner]")
    expect(banner).to_be_hidden()

    server.stop()
    expect(banner).to_be_visible(timeout=WAIT)
    expect(banner).to_have_text(
        "Connection lost: reconnecting… New messages will appear once it is back."
    )
    # Above the conversation, the whole width of it, covering none of the page's header.
    top, box = page.locator(".topbar").bounding_box(), banner.bounding_box()
    assert box["y"] >= top["y"] + top["height"] - 1, (box, top)
    assert box["x"] + box["width"] <= viewport["width"], box
    shot(page, f"newuser-reconnecting-{name_of(viewport)}")

    servers.append(Daphne(port=server.port))
    # Its next retry connects (a backoff of at most 15 s).
    expect(page.locator("body")).to_have_attribute("data-live", "connected", timeout=2 * WAIT)
    expect(banner).to_be_hidden()


def test_tabbing_out_of_the_phone_drawer_closes_it(orm, story, browser):
    team, general, _ = story
    chromium, (server,) = browser
    page = log_in(chromium, server, "alice", viewport=PHONE)
    page.goto(f"/w/{team.id}/c/{general.id}/")
    toggle = page.get_by_role("button", name="Open navigation")
    toggle.click()
    drawer = page.locator("#sidebar")
    expect(drawer).to_be_visible()
    # Tab past the drawer's last control: focus leaves it for the page it covers, which comes back
    # into view rather than being typed into unseen behind the backdrop.
    drawer.get_by_role("button", name="Log out").focus()
    page.keyboard.press("Tab")
    expect(drawer).to_be_hidden()
    expect(toggle).to_be_focused()
    expect(toggle).to_have_attribute("aria-expanded", "false")
    expect(page.locator("[data-sidebar-close]")).to_be_hidden()
    # Shift+Tab from the drawer's first control goes back out of it too.
    toggle.click()
    expect(drawer).to_be_visible()
    page.keyboard.press("Shift+Tab")
    expect(drawer).to_be_hidden()
    page.keyboard.press("Tab")  # from the skip link before it, to the button that opens it
    expect(toggle).to_be_focused()
    # Clicks inside the drawer, on words that take no focus, leave it open.
    toggle.click()
    drawer.get_by_text("Channels", exact=True).click()
    expect(drawer).to_be_visible()
    shot(page, "newuser-drawer-open-phone")
