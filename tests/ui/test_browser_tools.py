"""Agents' tool calls in a real browser: Nova's call waits for approval, the prompt appears live
for Alice (Nova's owner) while Bob is told whose approval it waits for; Alice approves and the
line shows the call succeeded; a late click is refused in words. Then the owner's Tools section
and the workspace's tool permissions. Calls go through the real call path (work/tools/calls.py)
as the agent socket runs them; database work goes through ``orm`` (tests/ui/browser.py)."""

import os
from datetime import timedelta

import pytest
from django.utils import timezone
from playwright.sync_api import expect, sync_playwright

from agents import actions as agent_actions
from conversations.actions import create_conversation, post_message
from tests.socket_helpers import Daphne
from tests.ui.browser import (
    CHROMIUM,
    CHROMIUM_ARGS,
    NO_CHROMIUM,
    PHONE,
    WAIT,
    Orm,
    live,
    log_in,
    person,
)
from tests.ui.browser import shot as save_shot
from tests.work.tooling import held_message
from work import actions, approvals
from work.access import access_tool
from work.models import PermissionRequest, ToolGrant, ToolPermission
from work.tools import calls
from workspaces.actions import accept_invitation, create_invitation, create_team_workspace

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.slow,
    pytest.mark.skipif(not os.access(CHROMIUM, os.X_OK), reason=NO_CHROMIUM),
]

PLAN = {"title": "Tide plan", "kind": "markdown", "content": "# High tide at 06:12"}


def shot(page, name):
    save_shot(page, f"tools-{name}")


def scroll_to(heading):
    """HEADING at the top of the page's scrolling content, for the picture."""
    heading.evaluate(
        """heading => {
          const box = heading.closest("#main") || document.scrollingElement;
          box.scrollTop += heading.getBoundingClientRect().top - box.getBoundingClientRect().top - 12;
        }"""
    )


@pytest.fixture
def orm():
    runner = Orm()
    yield runner
    runner.close()


@pytest.fixture
def story(orm):
    """Alice and Bob in Tide Lab with #general and Nova, Alice's agent, whose publishing waits
    for a person's approval."""

    def build():
        alice, bob = person("alice", "Alice Martin"), person("bob", "Bob Okafor")
        team = create_team_workspace(alice, "Tide Lab")
        _, token = create_invitation(team.memberships.get(user=alice))
        accept_invitation(bob, token)
        nova = agent_actions.create_agent(alice, name="Nova", handle="nova", backend="scripted")
        general = create_conversation(
            alice, team, kind="channel", title="general", agent_ids=[nova.id]
        )
        actions.set_agent_permission(alice, nova, access_tool("artifact_publish"), "ask")
        return team, general, nova, bob

    return orm(build)


@pytest.fixture
def browser(story):
    server = Daphne()
    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield chromium, server
        chromium.close()
    server.stop()


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
        answer, prepared = calls.call_tool(
            nova, held.connection_id, "message", held.item_id, call_id, "artifact_publish", PLAN
        )
        return answer if prepared is None else calls.run_prepared(prepared, calls.Guard())

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
    shot(alice, "04-late-click")
    assert orm(approvals.expire_permission_requests) == 1
    expect(prompt).to_have_count(0, timeout=WAIT)
    expect(alice.locator(".tool-call--failed")).to_contain_text("expired", timeout=WAIT)
    assert orm(lambda: PermissionRequest.objects.get(call__call_id="tide-2").status) == "expired"


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
