"""Carol's first minutes, in a real browser: a new account, no agent, nothing in her inbox. Her
pages say what to do first instead of offering what cannot work yet: no "Start task" form while no
agent is there to take it, no empty box under "Nothing here yet" in her inbox."""

import pytest
from playwright.sync_api import expect

from tests.ui.browser import LAPTOP, MARKS, PHONE, log_in, person, shot
from workspaces.models import Workspace

pytestmark = MARKS


@pytest.fixture
def story(orm):
    def build():
        carol = person("carol", "Carol Diaz")
        return Workspace.objects.get(owner=carol, kind=Workspace.Kind.PERSONAL)

    return orm(build)


@pytest.mark.parametrize("viewport", [LAPTOP, PHONE], ids=["laptop", "phone"])
def test_a_new_account_is_told_what_to_do_first(orm, story, browser, viewport):
    home = story
    chromium, server = browser
    label = "phone" if viewport == PHONE else "laptop"
    page = log_in(chromium, server, "carol", viewport=viewport)

    page.goto(f"/w/{home.id}/tasks/")
    expect(page.get_by_role("button", name="Start task")).to_have_count(0)
    first = page.get_by_role("link", name="Create an agent")
    expect(first).to_be_visible()
    shot(page, f"walkthrough-tasks-without-agents-{label}")
    first.click()
    expect(page).to_have_url(f"{server.url}/w/{home.id}/agents/new/")

    page.goto(f"/w/{home.id}/inbox/")
    expect(page.locator("[data-inbox-empty]")).to_be_visible()
    expect(page.locator("[data-inbox-list]")).to_be_hidden()
    shot(page, f"walkthrough-inbox-empty-{label}")
