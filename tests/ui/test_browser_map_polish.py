"""The work map's polish, in a real browser: the same work is drawn the same way on every load;
loading it logs no console warning or error; two threads in one channel (both titled "Thread in
general") are told apart by their first words; the details give a time as the rest of the pages
do ("Dec 7, 11:11 AM")."""

import pytest
from playwright.sync_api import expect

from agents import actions as agent_actions
from conversations.actions import create_conversation, post_message, reply_in_thread
from tests.ui.browser import (
    MAP_NODES,
    MARKS,
    live,
    log_in,
    shot,
    tide_lab_in_lisbon,
    wait_for_js,
)

pytestmark = MARKS
WHERE = "() => JSON.stringify(window.workMap.cy.nodes().map(n => [n.id(), n.position()]))"


@pytest.fixture
def story(orm):
    """Tide Lab's #general, with Nova and Scout: Alice replies in a thread under two of her
    messages (two threads titled "Thread in general"), and Nova pulls Scout aside."""

    def build():
        team, nova = tide_lab_in_lisbon()
        alice = team.owner
        scout = agent_actions.create_agent(alice, name="Scout", handle="scout", backend="scripted")
        general = create_conversation(
            alice, team, kind="channel", title="general", agent_ids=[nova.id, scout.id]
        )
        launch = post_message(alice, general, "The launch is on Friday.")
        tides = post_message(alice, general, "High tide is at six.")
        reply_in_thread(alice, launch, "Moved to Monday, sorry")
        reply_in_thread(alice, tides, "Low tide at noon then")
        post_message(nova, general, 'On it. <dm target="Scout">Which source did you use?</dm>')
        general.refresh_from_db()
        return team, general

    return orm(build)


def open_map(chromium, server, team, messages=None):
    page = log_in(chromium, server, "alice", timezone_id="UTC", locale="en-US")
    if messages is not None:
        page.on("console", lambda m: messages.append(f"{m.type}: {m.text}"))
    page.goto(f"/w/{team.id}/map/")
    live(page)
    wait_for_js(page, f"{MAP_NODES} === 6")
    return page


def test_the_same_work_is_drawn_the_same_way_on_every_load(story, browser):
    team, _ = story
    chromium, server = browser
    first = open_map(chromium, server, team)
    placed = first.evaluate(WHERE)
    # Another visit, in a fresh page: every node where it was.
    again = open_map(chromium, server, team)
    assert again.evaluate(WHERE) == placed
    again.reload()
    wait_for_js(again, f"{MAP_NODES} === 6")
    assert again.evaluate(WHERE) == placed


def test_loading_the_map_logs_no_warning_or_error(story, browser):
    team, _ = story
    chromium, server = browser
    messages = []
    page = open_map(chromium, server, team, messages)
    page.wait_for_timeout(500)  # a late warning of the first draw
    assert not [m for m in messages if m.startswith(("warning", "error"))], messages


def test_threads_in_one_channel_are_told_apart(story, browser):
    team, _ = story
    chromium, server = browser
    page = open_map(chromium, server, team)
    labels = page.evaluate(
        "() => window.workMap.cy.nodes('[kind = \"thread\"]').map(n => n.data('label')).sort()"
    )
    assert labels == [
        "“Low tide at noon then”",
        "“Moved to Monday, sorry”",
        "“Which source did you use?”",
    ]
    shot(page, "map-04-thread-labels")


def test_the_details_give_times_as_the_pages_do(story, browser):
    team, general = story
    chromium, server = browser
    page = open_map(chromium, server, team)
    point = page.evaluate(
        """id => {
          const box = window.workMap.cy.container().getBoundingClientRect();
          const at = window.workMap.cy.getElementById(id).renderedPosition();
          return { x: box.left + at.x, y: box.top + at.y };
        }""",
        f"conversation:{general.id}",
    )
    page.mouse.click(point["x"], point["y"])
    details = page.locator("[data-map-details]")
    expect(details).to_contain_text("#general")
    since = details.locator("li", has_text="Since")
    # As static/app.js writes a <time data-local-time data-format="datetime">, in the reader's
    # zone (UTC here) and language: "Dec 7, 11:11 AM".
    at = general.created_at
    hour = at.hour % 12 or 12
    expected = f"Since {at:%b} {at.day}, {hour:02d}:{at:%M} {at:%p}"
    assert " ".join(since.inner_text().replace("\u202f", " ").split()) == expected
    assert since.locator("time").get_attribute("datetime")
    shot(page, "map-05-details")
