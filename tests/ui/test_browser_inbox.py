"""The inbox in a real browser: Alice mentions Bob from her page of #plans; on Bob's page, open
elsewhere, the sidebar's Inbox badge and the tab's title count it at once; his inbox lists it
(and the next mention arrives there live); a click marks it read and opens the conversation at
the message; "Mark all read" and the digest setting work from the pages. Database work goes
through ``orm`` (tests/ui/browser.py)."""

import pytest
from playwright.sync_api import expect

from conversations.actions import (
    create_conversation,
    delete_message,
    edit_message,
    post_message,
)
from tests.ui.browser import (
    MARKS,
    PHONE,
    WAIT,
    live,
    log_in,
    shot,
    tide_lab_in_lisbon,
    wait_for_js,
)
from tests.waiting import wait_until
from workspaces.models import Notification, User

pytestmark = MARKS


@pytest.fixture
def story(orm):
    """Tide Lab with Alice, Bob and Nova, and #plans where Alice and Bob talk."""

    def build():
        team, nova = tide_lab_in_lisbon()
        alice, bob = User.objects.get(username="alice"), User.objects.get(username="bob")
        plans = create_conversation(alice, team, kind="channel", title="plans", user_ids=[bob.id])
        return team, plans, bob

    return orm(build)


# The Notification API as the page sees it, recording what it is asked to show, and a switch for
# document.hidden (a headless page is never in the background by itself).
DESKTOP = """(() => {
  window.__hidden = false;
  window.__notices = [];
  Object.defineProperty(Document.prototype, "hidden", { get: () => window.__hidden });
  function Recorded(title, options) { window.__notices.push(options.body); }
  Recorded.prototype.addEventListener = () => {};
  Recorded.permission = "granted";
  Recorded.requestPermission = async () => "granted";
  window.Notification = Recorded;
})();"""


def mention(page, text):
    composer = page.get_by_label("Message #plans")
    composer.fill(text)
    composer.press("Enter")
    expect(composer).to_have_value("")


def test_a_mention_reaches_bobs_badge_title_and_inbox_live(orm, story, browser):
    team, plans, bob_user = story
    chromium, server = browser

    bob = live(log_in(chromium, server, "bob"))
    bob.goto(f"/w/{team.id}/tasks/")
    live(bob)
    badge = bob.locator("#sidebar [data-inbox-badge]")
    expect(badge).to_be_hidden()
    assert not bob.title().startswith("(")

    alice = live(log_in(chromium, server, "alice"))
    alice.goto(f"/w/{team.id}/c/{plans.id}/")
    live(alice)
    mention(alice, "@bob can you check the tide tables for Saturday?")

    # Bob's page, elsewhere, counts it without a reload.
    expect(badge).to_be_visible(timeout=WAIT)
    expect(badge.locator("[data-inbox-count]")).to_have_text("1")
    wait_for_js(bob, "() => document.title.startsWith('(1) ')")
    shot(bob, "inbox-01-badge")

    # His inbox lists it, unread; the next mention arrives there live.
    bob.locator("#sidebar").get_by_role("link", name="Inbox").click()
    live(bob)
    items = bob.locator(".inbox-item")
    expect(items).to_have_count(1)
    expect(items.first).to_have_class("inbox-item is-unread")
    expect(items.first).to_contain_text(
        "Alice Martin mentioned you in #plans: @bob can you check the tide tables for Saturday?"
    )
    mention(alice, "@bob and the harbour's opening hours, please")
    expect(items).to_have_count(2, timeout=WAIT)
    expect(items.first).to_contain_text("the harbour's opening hours")
    expect(bob.locator("#sidebar [data-inbox-count]")).to_have_text("2")
    wait_for_js(bob, "() => document.title.startsWith('(2) ')")
    shot(bob, "inbox-02-list")

    # A click marks it read and opens the conversation at the message.
    first = orm(lambda: Notification.objects.get(user=bob_user, text__contains="tide tables"))
    items.last.get_by_role("link").click()
    bob.wait_for_url(f"**/c/{plans.id}/#msg-{first.message_id}", timeout=WAIT)
    orm(first.refresh_from_db)
    assert first.read_at is not None
    # Having read the conversation, what it brought is read too.
    expect(bob.locator("#sidebar [data-inbox-count]")).to_have_text("0", timeout=WAIT)
    wait_for_js(bob, "() => !document.title.startsWith('(')")

    # Back in the inbox: nothing unread. Another mention, then "Mark all read".
    bob.goto(f"/w/{team.id}/inbox/")
    live(bob)
    expect(bob.locator(".inbox-item.is-unread")).to_have_count(0)
    mention(alice, "@bob one more thing: the boat keys")
    expect(bob.locator(".inbox-item.is-unread")).to_have_count(1, timeout=WAIT)
    shot(bob, "inbox-03-new")
    bob.get_by_role("button", name="Mark all read").click()
    expect(bob.locator(".inbox-item.is-unread")).to_have_count(0, timeout=WAIT)
    expect(bob.locator("#sidebar [data-inbox-badge]")).to_be_hidden()
    assert orm(lambda: Notification.objects.filter(user=bob_user, read_at=None).count()) == 0
    shot(bob, "inbox-04-all-read")


def test_an_edited_or_deleted_message_changes_its_text_in_an_open_inbox(orm, story, browser):
    """What Alice takes back leaves Bob's open inbox at once, without a reload; the other item
    keeps its text."""
    team, plans, bob_user = story
    chromium, server = browser
    alice = orm(lambda: User.objects.get(username="alice"))
    secret = orm(post_message, alice, plans, "@bob the gate code is 4471")
    orm(post_message, alice, plans, "@bob lunch at one?")
    bob = log_in(chromium, server, "bob")
    bob.goto(f"/w/{team.id}/inbox/")
    live(bob)
    bob.evaluate("() => { window.__samePage = true; }")  # gone if the page were loaded again
    items = bob.locator(".inbox-item__text")
    expect(items).to_have_text(
        [
            "Alice Martin mentioned you in #plans: @bob lunch at one?",
            "Alice Martin mentioned you in #plans: @bob the gate code is 4471",
        ]
    )

    orm(edit_message, alice, secret, "@bob ask me for the gate code")
    expect(items.last).to_have_text(
        "Alice Martin mentioned you in #plans: @bob ask me for the gate code", timeout=WAIT
    )
    shot(bob, "inbox-07-edited")
    orm(delete_message, alice, secret)
    expect(items.last).to_have_text("Alice Martin deleted this message.", timeout=WAIT)
    expect(items.first).to_have_text("Alice Martin mentioned you in #plans: @bob lunch at one?")
    expect(bob.locator(".inbox-item.is-unread")).to_have_count(2)
    assert bob.evaluate("() => window.__samePage") is True
    shot(bob, "inbox-08-deleted")


def test_the_digest_setting_and_desktop_notifications(orm, story, browser):
    team, plans, bob_user = story
    chromium, server = browser
    bob = log_in(chromium, server, "bob")
    bob.context.grant_permissions(["notifications"], origin=server.url)
    bob.goto(f"/w/{team.id}/inbox/settings/")
    expect(bob.get_by_label("Daily")).to_be_checked()
    bob.get_by_label("Hourly").check()
    bob.get_by_role("button", name="Save").click()
    expect(bob.get_by_text("Saved.")).to_be_visible(timeout=WAIT)
    orm(bob_user.refresh_from_db)
    assert bob_user.digest == "hourly"
    # Allowed in this browser: the control says so instead of asking.
    expect(bob.get_by_text("Desktop notifications are on for this browser.")).to_be_visible()
    expect(bob.get_by_role("button", name="Enable desktop notifications")).to_be_hidden()
    shot(bob, "inbox-05-settings")


def test_a_desktop_notification_only_while_the_tab_is_hidden(orm, story, browser):
    team, plans, bob_user = story
    chromium, server = browser
    bob = log_in(chromium, server, "bob")
    bob.context.add_init_script(DESKTOP)
    bob.goto(f"/w/{team.id}/tasks/")
    live(bob)
    alice = orm(lambda: User.objects.get(username="alice"))

    orm(post_message, alice, plans, "@bob while you look")
    expect(bob.locator("#sidebar [data-inbox-count]")).to_have_text("1", timeout=WAIT)
    assert bob.evaluate("window.__notices") == []  # the tab is in front: the badge is enough

    bob.evaluate("window.__hidden = true")
    orm(post_message, alice, plans, "@bob while you are away")
    wait_for_js(bob, "() => window.__notices.length === 1")
    assert bob.evaluate("window.__notices") == [
        "Alice Martin mentioned you in #plans: @bob while you are away"
    ]


def test_on_a_phone_the_count_rides_on_the_menu_button(orm, story, browser):
    team, plans, bob_user = story
    chromium, server = browser
    bob = log_in(chromium, server, "bob", viewport=PHONE)
    bob.goto(f"/w/{team.id}/tasks/")
    live(bob)
    toggle = bob.locator("[data-sidebar-toggle]")
    expect(toggle.locator("[data-inbox-badge]")).to_be_hidden()
    alice = orm(lambda: User.objects.get(username="alice"))
    orm(post_message, alice, plans, "@bob are you on the boat?")
    expect(toggle.locator("[data-inbox-count]")).to_have_text("1", timeout=WAIT)
    expect(toggle.locator("[data-inbox-badge]")).to_be_visible()
    shot(bob, "inbox-06-phone")


def answer_held_on_reconnect(page, url_glob: str):
    """Tell PAGE its socket reconnected; the first request it then makes to URL_GLOB is
    answered by the server now and handed over only when the test fulfils it: (route, answer).
    Later requests go through."""
    held = []

    def hold_first(route):
        if held:
            route.continue_()
        else:
            held.append((route, route.fetch()))

    page.route(url_glob, hold_first)
    page.evaluate(
        "() => document.dispatchEvent(new CustomEvent('agntchat:live', "
        "{detail: {type: 'live.connected'}}))"
    )
    # Each evaluate lets playwright run the route handler.
    wait_until(lambda: page.evaluate("() => true") and held, what=f"a request to {url_glob}")
    return held[0]


def test_a_count_fetched_on_reconnect_does_not_undo_a_newer_live_one(orm, story, browser):
    """On reconnect the page asks the server for the count; a mention's live event that lands
    while that answer is on its way is newer, and the older answer must not hide the badge."""
    team, plans, bob_user = story
    chromium, server = browser
    bob = log_in(chromium, server, "bob")
    bob.goto(f"/w/{team.id}/tasks/")
    live(bob)
    route, stale = answer_held_on_reconnect(bob, "**/api/v1/notifications/?unread=true*")
    alice = orm(lambda: User.objects.get(username="alice"))
    orm(post_message, alice, plans, "@bob before the old count lands")
    badge = bob.locator("#sidebar [data-inbox-badge]")
    expect(badge.locator("[data-inbox-count]")).to_have_text("1", timeout=WAIT)
    assert stale.json()["unreadCount"] == 0
    route.fulfill(response=stale)
    bob.evaluate("() => new Promise(r => setTimeout(r, 300))")  # the answer handled
    expect(badge).to_be_visible()
    expect(badge.locator("[data-inbox-count]")).to_have_text("1")


def test_a_sidebar_drawn_before_a_live_unread_count_does_not_undo_it(orm, story, browser):
    """On reconnect the page draws its sidebar afresh; a message's live unread count that lands
    while that rendering is on its way is newer: the sidebar is drawn once more after it."""
    team, plans, bob_user = story
    chromium, server = browser
    bob = log_in(chromium, server, "bob")
    bob.goto(f"/w/{team.id}/tasks/")
    live(bob)
    route, stale = answer_held_on_reconnect(bob, "**/sidebar/*")
    alice = orm(lambda: User.objects.get(username="alice"))
    orm(post_message, alice, plans, "while the sidebar is on its way")
    unread = bob.locator(f'#sidebar [data-conversation-id="{plans.id}"] [data-unread-count]')
    expect(unread).to_have_text("1", timeout=WAIT)
    route.fulfill(response=stale)  # drawn before the message: no unread count
    expect(unread).to_have_text("1", timeout=WAIT)
    bob.evaluate("() => new Promise(r => setTimeout(r, 500))")  # the second drawing landed
    expect(unread).to_have_text("1")
    expect(unread).to_be_visible()
