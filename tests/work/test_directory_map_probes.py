"""Probes of the agent directory, the work map and agent keys: each test here pinned a defect
that was found and fixed."""

import pytest
from django.test import override_settings

from agents import actions as agent_actions
from agents.models import AgentSession
from work import directory, skills
from work.models import AgentListing, Skill

pytestmark = pytest.mark.django_db


def exchange(client, secret, address="198.51.100.9"):
    return client.post(
        "/api/v1/agent/session/", HTTP_AUTHORIZATION=f"Bearer {secret}", REMOTE_ADDR=address
    )


@override_settings(
    AGENT_SESSIONS_PER_MINUTE=1, AGENT_SESSIONS_BURST=1, AGENT_KEY_FAILURES_PER_ADDRESS=3
)
def test_a_good_key_over_its_agents_rate_is_no_bad_secret_against_its_address(alice, nova, client):
    """A valid key refused for its agent's session rate (a bridge restarting in a loop) is not a
    bad secret: it must not lock out every other agent and host behind the same address."""
    _, key = agent_actions.create_agent_key(nova)
    assert exchange(client, key).status_code == 200
    for _ in range(3):
        refused = exchange(client, key)
        assert refused.status_code == 429 and refused.json()["error"]["code"] == "rate_limited"
    other = agent_actions.create_agent(alice, name="Other")
    _, other_key = agent_actions.create_agent_key(other)
    response = exchange(client, other_key)
    assert response.status_code == 200, response.json()
    assert AgentSession.objects.filter(agent=other).count() == 1


def skill_md(name, body=""):
    return (
        f"---\nname: {name}\ndescription: Helps with {name}. Use for it.\n---\n# {name}\n{body}\n"
    )


def test_a_listing_holds_a_bounded_amount_of_skills(alice, bob, api):
    """Every directory read loads each listing's skills: an agent with hundreds of big skills
    (each is allowed 256 KB) published as one listing would make every visitor's page load
    them all. Publishing such an agent is refused, and nothing is stored."""
    agent = agent_actions.create_agent(alice, name="Hoarder", handle="hoarder")
    page = "x" * (200 * 1024)
    for i in range(directory.MAX_LISTING_SKILL_BYTES // len(page) + 1):
        skills.create_skill(alice, skills.parse_skill_md(skill_md(f"s-{i}", page)), agent=agent)
    url = f"/api/v1/agents/{agent.id}/listing/"
    response = api(alice).put(url, {"description": "Everything."}, format="json")
    assert response.status_code == 409, response.json()
    assert response.json()["error"]["code"] == "listing_too_large"
    assert not AgentListing.objects.filter(agent=agent).exists()
    # Down to what a listing holds, it publishes.
    Skill.objects.filter(agent=agent, name="s-0").delete()
    assert api(alice).put(url, {"description": "Fewer."}, format="json").status_code == 201


def test_a_listing_holds_a_bounded_number_of_skills(alice, api):
    agent = agent_actions.create_agent(alice, name="Many", handle="many")
    for i in range(directory.MAX_LISTING_SKILLS + 1):
        skills.create_skill(alice, skills.parse_skill_md(skill_md(f"s-{i}")), agent=agent)
    url = f"/api/v1/agents/{agent.id}/listing/"
    response = api(alice).put(url, {"description": "Everything."}, format="json")
    assert response.status_code == 409
    assert response.json()["error"]["code"] == "listing_too_large"
    assert not AgentListing.objects.filter(agent=agent).exists()


def test_an_inactive_persons_listings_leave_the_directory(alice, bob, api):
    """A person made inactive (staff closing an abusive account) signs in nowhere and their
    agents open no sessions: their listings are not in the directory either."""
    agent = agent_actions.create_agent(alice, name="Scout", handle="scout")
    directory.publish_agent(alice, agent, description="Finds sources.")
    listed = api(bob).get("/api/v1/directory/agents/").json()["results"]
    assert [r["name"] for r in listed] == ["Scout"]
    listing_id = listed[0]["id"]
    alice.is_active = False
    alice.save(update_fields=["is_active"])
    for params in ({}, {"q": "sources"}, {"sort": "clones"}):
        assert api(bob).get("/api/v1/directory/agents/", params).json()["results"] == []
    # Nor by its id: not read, not cloned.
    assert api(bob).get(f"/api/v1/directory/agents/{listing_id}/").status_code == 404
    cloned = api(bob).post(f"/api/v1/directory/agents/{listing_id}/clone/", {}, format="json")
    assert cloned.status_code == 404


def test_the_directory_list_reads_no_skill_contents(alice, bob, team_a, client, api):
    """A list of up to 200 listings shows each skill's name, description, tools and file names:
    it reads those in SQL, not every SKILL.md and file of every listing (up to a megabyte
    each); what it shows is the same as one listing's page."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    agent = agent_actions.create_agent(alice, name="Scout", handle="scout")
    package = skills.parse_skill_md(
        skill_md("cite", "Steps."), files={"b.md": "second", "a/c.py": "print(1)"}
    )
    skills.create_skill(alice, package, agent=agent)
    skills.create_skill(alice, skills.parse_skill_md(skill_md("alpha")), agent=agent)
    listing, _ = directory.publish_agent(alice, agent, description="Finds sources.")
    one = api(bob).get(f"/api/v1/directory/agents/{listing.id}/").json()
    with CaptureQueriesContext(connection) as captured:
        listed = api(bob).get("/api/v1/directory/agents/", {"q": "sources"}).json()["results"]
    assert [r["skills"] for r in listed] == [one["skills"]]
    assert [s["files"] for s in one["skills"]] == [[], ["a/c.py", "b.md"]]
    reads = [q["sql"] for q in captured if 'FROM "work_agentlisting"' in q["sql"]]
    assert reads and not [sql for sql in reads if '"work_agentlisting"."skills"' in sql]
    # The directory page counts them the same way.
    client.force_login(bob)
    with CaptureQueriesContext(connection) as captured:
        shown = client.get(f"/w/{team_a.id}/directory/", {"q": "sources"})
    assert shown.status_code == 200 and "· 2 skills" in shown.content.decode()
    reads = [q["sql"] for q in captured if 'FROM "work_agentlisting"' in q["sql"]]
    assert reads and not [sql for sql in reads if '"work_agentlisting"."skills"' in sql]


def test_the_map_loads_no_channels_people(alice, team_a, nova, channel):
    """A channel is named by its title and draws only its agents: the map loads none of its
    people (everyone who ever posted in it, each with their account's row), which in a big
    workspace would be every member once per channel."""
    from django.db.models.signals import post_init

    from conversations.actions import post_message
    from tests.conftest import make_person
    from work.map import work_map
    from workspaces import actions as workspace_actions
    from workspaces.models import User

    owner = team_a.memberships.get(user=alice)
    for i in range(12):
        person = make_person(f"member{i}")
        _, token = workspace_actions.create_invitation(owner)
        workspace_actions.accept_invitation(person, token)
        post_message(person, channel, f"Hello from {i}.")
    loaded = []

    def count(sender, instance, **kwargs):
        loaded.append(instance)

    post_init.connect(count, sender=User)
    try:
        graph = work_map(alice, team_a)
    finally:
        post_init.disconnect(count, sender=User)
    node = next(n for n in graph["nodes"] if n["id"] == f"conversation:{channel.id}")
    assert node["label"] == "#general"
    assert (f"agent:{nova.id}", f"conversation:{channel.id}", "takes_part") in {
        (e["source"], e["target"], e["kind"]) for e in graph["edges"]
    }
    assert loaded == []


def test_an_empty_search_lists_the_whole_directory(alice, bob, api):
    """A search box sent empty (``?q=``, as a form sends it) is no search, as on the page; it
    was a 400."""
    agent = agent_actions.create_agent(alice, name="Scout", handle="scout")
    directory.publish_agent(alice, agent, description="Finds sources.")
    for params in ({"q": ""}, {"q": "  ", "sort": "clones"}):
        response = api(bob).get("/api/v1/directory/agents/", params)
        assert response.status_code == 200, response.json()
        assert [r["name"] for r in response.json()["results"]] == ["Scout"]
