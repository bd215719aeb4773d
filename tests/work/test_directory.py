"""The public agent directory (AGT-7): publishing a snapshot (never a secret), the team-pin
rule both ways, browsing and ranked search, cloning (config and skill copies, a free handle,
nothing private) and clone counts, unpublishing, and every refusal changing nothing."""

import json

import pytest

from agents import actions as agent_actions
from agents.models import Agent, AgentPin
from tests.conftest import make_person
from work import actions as work_actions
from work import directory, memory, skills
from work.models import AgentClone, AgentListing, Skill, ToolGrant
from work.tools.registry import REGISTRY, granted_tools
from workspaces import actions as workspace_actions
from workspaces.models import AuditEntry, Workspace

pytestmark = pytest.mark.django_db

BASE_URL_SECRET = "https://user:sk-base-secret-9@llm.internal.example/v1"
PERSONALITY = "Warm, exact, dry humour. Cares about sources."


def skill_md(name, description="Sort an inbox well. Use for email.", tools=""):
    extra = f"allowed-tools: {tools}\n" if tools else ""
    return f"---\nname: {name}\ndescription: {description}\n{extra}---\n# {name}\nSteps.\n"


def listing_url(agent) -> str:
    return f"/api/v1/agents/{agent.id}/listing/"


def publish(api, user, agent, description="Finds sources and summarises them."):
    return api(user).put(listing_url(agent), {"description": description}, format="json")


@pytest.fixture
def scout(alice, team_a):
    """Alice's agent with everything private an agent can have: a base URL with a secret, a key
    and a live session, a credential grant, memory, a tool grant; plus a personality and two
    skills of its own (one in her owner layer, which is not the agent's and stays behind)."""
    agent = agent_actions.create_agent(
        alice,
        name="Scout",
        handle="scout",
        role="research assistant",
        capabilities=["research", "summaries"],
        backend="openai_api",
        model="gpt-test",
        base_url=BASE_URL_SECRET,
        turn_time_limit_seconds=900,
    )
    agent_actions.set_personality(agent, PERSONALITY, author=alice)
    _, key_secret = agent_actions.create_agent_key(agent, "laptop")
    _, session_secret = agent_actions.open_agent_session(key_secret)
    manager = team_a.memberships.get(user=alice)
    credential = workspace_actions.create_credential(manager, "openai", "sk-cred-secret-7")
    agent_actions.grant_credential(manager, credential, agent)
    memory.remember(agent, team_a.id, "The vault code is private-memory-42.")
    skills.create_skill(
        alice, skills.parse_skill_md(skill_md("inbox-triage", tools="web_fetch")), agent=agent
    )
    skills.create_skill(
        alice,
        skills.parse_skill_md(skill_md("cite-sources", "Cite every source. Use for research.")),
        agent=agent,
    )
    skills.create_skill(alice, skills.parse_skill_md(skill_md("owner-only", "Mine. For all.")))
    agent.refresh_from_db()
    agent.secrets = [
        key_secret,
        key_secret[:12],
        session_secret,
        "sk-cred-secret-7",
        "sk-base-secret-9",
        "llm.internal.example",
        "private-memory-42",
        str(credential.id),
    ]
    return agent


def personal(user):
    return Workspace.objects.get(owner=user, kind=Workspace.Kind.PERSONAL)


def assert_no_secret(body, agent, listing=True):
    text = json.dumps(body)
    for secret in agent.secrets:
        assert secret not in text, secret
    if listing:  # a listing has no such field at all (a clone's own record has, empty)
        assert "baseUrl" not in text and "hostId" not in text and "keys" not in text


def counts():
    return (
        Agent.objects.count(),
        AgentListing.objects.count(),
        AgentListing.objects.filter(published_at__isnull=False).count(),
        AgentClone.objects.count(),
        Skill.objects.count(),
        AgentPin.objects.count(),
    )


# -- publishing -------------------------------------------------------------------------------


def test_publish_holds_the_listing_fields_and_never_a_secret(alice, bob, scout, api):
    response = publish(api, alice, scout)
    assert response.status_code == 201, response.json()
    body = response.json()
    assert body["name"] == "Scout" and body["handle"] == "scout"
    assert body["description"] == "Finds sources and summarises them."
    assert body["role"] == "research assistant"
    assert body["capabilities"] == ["research", "summaries"]
    assert body["personality"] == PERSONALITY
    assert (body["backend"], body["model"]) == ("openai_api", "gpt-test")
    assert body["turnTimeLimitSeconds"] == 900
    assert [s["name"] for s in body["skills"]] == ["cite-sources", "inbox-triage"]
    assert body["skills"][1]["allowedTools"] == ["web_fetch"]
    assert body["skills"][1]["summary"] == "Sort an inbox well."
    assert body["published"] is True and body["cloneCount"] == 0 and body["mine"] is True
    assert body["author"] == {"id": str(alice.id), "name": alice.label}
    assert body["agentId"] == str(scout.id)
    assert_no_secret(body, scout)

    # What anyone else reads: the same, without the source agent's id, and never a secret.
    listing_id = body["id"]
    for read in (
        api(bob).get(f"/api/v1/directory/agents/{listing_id}/").json(),
        api(bob).get("/api/v1/directory/agents/").json(),
        api(alice).get(listing_url(scout)).json(),
    ):
        assert_no_secret(read, scout)
    other = api(bob).get(f"/api/v1/directory/agents/{listing_id}/").json()
    assert other["mine"] is False and "agentId" not in other
    assert other["personality"] == PERSONALITY


def test_republish_takes_a_fresh_snapshot_and_unpublish_hides_it(alice, bob, scout, api):
    listing_id = publish(api, alice, scout).json()["id"]
    agent_actions.update_agent(scout, name="Scout Two", model="gpt-next")
    skills.create_skill(alice, skills.parse_skill_md(skill_md("late-skill")), agent=scout)
    response = publish(api, alice, scout, "Now better.")
    assert response.status_code == 200
    body = response.json()
    assert body["id"] == listing_id  # same address
    assert (body["name"], body["model"], body["description"]) == (
        "Scout Two",
        "gpt-next",
        "Now better.",
    )
    assert "late-skill" in [s["name"] for s in body["skills"]]

    assert api(alice).delete(listing_url(scout)).status_code == 204
    # Publishing is in the audit log of the owner's own workspace (issue 27).
    assert list(
        AuditEntry.objects.filter(target_id=str(scout.id))
        .order_by("created_at")
        .values_list("action", "actor_user_id", "workspace__owner_id")
    ) == [
        ("agent.published", alice.id, alice.id),
        ("agent.republished", alice.id, alice.id),
        ("agent.unpublished", alice.id, alice.id),
    ]
    assert api(bob).get(f"/api/v1/directory/agents/{listing_id}/").status_code == 404
    assert api(bob).get("/api/v1/directory/agents/").json()["results"] == []
    again = api(alice).delete(listing_url(scout))
    assert again.status_code == 404 and again.json()["error"]["code"] == "agent_not_published"
    # The owner still reads what was published; a republish brings it back at the same address.
    assert api(alice).get(listing_url(scout)).json()["published"] is False
    assert publish(api, alice, scout).json()["id"] == listing_id


def test_an_agent_pinned_to_a_team_workspace_is_not_published(alice, scout, team_a, api):
    directory.set_pins(scout, [team_a.id])
    before = counts()
    response = publish(api, alice, scout)
    assert response.status_code == 409
    error = response.json()["error"]
    assert error["code"] == "agent_pinned_to_team"
    assert "team workspace" in error["message"]
    assert counts() == before
    # Pinned to the personal workspace only: that is fine.
    directory.set_pins(scout, [personal(alice).id])
    assert publish(api, alice, scout).status_code == 201


def test_a_published_agent_is_not_pinned_to_a_team_workspace(alice, scout, team_a, api):
    assert publish(api, alice, scout).status_code == 201
    before = counts()
    response = api(alice).patch(
        f"/api/v1/agents/{scout.id}/",
        {"pinnedWorkspaces": [str(team_a.id)], "name": "Renamed"},
        format="json",
    )
    assert response.status_code == 409
    assert response.json()["error"]["code"] == "agent_published"
    assert counts() == before
    scout.refresh_from_db()
    assert scout.visibility == Agent.Visibility.ALL and scout.name == "Scout"
    # The personal workspace is not shared: pinning there is allowed while published.
    pinned_home = api(alice).patch(
        f"/api/v1/agents/{scout.id}/",
        {"pinnedWorkspaces": [str(personal(alice).id)]},
        format="json",
    )
    assert pinned_home.status_code == 200
    # Unpublished, it may be pinned to the team.
    api(alice).delete(listing_url(scout))
    team = api(alice).patch(
        f"/api/v1/agents/{scout.id}/", {"pinnedWorkspaces": [str(team_a.id)]}, format="json"
    )
    assert team.status_code == 200


def test_someone_elses_agent_is_not_found_for_publishing(alice, bob, charlie, scout, team_a, api):
    """Bob sees Scout in team A (not pinned away), Charlie does not: both get 404, never 403."""
    publish(api, alice, scout)
    before = counts()
    for who in (bob, charlie):
        client = api(who)
        for response in (
            client.put(listing_url(scout), {"description": "mine now"}, format="json"),
            client.delete(listing_url(scout)),
            client.get(listing_url(scout)),
        ):
            assert response.status_code == 404, (who, response.json())
            assert response.json()["error"]["code"] == "agent_not_found"
    assert counts() == before
    assert AgentListing.objects.get(agent=scout).description == "Finds sources and summarises them."


@pytest.mark.parametrize(
    "body, field",
    [
        ({}, "description"),
        ({"description": ""}, "description"),
        ({"description": "   "}, "description"),
        ({"description": 12}, "description"),
        ({"description": "x" * (directory.DESCRIPTION_MAX + 1)}, "description"),
        ({"description": "ok", "baseUrl": "https://x"}, "baseUrl"),
    ],
)
def test_bad_publish_input_is_a_400_that_changes_nothing(alice, scout, api, body, field):
    before = counts()
    response = api(alice).put(listing_url(scout), body, format="json")
    assert response.status_code == 400
    assert field in response.json()["error"]["fields"]
    assert counts() == before


# -- the directory ----------------------------------------------------------------------------


def make_agent(owner, name, role="", **kw):
    return agent_actions.create_agent(owner, name=name, role=role, backend="scripted", **kw)


def test_search_ranks_the_best_match_first_and_sorts_by_newest_or_clones(alice, bob, api):
    calendar = make_agent(alice, "Planner", "calendar assistant")
    both = make_agent(alice, "Inbox Calendar Keeper", "email and calendar triage")
    email = make_agent(bob, "Mailman", "email helper")
    directory.publish_agent(alice, calendar, description="Keeps a calendar tidy.")
    directory.publish_agent(alice, both, description="Email triage and calendar upkeep.")
    directory.publish_agent(bob, email, description="Answers email politely.")

    def names(**params):
        response = api(bob).get("/api/v1/directory/agents/", params)
        assert response.status_code == 200
        return [r["name"] for r in response.json()["results"]]

    # Matching more of the words ranks higher; an agent matching none is not listed.
    found = names(q="calendar email triage")
    assert found[0] == "Inbox Calendar Keeper"
    assert set(found) == {"Inbox Calendar Keeper", "Planner", "Mailman"}
    assert set(names(q="calendar")) == {"Planner", "Inbox Calendar Keeper"}
    assert names(q="zzzunknown") == []
    assert names(q="the and") == []  # stop words only: nothing, not an error
    assert names() == ["Mailman", "Inbox Calendar Keeper", "Planner"]  # newest first
    # Most cloned first: two people clone the planner, one the mailman; the author's own clone
    # does not count.
    listing = AgentListing.objects.get(agent=calendar)
    directory.clone_listing(bob, listing)
    directory.clone_listing(make_person("dora"), listing)
    directory.clone_listing(alice, listing)
    directory.clone_listing(alice, AgentListing.objects.get(agent=email))
    assert names(sort="clones") == ["Planner", "Mailman", "Inbox Calendar Keeper"]
    bad = api(bob).get("/api/v1/directory/agents/", {"sort": "stars"})
    assert bad.status_code == 400 and "sort" in bad.json()["error"]["fields"]


def test_the_ranking_prefers_more_matching_words(alice, bob, api):
    one = make_agent(alice, "Alpha", "research")
    two = make_agent(alice, "Beta", "research and citations")
    directory.publish_agent(alice, two, description="Research with citations and sources.")
    directory.publish_agent(alice, one, description="Research.")
    results = api(bob).get("/api/v1/directory/agents/", {"q": "research citations sources"})
    assert [r["name"] for r in results.json()["results"]] == ["Beta", "Alpha"]


# -- cloning ----------------------------------------------------------------------------------


def test_clone_makes_an_agent_of_ones_own_with_config_and_skill_copies(
    alice, bob, scout, team_a, api
):
    listing_id = publish(api, alice, scout).json()["id"]
    # Bob lacks web_fetch on nothing yet: his clone is granted what its skills use.
    response = api(bob).post(f"/api/v1/directory/agents/{listing_id}/clone/", {}, format="json")
    assert response.status_code == 201, response.json()
    body = response.json()
    clone = Agent.objects.get(pk=body["id"])
    assert clone.owner == bob and clone.pk != scout.pk
    assert (clone.name, clone.handle, clone.role) == ("Scout", "scout", "research assistant")
    assert clone.capabilities == ["research", "summaries"]
    assert (clone.backend, clone.model, clone.turn_time_limit_seconds) == (
        "openai_api",
        "gpt-test",
        900,
    )
    assert clone.personality == PERSONALITY
    assert clone.personality_revisions.get().author_user == bob
    # Not pinned anywhere, local, and nothing private of the original came along.
    assert clone.visibility == Agent.Visibility.ALL and not clone.pins.exists()
    assert clone.runtime == Agent.Runtime.LOCAL and clone.host_id is None
    assert clone.base_url == ""
    assert not clone.keys.exists() and not clone.sessions.exists()
    assert not clone.credential_grants.exists()
    assert not clone.memories.exists()
    assert_no_secret(body, scout, listing=False)
    # Skills: copies in the clone's own layer, owned by Bob; the owner layer stayed behind.
    copies = Skill.objects.filter(agent=clone).order_by("name")
    assert [s.name for s in copies] == ["cite-sources", "inbox-triage"]
    assert {s.owner_id for s in copies} == {bob.id}
    assert {s.layer for s in copies} == {Skill.Layer.AGENT}
    assert not Skill.objects.filter(owner=bob, name="owner-only").exists()
    assert "web_fetch" in [t.name for t in granted_tools(clone)]
    # The original is untouched.
    scout.refresh_from_db()
    assert scout.owner == alice and Skill.objects.filter(agent=scout).count() == 2
    # Bob's agents list shows it.
    mine = api(bob).get("/api/v1/agents/").json()["results"]
    assert str(clone.id) in [a["id"] for a in mine]


def test_a_clones_changes_do_not_reach_the_original_and_skills_can_grant_tools(alice, bob, scout):
    """The skill copies are independent rows: changing one changes neither the listing nor
    Scout's; a taken-away tool the skill uses is granted back on the clone."""
    directory.publish_agent(alice, scout, description="x")
    listing = AgentListing.objects.get(agent=scout)
    clone = directory.clone_listing(bob, listing)
    copy = Skill.objects.get(agent=clone, name="inbox-triage")
    skills.update_skill(bob, copy, skills.parse_skill_md(skill_md("inbox-triage", "Changed.")))
    assert Skill.objects.get(agent=scout, name="inbox-triage").description != "Changed."
    assert listing.skills[1]["description"] != "Changed."
    work_actions.set_tool_grant(bob, clone, REGISTRY["web_fetch"], False)
    assert ToolGrant.objects.filter(agent=clone, tool="web_fetch", granted=False).exists()


def test_handles_get_a_suffix_or_a_409_when_chosen_and_taken(alice, bob, scout, api):
    listing_id = publish(api, alice, scout).json()["id"]
    url = f"/api/v1/directory/agents/{listing_id}/clone/"
    make_agent(bob, "My scout", handle="scout")
    first = api(bob).post(url, {}, format="json").json()
    second = api(bob).post(url, {}, format="json").json()
    assert (first["handle"], second["handle"]) == ("scout-2", "scout-3")
    named = api(bob).post(url, {"name": "Scouty", "handle": "scouty"}, format="json")
    assert named.status_code == 201
    assert (named.json()["name"], named.json()["handle"]) == ("Scouty", "scouty")
    before = counts()
    taken = api(bob).post(url, {"handle": "scouty"}, format="json")
    assert taken.status_code == 409 and taken.json()["error"]["code"] == "handle_taken"
    assert counts() == before
    # The author clones their own listing too (handle scout-2): not counted.
    assert api(alice).post(url, {}, format="json").json()["handle"] == "scout-2"
    assert api(bob).get(f"/api/v1/directory/agents/{listing_id}/").json()["cloneCount"] == 1


def test_clone_count_counts_other_people_and_unpublish_keeps_clones(
    alice, bob, charlie, scout, api
):
    listing_id = publish(api, alice, scout).json()["id"]
    url = f"/api/v1/directory/agents/{listing_id}/clone/"
    for who in (bob, bob, charlie, alice):
        assert api(who).post(url, {}, format="json").status_code == 201
    assert api(bob).get(f"/api/v1/directory/agents/{listing_id}/").json()["cloneCount"] == 2
    clones = list(Agent.objects.filter(cloned_from__listing_id=listing_id))
    assert len(clones) == 4

    assert api(alice).delete(listing_url(scout)).status_code == 204
    # Clones untouched: still there, still their owners', skills and all.
    for clone in clones:
        clone.refresh_from_db()
        assert Skill.objects.filter(agent=clone).count() == 2
    assert {c.owner_id for c in clones} == {alice.id, bob.id, charlie.id}
    # No more cloning; the listing is gone for everyone else.
    before = counts()
    gone = api(charlie).post(url, {}, format="json")
    assert gone.status_code == 404 and gone.json()["error"]["code"] == "listing_not_found"
    assert counts() == before


@pytest.mark.parametrize(
    "body, field",
    [
        ({"handle": "not a slug"}, "handle"),
        ({"handle": "x" * 41}, "handle"),
        ({"name": ""}, "name"),
        ({"name": 5}, "name"),
        ({"agent": "x"}, "agent"),
    ],
)
def test_bad_clone_input_is_a_400_that_changes_nothing(alice, bob, scout, api, body, field):
    listing_id = publish(api, alice, scout).json()["id"]
    before = counts()
    response = api(bob).post(f"/api/v1/directory/agents/{listing_id}/clone/", body, format="json")
    assert response.status_code == 400
    assert field in response.json()["error"]["fields"]
    assert counts() == before


def test_unknown_listings_are_404_and_agents_cannot_use_the_directory(alice, bob, scout, api):
    from rest_framework.test import APIClient

    from tests.conftest import agent_session

    for url in (
        "/api/v1/directory/agents/00000000-0000-4000-8000-000000000000/",
        "/api/v1/directory/agents/not-a-uuid/",
    ):
        assert api(bob).get(url).status_code == 404
    before = counts()
    missing = api(bob).post(
        "/api/v1/directory/agents/00000000-0000-4000-8000-000000000000/clone/", {}, format="json"
    )
    assert missing.status_code == 404 and counts() == before
    # An agent's session token is no person: the directory is for people.
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {agent_session(scout)}")
    assert client.get("/api/v1/directory/agents/").status_code in (401, 403)


def test_the_directory_reads_no_more_queries_for_more_listings(alice, bob, api):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    def publish_one(i):
        agent = make_agent(alice if i % 2 else bob, f"Agent {i}", "research helper")
        skills.create_skill(agent.owner, skills.parse_skill_md(skill_md(f"s-{i}")), agent=agent)
        directory.publish_agent(agent.owner, agent, description=f"Research number {i}.")

    def queries(url):
        client = api(bob)
        client.get(url)
        with CaptureQueriesContext(connection) as captured:
            assert client.get(url).status_code == 200
        return len(captured)

    urls = ["/api/v1/directory/agents/", "/api/v1/directory/agents/?q=research&sort=clones"]
    publish_one(0)
    before = [queries(url) for url in urls]
    for i in range(1, 5):
        publish_one(i)
    assert [queries(url) for url in urls] == before
