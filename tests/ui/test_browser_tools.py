"""Agents' tool calls in a real browser: Nova's call waits for approval, the prompt appears live
for Alice (Nova's owner) while Bob is told whose approval it waits for; Alice approves and the
line shows the call succeeded; a late click is refused in words. A task's page shows the calls
made for it, live, with the same prompt and its countdown to the expiry; a call made while the
page's socket was away shows once it reconnects. Then the owner's Tools section and the
workspace's tool permissions. Calls go through the real call path (work/tools/calls.py)
as the agent socket runs them; database work goes through ``orm`` (tests/ui/browser.py)."""

import re
from datetime import timedelta

import pytest
from django.utils import timezone
from playwright.sync_api import expect

from conversations.actions import post_message
from tests.ui.browser import (
    MARKS,
    PHONE,
    WAIT,
    drop_live,
    live,
    log_in,
    nova_in_general,
    restore_live,
    scroll_to,
    with_live_switch,
)
from tests.ui.browser import shot as save_shot
from tests.work.tooling import held_message, held_task
from work import actions, approvals
from work.access import access_tool
from work.models import PermissionRequest, ToolGrant, ToolPermission
from work.tools import calls
from workspaces.models import User

pytestmark = MARKS

PLAN = {"title": "Tide plan", "kind": "markdown", "content": "# High tide at 06:12"}


def shot(page, name):
    save_shot(page, f"tools-{name}")


def call_as(held, call_id, tool="artifact_publish", arguments=PLAN):
    """The call CALL_ID of the agent's connection holding HELD, as the socket runs a tool.call
    frame: asked again with the same id (once approved), it runs."""
    answer, prepared = calls.call_tool(
        held.agent, held.connection_id, held.kind, held.item_id, call_id, tool, arguments
    )
    return answer if prepared is None else calls.run_prepared(prepared, calls.Guard())


@pytest.fixture
def story(orm):
    """Alice and Bob in Tide Lab with #general and Nova, Alice's agent, whose publishing waits
    for a person's approval."""

    def build():
        team, general, nova = nova_in_general(with_bob=True)
        actions.set_agent_permission(team.owner, nova, access_tool("artifact_publish"), "ask")
        return team, general, nova, User.objects.get(username="bob")

    return orm(build)


def test_a_call_waits_for_approval_live_and_runs_once_approved(orm, story, browser):
    team, general, nova, bob_user = story
    chromium, server = browser
    url = f"/w/{team.id}/c/{general.id}/"
    alice, bob = log_in(chromium, server, "alice"), log_in(chromium, server, "bob")
    for page in (alice, bob):
        page.goto(url)
        live(page)

    # Bob asks; Nova's connection holds his message and calls a tool that must wait.
    held = orm(held_message, nova, general, bob_user, "Publish the plan")

    def call(call_id):
        return call_as(held, call_id)

    assert orm(call, "tide-1").pending is not None
    prompt = alice.locator("[data-approval]")
    expect(prompt).to_contain_text("Approval needed", timeout=WAIT)
    expect(alice.locator(".tool-call")).to_contain_text("waiting for approval")
    waiting = bob.locator("[data-approval]")
    expect(waiting).to_contain_text(
        "Waiting for approval from Alice Martin (Nova's owner)", timeout=WAIT
    )
    expect(waiting.get_by_role("button", name="Approve")).to_have_count(0)
    shot(alice, "01-approval-prompt")
    shot(bob, "02-waiting-for-approval")
    phone = chromium.new_context(
        viewport=PHONE, base_url=server.url, storage_state=alice.context.storage_state()
    ).new_page()
    phone.goto(url)
    expect(phone.locator("[data-approval]").get_by_role("button", name="Approve")).to_be_visible()
    shot(phone, "07-phone-approval-prompt")
    phone.context.close()

    # Alice approves: the prompt goes, for Bob too; the call runs once Nova's connection asks
    # again (as the bridge does when it claims the decision), and the line shows it succeeded.
    prompt.get_by_role("button", name="Approve").click()
    expect(prompt).to_have_count(0, timeout=WAIT)
    expect(waiting).to_have_count(0, timeout=WAIT)
    expect(alice.locator(".tool-call")).to_contain_text("approved, running")
    assert orm(call, "tide-1").ok
    for page in (alice, bob):
        line = page.locator(".tool-call")
        expect(line).to_contain_text("succeeded", timeout=WAIT)
        expect(line).to_have_class("tool-call tool-call--succeeded")
        expect(page.locator(".artifact-chip", has_text="Tide plan")).to_be_visible(timeout=WAIT)

    # Nova answers: its calls move under its reply; opened, the line shows input and output.
    question = orm(lambda: general.messages.get(body="Publish the plan"))
    reply = orm(post_message, nova, general, "Published the tide plan.", reply_to=question)
    under_reply = alice.locator(f"#msg-{reply.id} .tool-call")
    expect(under_reply).to_contain_text("used artifact_publish", timeout=WAIT)
    expect(alice.locator(f"#msg-{question.id} .tool-call")).to_have_count(0, timeout=WAIT)
    under_reply.locator("summary").click()
    expect(under_reply).to_contain_text('"title": "Tide plan"')
    expect(under_reply).to_contain_text("artifact_id")
    shot(alice, "03-succeeded-under-reply")

    # A second call waits; its time runs out before anyone looks at the page again, so a late
    # click is refused in the server's words; the expiry sweep then shows it expired, live.
    assert orm(call, "tide-2").pending is not None
    prompt = alice.locator("[data-approval]")
    expect(prompt).to_be_visible(timeout=WAIT)
    past = timezone.now() - timedelta(minutes=1)
    orm(lambda: PermissionRequest.objects.filter(status="pending").update(expires_at=past))
    prompt.get_by_role("button", name="Approve").click()
    expect(prompt.locator("[data-approval-error]")).to_have_text(
        approvals.ApprovalExpired.default_message, timeout=WAIT
    )
    expect(prompt.locator("[data-countdown]")).to_have_text("expired")  # the server said so
    expect(prompt.get_by_role("button", name="Approve")).to_be_disabled()
    shot(alice, "04-late-click")
    assert orm(approvals.expire_permission_requests) == 1
    expect(prompt).to_have_count(0, timeout=WAIT)
    expect(alice.locator(".tool-call--failed")).to_contain_text("expired", timeout=WAIT)
    assert orm(lambda: PermissionRequest.objects.get(call__call_id="tide-2").status) == "expired"


COUNTDOWN = re.compile(r"^expires in 1[45]:[0-5]\d$")  # the workspace's 15 minutes, ticking


def test_a_tasks_page_shows_its_calls_live_and_counts_down_an_approval(orm, story, browser):
    team, general, nova, bob_user = story
    chromium, server = browser
    alice_user = orm(User.objects.get, username="alice")
    held = orm(held_task, nova, team, alice_user, "Publish the tide plan for the week.", general)
    url = f"/w/{team.id}/tasks/{held.item_id}/"
    alice = with_live_switch(log_in(chromium, server, "alice"))
    bob = log_in(chromium, server, "bob")
    for page in (alice, bob):
        page.goto(url)
        live(page)
        expect(page.locator(".tool-call")).to_have_count(0)

    # Nova searches the workspace (it may, without asking), then wants to publish: both lines
    # appear live, and the prompt asks Alice with the time left, counted down each second.
    assert orm(call_as, held, "task-1", "workspace_search", {"query": "tide"}).ok
    first = alice.locator(".tool-call").first
    expect(first).to_contain_text("used workspace_search", timeout=WAIT)
    expect(first).to_contain_text("succeeded")
    assert orm(call_as, held, "task-2").pending is not None
    prompt = alice.locator("[data-approval]")
    expect(prompt).to_contain_text("Approval needed", timeout=WAIT)
    expect(alice.locator(".tool-call").nth(1)).to_contain_text("wants to use artifact_publish")
    countdown = prompt.locator("[data-countdown]")
    expect(countdown).to_have_text(COUNTDOWN)
    before = countdown.text_content()
    expect(countdown).not_to_have_text(before, timeout=3000)
    expect(countdown).to_have_text(COUNTDOWN)
    expect(bob.locator("[data-approval]")).to_contain_text(
        "Waiting for approval from Alice Martin (Nova's owner)", timeout=WAIT
    )
    expect(bob.locator("[data-approval] [data-countdown]")).to_have_text(COUNTDOWN)
    first.locator("summary").click()
    expect(first).to_contain_text('"query": "tide"')
    scroll_to(alice.locator("#instructions-title"))  # the instructions, the calls, the prompt
    shot(alice, "08-task-page")

    # Alice approves on the task's page; the call runs once Nova's connection asks again, and
    # the line shows it succeeded, for Bob too. The line Alice opened stays open meanwhile.
    prompt.get_by_role("button", name="Approve").click()
    expect(prompt).to_have_count(0, timeout=WAIT)
    expect(bob.locator("[data-approval]")).to_have_count(0, timeout=WAIT)
    expect(alice.locator(".tool-call").nth(1)).to_contain_text("approved, running")
    assert orm(call_as, held, "task-2").ok
    for page in (alice, bob):
        expect(page.locator(".tool-call--succeeded")).to_have_count(2, timeout=WAIT)
    expect(alice.locator(".tool-call").first.locator("details")).to_have_attribute("open", "")

    # A third call starts while Alice's socket is away: back, her page shows it and its prompt.
    drop_live(alice)
    assert orm(call_as, held, "task-3").pending is not None
    expect(bob.locator("[data-approval]")).to_be_visible(timeout=WAIT)
    expect(prompt).to_have_count(0)
    restore_live(alice)
    expect(prompt).to_contain_text("Approval needed", timeout=WAIT)

    # It is left to run out: at zero the prompt says it expired and its buttons are off, before
    # the server's sweep marks the call expired (which then shows it failed).
    soon = timezone.now() + timedelta(seconds=3)
    orm(lambda: PermissionRequest.objects.filter(status="pending").update(expires_at=soon))
    alice.reload()
    live(alice)
    expect(countdown).to_have_text(re.compile(r"^expires in 0:0[0-3]$"))
    expect(countdown).to_have_text("expired", timeout=WAIT)
    for name in ("Approve", "Always allow", "Deny"):
        expect(prompt.get_by_role("button", name=name)).to_be_disabled()
    expect(alice.locator(".tool-call").nth(2).locator("[data-call-status]")).to_have_text("expired")
    assert orm(approvals.expire_permission_requests) == 1
    expect(prompt).to_have_count(0, timeout=WAIT)
    expect(alice.locator(".tool-call--failed")).to_contain_text("expired", timeout=WAIT)


def test_a_call_made_while_the_socket_was_away_shows_once_it_reconnects(orm, story, browser):
    team, general, nova, bob_user = story
    chromium, server = browser
    alice = with_live_switch(log_in(chromium, server, "alice"))
    alice.goto(f"/w/{team.id}/c/{general.id}/")
    live(alice)
    held = orm(held_message, nova, general, bob_user, "Publish the plan")
    question = orm(lambda: general.messages.get(body="Publish the plan"))
    expect(alice.locator(f"#msg-{question.id}")).to_be_visible(timeout=WAIT)

    # The socket drops; meanwhile Nova searches and then asks to publish, under Bob's question
    # already on the page: nothing of it reaches the page while it is away.
    drop_live(alice)
    assert orm(call_as, held, "away-1", "workspace_search", {"query": "tide"}).ok
    assert orm(call_as, held, "away-2").pending is not None
    expect(alice.locator(".tool-call")).to_have_count(0)

    # Back: the calls are fetched, the prompt with them, counting down.
    restore_live(alice)
    under = alice.locator(f"#msg-{question.id}")
    expect(under.locator(".tool-call")).to_have_count(2, timeout=WAIT)
    expect(under.locator(".tool-call").first).to_contain_text("used workspace_search")
    prompt = under.locator("[data-approval]")
    expect(prompt).to_contain_text("Approval needed")
    expect(prompt.locator("[data-countdown]")).to_have_text(COUNTDOWN)
    shot(alice, "09-countdown")

    # Away again, and Alice approves elsewhere meanwhile (her phone, say): back, the prompt is
    # gone and the line says the call was approved.
    drop_live(alice)
    request = orm(lambda: PermissionRequest.objects.select_related("call__agent").get())
    orm(approvals.decide_permission, orm(User.objects.get, username="alice"), request, True)
    restore_live(alice)
    expect(prompt).to_have_count(0, timeout=WAIT)
    expect(under.locator(".tool-call").nth(1)).to_contain_text("approved, running")


def test_the_owner_sets_tools_and_an_admin_sets_the_workspaces(orm, story, browser):
    team, general, nova, bob_user = story
    chromium, server = browser
    alice = log_in(chromium, server, "alice")

    # Nova's page: Alice takes web_fetch away and lets publishing run without asking.
    alice.goto(f"/w/{team.id}/agents/{nova.id}/")
    tools = alice.locator("section", has=alice.get_by_role("heading", name="Tools"))
    expect(tools).to_be_visible()
    row = tools.locator('tr[data-tool="artifact_publish"]')
    expect(row.get_by_label("Permission for artifact_publish")).to_have_value("ask")
    row.get_by_label("Permission for artifact_publish").select_option("allow")
    expect(row.get_by_text("Saved")).to_be_visible(timeout=WAIT)
    fetch = tools.locator('tr[data-tool="web_fetch"]')
    fetch.get_by_label("web_fetch granted").uncheck()
    expect(fetch.get_by_text("Saved")).to_be_visible(timeout=WAIT)
    scroll_to(tools.get_by_role("heading", name="Tools"))
    shot(alice, "05-agent-tools")
    assert orm(
        lambda: ToolPermission.objects.get(agent=nova, tool="artifact_publish").decision
    ) == ("allow")
    assert orm(lambda: ToolGrant.objects.get(agent=nova, tool="web_fetch").granted) is False

    # The members page: external tools are allowed for every agent here; approvals last 30 min.
    alice.goto(f"/w/{team.id}/members/")
    external = alice.get_by_label("Permission for external tools")
    external.select_option("allow")
    reset = alice.locator('tr[data-risk="external"]').get_by_role("button", name="Reset to default")
    expect(reset).to_be_visible(timeout=WAIT)
    alice.get_by_label("Approval expires after (minutes)").fill("30")
    alice.get_by_role("button", name="Save", exact=True).click()
    expect(alice.get_by_text("Saved.")).to_be_visible(timeout=WAIT)
    scroll_to(alice.locator("#tool-permissions-title"))
    shot(alice, "06-workspace-tool-permissions")
    assert orm(
        lambda: ToolPermission.objects.get(workspace=team, agent=None, risk="external").decision
    ) == ("allow")
    assert orm(lambda: type(team).objects.get(pk=team.pk).approval_expiry_minutes) == 30
    reset.click()
    expect(external).to_have_value("", timeout=WAIT)
    assert not orm(lambda: ToolPermission.objects.filter(workspace=team).exists())
