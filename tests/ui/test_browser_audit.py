"""The audit log in a real browser: Alice, owner of Tide Lab, goes from the members page to the
whole log, reads who did what to what and when, and narrows it to one action. Database work goes
through ``orm`` (tests/ui/browser.py)."""

import pytest
from django.db import transaction
from playwright.sync_api import expect

from agents import actions as agent_actions
from agents import hosting
from tests.ui.browser import MARKS, WAIT, log_in, person, shot
from work import skills
from workspaces import actions
from workspaces.models import Role

pytestmark = MARKS

KEY = "-----BEGIN OPENSSH PRIVATE KEY-----\nnot used\n-----END OPENSSH PRIVATE KEY-----\n"
SKILL = "---\nname: weekly-report\ndescription: Write the weekly report. Use on Fridays.\n---\n# Steps\n"


@pytest.fixture
def story(orm):
    """Tide Lab: Alice owns it; Bob joined and became an admin; a model key, a host, an agent's
    key and a published skill, each done through its action (and so in the log)."""

    def build():
        alice, bob = person("alice", "Alice Martin"), person("bob", "Bob Okafor")
        lab = actions.create_team_workspace(alice, "Tide Lab")
        owner = lab.memberships.get(user=alice)
        _, token = actions.create_invitation(owner, Role.MEMBER, "bob@example.com")
        actions.accept_invitation(bob, token)
        actions.change_role(owner, lab.memberships.get(user=bob), Role.ADMIN)
        actions.create_credential(owner, "anthropic_api_key", "sk-ant-secret")
        host = hosting.create_host(
            workspace=lab, name="edge-1", address="10.0.0.5", ssh_key=KEY, by=alice
        )
        hosting.issue_host_token(host)
        scout = agent_actions.create_agent(alice, name="Scout", backend="scripted")
        agent_actions.create_agent_key(scout, "laptop")
        skill = skills.create_skill(alice, skills.parse_skill_md(SKILL))
        with transaction.atomic():
            skills.update_skill(alice, skill, published=True)
        return lab

    return orm(build)


def test_the_owner_reads_the_whole_log(story, browser):
    lab = story
    chromium, server = browser
    alice = log_in(chromium, server, "alice")
    alice.goto(f"/w/{lab.id}/members/")
    alice.get_by_role("link", name="All entries").click()
    alice.wait_for_url(f"**/w/{lab.id}/audit/", timeout=WAIT)
    expect(alice.get_by_role("heading", name="What was done in Tide Lab")).to_be_visible()
    rows = alice.locator("tr[data-audit-entry]")
    expect(rows.first).to_be_visible(timeout=WAIT)
    role = alice.locator('tr[data-audit-entry="member.role_changed"]')
    expect(role).to_contain_text("Alice Martin")
    expect(role).to_contain_text("Bob Okafor")
    expect(alice.locator('tr[data-audit-entry="host_token.issued"]')).to_contain_text("edge-1")
    assert "sk-ant-secret" not in alice.content()
    shot(alice, "audit-01-log")

    # One action only.
    alice.get_by_label("Action").select_option("member.role_changed")
    alice.get_by_role("button", name="Show").click()
    alice.wait_for_url("**action=member.role_changed", timeout=WAIT)
    expect(rows).to_have_count(1)
