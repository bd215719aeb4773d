"""The agent directory in a real browser: Alice publishes Scout from its page; Bob, in his own
workspace, finds it from the sidebar's Agent directory by searching, opens the listing, clones
it and lands on his new agent's page; the clone is among his agents, with Scout's skill, and
Alice's page counts the clone. Database work goes through ``orm`` (tests/ui/browser.py)."""

import pytest
from playwright.sync_api import expect

from agents import actions as agent_actions
from agents.models import Agent
from tests.ui.browser import MARKS, WAIT, log_in, person, scroll_to, shot
from work import skills
from work.models import AgentClone, Skill
from workspaces.models import Workspace

pytestmark = MARKS

CITE = """---
name: cite-sources
description: Cite every source with a link. Use for any research answer.
---
Every claim gets a link to where it was read.
"""


@pytest.fixture
def story(orm):
    """Alice with Scout (a research agent with a personality, a skill of its own and a key),
    Bob with nothing but his personal workspace; and Dora's published agent, so the directory
    has more than one listing."""

    def build():
        alice, bob = person("alice", "Alice Martin"), person("bob", "Bob Okafor")
        dora = person("dora", "Dora Lindqvist")
        scout = agent_actions.create_agent(
            alice,
            name="Scout",
            handle="scout",
            role="research assistant",
            capabilities=["research", "summaries"],
            backend="anthropic_api",
            model="claude-sonnet-4-5",
        )
        agent_actions.set_personality(
            scout, "Curious, careful, brief. Sources first.", author=alice
        )
        skills.create_skill(alice, skills.parse_skill_md(CITE), agent=scout)
        agent_actions.create_agent_key(scout, "laptop")
        from work import directory

        mailman = agent_actions.create_agent(dora, name="Mailman", role="email helper")
        directory.publish_agent(dora, mailman, description="Answers routine email politely.")

        def home(user):
            return Workspace.objects.get(owner=user, kind=Workspace.Kind.PERSONAL)

        return home(alice), home(bob), scout

    return orm(build)


def test_publish_find_clone_and_see_the_clone(orm, story, browser):
    alice_home, bob_home, scout = story
    chromium, server = browser

    # Alice publishes Scout from its page.
    alice = log_in(chromium, server, "alice")
    alice.goto(f"/w/{alice_home.id}/agents/{scout.id}/")
    panel = alice.locator("section", has=alice.get_by_role("heading", name="Agent directory"))
    expect(panel.locator("[data-listing-state]")).to_contain_text("Not published")
    panel.get_by_label("Description in the directory").fill(
        "Researches a question on the web and answers with sources."
    )
    panel.get_by_role("button", name="Publish Scout").click()
    panel = alice.locator("section", has=alice.get_by_role("heading", name="Agent directory"))
    expect(panel.locator("[data-listing-state]")).to_contain_text("Published", timeout=WAIT)
    expect(panel.get_by_role("button", name="Republish Scout")).to_be_visible()
    expect(panel.get_by_role("button", name="Unpublish Scout")).to_be_visible()
    expect(panel.locator("[data-listing-state]")).to_contain_text("nobody else has cloned it yet")
    scroll_to(alice.get_by_role("heading", name="Agent directory"))
    shot(alice, "directory-01-published")

    # Bob finds it from the sidebar, searching.
    bob = log_in(chromium, server, "bob")
    bob.goto(f"/w/{bob_home.id}/")
    bob.get_by_role("link", name="Agent directory").click()
    expect(bob.locator('.market-item[data-listing="mailman"]')).to_be_visible(timeout=WAIT)
    bob.get_by_label("Search the agent directory").fill("research sources")
    bob.get_by_role("button", name="Search").click()
    row = bob.locator('.market-item[data-listing="scout"]')
    expect(row).to_contain_text("by Alice Martin")
    expect(bob.locator('.market-item[data-listing="mailman"]')).to_have_count(0)
    shot(bob, "directory-02-search")

    # The listing: what a clone gets; nothing secret on the page.
    row.get_by_role("link", name="Scout").click()
    expect(bob.get_by_role("heading", name="About Scout")).to_be_visible(timeout=WAIT)
    expect(bob.locator('[data-skill="cite-sources"]')).to_contain_text("Cite every source")
    expect(bob.locator(".listing-personality")).to_contain_text("Sources first.")
    expect(bob.locator("[data-clone-count]")).to_have_text("0")
    assert "agk_" not in bob.content()
    shot(bob, "directory-03-listing")

    # He clones it and lands on his new agent's page.
    bob.get_by_role("button", name="Clone Scout").click()
    bob.wait_for_url("**/agents/**?cloned=1", timeout=WAIT)
    expect(bob.get_by_text("cloned from the agent directory")).to_be_visible()
    expect(bob.locator(".conv-head__meta")).to_contain_text("owned by you")
    expect(bob.locator('tr[data-skill="cite-sources"]')).to_contain_text("Scout only")
    shot(bob, "directory-04-cloned")

    # Among his agents.
    bob.goto(f"/w/{bob_home.id}/agents/")
    expect(bob.get_by_role("link", name="Scout").first).to_be_visible()
    shot(bob, "directory-05-my-agents")
    clone = orm(lambda: Agent.objects.get(owner__username="bob"))
    assert (clone.handle, clone.backend, clone.model) == (
        "scout",
        "anthropic_api",
        "claude-sonnet-4-5",
    )
    assert orm(lambda: list(Skill.objects.filter(agent=clone).values_list("name", flat=True))) == [
        "cite-sources"
    ]
    assert orm(lambda: clone.keys.count()) == 0
    assert orm(lambda: AgentClone.objects.get().cloned_by.username) == "bob"

    # Alice's page counts Bob's clone.
    alice.reload()
    panel = alice.locator("section", has=alice.get_by_role("heading", name="Agent directory"))
    expect(panel.locator("[data-listing-state]")).to_contain_text("cloned by 1 other person")
