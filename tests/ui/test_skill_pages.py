"""Skill pages without a browser: a person's layers and the platform's, an agent's skills on its
page for its owner, and the marketplace (search, standing, rating, installing). The pages only
read; their forms call the REST API. Alice owns team A and Nova; Bob is a member; Charlie, an
outsider with team B, gets 404 for everything of theirs."""

import pytest

from work import skills
from work.models import Skill

pytestmark = pytest.mark.django_db


def skill_md(name, description="Sort an inbox well. Use for email.", body=None, **front):
    lines = [f"name: {name}", f"description: {description}"]
    lines += [f"{key}: {value}" for key, value in front.items()]
    return "---\n" + "\n".join(lines) + "\n---\n" + (body or f"# {name}\nThe steps of {name}.\n")


def make(user, name, agent=None, published=False, **front):
    skill = skills.create_skill(user, skills.parse_skill_md(skill_md(name, **front)), agent=agent)
    if published:
        skill = skills.update_skill(user, skill, published=True)
    return skill


@pytest.fixture
def layers(alice, bob, nova):
    """The platform's triage, Alice's own (over it) and Nova's own (needing a tool Nova lacks),
    and one of Bob's that Alice must not see."""
    platform = skills.load_platform_skill(
        skills.parse_skill_md(skill_md("triage", "Platform triage."))
    )
    return {
        "platform": platform,
        "mine": make(alice, "triage", description="Alice's triage. Second sentence."),
        "novas": make(alice, "calendar-care", agent=nova, activation="{tools: [calendar_list]}"),
        "bobs": make(bob, "bob-secret"),
    }


def page(client, user, url):
    client.force_login(user)
    response = client.get(url)
    assert response.status_code == 200, url
    return response.content.decode()


def test_the_skills_page_shows_my_layers_and_the_platforms(client, alice, team_a, layers):
    html = page(client, alice, f"/w/{team_a.id}/skills/")
    mine, novas = layers["mine"], layers["novas"]
    assert 'id="my-skills-title"' in html and 'id="platform-skills-title"' in html
    assert 'data-skill="triage"' in html and 'data-skill-agent="nova"' in html
    assert "Alice&#x27;s triage." in html and "Second sentence" not in html.split("summary")[1]
    assert "bob-secret" not in html
    # Adding: paste, upload (read in the browser, sent as base64 package) or a URL, to the REST API.
    assert 'action="/api/v1/skills/"' in html
    for field in ('name="skillMd"', 'data-base64="package"', 'name="package"', 'name="url"'):
        assert field in html, field
    assert f'<option value="{novas.agent_id}">Nova only</option>' in html
    # Her own skills can be edited, published and deleted; the platform's only read.
    for skill in (mine, novas):
        assert html.count(f'action="/api/v1/skills/{skill.id}/"') == 3  # publish, delete, edit
    assert f"/api/v1/skills/{layers['platform'].id}/" not in html
    assert 'name="published" value="true"' in html  # not published yet: the button publishes


def test_a_published_skill_shows_its_standing_and_an_unpublish_button(
    client, alice, bob, team_a, layers
):
    skill = skills.update_skill(alice, layers["mine"], published=True)
    skills.rate_skill(bob, skill, 4)
    html = page(client, alice, f"/w/{team_a.id}/skills/")
    item = html.split('data-skill="triage"')[1].split("</li>")[0]
    assert "Unpublish" in item and 'name="published" value="false"' in item
    assert "★ 4.0 (1 rating)" in item and "0 installs" in item
    assert f"/w/{team_a.id}/skills/marketplace/{skill.id}/" in item


def test_the_agent_page_shows_its_resolved_skills_to_its_owner_only(
    client, alice, bob, team_a, nova, layers
):
    url = f"/w/{team_a.id}/agents/{nova.id}/"
    html = page(client, alice, url)
    section = html.split('id="skills-title"')[1].split('id="memory-title"')[0]
    triage = section.split('data-skill="triage"')[1].split("</tr>")[0]
    assert "all my agents" in triage and "Overrides the platform's triage" in triage
    assert "Active" in triage
    calendar = section.split('data-skill="calendar-care"')[1].split("</tr>")[0]
    assert (
        "Nova only" in calendar
        and "Inactive" in calendar
        and "<code>calendar_list</code>" in calendar
    )
    # An agent-layer skill can be removed here; the owner's layer is changed on the skills page.
    assert f'data-api="DELETE" action="/api/v1/skills/{layers["novas"].id}/"' in calendar
    assert "/api/v1/skills/" not in triage
    # Adding assigns it to Nova, through the REST API, and refreshes the skills and tools.
    assert f'<input type="hidden" name="agent" value="{nova.id}">' in section
    assert 'data-regions="agent-skills agent-tools"' in section
    html = page(client, bob, url)
    assert 'id="skills-title"' not in html and "calendar-care" not in html


def test_the_marketplace_lists_searches_and_ranks_published_skills(
    client, alice, bob, charlie, team_a, team_b, layers
):
    triage = skills.update_skill(alice, layers["mine"], published=True)
    weather = make(bob, "weather-watch", description="Watch the weather.", published=True)
    skills.rate_skill(bob, triage, 5)
    skills.rate_skill(charlie, triage, 3)
    skills.install_skill(bob, triage)
    skills.install_skill(charlie, triage)
    url = f"/w/{team_a.id}/skills/marketplace/"
    html = page(client, alice, url)
    assert html.index('data-skill="triage"') < html.index('data-skill="weather-watch"')
    row = html.split('data-skill="triage"')[1].split("</li>")[0]
    assert "4.0" in row and "(2)" in row and "<dd>2</dd>" in row  # average, ratings, installs
    assert "not rated" in html.split('data-skill="weather-watch"')[1].split("</li>")[0]
    assert html.count('class="market-item"') == 2  # one row each, whatever its installs
    assert "bob-secret" not in html and "calendar-care" not in html  # not published
    found = page(client, alice, url + "?q=weather")
    assert 'data-skill="weather-watch"' in found and 'data-skill="triage"' not in found
    assert "No published skill matches" in page(client, alice, url + "?q=the")
    # The marketplace is the instance's: Charlie sees it from his own workspace.
    assert 'data-skill="weather-watch"' in page(
        client, charlie, f"/w/{team_b.id}/skills/marketplace/"
    )
    assert weather.published_at is not None


def test_a_marketplace_skill_page_renders_it_and_offers_rating_and_install(
    client, alice, bob, team_a, nova, layers
):
    body = "# Steps\n1. **Read** everything\n<script>alert(1)</script>\n"
    skill = skills.create_skill(alice, skills.parse_skill_md(skill_md("safe-steps", body=body)))
    skills.update_skill(alice, skill, published=True)
    skills.rate_skill(bob, skill, 4)
    url = f"/w/{team_a.id}/skills/marketplace/{skill.id}/"

    html = page(client, bob, url)
    assert "<strong>Read</strong>" in html and "<script>alert" not in html
    assert f'action="/api/v1/marketplace/skills/{skill.id}/rating/"' in html
    assert 'value="4" data-type="int" data-autosubmit checked' in html
    assert "You rated it 4 of 5" in html
    assert f'action="/api/v1/marketplace/skills/{skill.id}/install/"' in html

    html = page(client, alice, url)  # her own: no rating form, installing into Nova is offered
    assert "/rating/" not in html and "You published this skill" in html
    assert f'<option value="{nova.id}">Nova only</option>' in html


def test_skill_pages_are_404_for_outsiders_and_for_what_is_not_published(
    client, alice, charlie, team_a, team_b, layers
):
    unpublished = layers["mine"]
    published = make(alice, "shared-one", published=True)
    client.force_login(charlie)
    w = f"/w/{team_a.id}"
    for url in (
        f"{w}/skills/",
        f"{w}/skills/marketplace/",
        f"{w}/skills/marketplace/{published.id}/",
    ):
        assert client.get(url).status_code == 404, url
    # In his own workspace: a published skill yes, an unpublished or a missing one not.
    assert client.get(f"/w/{team_b.id}/skills/marketplace/{published.id}/").status_code == 200
    for skill_id in (unpublished.id, layers["bobs"].id, layers["novas"].id):
        assert client.get(f"/w/{team_b.id}/skills/marketplace/{skill_id}/").status_code == 404
    # Not published is not in the marketplace, for its owner too.
    client.force_login(alice)
    assert client.get(f"{w}/skills/marketplace/{unpublished.id}/").status_code == 404
    assert client.get(f"{w}/skills/marketplace/not-a-uuid/").status_code == 404
    assert Skill.objects.filter(published_at__isnull=False).count() == 1
