"""REST for memory: owners see, teach, edit, pin and forget what their agents remember;
members see the family layer where they may read its source; everyone else gets 404."""

import pytest

from conversations.actions import create_conversation
from work import memory
from work.models import MemoryItem

pytestmark = pytest.mark.django_db


@pytest.fixture
def items(alice, team_a, channel, nova):
    dm = create_conversation(alice, team_a, kind="direct", agent_ids=[nova.id])
    return {
        "own": memory.remember(nova, team_a.id, "Alice takes her coffee black"),
        "family_public": memory.remember(
            nova, team_a.id, "Standup is at nine", family=True, conversation=channel
        ),
        "family_private": memory.remember(
            nova, team_a.id, "Alice's review is Friday", family=True, conversation=dm
        ),
    }


def listed(client, **params):
    response = client.get("/api/v1/memory/", params)
    assert response.status_code == 200, response.json()
    return [r["content"] for r in response.json()["results"]]


def test_owner_and_members_see_what_they_may(alice, bob, charlie, items, api):
    assert sorted(listed(api(alice))) == sorted(i.content for i in items.values())
    # Bob sees the family layer learned in #general, not the one from Alice's DM, nor Nova's own.
    assert listed(api(bob)) == ["Standup is at nine"]
    assert listed(api(charlie)) == []
    assert listed(api(alice), q="coffee") == ["Alice takes her coffee black"]
    assert listed(api(alice), q="the") == []  # stop words only: nothing to match
    assert listed(api(alice), scope="family", q="standup nine") == ["Standup is at nine"]
    for who, status in ((alice, 200), (bob, 404), (charlie, 404)):
        assert api(who).get(f"/api/v1/memory/{items['own'].id}/").status_code == status


def test_owner_teaches_edits_pins_and_forgets(alice, team_a, nova, items, api):
    client = api(alice)
    body = {
        "agent": str(nova.id),
        "workspace": str(team_a.id),
        "content": "Invoices go to Dana",
        "pinned": True,
    }
    created = client.post("/api/v1/memory/", body, format="json")
    assert created.status_code == 201 and created.json()["pinned"] is True
    item = MemoryItem.objects.get(pk=created.json()["id"])
    assert (item.agent, item.created_by_user, item.scope) == (nova, alice, "agent")

    url = f"/api/v1/memory/{item.id}/"
    changed = client.patch(url, {"content": "Invoices go to Dana, cc Bob"}, format="json")
    assert changed.status_code == 200 and changed.json()["content"] == "Invoices go to Dana, cc Bob"
    forgotten = client.delete(url)
    assert forgotten.status_code == 200 and forgotten.json()["archivedReason"] == "forgotten"
    assert "Invoices go to Dana, cc Bob" not in listed(client)
    assert listed(client, archived="true") == ["Invoices go to Dana, cc Bob"]


def test_others_cannot_teach_or_change_and_bad_input_changes_nothing(
    alice, bob, charlie, team_a, team_b, nova, items, api
):
    before = list(MemoryItem.objects.values_list("id", "content", "pinned", "archived_at"))
    teach = {"agent": str(nova.id), "workspace": str(team_a.id), "content": "x"}
    # Bob sees Nova but she is not his: 403, as for her other settings.
    assert api(bob).post("/api/v1/memory/", teach, format="json").status_code == 403
    assert api(charlie).post("/api/v1/memory/", teach, format="json").status_code == 404
    elsewhere = {**teach, "workspace": str(team_b.id)}
    assert api(alice).post("/api/v1/memory/", elsewhere, format="json").status_code == 404
    public = f"/api/v1/memory/{items['family_public'].id}/"
    assert (
        api(bob).patch(public, {"pinned": True}, format="json").status_code == 404
    )  # sees, may not edit
    assert api(charlie).delete(public).status_code == 404
    client = api(alice)
    for bad in (
        {},
        {"pinned": "maybe"},
        {"content": ""},
        {"content": "x" * 5000},
        {"colour": "red"},
    ):
        assert client.patch(public, bad, format="json").status_code == 400, bad
    assert (
        client.post("/api/v1/memory/", {**teach, "content": ""}, format="json").status_code == 400
    )
    assert client.get("/api/v1/memory/", {"scope": "galaxy"}).status_code == 400
    assert list(MemoryItem.objects.values_list("id", "content", "pinned", "archived_at")) == before
