"""Agents over REST: creation, visibility (AGT-1/2), keys and sessions (WS-3), tenant isolation."""

from datetime import timedelta

import pytest
from django.db import connection
from django.utils import timezone

from agents import actions, hosting
from agents.models import Agent, AgentKey, AgentSession
from tests.conftest import agent_session

pytestmark = pytest.mark.django_db


def test_it_creates_an_agent_with_its_model_config(alice, api):
    response = api(alice).post(
        "/api/v1/agents/",
        {
            "name": "Nova",
            "role": "researcher",
            "capabilities": ["research", "web"],
            "backend": "openai_api",
            "model": "llama3",
            "baseUrl": "http://127.0.0.1:11434/v1",
        },
        format="json",
    )
    assert response.status_code == 201, response.json()
    body = response.json()
    assert (
        body["handle"] == "nova"
        and body["backend"] == "openai_api"
        and body["baseUrl"] == "http://127.0.0.1:11434/v1"
    )
    assert body["online"] is False and body["visibility"] == "all"


def test_the_default_backend_is_the_claude_cli(alice, api):
    assert (
        api(alice).post("/api/v1/agents/", {"name": "Ada"}, format="json").json()["backend"]
        == "claude_cli"
    )


def test_a_turn_may_run_ten_minutes_unless_the_owner_says_otherwise(alice, api):
    created = api(alice).post("/api/v1/agents/", {"name": "Ada"}, format="json").json()
    assert created["turnTimeLimitSeconds"] == 600
    changed = api(alice).patch(
        f"/api/v1/agents/{created['id']}/", {"turnTimeLimitSeconds": 90}, format="json"
    )
    assert changed.status_code == 200 and changed.json()["turnTimeLimitSeconds"] == 90
    assert Agent.objects.get(pk=created["id"]).turn_time_limit_seconds == 90


@pytest.mark.parametrize(
    "body, field",
    [
        ({}, "name"),
        ({"name": "x", "backend": "gpt-9"}, "backend"),
        ({"name": "x", "capabilities": "web"}, "capabilities"),
        ({"name": "x", "baseUrl": "not a url"}, "baseUrl"),
        ({"name": "x", "secret": 1}, "secret"),
        ({"name": "x", "handle": "no spaces"}, "handle"),
        ({"name": "x", "turnTimeLimitSeconds": 0}, "turnTimeLimitSeconds"),
        ({"name": "x", "turnTimeLimitSeconds": 86_401}, "turnTimeLimitSeconds"),
    ],
)
def test_it_rejects_bad_agent_bodies(alice, api, body, field):
    response = api(alice).post("/api/v1/agents/", body, format="json")
    assert response.status_code == 400
    assert field in response.json()["error"]["fields"]
    assert Agent.objects.count() == 0


def test_handles_are_unique_per_owner(alice, bob, api):
    assert api(alice).post("/api/v1/agents/", {"name": "Nova"}, format="json").status_code == 201
    again = api(alice).post("/api/v1/agents/", {"name": "Nova"}, format="json")
    assert again.status_code == 409 and "handle" in again.json()["error"]["fields"]
    assert api(bob).post("/api/v1/agents/", {"name": "Nova"}, format="json").status_code == 201


def test_an_agent_appears_in_every_workspace_of_its_owner_unless_pinned(
    alice, bob, team_a, nova, api
):
    personal = alice.owned_workspaces.get(kind="personal")
    in_team = api(bob).get(f"/api/v1/agents/?workspace={team_a.id}").json()["results"]
    assert [a["id"] for a in in_team] == [str(nova.id)]
    response = api(alice).patch(
        f"/api/v1/agents/{nova.id}/", {"pinnedWorkspaces": [str(personal.id)]}, format="json"
    )
    assert response.status_code == 200 and response.json()["visibility"] == "pinned"
    assert api(bob).get(f"/api/v1/agents/?workspace={team_a.id}").json()["results"] == []
    assert api(bob).get(f"/api/v1/agents/{nova.id}/").status_code == 404
    # Back to everywhere.
    api(alice).patch(f"/api/v1/agents/{nova.id}/", {"pinnedWorkspaces": None}, format="json")
    assert api(bob).get(f"/api/v1/agents/{nova.id}/").status_code == 200


def test_pinning_to_someone_elses_workspace_is_refused(alice, charlie, team_b, nova, api):
    response = api(alice).patch(
        f"/api/v1/agents/{nova.id}/", {"pinnedWorkspaces": [str(team_b.id)]}, format="json"
    )
    assert response.status_code == 404
    nova.refresh_from_db()
    assert nova.visibility == "all" and nova.pins.count() == 0


@pytest.mark.parametrize(
    "change, status, field",
    [
        # The pins are fine; where it runs is not: the whole change is refused.
        ({"host": "00000000-0000-0000-0000-000000000000"}, 400, "host"),
        ({"handle": "brand-new"}, 400, "handle"),  # fixed once created: said, not ignored
        ({"name": ""}, 400, "name"),
    ],
)
def test_a_refused_change_leaves_the_pins_and_everything_else_alone(
    alice, team_a, nova, api, change, status, field
):
    before = (list(Agent.objects.values()), list(nova.pins.values_list("workspace_id")))
    response = api(alice).patch(
        f"/api/v1/agents/{nova.id}/",
        {"pinnedWorkspaces": [str(team_a.id)], "role": "changed", **change},
        format="json",
    )
    assert response.status_code == status and field in response.json()["error"]["fields"]
    assert (list(Agent.objects.values()), list(nova.pins.values_list("workspace_id"))) == before
    nothing = api(alice).patch(f"/api/v1/agents/{nova.id}/", {}, format="json")
    assert nothing.status_code == 400 and "Nothing to change" in nothing.text


def test_a_key_is_shown_once_and_stored_only_as_a_hash(alice, nova, api):
    response = api(alice).post(f"/api/v1/agents/{nova.id}/keys/", {"name": "laptop"}, format="json")
    assert response.status_code == 201
    key = response.json()["key"]
    assert key.startswith("agk_")
    with connection.cursor() as cursor:
        cursor.execute("SELECT * FROM agents_agentkey")
        assert key not in str(cursor.fetchall())
    listed = api(alice).get(f"/api/v1/agents/{nova.id}/keys/").json()["results"]
    assert len(listed) == 1 and "key" not in listed[0] and listed[0]["prefix"] == key[:12]


def test_the_key_is_exchanged_for_a_session_and_is_no_credential_elsewhere(nova, client):
    _, key = actions.create_agent_key(nova)
    assert client.get("/api/v1/agent/me/", HTTP_AUTHORIZATION=f"Bearer {key}").status_code == 401
    response = client.post("/api/v1/agent/session/", HTTP_AUTHORIZATION=f"Bearer {key}")
    assert response.status_code == 200
    token = response.json()["token"]
    assert token.startswith("ags_")
    expires = response.json()["expiresAt"]
    assert (
        timedelta(minutes=14)
        < timezone.datetime.fromisoformat(expires) - timezone.now()
        <= timedelta(minutes=15)
    )
    me = client.get("/api/v1/agent/me/", HTTP_AUTHORIZATION=f"Bearer {token}")
    assert me.status_code == 200 and me.json()["id"] == str(nova.id)
    # A session token is not a key: it cannot open further sessions.
    assert (
        client.post("/api/v1/agent/session/", HTTP_AUTHORIZATION=f"Bearer {token}").status_code
        == 401
    )


def test_expired_sessions_and_revoked_keys_stop_working(alice, nova, client, api):
    key_row, key = actions.create_agent_key(nova)
    token = client.post("/api/v1/agent/session/", HTTP_AUTHORIZATION=f"Bearer {key}").json()[
        "token"
    ]
    AgentSession.objects.update(expires_at=timezone.now() - timedelta(seconds=1))
    assert client.get("/api/v1/agent/me/", HTTP_AUTHORIZATION=f"Bearer {token}").status_code == 401
    token = client.post("/api/v1/agent/session/", HTTP_AUTHORIZATION=f"Bearer {key}").json()[
        "token"
    ]
    assert api(alice).delete(f"/api/v1/agents/{nova.id}/keys/{key_row.id}/").status_code == 204
    assert client.get("/api/v1/agent/me/", HTTP_AUTHORIZATION=f"Bearer {token}").status_code == 401
    response = client.post("/api/v1/agent/session/", HTTP_AUTHORIZATION=f"Bearer {key}")
    assert response.status_code == 401 and response.json()["error"]["code"] == "invalid_agent_key"


def test_an_agent_cannot_use_person_endpoints(nova, client):
    token = agent_session(nova)
    for path in ["/api/v1/me/", "/api/v1/workspaces/", "/api/v1/agents/"]:
        assert client.get(path, HTTP_AUTHORIZATION=f"Bearer {token}").status_code == 403


def test_only_the_owner_manages_an_agent_and_outsiders_see_nothing(
    alice, bob, charlie, team_a, team_b, nova, api
):
    before = (list(Agent.objects.values()), AgentKey.objects.count())
    # Bob sees Nova in team A but does not own it: 403.
    assert api(bob).get(f"/api/v1/agents/{nova.id}/").status_code == 200
    assert (
        api(bob).patch(f"/api/v1/agents/{nova.id}/", {"name": "Mine"}, format="json").status_code
        == 403
    )
    assert api(bob).post(f"/api/v1/agents/{nova.id}/keys/", {}, format="json").status_code == 403
    # Charlie cannot see it at all: 404 everywhere.
    for response in [
        api(charlie).get(f"/api/v1/agents/{nova.id}/"),
        api(charlie).patch(f"/api/v1/agents/{nova.id}/", {"name": "Mine"}, format="json"),
        api(charlie).get(f"/api/v1/agents/{nova.id}/keys/"),
        api(charlie).post(f"/api/v1/agents/{nova.id}/keys/", {}, format="json"),
        api(charlie).get(f"/api/v1/agents/?workspace={team_a.id}"),
    ]:
        assert response.status_code == 404
    assert (list(Agent.objects.values()), AgentKey.objects.count()) == before


def test_where_an_agent_runs_is_separate_from_where_it_appears(alice, team_a, team_b, api):
    """Hosted means placed on an allowed host with room, through one path; local clears the
    placement and ends what the host held; another workspace's host is not found; a full host
    changes nothing."""
    shared = hosting.create_host(name="shared", address="10.0.0.1", ssh_key="k", capacity=1)
    theirs = hosting.create_host(workspace=team_b, name="theirs", address="10.0.0.2", ssh_key="k")
    created = api(alice).post(
        "/api/v1/agents/", {"name": "Hosty", "runtime": "hosted"}, format="json"
    )
    assert created.status_code == 201, created.json()
    created = created.json()
    assert created["runtime"] == "hosted" and created["hostId"] == str(shared.id)
    assert created["visibility"] == "all"
    hosty = Agent.objects.get(pk=created["id"])
    placement = hosting.issue_host_token(shared, hosty)

    # Another workspace's host: not found, nothing changed.
    other = api(alice).patch(
        f"/api/v1/agents/{hosty.id}/", {"host": str(theirs.id), "name": "X"}, format="json"
    )
    assert other.status_code == 404 and other.json()["error"]["code"] == "host_not_found"
    assert Agent.objects.get(pk=hosty.id).host_id == shared.id
    assert Agent.objects.get(pk=hosty.id).name == "Hosty"
    # The only host is full: a second hosted agent is refused and not created.
    full = api(alice).post(
        "/api/v1/agents/", {"name": "Second", "runtime": "hosted"}, format="json"
    )
    assert full.status_code == 409 and full.json()["error"]["code"] == "host_full"
    assert not Agent.objects.filter(name="Second").exists()
    # A host for a local agent is a contradiction.
    both = api(alice).patch(
        f"/api/v1/agents/{hosty.id}/", {"runtime": "local", "host": str(shared.id)}, format="json"
    )
    assert both.status_code == 400 and "host" in both.json()["error"]["fields"]

    changed = (
        api(alice)
        .patch(f"/api/v1/agents/{created['id']}/", {"runtime": "local"}, format="json")
        .json()
    )
    assert changed["runtime"] == "local" and changed["hostId"] is None
    assert changed["visibility"] == "all"
    # What the host held for it no longer opens anything.
    assert hosting.open_hosted_session(placement) is None
    bad = api(alice).patch(f"/api/v1/agents/{created['id']}/", {"runtime": "cloud"}, format="json")
    assert bad.status_code == 400 and "runtime" in bad.json()["error"]["fields"]
    assert Agent.objects.get(pk=created["id"]).runtime == "local"


def test_a_handle_made_from_a_long_name_can_be_mentioned(alice, api):
    """The handle made from a name is cut to 40 characters; a cut at a space left it ending in
    a hyphen, which a mention (@handle, trailing punctuation stripped) never matches."""
    from conversations.turns import mentioned

    name = "Research assistant for the quarterly QA review"
    response = api(alice).post("/api/v1/agents/", {"name": name}, format="json")
    assert response.status_code == 201
    handle = response.json()["handle"]
    assert handle == "research-assistant-for-the-quarterly-qa"
    agent = Agent.objects.get(pk=response.json()["id"])
    assert mentioned(f"@{handle} please look", [agent]) == [agent]


def test_an_agents_base_url_is_its_owners_to_read(alice, bob, team_a, nova, api):
    """A base URL may carry a credential (https://user:key@host/v1): teammates who see the agent
    do not read it; its owner and the agent itself do."""
    secret = "https://u:sk-zz@llm.example/v1"
    changed = api(alice).patch(f"/api/v1/agents/{nova.id}/", {"baseUrl": secret}, format="json")
    assert changed.status_code == 200 and changed.json()["baseUrl"] == secret
    assert api(alice).get(f"/api/v1/agents/{nova.id}/").json()["baseUrl"] == secret
    seen = api(bob).get(f"/api/v1/agents/{nova.id}/")
    assert seen.status_code == 200 and "baseUrl" not in seen.json()
    listed = api(bob).get(f"/api/v1/agents/?workspace={team_a.id}").json()["results"]
    assert [a for a in listed if a["id"] == str(nova.id)] and all(
        "baseUrl" not in a for a in listed
    )
    assert secret not in api(bob).get(f"/api/v1/agents/?workspace={team_a.id}").content.decode()


def test_a_base_url_longer_than_is_kept_is_refused(alice, nova, api):
    long = "https://llm.example/" + "v" * 200
    refused = api(alice).patch(f"/api/v1/agents/{nova.id}/", {"baseUrl": long}, format="json")
    assert refused.status_code == 400 and "baseUrl" in refused.json()["error"]["fields"]
    nova.refresh_from_db()
    assert nova.base_url == ""


def test_a_person_has_at_most_their_cap_of_agents(alice, api, settings):
    settings.AGENTS_PER_PERSON = 2
    for name in ("One", "Two"):
        assert api(alice).post("/api/v1/agents/", {"name": name}, format="json").status_code == 201
    response = api(alice).post("/api/v1/agents/", {"name": "Three"}, format="json")
    assert response.status_code == 409
    assert response.json()["error"]["code"] == "limit_reached"
    assert "You have 2 agents, the most one person may" in response.json()["error"]["message"]
    assert Agent.objects.filter(owner=alice).count() == 2


@pytest.mark.django_db(transaction=True)
def test_agents_made_at_once_fill_the_last_place_once(alice, settings):
    from agntchat.core.limits import LimitReached
    from tests.concurrency import run_together

    settings.AGENTS_PER_PERSON = 3
    actions.create_agent(alice, name="First")
    results = run_together(
        lambda n: actions.create_agent(alice, name=f"Racer {n}"),
        [(n,) for n in range(5)],
        catching=(LimitReached,),
    )
    assert sum(isinstance(r, Agent) for r in results) == 2
    assert Agent.objects.filter(owner=alice).count() == 3
