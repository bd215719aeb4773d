"""Stop from the start of an agent's turn, in a real browser with a real bridge: while Nova only
works (progress steps, no text yet) the "Nova is working…" line offers Stop, and Stop ends the
turn with an empty reply marked Stopped; while Nova's tool call waits for a person's approval
the line says so ("waiting for approval"), stays past the line's two-minute check while the turn
is open, and Stop works there too, withdrawing the request; a card button's turn has Stop as well."""

import json

import pytest
from playwright.sync_api import expect

from artifacts.actions import post_card
from conversations.models import Message
from tests.ui.browser import (
    MARKS,
    WAIT,
    hotel_card,
    live,
    log_in,
    nova_in_general,
    running_bridge,
)
from tests.ui.browser import shot as save_shot
from work import actions
from work.access import access_tool

pytestmark = MARKS

PLAN = {"title": "Tide plan", "kind": "markdown", "content": "# High tide at 06:12"}
SCRIPT = {
    "think hard": [{"progress": "thinking", "sleep_ms": 30_000}, {"text": "Never said"}],
    "publish the plan": [{"tool": "artifact_publish", "input": PLAN}, {"text": "Published"}],
    "Alice Martin chose “More like this” on “Memmo Alfama”": [
        {"progress": "looking", "sleep_ms": 30_000},
        {"text": "Never said"},
    ],
}


def shot(page, name):
    save_shot(page, f"working-{name}")


@pytest.fixture
def story(orm):
    def build():
        team, general, nova = nova_in_general()
        actions.set_agent_permission(team.owner, nova, access_tool("artifact_publish"), "ask")
        return team, general, nova

    return orm(build)


@pytest.fixture
def bridge(orm, story, browser, tmp_path):
    _, _, nova = story
    _, server = browser
    yield from running_bridge(orm, server, nova, tmp_path, json.dumps({"replies": SCRIPT}))


def test_stop_is_offered_from_the_start_of_a_turn(orm, story, browser, bridge):
    team, general, nova = story
    chromium, server = browser
    page = log_in(chromium, server, "alice")
    # The page's clock, to move it past the working line's two-minute check.
    page.clock.install()
    page.goto(f"/w/{team.id}/c/{general.id}/")
    live(page)
    # The bridge's first connection (a new process, its key exchanged: slow on a loaded machine).
    online = page.locator(f'[data-agent-id="{nova.id}"] [data-presence].is-online')
    expect(online.first).to_be_attached(timeout=4 * WAIT)
    working = page.locator("[data-working]")
    stopped = page.locator("li[data-message-id]").filter(has=page.locator(".tag--stopped"))

    # Nova only works, no text yet: Stop is there all the same, and ends the turn.
    page.locator("#composer-input").fill("think hard")
    page.locator("#composer-input").press("Enter")
    expect(working).to_contain_text("Nova is working…", timeout=2 * WAIT)
    expect(working.get_by_role("button", name="Stop")).to_be_visible()
    expect(page.locator(".msg.is-draft")).to_have_count(0)
    shot(page, "01-working-with-stop")
    working.get_by_role("button", name="Stop").click()
    expect(stopped).to_have_count(1, timeout=WAIT)
    expect(stopped.locator(".msg__author")).to_have_text("Nova")
    expect(stopped.locator(".msg__note")).to_have_text("Stopped before it wrote anything.")
    expect(working).to_be_empty()
    shot(page, "02-stopped-before-text")

    # Nova's call waits for Alice's approval: the line says so, and Stop works there too.
    page.locator("#composer-input").fill("publish the plan")
    page.locator("#composer-input").press("Enter")
    expect(page.locator("[data-approval]")).to_contain_text("Approval needed", timeout=2 * WAIT)
    expect(working).to_contain_text("Nova is waiting for approval…", timeout=WAIT)
    expect(working).not_to_contain_text("working")
    shot(page, "03-waiting-for-approval")
    # Two minutes on, the line asks whether the turn is still open: it is, so it stays.
    with page.expect_response(lambda response: "/turns/" in response.url, timeout=WAIT):
        page.clock.fast_forward("02:05")
    expect(working).to_contain_text("Nova is waiting for approval…")
    working.get_by_role("button", name="Stop").click()
    expect(stopped).to_have_count(2, timeout=WAIT)
    expect(working).to_be_empty()
    # The call moves under the stopped reply, and its request is withdrawn: nothing to approve.
    expect(page.locator("[data-tool-calls]")).to_have_count(1, timeout=WAIT)
    expect(page.locator("[data-decide]")).to_have_count(0, timeout=WAIT)
    expect(page.locator(".tool-call [data-call-status]")).to_have_text("stopped", timeout=WAIT)
    shot(page, "04-stopped-while-waiting")

    # A card button hands its click to Nova, with no turn decision: Stop is on the line all the
    # same, and stops that work.
    card = orm(post_card, nova, general, hotel_card())
    result = page.locator(f'[data-message-id="{card.id}"]')
    result.get_by_role("button", name="More like this").click()
    expect(working).to_contain_text("Nova is working…", timeout=WAIT)
    shot(page, "05-card-click-working")
    working.get_by_role("button", name="Stop").click()
    expect(stopped).to_have_count(3, timeout=WAIT)
    expect(working).to_be_empty()

    replies = orm(lambda: list(Message.objects.filter(author_agent=nova).order_by("created_at")))
    stopped_replies = [(r.body, r.payload) for r in replies if r.pk != card.pk]
    assert stopped_replies == [("", {"stopped": True})] * 3
