"""Mentioning an agent that does not take part, in a real browser (as Slack says of a person not
in the channel): Alice writes @orion in #general, where only Nova takes part; only she is told
Orion will not answer, and may add it there; mentioning Nova, a person or an unknown name says
nothing."""

import pytest
from playwright.sync_api import expect

from agents import actions as agent_actions
from conversations.actions import open_direct
from conversations.models import Participant
from tests.ui.browser import MARKS, PHONE, WAIT, live, log_in, nova_in_general, shot

pytestmark = MARKS


@pytest.fixture
def story(orm):
    def build():
        team, general, nova = nova_in_general(with_bob=True)
        orion = agent_actions.create_agent(
            team.owner, name="Orion", handle="orion", backend="scripted"
        )
        return team, general, orion

    return orm(build)


@pytest.fixture
def with_nova(orm, story):
    """Alice's direct conversation with Nova."""
    team, general, _ = story
    nova = general.participants.get(agent__handle="nova").agent
    return orm(lambda: open_direct(team.owner, team, agent_ids=[nova.id])[0])


def open_general(chromium, server, team, general, who, **kwargs):
    page = live(log_in(chromium, server, who, **kwargs))
    page.goto(f"/w/{team.id}/c/{general.id}/")
    return live(page)


def send(page, text, where="#general"):
    composer = page.get_by_label(f"Message {where}")
    composer.fill(text)
    composer.press("Enter")
    expect(page.locator("[data-messages] > li", has_text=text).last).to_be_visible(timeout=WAIT)


def test_mentioning_an_absent_agent_offers_to_add_it(orm, story, browser):
    team, general, orion = story
    chromium, server = browser
    alice = open_general(chromium, server, team, general, "alice")
    bob = open_general(chromium, server, team, general, "bob")
    notice = alice.locator("[data-mention-hint]")

    # Nova takes part, Bob is a person, @nobody names no one: nothing to say.
    send(alice, "@nova @bob @nobody what is the tide doing?")
    expect(notice).to_be_hidden()

    send(alice, "@orion can you read the buoy data?")
    expect(notice).to_be_visible()
    expect(notice).to_contain_text("Orion is not in #general, so it will not answer.")
    shot(alice, "mention-hint-laptop")
    # Only the writer is told.
    expect(bob.locator("[data-messages]")).to_contain_text("buoy data", timeout=WAIT)
    expect(bob.locator("[data-mention-hint]")).to_be_hidden()

    # Dismissed by its × (a button: Enter on it).
    notice.get_by_role("button", name="Dismiss").focus()
    alice.keyboard.press("Enter")
    expect(notice).to_be_hidden()

    send(alice, "@orion are you there?")
    add = notice.get_by_role("button", name="Add Orion")
    expect(add).to_be_visible()
    add.click()
    expect(notice).to_be_hidden(timeout=WAIT)
    expect(alice.locator(".conv-head__agents")).to_contain_text("Orion", timeout=WAIT)
    assert orm(lambda: Participant.objects.filter(conversation=general, agent=orion).exists())

    # Orion now takes part: no notice.
    send(alice, "@orion welcome aboard")
    expect(notice).to_be_hidden()


def test_the_notice_fits_a_phone_without_moving_the_composer(orm, story, browser):
    team, general, _ = story
    chromium, server = browser
    alice = open_general(chromium, server, team, general, "alice", viewport=PHONE)
    box = alice.locator(".composer__box")

    composer = alice.get_by_label("Message #general")
    composer.fill("@orion hi")  # one line, as the empty box is
    before = box.bounding_box()
    composer.press("Enter")
    notice = alice.locator("[data-mention-hint]")
    expect(notice).to_be_visible(timeout=WAIT)
    alice.wait_for_timeout(300)
    assert box.bounding_box() == before  # laid over the messages: the box stays under the thumb
    hint = notice.bounding_box()
    assert hint["x"] >= 0 and hint["x"] + hint["width"] <= PHONE["width"]
    assert not alice.evaluate("document.documentElement.scrollWidth > innerWidth")
    shot(alice, "mention-hint-phone")
    notice.get_by_role("button", name="Add Orion").click()
    expect(notice).to_be_hidden(timeout=WAIT)


def test_in_a_direct_conversation_it_says_agents_join_channels_only(orm, story, with_nova, browser):
    team, _, _ = story
    chromium, server = browser
    alice = open_general(chromium, server, team, with_nova, "alice")
    notice = alice.locator("[data-mention-hint]")

    send(alice, "@nova hello", where="Nova")
    expect(notice).to_be_hidden()
    send(alice, "@orion hello", where="Nova")
    expect(notice.get_by_role("paragraph")).to_have_text(
        "Orion is not in this conversation, so it will not answer. "
        "Agents are added to channels only."
    )
    expect(notice.get_by_role("button", name="Add Orion")).to_be_hidden()
    # Reached by Tab from the box (past Send), and closed by Escape, back to the box.
    alice.get_by_label("Message Nova").press("Tab")
    alice.keyboard.press("Tab")
    expect(notice.get_by_role("button", name="Dismiss")).to_be_focused()
    alice.keyboard.press("Escape")
    expect(notice).to_be_hidden()
    expect(alice.get_by_label("Message Nova")).to_be_focused()
