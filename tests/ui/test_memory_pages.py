"""Memory pages without a browser: one agent's memory for its owner, and a workspace's family
layer for its members, with changes offered exactly where the REST API allows them. Alice owns
team A and Nova; Bob is a member; Charlie, an outsider with team B, gets 404."""

import pytest

from agents import actions as agent_actions
from conversations.actions import create_conversation
from work import memory

pytestmark = pytest.mark.django_db


@pytest.fixture
def items(alice, bob, team_a, channel, nova):
    """Nova's own memories (one learned in #general, one in Bob's DM with it that Alice cannot
    read), a family item from #general and one from Alice's DM with Nova that Bob cannot read."""
    alice_dm = create_conversation(alice, team_a, kind="direct", agent_ids=[nova.id])
    bob_dm = create_conversation(bob, team_a, kind="direct", agent_ids=[nova.id])
    message = channel.messages.create(body="Coffee talk", author_user=alice)
    return {
        "coffee": memory.remember(
            nova, team_a.id, "Alice takes her coffee black", conversation=channel, message=message
        ),
        "secret": memory.remember(nova, team_a.id, "Bob's surprise party", conversation=bob_dm),
        "taught": memory.remember(nova, team_a.id, "Reports go out Fridays", user=alice),
        "standup": memory.remember(
            nova, team_a.id, "Standup is at nine", family=True, conversation=channel
        ),
        "review": memory.remember(
            nova, team_a.id, "Alice's review is Friday", family=True, conversation=alice_dm
        ),
    }


def page(client, user, url):
    client.force_login(user)
    response = client.get(url)
    assert response.status_code == 200, url
    return response.content.decode()


def item_html(html, item):
    return html.split(f'data-memory-id="{item.id}"')[1].split("</li>")[0]


def test_the_owner_sees_what_the_agent_remembers_and_where_it_learned_it(
    client, alice, team_a, channel, nova, items
):
    html = page(client, alice, f"/w/{team_a.id}/agents/{nova.id}/memory/")
    for key in ("coffee", "secret", "taught", "standup", "review"):
        assert f'data-memory-id="{items[key].id}"' in html, key
    coffee = item_html(html, items["coffee"])
    link = f'href="/w/{team_a.id}/c/{channel.id}/#msg-{items["coffee"].source_message_id}"'
    assert link in coffee and "#general" in coffee
    assert "learned in a conversation you cannot see" in item_html(html, items["secret"])
    assert "taught by you" in item_html(html, items["taught"])
    assert "shared with the workspace" in item_html(html, items["standup"])
    # Pin, edit and forget through the REST API; teaching too.
    for form in ('data-api="PATCH"', 'data-api="DELETE"', 'name="pinned" value="true"'):
        assert form in coffee, form
    assert coffee.count(f'action="/api/v1/memory/{items["coffee"].id}/"') == 3
    assert 'action="/api/v1/memory/"' in html and f'name="agent" value="{nova.id}"' in html
    assert "100%" in coffee  # its strength


def test_memory_search_and_forgotten_items(client, alice, team_a, nova, items):
    url = f"/w/{team_a.id}/agents/{nova.id}/memory/"
    found = page(client, alice, url + "?q=coffee")
    assert f'data-memory-id="{items["coffee"].id}"' in found
    assert f'data-memory-id="{items["taught"].id}"' not in found
    assert "matches “the”" in page(client, alice, url + "?q=the")
    memory.forget(items["taught"])
    memory.update_item(items["coffee"], pinned=True)
    html = page(client, alice, url)
    assert f'data-memory-id="{items["taught"].id}"' not in html
    assert html.index(f'data-memory-id="{items["coffee"].id}"') < html.index("Standup is at nine")
    assert 'name="pinned" value="false"' in item_html(html, items["coffee"])  # its Unpin
    forgotten = page(client, alice, url + "?archived=1")
    row = item_html(forgotten, items["taught"])
    assert "forgotten" in row and "data-api" not in row  # listed, no longer changed
    assert f'data-memory-id="{items["coffee"].id}"' not in forgotten


def test_the_agent_page_links_its_memory_for_its_owner(client, alice, bob, team_a, nova, items):
    url = f"/w/{team_a.id}/agents/{nova.id}/"
    html = page(client, alice, url)
    assert f'href="/w/{team_a.id}/agents/{nova.id}/memory/"' in html
    assert "Nova remembers 5 things in Team A." in html
    assert "/memory/" not in page(client, bob, url).split('id="main"')[1]


def test_a_pinned_away_agent_cannot_be_taught_here(client, alice, team_a, items):
    personal = alice.memberships.get(workspace__kind="personal").workspace
    elsewhere = agent_actions.create_agent(
        alice, name="Orbit", backend="scripted", pinned_workspace_ids=[personal.id]
    )
    html = page(client, alice, f"/w/{team_a.id}/agents/{elsewhere.id}/memory/")
    assert 'action="/api/v1/memory/"' not in html and "does not appear in Team A" in html


def test_the_family_layer_for_members_with_changes_where_allowed(
    client, alice, bob, team_a, nova, items
):
    url = f"/w/{team_a.id}/memory/"
    html = page(client, bob, url)
    standup = item_html(html, items["standup"])
    assert "Standup is at nine" in standup and "Nova" in standup
    assert "data-api" not in standup  # Bob is a member, not Nova's owner nor an admin
    assert "Alice's review" not in html  # learned in Alice's DM, which Bob cannot read
    assert "coffee" not in html  # Nova's own memory is not the family's
    assert 'action="/api/v1/memory/"' not in html  # Bob has no agent here to teach through
    assert 'aria-current="page"' in html.split("Memory</span>")[0].rsplit("<li>", 1)[1]

    html = page(client, alice, url)
    standup = item_html(html, items["standup"])
    assert f'action="/api/v1/memory/{items["standup"].id}/"' in standup
    assert f'data-memory-id="{items["review"].id}"' in html
    assert (
        'name="shared" value="true"' in html and f'<option value="{nova.id}">Nova</option>' in html
    )


def test_an_admin_changes_family_items_of_others_agents(client, alice, bob, team_a, items):
    bobs = agent_actions.create_agent(bob, name="Pixel", handle="pixel", backend="scripted")
    shared = memory.remember(bobs, team_a.id, "Deploys happen on Tuesdays", family=True)
    html = page(client, alice, f"/w/{team_a.id}/memory/")
    assert f'action="/api/v1/memory/{shared.id}/"' in item_html(html, shared)  # the owner of A
    html = page(client, bob, f"/w/{team_a.id}/memory/")
    assert f'action="/api/v1/memory/{shared.id}/"' in item_html(html, shared)  # Pixel's owner
    assert "data-api" not in item_html(html, items["standup"])


def test_memory_pages_are_404_for_others(client, alice, bob, charlie, team_a, team_b, nova, items):
    client.force_login(bob)  # a member who does not own Nova
    assert client.get(f"/w/{team_a.id}/agents/{nova.id}/memory/").status_code == 404
    client.force_login(charlie)
    for url in (
        f"/w/{team_a.id}/memory/",
        f"/w/{team_a.id}/agents/{nova.id}/memory/",
        f"/w/{team_b.id}/agents/{nova.id}/memory/",
    ):
        assert client.get(url).status_code == 404, url
    html = page(client, charlie, f"/w/{team_b.id}/memory/")
    assert "Standup" not in html and "coffee" not in html
    client.force_login(alice)
    assert client.get(f"/w/{team_b.id}/memory/").status_code == 404
    assert client.get(f"/w/{team_a.id}/agents/{team_a.id}/memory/").status_code == 404
