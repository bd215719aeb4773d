"""Agent directory pages without a browser: the owner's panel on the agent page in each state
(never published, published, unpublished, pinned to a team), the directory (search, order) and
a listing page, which only a published listing has. Alice owns team A and Nova; Bob is a member;
Charlie is an outsider."""

import pytest

from work import directory

pytestmark = pytest.mark.django_db


def page(client, user, url, status=200):
    client.force_login(user)
    response = client.get(url)
    assert response.status_code == status, url
    return response.content.decode()


def test_the_owner_panel_says_what_state_the_listing_is_in(client, alice, bob, team_a, nova):
    url = f"/w/{team_a.id}/agents/{nova.id}/"
    html = page(client, alice, url)
    assert 'data-listing-state="unpublished"' in html and "Publish Nova" in html
    directory.publish_agent(alice, nova, description="Finds things out.")
    html = page(client, alice, url)
    assert 'data-listing-state="published"' in html
    assert "Republish Nova" in html and "Unpublish Nova" in html
    assert "nobody else has cloned it yet" in html
    # Bob sees Nova in team A, but the panel is its owner's only.
    assert "Agent directory</h2>" not in page(client, bob, url)
    directory.unpublish_agent(nova)
    html = page(client, alice, url)
    assert "published before; clones made then are untouched" in html
    directory.set_pins(nova, [team_a.id])
    html = page(client, alice, url)
    assert 'data-listing-state="pinned"' in html and "cannot be published" in html
    assert "Publish Nova</button>" not in html


def test_the_directory_searches_and_a_listing_page_exists_only_while_published(
    client, alice, bob, charlie, team_a, nova
):
    listing, _ = directory.publish_agent(alice, nova, description="Researches <b>carefully</b>.")
    charlies_home = charlie.memberships.get().workspace_id
    html = page(client, charlie, f"/w/{charlies_home}/directory/")
    assert 'data-listing="nova"' in html and f"by {alice.label}" in html
    assert "&lt;b&gt;carefully" in html  # the owner's text is escaped
    assert 'data-listing="nova"' in page(
        client, charlie, f"/w/{charlies_home}/directory/?q=research"
    )
    assert "No published agent matches" in page(
        client, charlie, f"/w/{charlies_home}/directory/?q=zebra"
    )
    assert "Most cloned first" in page(
        client, charlie, f"/w/{charlies_home}/directory/?sort=clones"
    )
    # An unknown order falls back to newest rather than failing.
    assert "Newest first" in page(client, charlie, f"/w/{charlies_home}/directory/?sort=bogus")
    detail = f"/w/{charlies_home}/directory/{listing.id}/"
    html = page(client, charlie, detail)
    assert "Clone Nova" in html and f"/api/v1/directory/agents/{listing.id}/clone/" in html
    directory.unpublish_agent(nova)
    page(client, charlie, detail, status=404)
