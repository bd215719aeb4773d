"""Skills and memory in a real browser: Alice adds a skill by pasting its SKILL.md (a broken one
is refused in the server's words), sees it on Nova's page, gives Nova a skill of its own (which
grants the tool it uses) and publishes hers; Bob finds it in the marketplace, rates and installs
it; Alice forgets one of Nova's memories. Database work goes through ``orm`` (tests/ui/browser.py)."""

import io
import zipfile

import pytest
from django.core.management import call_command
from playwright.sync_api import expect

from tests.ui.browser import (
    MARKS,
    PHONE,
    WAIT,
    log_in,
    nova_in_general,
    scroll_to,
    shot,
)
from work import actions, memory, skills
from work.access import access_tool
from work.models import MemoryItem, Skill, SkillRating, ToolGrant

pytestmark = MARKS

TRIAGE = """---
name: inbox-triage
description: Sort an inbox by urgency and draft short replies. Use when asked to triage email.
---
# Inbox triage

1. Read every unread message once.
2. Sort them: **urgent**, this week, later.
3. Draft a two-line reply for each urgent one.
"""

TIDES = """---
name: tide-tables
description: Read tide tables from the harbour's site. Use for any question about tides.
allowed-tools: web_fetch
activation:
  tools: [web_fetch]
---
# Tide tables

Fetch the harbour page and quote high and low water for the day asked about.
"""

# Active only for an agent with a calendar tool, which no agent here has.
CALENDAR = """---
name: calendar-care
description: Keep a calendar tidy. Use before booking anything.
activation:
  tools: [calendar_list]
---
Look at the week first, then book.
"""


def zipped(files: dict) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for path, text in files.items():
            archive.writestr(path, text)
    return buffer.getvalue()


WEATHER = zipped(
    {
        "weather-watch/SKILL.md": "---\nname: weather-watch\ndescription: Watch the weather."
        "\n---\nSee notes.md.\n",
        "weather-watch/notes.md": "Gales come from the west.\n",
    }
)


@pytest.fixture
def story(orm):
    """Alice and Bob in Tide Lab with #general and Nova, Alice's agent, which remembers a few
    things (one learned in #general) and has had web_fetch taken away. The platform's skills
    are loaded, and Alice has one skill already, which needs a tool no agent here holds."""

    def build():
        team, general, nova = nova_in_general(with_bob=True)
        alice = team.owner
        actions.set_tool_grant(alice, nova, access_tool("web_fetch"), False)
        call_command("load_platform_skills", stdout=io.StringIO())
        skills.create_skill(alice, skills.parse_skill_md(CALENDAR))
        said = general.messages.create(body="I take my coffee black.", author_user=alice)
        memory.remember(
            nova, team.id, "Alice takes her coffee black.", conversation=general, message=said
        )
        memory.remember(
            nova, team.id, "The weekly tide report goes out on Fridays.", pinned=True, user=alice
        )
        memory.remember(nova, team.id, "Bob prefers morning meetings.", user=alice)
        memory.remember(
            nova, team.id, "The harbour office closes at 17:00.", family=True, conversation=general
        )
        stale = memory.remember(nova, team.id, "The old boat is called Heron.", user=alice)
        MemoryItem.objects.filter(pk=stale.pk).update(strength=0.32)
        return team, general, nova

    return orm(build)


def test_skills_from_paste_to_marketplace_and_forgetting_a_memory(orm, story, browser):
    team, general, nova = story
    chromium, server = browser
    alice = log_in(chromium, server, "alice")
    alice.on("dialog", lambda dialog: dialog.accept())  # the "are you sure?" of delete, forget

    # The skills page: a broken SKILL.md is refused with the server's reason, a good one added.
    alice.goto(f"/w/{team.id}/skills/")
    alice.get_by_text("Add a skill", exact=True).click()  # folded away: she has a skill already
    adding = alice.locator("[data-add-skill]")
    adding.get_by_label("SKILL.md", exact=True).fill("# Inbox triage\nNo front matter here.")
    adding.get_by_role("button", name="Add skill").click()
    expect(adding.locator("[data-form-error]")).to_contain_text(
        "starts with YAML front matter", timeout=WAIT
    )
    shot(alice, "skills-01-refused")
    adding.get_by_label("SKILL.md", exact=True).fill(TRIAGE)
    adding.get_by_role("button", name="Add skill").click()
    expect(adding.locator("[data-added]")).to_contain_text("Added inbox-triage.", timeout=WAIT)
    mine = alice.locator("section", has=alice.get_by_role("heading", name="My skills"))
    expect(mine.locator('[data-skill="inbox-triage"]')).to_contain_text("Sort an inbox by urgency")
    expect(adding.get_by_label("SKILL.md", exact=True)).to_have_value("")
    shot(alice, "skills-02-added")

    # The other ways in: a zip of a skill's folder, read in the browser and sent as base64; a URL,
    # which the server fetches under web_fetch's rules (a private address is refused in words).
    adding.get_by_label("Upload a file").check()
    expect(adding.get_by_label("SKILL.md", exact=True)).to_be_hidden()
    adding.get_by_label("A SKILL.md, or a .zip of the skill's folder").set_input_files(
        files=[{"name": "weather-watch.zip", "mimeType": "application/zip", "buffer": WEATHER}]
    )
    adding.get_by_role("button", name="Add skill").click()
    expect(adding.locator("[data-added]")).to_contain_text("Added weather-watch.", timeout=WAIT)
    expect(mine.locator('[data-skill="weather-watch"]')).to_contain_text("1 file")
    adding.get_by_label("From a URL").check()
    adding.get_by_label("URL of a SKILL.md or a .zip").fill("http://127.0.0.1:9/SKILL.md")
    adding.get_by_role("button", name="Add skill").click()
    expect(adding.locator("[data-form-error]")).to_contain_text(
        "private or reserved address", timeout=WAIT
    )
    adding.get_by_label("Paste SKILL.md").check()

    # Nova's page: it has the skill (from Alice's layer); a skill of its own grants web_fetch.
    alice.goto(f"/w/{team.id}/agents/{nova.id}/")
    section = alice.locator("section", has=alice.get_by_role("heading", name="Skills", exact=True))
    triage = section.locator('tr[data-skill="inbox-triage"]')
    expect(triage).to_contain_text("all my agents")
    expect(triage).to_contain_text("Active")
    section.get_by_text("Add a skill to Nova").click()
    section.get_by_label("SKILL.md", exact=True).fill(TIDES)
    section.get_by_role("button", name="Add skill to Nova").click()
    expect(section.locator("[data-added]")).to_contain_text(
        "Granted the tools it uses: web_fetch.", timeout=WAIT
    )
    tides = section.locator('tr[data-skill="tide-tables"]')
    expect(tides).to_contain_text("Nova only")
    expect(tides).to_contain_text("Active")  # web_fetch granted, so its activation rule holds
    calendar = section.locator('tr[data-skill="calendar-care"]')
    expect(calendar).to_contain_text("Inactive needs calendar_list")
    expect(section.locator('tr[data-skill="result-cards"]')).to_contain_text("platform")
    expect(alice.get_by_label("web_fetch granted")).to_be_checked()  # the Tools list followed
    scroll_to(section.get_by_role("heading", name="Skills", exact=True))
    shot(alice, "skills-03-agent-skills")
    assert orm(lambda: ToolGrant.objects.filter(agent=nova, tool="web_fetch").exists()) is False

    # Back on her skills: she publishes inbox-triage.
    alice.goto(f"/w/{team.id}/skills/")
    item = alice.locator('section [data-skill="inbox-triage"]').first
    item.get_by_role("button", name="Publish inbox-triage").click()
    expect(item.get_by_role("button", name="Unpublish inbox-triage")).to_be_visible(timeout=WAIT)
    expect(item.get_by_role("link", name="Published")).to_be_visible()
    scroll_to(alice.get_by_role("heading", name="My skills"))
    shot(alice, "skills-04-published")

    # Bob finds it in the marketplace, rates it four stars and installs it into his skills.
    bob = log_in(chromium, server, "bob")
    bob.goto(f"/w/{team.id}/skills/marketplace/")
    bob.get_by_label("Search the marketplace").fill("inbox urgency")
    bob.get_by_role("button", name="Search").click()
    row = bob.locator('.market-item[data-skill="inbox-triage"]')
    expect(row).to_contain_text("not rated")
    shot(bob, "skills-05-marketplace")
    row.get_by_role("link", name="inbox-triage").click()
    expect(bob.locator(".skill-body strong", has_text="urgent")).to_be_visible()
    bob.get_by_label("4 stars").click()
    expect(bob.locator("[data-my-rating]")).to_have_text(
        "You rated it 4 of 5. Pick again to change it.", timeout=WAIT
    )
    expect(bob.locator("[data-average]")).to_contain_text("4.0")
    bob.get_by_role("button", name="Install inbox-triage").click()
    expect(bob.locator("[data-added]")).to_contain_text("Added inbox-triage.", timeout=WAIT)
    expect(bob.locator("[data-installs]")).to_have_text("1", timeout=WAIT)
    shot(bob, "skills-06-rated-and-installed")
    # Installing twice is refused in words (the name is taken in his skills).
    bob.get_by_role("button", name="Install inbox-triage").click()
    expect(bob.locator("[data-add-skill] [data-form-error]")).to_contain_text(
        "There is a skill named inbox-triage in your skills already", timeout=WAIT
    )
    assert orm(lambda: SkillRating.objects.get().stars) == 4
    assert (
        orm(lambda: Skill.objects.filter(owner__username="bob", name="inbox-triage").count()) == 1
    )

    # Alice, on her own skill's page: no rating form, Bob's rating and install counted.
    alice.goto(bob.url)
    expect(alice.get_by_text("You published this skill")).to_be_visible()
    expect(alice.get_by_label("4 stars")).to_have_count(0)

    # Nova's memory: where each was learned, strength, pinned; Alice forgets one.
    alice.goto(f"/w/{team.id}/agents/{nova.id}/memory/")
    coffee = alice.locator(".memory", has_text="Alice takes her coffee black.")
    expect(coffee.get_by_role("link", name="#general")).to_be_visible()
    shot(alice, "memory-01-agent")
    meetings = alice.locator(".memory", has_text="Bob prefers morning meetings.")
    meetings.get_by_role("button", name="Edit").click()
    meetings.get_by_label("Memory").fill("Bob prefers meetings before ten.")
    meetings.get_by_role("button", name="Save").click()
    expect(alice.locator(".memory", has_text="Bob prefers meetings before ten.")).to_be_visible(
        timeout=WAIT
    )
    boat = alice.locator(".memory", has_text="The old boat is called Heron.")
    boat.get_by_role("button", name="Forget").click()
    expect(boat).to_have_count(0, timeout=WAIT)
    forgotten = orm(lambda: MemoryItem.objects.get(content__contains="Heron"))
    assert forgotten.archived_at is not None and forgotten.archived_reason == "forgotten"
    alice.get_by_label("Show forgotten").check()
    alice.get_by_role("button", name="Search").click()
    expect(alice.locator(".memory", has_text="Heron")).to_contain_text("forgotten")
    shot(alice, "memory-02-forgotten")

    # The family layer, as Bob (a member: he reads it, he changes nothing); and on a phone.
    bob.goto(f"/w/{team.id}/memory/")
    shared = bob.locator(".memory", has_text="The harbour office closes at 17:00.")
    expect(shared).to_be_visible()
    expect(shared.get_by_role("button")).to_have_count(0)
    shot(bob, "memory-03-family")
    phone = chromium.new_context(
        viewport=PHONE, base_url=server.url, storage_state=alice.context.storage_state()
    ).new_page()
    phone.goto(f"/w/{team.id}/agents/{nova.id}/memory/")
    expect(phone.locator(".memory").first).to_be_visible()
    shot(phone, "memory-04-phone")
    phone.goto(f"/w/{team.id}/skills/marketplace/")
    shot(phone, "skills-07-phone-marketplace")
    phone.context.close()
