"""Streaming replies in a real browser (issue 28): a real bridge whose scripted model writes a
word every 200 ms. Alice asks; Nova's answer grows in a "writing…" bubble (shown as text: the
markup in it stays text); Stop ends the turn with a reply marked stopped, holding what was
written; Regenerate has Nova answer the same message again, as a new reply marked regenerated,
the earlier one marked as such."""

import json
import re
import time

import pytest
from playwright.sync_api import expect

from conversations.drafts import drafts_in
from conversations.models import Delivery, Message
from tests.ui.browser import (
    LIVE_SWITCH,
    MARKS,
    WAIT,
    log_in,
    nova_in_general,
    open_conversation,
    person,
    running_bridge,
    wait_for_js,
)
from tests.ui.browser import shot as save_shot
from tests.waiting import wait_until
from workspaces.actions import accept_invitation, create_invitation

pytestmark = MARKS

REPLY = (
    "Tides rise and fall twice a day. The <b>moon</b> pulls the water toward it, and the sun "
    "helps a little. Spring tides come at new and full moon; neap tides come in between. "
    "Check the local tables before you sail."
)
DRAFT_TEXT = "document.querySelector('.msg.is-draft [data-draft-text]')?.textContent || ''"


def invited_to(team) -> str:
    _, token = create_invitation(team.memberships.get(role="owner"))
    return token


def shot(page, name):
    save_shot(page, f"streaming-{name}")


@pytest.fixture
def story(orm):
    return orm(nova_in_general)


@pytest.fixture
def bridge(orm, story, browser, tmp_path):
    _, _, nova = story
    _, server = browser
    options = json.dumps({"word_ms": 200, "default": REPLY})
    yield from running_bridge(orm, server, nova, tmp_path, options)


def test_a_reply_streams_stops_and_is_regenerated(orm, story, browser, bridge):
    team, general, nova = story
    chromium, server = browser
    page = open_conversation(chromium, server, "alice", team, general)

    page.locator("#composer-input").fill("How do tides work?")
    page.locator("#composer-input").press("Enter")
    bubble = page.locator(".msg.is-draft")
    expect(bubble).to_be_visible(timeout=2 * WAIT)  # the bridge's first turn (a loaded machine)
    expect(bubble.locator(".msg__author")).to_have_text("Nova")
    expect(bubble.locator("[data-draft-state]")).to_have_text("writing…")
    expect(page.locator("[data-working]")).not_to_contain_text("Nova")  # the bubble says it

    # The bubble grows: partial texts, each the reply so far.
    partial, deadline = [], time.monotonic() + 15
    while time.monotonic() < deadline and (len(partial) < 3 or "<b>moon</b>" not in partial[-1]):
        text = page.evaluate(DRAFT_TEXT)
        if text and (not partial or text != partial[-1]):
            partial.append(text)
        time.sleep(0.05)
    assert len(set(partial)) >= 3, partial
    assert all(REPLY.startswith(text) for text in partial), partial
    assert [len(t) for t in partial] == sorted(len(t) for t in partial)
    # Markup in a draft is text, never HTML.
    assert "<b>moon</b>" in bubble.locator("[data-draft-text]").text_content()
    assert bubble.locator("[data-draft-text] b").count() == 0
    shot(page, "01-writing")

    bubble.get_by_role("button", name="Stop").click()
    stopped = page.locator("li[data-message-id]").filter(has=page.locator(".tag--stopped"))
    expect(stopped).to_have_count(1, timeout=WAIT)
    expect(bubble).to_have_count(0)
    expect(stopped.locator(".msg__author")).to_have_text("Nova")
    written = stopped.locator(".msg__text").inner_text()
    assert written and "moon" in written and "Check the local tables" not in written
    shot(page, "02-stopped")

    def replies():
        return list(
            Message.objects.filter(author_agent=nova)
            .order_by("created_at")
            .values("id", "body", "payload")
        )

    (first,) = orm(replies)
    assert first["payload"] == {"stopped": True} and REPLY.startswith(first["body"])
    assert orm(lambda: Delivery.objects.get(agent=nova).attempts) == 1

    # Regenerate: a new answer to the same message, streamed again, posted as a new reply.
    stopped.hover()
    stopped.get_by_role("button", name="Regenerate").click()
    expect(page.locator(".msg.is-draft")).to_be_visible(timeout=2 * WAIT)
    expect(stopped.locator(".tag--superseded")).to_have_text("Earlier answer", timeout=WAIT)
    regenerated = page.locator("li[data-message-id]").filter(has=page.locator(".tag--regenerated"))
    expect(regenerated).to_have_count(1, timeout=30_000)
    expect(regenerated.locator(".tag--regenerated")).to_be_visible()
    expect(stopped.get_by_role("button", name="Regenerate")).to_have_count(
        0
    )  # the newer one has it
    expect(regenerated.get_by_role("button", name="Regenerate")).to_have_count(1)
    expect(page.locator(".msg.is-draft")).to_have_count(0)
    expect(regenerated.locator(".msg__text")).to_contain_text("Check the local tables")
    # The final message is rendered like every message: markup sanitised, not run.
    assert regenerated.locator(".msg__text script, .msg__text [onerror]").count() == 0
    first_answer, second_answer = orm(replies)
    assert second_answer["payload"] == {"regenerated_from": str(first_answer["id"])}
    assert first_answer["payload"] == {"stopped": True, "superseded": True}
    assert second_answer["body"] == REPLY
    delivery = orm(lambda: Delivery.objects.get(agent=nova))
    assert delivery.acked_at is not None and delivery.attempts == 1  # a new turn counts afresh
    shot(page, "03-regenerated")


def test_a_late_joiner_sees_the_reply_so_far(orm, story, browser, bridge):
    """Bob opens the conversation while Nova writes: the page brings the draft so far, with no
    live socket at all (it is kept on the server, not only passed on); a reload keeps it; once
    the reply is posted, the page shows the reply and no draft."""
    team, general, nova = story
    chromium, server = browser
    orm(lambda: accept_invitation(person("bob", "Bob Okafor"), invited_to(team)))
    alice = open_conversation(chromium, server, "alice", team, general)
    bob = log_in(chromium, server, "bob")
    bob.context.add_init_script(LIVE_SWITCH)
    bob.context.add_init_script("window.__live.blocked = true;")  # no live socket from the start

    alice.locator("#composer-input").fill("How do tides work?")
    alice.locator("#composer-input").press("Enter")
    wait_for_js(alice, f"({DRAFT_TEXT}).includes('moon')", timeout=2 * WAIT / 1000)
    bob.goto(f"/w/{team.id}/c/{general.id}/")
    expect(bob.locator("body")).not_to_have_attribute("data-live", "connected")
    bubble = bob.locator(".msg.is-draft")
    expect(bubble).to_be_visible()
    expect(bubble.locator(".msg__author")).to_have_text("Nova")
    so_far = bubble.locator("[data-draft-text]").text_content()
    assert "moon" in so_far and REPLY.startswith(so_far) and so_far != REPLY, so_far
    expect(bubble.get_by_role("button", name="Stop")).to_be_visible()
    shot(bob, "04-late-joiner")

    alice.reload()
    expect(alice.locator(".msg.is-draft [data-draft-text]")).to_contain_text("moon")

    (reply,) = wait_until(
        lambda: orm(lambda: list(Message.objects.filter(author_agent=nova))),
        timeout=30,
        what="Nova's reply",
    )
    assert reply.body == REPLY
    bob.reload()
    expect(bob.locator(".msg.is-draft")).to_have_count(0)
    expect(bob.locator(f'li[data-message-id="{reply.id}"] .msg__text')).to_contain_text(
        "Check the local tables"
    )
    assert orm(drafts_in, general.id) == []


def test_a_message_sent_while_a_reply_is_written_stays_above_it(orm, story, browser, bridge):
    """The reply being written is posted after Alice's next message, so it is shown after it
    from the start, as a reload shows them."""
    team, general, nova = story
    chromium, server = browser
    page = open_conversation(chromium, server, "alice", team, general)
    page.locator("#composer-input").fill("How do tides work?")
    page.locator("#composer-input").press("Enter")
    expect(page.locator(".msg.is-draft")).to_be_visible(timeout=2 * WAIT)
    page.locator("#composer-input").fill("And what about the moon?")
    page.locator("#composer-input").press("Enter")
    mine = page.locator("[data-messages] > li", has_text="And what about the moon?")
    expect(mine).to_have_attribute("data-message-id", re.compile(".+"), timeout=WAIT)
    order = (
        "() => [...document.querySelectorAll('[data-messages] > li')]"
        ".map((li) => li.dataset.messageId || 'writing')"
    )
    assert page.evaluate(order)[-2:] == [mine.get_attribute("data-message-id"), "writing"]
    shot(page, "05-sent-while-writing")

    # Once posted, the reply is where the bubble was; a reload shows the same order.
    first = page.locator("li[data-message-id]", has_text="Check the local tables").first
    expect(first).to_be_visible(timeout=30_000)
    live_order = [i for i in page.evaluate(order) if i != "writing"]
    page.reload()  # Nova's answer to the second message may have come meanwhile, after them
    assert [i for i in page.evaluate(order) if i != "writing"][: len(live_order)] == live_order
