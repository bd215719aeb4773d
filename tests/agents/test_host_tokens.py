"""Hosts' narrow tokens (WS-4) and placement (AGT-5): a placement token opens only its agent's
session, only while the agent stays on that host; no host token is accepted anywhere else."""

import re
import uuid

import pytest
from django.urls import resolve
from drf_spectacular.generators import SchemaGenerator
from rest_framework.test import APIClient

from agents import hosting
from agents.models import Agent, AgentSession, HostToken
from tests.concurrency import run_together
from tests.conftest import make_person
from work import hosting as work_hosting

pytestmark = pytest.mark.django_db(transaction=True)

KEY = "-----BEGIN OPENSSH PRIVATE KEY-----\nnot used here\n-----END OPENSSH PRIVATE KEY-----\n"


def make_host(name="h1", **fields):
    return hosting.create_host(name=name, address="127.0.0.1", ssh_key=KEY, **fields)


def exchange(secret):
    return APIClient().post("/api/v1/agent/session/", HTTP_AUTHORIZATION=f"Bearer {secret}")


def test_a_placement_token_opens_its_agents_session_and_nothing_else(nova):
    host = make_host()
    hosting.place_agent(nova, host)
    placement = hosting.issue_host_token(host, nova)
    supervisor = hosting.issue_host_token(host)

    opened = exchange(placement)
    assert opened.status_code == 200 and opened.json()["agentId"] == str(nova.id)
    me = APIClient().get("/api/v1/agent/me/", HTTP_AUTHORIZATION=f"Bearer {opened.json()['token']}")
    assert me.status_code == 200 and me.json()["id"] == str(nova.id)
    assert me.json()["runtime"] == "hosted"
    # The supervisor's token is for the host socket only, not for sessions.
    assert exchange(supervisor).status_code == 401
    # Stored only as hashes.
    assert not HostToken.objects.filter(token_hash__in=[placement, supervisor]).exists()


def test_every_other_endpoint_refuses_a_host_token(nova, alice):
    """Across the whole API, every path and method: a host token is never a credential."""
    host = make_host()
    hosting.place_agent(nova, host)
    tokens = [hosting.issue_host_token(host, nova), hosting.issue_host_token(host)]
    schema = SchemaGenerator().get_schema(request=None, public=True)
    checked = 0
    for path, operations in schema["paths"].items():
        if path == "/api/v1/agent/session/":
            continue
        # Ids are UUIDs; a version is a number.
        url = re.sub(r"\{(\w+)\}", lambda m: "1" if m[1] == "number" else str(uuid.uuid4()), path)
        view = resolve(url).func.view_class
        if view.authentication_classes == []:
            continue  # takes no credentials at all (logging in with a password)
        for method in operations:
            if method not in ("get", "post", "put", "patch", "delete"):
                continue
            for token in tokens:
                response = getattr(APIClient(), method)(url, HTTP_AUTHORIZATION=f"Bearer {token}")
                assert response.status_code == 401, (method, path, response.status_code)
                assert "/api/v1/agent/session/" in response.json()["error"]["message"]
                checked += 1
    assert checked > 100


def test_moving_the_agent_off_the_host_ends_what_the_host_holds(nova):
    host = make_host()
    hosting.place_agent(nova, host)
    placement = hosting.issue_host_token(host, nova)
    token = exchange(placement).json()["token"]
    work_hosting.set_runtime(nova, Agent.Runtime.LOCAL)
    nova.refresh_from_db()
    assert nova.runtime == "local" and nova.host_id is None
    assert exchange(placement).status_code == 401
    assert (
        APIClient().get("/api/v1/agent/me/", HTTP_AUTHORIZATION=f"Bearer {token}").status_code
        == 401
    )
    assert not AgentSession.objects.filter(agent=nova).exists()


def test_a_placement_token_of_another_host_does_not_follow_the_agent(nova):
    first, second = make_host("h1"), make_host("h2")
    hosting.place_agent(nova, first)
    old = hosting.issue_host_token(first, nova)
    hosting.place_agent(nova, second)
    assert exchange(old).status_code == 401
    assert exchange(hosting.issue_host_token(second, nova)).status_code == 200


def test_placement_respects_capacity_under_concurrency(alice):
    """Eight agents placed at once on hosts with three places in all: three placed, five told
    there is no room, never a fourth squeezed in."""
    make_host("h1", capacity=2)
    make_host("h2", capacity=1)
    from agents.actions import create_agent

    agents = [create_agent(alice, name=f"a{i}") for i in range(8)]
    placements = run_together(
        hosting.place_agent, [(a,) for a in agents], catching=hosting.HostFull
    )
    outcomes = ["full" if isinstance(p, hosting.HostFull) else "placed" for p in placements]
    assert sorted(outcomes) == ["full"] * 5 + ["placed"] * 3
    counts = {h.name: h.agents.count() for h in hosting.Host.objects.all()}
    assert counts == {"h1": 2, "h2": 1}


def test_a_workspace_host_is_only_for_its_members_agents(alice, charlie, team_b):
    from agents.actions import create_agent

    theirs = make_host("b-host", workspace=team_b)
    mine = create_agent(alice, name="Mine")
    with pytest.raises(hosting.HostNotFound):
        hosting.place_agent(mine, theirs)
    charlies = create_agent(charlie, name="His")
    assert hosting.place_agent(charlies, theirs).host == theirs
    assert make_person("dora")  # nobody else's agents see it either


def test_only_a_workspace_manager_runs_agents_on_its_hosts(alice, bob, team_a):
    """A member reads the workspace's hosts; running code on one is for its admins."""
    from agents.actions import create_agent
    from workspaces.models import Membership, Role

    host = make_host("a-host", workspace=team_a)
    bobs = create_agent(bob, name="Bobs")
    with pytest.raises(hosting.HostNotFound):
        hosting.place_agent(bobs, host)
    Membership.objects.filter(workspace=team_a, user=bob).update(role=Role.ADMIN)
    assert hosting.place_agent(bobs, host).host == host


@pytest.mark.parametrize("ends", ["removed", "left", "demoted"])
def test_a_person_who_stops_managing_a_workspace_loses_its_hosts(alice, bob, team_a, ends):
    """Bob's agent stops running on team A's machine the moment he no longer manages team A:
    made local, its placement token revoked (the host stops its bridge)."""
    from agents.actions import create_agent
    from workspaces import actions as workspace_actions
    from workspaces.models import Membership, Role

    host = make_host("a-host", workspace=team_a)
    shared = make_host("shared")
    Membership.objects.filter(workspace=team_a, user=bob).update(role=Role.ADMIN)
    bobs, elsewhere = create_agent(bob, name="Bobs"), create_agent(bob, name="Roams")
    hosting.place_agent(bobs, host)
    hosting.place_agent(elsewhere, shared)
    placement = hosting.issue_host_token(host, bobs)
    owner = Membership.objects.get(workspace=team_a, user=alice)
    his = Membership.objects.get(workspace=team_a, user=bob)
    if ends == "removed":
        workspace_actions.remove_member(owner, his)
    elif ends == "left":
        workspace_actions.leave_workspace(his)
    else:
        workspace_actions.change_role(owner, his, Role.MEMBER)
    bobs.refresh_from_db()
    assert (bobs.runtime, bobs.host_id) == (Agent.Runtime.LOCAL, None)
    assert exchange(placement).status_code == 401
    elsewhere.refresh_from_db()
    assert elsewhere.host == shared  # a shared host is not the workspace's


def test_deleting_a_workspace_makes_the_agents_on_its_hosts_local(alice, team_a, nova):
    from workspaces import actions as workspace_actions
    from workspaces.models import Membership

    host = make_host("a-host", workspace=team_a)
    hosting.place_agent(nova, host)
    workspace_actions.delete_workspace(Membership.objects.get(workspace=team_a, user=alice))
    nova.refresh_from_db()
    assert (nova.runtime, nova.host_id) == (Agent.Runtime.LOCAL, None)
    assert not HostToken.objects.filter(agent=nova, revoked_at__isnull=True).exists()


def test_a_demotion_racing_a_placement_is_waited_for_and_refuses_it(alice, bob, team_a):
    """Bob, an admin, places his agent on team A's host while Alice demotes him. The demotion
    holds his membership row (uncommitted) when the placement reads his role: the placement
    waits for it under the row's lock and then refuses. A read without the lock would see him
    an admin still and place the agent after the demotion's eviction had run (nothing there)."""
    import threading

    from django.db import connection, transaction

    from agents.actions import create_agent
    from tests.concurrency import backend_pid, sessions_waiting_on_me
    from tests.waiting import wait_until
    from workspaces import actions as workspace_actions
    from workspaces.models import Membership, Role

    host = make_host("a-host", workspace=team_a)
    Membership.objects.filter(workspace=team_a, user=bob).update(role=Role.ADMIN)
    bobs = create_agent(bob, name="Bobs")
    owner = Membership.objects.get(workspace=team_a, user=alice)
    his = Membership.objects.get(workspace=team_a, user=bob)
    placer_pid, demotion_held, placed = backend_pid(), threading.Event(), threading.Event()
    seen = []

    def demote_and_hold():
        try:
            with transaction.atomic():
                workspace_actions.change_role(owner, his, Role.MEMBER)
                demotion_held.set()
                seen.append(
                    wait_until(
                        lambda: (
                            (placer_pid in sessions_waiting_on_me() and "waited")
                            or (placed.is_set() and "finished")
                        ),
                        what="the placement to wait or finish",
                    )
                )
        finally:
            demotion_held.set()
            connection.close()

    demoter = threading.Thread(target=demote_and_hold)
    demoter.start()
    demotion_held.wait(timeout=20)
    try:
        with pytest.raises(hosting.HostNotFound):
            hosting.place_agent(bobs, host)
    finally:
        placed.set()
        demoter.join(timeout=20)
    assert seen == ["waited"]
    bobs.refresh_from_db()
    assert (bobs.runtime, bobs.host_id) == (Agent.Runtime.LOCAL, None)
