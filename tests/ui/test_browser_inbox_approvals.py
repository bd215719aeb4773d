"""Approvals in the inbox, in a real browser: Nova's publishing waits for a person. Alice (Nova's
owner) approves from her inbox and the item says so at once; an approval decided in the
conversation changes the text of her inbox, open in another tab, live; Bob, an admin when Nova
asked and a member by the time he clicks, is shown the server's refusal and nothing changes.
And the DM the person is looking at never shows on the Inbox badge, not even for a moment.
Database work goes through ``orm`` (tests/ui/browser.py)."""

import pytest
from playwright.sync_api import expect

from conversations.actions import open_direct, post_message
from tests.ui.browser import (
    MARKS,
    PHONE,
    WAIT,
    live,
    log_in,
    nova_in_general,
    wait_for_js,
)
from tests.ui.browser import shot as save_shot
from tests.work.tooling import held_message
from work import actions
from work.access import access_tool
from work.models import PermissionRequest
from workspaces.actions import (
    change_role,
)
from workspaces.models import Notification, User

pytestmark = MARKS

PLAN = {"title": "Tide plan", "kind": "markdown", "content": "# High tide at 06:12"}
ASKING = "Nova asks to use artifact_publish: approve or deny"


def shot(page, name):
    save_shot(page, f"inbox-approvals-{name}")


@pytest.fixture
def story(orm):
    """Alice and Bob, an admin, in Tide Lab with #general and Nova, Alice's agent, whose
    publishing waits for a person's approval."""

    def build():
        team, general, nova = nova_in_general(with_bob=True)
        owner = team.memberships.get(user=team.owner)
        change_role(owner, team.memberships.get(user__username="bob"), "admin")
        actions.set_agent_permission(owner.user, nova, access_tool("artifact_publish"), "ask")
        return team, general, nova

    return orm(build)


def waiting_call(nova, general, text):
    """Alice asks Nova in #general; Nova's call waits for approval: (request, the message)."""
    alice = User.objects.get(username="alice")
    held = held_message(nova, general, alice, text)
    assert held.call("artifact_publish", PLAN).pending is not None
    request = PermissionRequest.objects.select_related("call").latest("created_at")
    return request, request.call.message_id


def alices_item(request):
    """The id of REQUEST's item in Alice's inbox."""
    return Notification.objects.get(user__username="alice", target_id=request.id).id


def status_of(request):
    request.refresh_from_db()
    return request.status


def test_approve_from_the_inbox_and_a_decision_elsewhere_reach_it_live(orm, story, browser):
    team, general, nova = story
    chromium, server = browser
    first, first_message = orm(waiting_call, nova, general, "@nova publish the tide plan")

    alice = log_in(chromium, server, "alice")
    alice.goto(f"/w/{team.id}/inbox/")
    live(alice)
    alice.evaluate("() => { window.__samePage = true; }")  # gone if the page were loaded again
    item = alice.locator(f'[data-notification-id="{orm(alices_item, first)}"]')
    expect(item).to_contain_text(ASKING)
    # It leads to the message where the approval prompt shows.
    link = item.locator("[data-notification-link]")
    expect(link).to_have_attribute("href", f"/w/{team.id}/c/{general.id}/#msg-{first_message}")
    shot(alice, "01-waiting")

    item.get_by_role("button", name="Approve").click()
    done = "Nova asked to use artifact_publish: approved by Alice Martin"
    expect(link.locator(".inbox-item__text")).to_have_text(done, timeout=WAIT)
    expect(item.get_by_role("button")).to_have_count(0)
    expect(alice.locator(".inbox-item.is-unread")).to_have_count(0)
    assert orm(status_of, first) == PermissionRequest.Status.APPROVED
    shot(alice, "02-approved")

    # Another call, arriving live: decided in the conversation, in another tab of Alice's.
    second, _ = orm(waiting_call, nova, general, "@nova and the harbour plan")
    new = alice.locator(f'[data-notification-id="{orm(alices_item, second)}"]')
    expect(new).to_contain_text(ASKING, timeout=WAIT)
    expect(new.get_by_role("button", name="Deny")).to_be_visible()
    shot(alice, "03-second-waiting")
    there = alice.context.new_page()
    there.goto(f"/w/{team.id}/c/{general.id}/")
    live(there)
    there.locator(f'[data-approval="{second.id}"]').get_by_role("button", name="Deny").click()
    expect(new.locator(".inbox-item__text")).to_have_text(
        "Nova asked to use artifact_publish: denied by Alice Martin", timeout=WAIT
    )
    expect(new.get_by_role("button")).to_have_count(0)
    assert alice.evaluate("() => window.__samePage") is True
    assert orm(status_of, second) == PermissionRequest.Status.DENIED
    shot(alice, "04-denied-elsewhere")

    # Its link opens the conversation at the message the approval prompt belongs to.
    link.click()
    alice.wait_for_url(f"**/c/{general.id}/#msg-{first_message}", timeout=WAIT)
    live(alice)
    shot(alice, "05-opened")


def test_one_who_may_no_longer_decide_sees_the_servers_refusal(orm, story, browser):
    team, general, nova = story
    chromium, server = browser
    request, _ = orm(waiting_call, nova, general, "@nova publish the tide plan")
    bob = log_in(chromium, server, "bob", viewport=PHONE)  # on his phone
    bob.goto(f"/w/{team.id}/inbox/")
    live(bob)
    item = bob.locator(".inbox-item").first
    expect(item).to_contain_text(ASKING)

    def demote():
        team.refresh_from_db()
        owner = team.memberships.get(role="owner")
        change_role(owner, team.memberships.get(user__username="bob"), "member")

    orm(demote)
    item.get_by_role("button", name="Approve").click()
    error = item.locator("[data-approval-error]")
    expect(error).to_have_text(
        "Only the agent's owner or an admin of this workspace can decide this.", timeout=WAIT
    )
    expect(item.locator(".inbox-item__text")).to_have_text(ASKING)
    assert orm(status_of, request) == PermissionRequest.Status.PENDING
    shot(bob, "06-refused")
    # On the next visit the page offers him nothing to decide.
    bob.reload()
    expect(bob.locator(".inbox-item").first).to_contain_text(ASKING)
    expect(bob.locator(".inbox-item").first.get_by_role("button")).to_have_count(0)


# What the page's title said, each time it changed (showCount writes the count into it).
TITLES = """(() => {
  window.__titles = [];
  window.__events = [];
  document.addEventListener("agntchat:live", (e) => window.__events.push(e.detail.type));
  addEventListener("DOMContentLoaded", () => {
    new MutationObserver(() => window.__titles.push(document.title)).observe(
      document.querySelector("title"), { childList: true, characterData: true, subtree: true });
  });
})();"""


def test_a_dm_being_looked_at_never_counts_on_the_badge(orm, story, browser):
    team, general, nova = story
    chromium, server = browser

    def direct():
        alice, bob = User.objects.get(username="alice"), User.objects.get(username="bob")
        return open_direct(alice, team, user_ids=[bob.id])[0], alice

    dm, alice = orm(direct)
    bob = log_in(chromium, server, "bob")
    bob.context.add_init_script(TITLES)
    bob.goto(f"/w/{team.id}/c/{dm.id}/")
    live(bob)
    orm(post_message, alice, dm, "Are you on the boat?")
    expect(bob.locator(".msg").last).to_contain_text("Are you on the boat?", timeout=WAIT)
    wait_for_js(bob, "() => window.__events.includes('notification.read')")
    bob.evaluate("() => new Promise(r => setTimeout(r, 300))")
    assert "notification.created" in bob.evaluate("window.__events")
    assert [t for t in bob.evaluate("window.__titles") if t.startswith("(")] == []
    expect(bob.locator("#sidebar [data-inbox-badge]")).to_be_hidden()
    assert orm(lambda: Notification.objects.get(conversation_id=dm.id).read_at) is not None
    shot(bob, "07-dm-in-view")

    # Elsewhere, the same DM counts.
    bob.goto(f"/w/{team.id}/tasks/")
    live(bob)
    orm(post_message, alice, dm, "Hello?")
    expect(bob.locator("#sidebar [data-inbox-count]")).to_have_text("1", timeout=WAIT)
