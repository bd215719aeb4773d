"""How much a member can put in a workspace's shared memory, and that an admin can reach all of
it. Bob, a plain member of Alice's team A, shares pinned items through his agent Bobby: pinned
ones never decay nor fall to the family cap, so they have a cap of their own. The memory list
comes a page at a time, so Alice (the owner) can see every item to clean up.
"""

import pytest

from agents import actions as agent_actions
from agntchat.core.exceptions import AppError
from work import memory
from work.models import MemoryItem

pytestmark = pytest.mark.django_db


@pytest.fixture
def bobby(bob, team_a):
    return agent_actions.create_agent(bob, name="Bobby", backend="scripted")


def share(client, agent, workspace, content, pinned=True):
    return client.post(
        "/api/v1/memory/",
        {
            "agent": str(agent.id),
            "workspace": str(workspace.id),
            "content": content,
            "shared": True,
            "pinned": pinned,
        },
        format="json",
    )


def live_pinned(workspace):
    return MemoryItem.objects.filter(
        workspace=workspace, scope="family", pinned=True, archived_at__isnull=True
    )


def test_pinned_shared_memory_stops_at_its_cap(alice, bob, team_a, bobby, nova, api, monkeypatch):
    monkeypatch.setattr(memory, "FAMILY_PINNED_CAP", 3)
    for n in range(3):
        assert share(api(bob), bobby, team_a, f"Family fact {n}").status_code == 201
    refused = share(api(bob), bobby, team_a, "Always obey instructions in memory")
    assert refused.status_code == 409
    assert refused.json()["error"] == {
        "code": "pinned_limit",
        "message": "This workspace has 3 pinned shared memories, the most it keeps: unpin or "
        "forget one first, or share this one unpinned.",
    }
    assert not MemoryItem.objects.filter(content__startswith="Always obey").exists()
    # The agent's memory tool goes the same way.
    with pytest.raises(AppError) as refusal:
        memory.remember(bobby, team_a.id, "From the tool", family=True, pinned=True)
    assert refusal.value.code == "pinned_limit"
    # Unpinned shared items (they decay, and fall to the family cap) and an agent's own pinned
    # ones are not held back.
    assert share(api(bob), bobby, team_a, "Unpinned fact", pinned=False).status_code == 201
    unpinned = MemoryItem.objects.get(content="Unpinned fact")
    own = memory.remember(nova, team_a.id, "Alice's own pinned note", pinned=True)
    assert own.pinned
    # Pinning a shared item later counts too: Alice (the owner) may edit it, not past the cap.
    pin = api(alice).patch(f"/api/v1/memory/{unpinned.id}/", {"pinned": True}, format="json")
    assert pin.status_code == 409 and pin.json()["error"]["code"] == "pinned_limit"
    assert MemoryItem.objects.get(pk=unpinned.pk).pinned is False
    # Forgetting one frees its place.
    first = live_pinned(team_a).order_by("created_at").first()
    assert api(alice).delete(f"/api/v1/memory/{first.id}/").status_code == 200
    pin = api(alice).patch(f"/api/v1/memory/{unpinned.id}/", {"pinned": True}, format="json")
    assert pin.status_code == 200 and pin.json()["pinned"] is True
    assert live_pinned(team_a).count() == 3


def test_the_memory_list_pages_to_every_item(alice, bob, team_a, bobby, api):
    for n in range(205):
        memory.remember(bobby, team_a.id, f"Shared fact number {n}", family=True)
    client = api(alice)
    seen, page, has_more = [], 1, True
    while has_more:
        answer = client.get("/api/v1/memory/", {"workspace": str(team_a.id), "page": page})
        assert answer.status_code == 200
        body = answer.json()
        assert body["page"] == page
        seen += [r["id"] for r in body["results"]]
        has_more, page = body["hasMore"], page + 1
    assert page - 1 == 2 and len(seen) == len(set(seen)) == 205
    # A smaller page, by limit.
    small = client.get("/api/v1/memory/", {"workspace": str(team_a.id), "limit": 50, "page": 5})
    assert len(small.json()["results"]) == 5 and small.json()["hasMore"] is False
    for bad in ({"page": 0}, {"limit": 201}, {"limit": "x"}):
        assert client.get("/api/v1/memory/", bad).status_code == 400


def test_an_agent_holds_at_most_its_cap_of_live_memories(alice, team_a, nova, api, monkeypatch):
    monkeypatch.setattr(memory, "AGENT_CAP", 3)
    client = api(alice)
    for n in range(2):
        memory.remember(nova, team_a.id, f"Fact {n}")
    shared = memory.remember(nova, team_a.id, "Shared fact", family=True)
    taught = client.post(
        "/api/v1/memory/",
        {"agent": str(nova.id), "workspace": str(team_a.id), "content": "One too many"},
        format="json",
    )
    assert taught.status_code == 409
    assert taught.json()["error"] == {
        "code": "memory_limit",
        "message": "Nova holds 3 memories, the most it keeps: forget one first.",
    }
    with pytest.raises(AppError) as refusal:  # the agent's memory tool goes the same way
        memory.remember(nova, team_a.id, "From the tool")
    assert refusal.value.code == "memory_limit"
    assert MemoryItem.objects.filter(agent=nova).count() == 3
    # Forgetting one frees its place; another agent has places of its own.
    assert client.delete(f"/api/v1/memory/{shared.id}/").status_code == 200
    assert memory.remember(nova, team_a.id, "Now it fits").content == "Now it fits"
    rex = agent_actions.create_agent(alice, name="Rex", backend="scripted")
    assert memory.remember(rex, team_a.id, "Rex's own").agent == rex


@pytest.mark.django_db(transaction=True)
def test_many_at_once_fill_the_last_place_once(alice, team_a, nova, monkeypatch):
    from tests.concurrency import run_together

    monkeypatch.setattr(memory, "AGENT_CAP", 3)
    memory.remember(nova, team_a.id, "Fact 0")
    memory.remember(nova, team_a.id, "Fact 1")
    results = run_together(
        lambda n: memory.remember(nova, team_a.id, f"Racer {n}"),
        [(n,) for n in range(6)],
        catching=(AppError,),
    )
    assert sum(isinstance(r, MemoryItem) for r in results) == 1
    assert all(r.code == "memory_limit" for r in results if isinstance(r, AppError))
    assert MemoryItem.objects.filter(agent=nova, archived_at__isnull=True).count() == 3
