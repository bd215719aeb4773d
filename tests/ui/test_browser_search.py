"""Search and the workspace archive in a real browser: Alice types in the header's search box,
gets results with the matched words marked, narrows them to Bob's, opens a message from the
results and lands on it in its conversation; then downloads the workspace's archive from the
settings page. Database work goes through ``orm`` (tests/ui/browser.py)."""

import json
import zipfile

import pytest
from playwright.sync_api import expect

from agents import actions as agent_actions
from artifacts import actions as artifact_actions
from conversations.actions import create_conversation, post_message
from conversations.tasks import create_task
from tests.ui.browser import (
    MARKS,
    PHONE,
    WAIT,
    log_in,
    person,
    scroll_to,
    shot,
    wait_for_js,
)
from workspaces.actions import accept_invitation, create_invitation, create_team_workspace

pytestmark = MARKS


@pytest.fixture
def story(orm):
    """Team Tide with Alice (owner) and Bob, Nova in #general and #launch, a conversation about
    the budget: messages, an artifact and a task."""

    def build():
        alice, bob = person("alice", "Alice Martin"), person("bob", "Bob Okafor")
        team = create_team_workspace(alice, "Tide Lab")
        _, token = create_invitation(team.memberships.get(user=alice))
        accept_invitation(bob, token)
        nova = agent_actions.create_agent(
            alice, name="Nova", handle="nova", role="researcher", backend="scripted"
        )
        general = create_conversation(
            alice, team, kind="channel", title="general", user_ids=[bob.id], agent_ids=[nova.id]
        )
        launch = create_conversation(alice, team, kind="channel", title="launch")
        post_message(alice, general, "Kickoff: the harbour survey starts on Monday.")
        for n in range(60):  # the kickoff is older than the conversation page shows at first
            post_message(bob, general, f"Survey log, line {n}.")
        post_message(alice, general, "Morning all. Coffee is in the kitchen.")
        target = post_message(
            bob, general, "The budget review is Thursday: bring the marketing budget <draft>."
        )
        post_message(alice, general, "Thanks, I will read the budget before then.")
        post_message(alice, launch, "Launch budget approved; the press kit is next.")
        for n in range(12):
            post_message(alice, general, f"Notes from the stand-up, item {n}.")
        artifact_actions.publish_artifact(
            nova, general, "Budget 2027", "markdown", "# Budget 2027\n\nMarketing: 40k."
        )
        create_task(alice, team, nova, "Check the budget numbers against last year.")
        return team, general, target

    return orm(build)


def test_search_from_the_header_filter_open_and_export(orm, story, browser, tmp_path):
    team, general, target = story
    chromium, server = browser
    alice = log_in(chromium, server, "alice")
    alice.goto(f"/w/{team.id}/c/{general.id}/")

    # The search box in the header: type, press Enter.
    box = alice.get_by_role("searchbox", name="Search Tide Lab")
    box.fill("budget")
    box.press("Enter")
    alice.wait_for_url(f"**/w/{team.id}/search/?q=budget")
    hits = alice.locator("[data-hit-id]")
    expect(hits).to_have_count(6)
    expect(alice.locator("[data-hit-kind=artifact]")).to_contain_text("Budget 2027")
    expect(alice.locator("[data-hit-kind=task]")).to_contain_text("Task for Nova")
    best = alice.locator("[data-hit-kind=message]").first  # the artifact's title ranks first
    expect(best).to_have_attribute("data-hit-id", str(target.id))
    expect(best.locator("mark")).to_have_text(["budget", "budget"])
    # What Bob wrote is text: "<draft>" shown as typed, not taken for markup.
    expect(best.locator("[data-hit-text]")).to_contain_text("<draft>")
    shot(alice, "search-01-results")

    # Narrow to what Bob wrote.
    alice.get_by_label("Author").select_option(label="Bob Okafor")
    alice.get_by_role("button", name="Search", exact=True).click()
    expect(hits).to_have_count(1)
    expect(hits.first).to_have_attribute("data-hit-id", str(target.id))
    shot(alice, "search-02-filtered")

    # Open it: the conversation, scrolled to that message, marked.
    hits.first.locator(".search-hit__link").click()
    alice.wait_for_url(f"**/c/{general.id}/#msg-{target.id}")
    found = alice.locator(f"#msg-{target.id}")
    expect(found).to_have_class("msg msg--person msg--found", timeout=WAIT)
    expect(found).to_be_in_viewport()
    shot(alice, "search-03-message")

    # A message older than the page first shows: paged back to, then marked.
    alice.get_by_role("searchbox", name="Search Tide Lab").fill("harbour kickoff")
    alice.keyboard.press("Enter")
    expect(hits).to_have_count(1)
    hits.first.locator(".search-hit__link").click()
    kickoff = alice.locator(".msg--found")
    expect(kickoff).to_contain_text("the harbour survey starts on Monday", timeout=WAIT)
    expect(kickoff).to_be_in_viewport()

    # No match: said so.
    alice.goto(f"/w/{team.id}/search/?q=budget&type=task&author={target.author_user_id}")
    expect(alice.locator("[data-no-results]")).to_contain_text("with these filters")

    # The archive, from the workspace's settings page.
    alice.goto(f"/w/{team.id}/members/")
    link = alice.get_by_role("link", name="Download archive (.zip)")
    scroll_to(alice.get_by_role("heading", name="Workspace"))
    shot(alice, "export-01-settings")
    with alice.expect_download() as info:
        link.click()
    download = info.value
    assert download.suggested_filename.startswith("tide-lab-")
    saved = tmp_path / "archive.zip"
    download.save_as(saved)
    with zipfile.ZipFile(saved) as archive:
        manifest = json.loads(archive.read("manifest.json"))
        titles = {c["title"] for c in manifest["conversations"]}
        assert titles == {"general", "launch"}
        assert [a["title"] for a in manifest["artifacts"]] == ["Budget 2027"]
    # The audit log says who took it.
    alice.reload()
    audit = alice.locator("[data-audit] tbody tr").first
    expect(audit).to_contain_text("Workspace exported")
    expect(audit).to_contain_text("Alice Martin")
    scroll_to(alice.get_by_role("heading", name="Audit log"))
    shot(alice, "export-02-audit-log")

    # On a phone: the box in the header, the results below.
    phone = log_in(chromium, server, "bob", viewport=PHONE)
    phone.goto(f"/w/{team.id}/search/?q=budget+review")
    wait_for_js(phone, "document.querySelectorAll('[data-hit-id]').length === 1")
    shot(phone, "search-04-phone")
