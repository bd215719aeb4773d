"""The work map in a real browser: Alice opens it from the sidebar and sees her team's work as a
graph (read through Cytoscape's own API); clicking a task shows what it is with a link to open
it; a task Bob asks for in #general from his own session appears on her map live; picking an
agent narrows the map to its work. Pictures at laptop and phone width."""

import pytest
from playwright.sync_api import expect

from agents import actions as agent_actions
from artifacts.actions import publish_artifact
from conversations.actions import create_conversation, open_direct, post_message
from conversations.models import Task
from tests.ui.browser import (
    MAP_NODES,
    MARKS,
    PHONE,
    live,
    log_in,
    shot,
    tide_lab_in_lisbon,
    wait_for_js,
)

pytestmark = MARKS


@pytest.fixture
def story(orm):
    """Tide Lab: Alice asks Scout (in their direct conversation) to research the tides; Scout
    hands the write-up to Quill, Bob's agent, and publishes notes; Nova pulls Scout aside in
    #general. Bob's own request to Quill, in his direct conversation, is not Alice's to see."""

    def build():
        team, nova = tide_lab_in_lisbon()
        alice, bob = team.owner, team.memberships.get(role="member").user
        scout = agent_actions.create_agent(
            alice, name="Scout", handle="scout", role="research", backend="scripted"
        )
        quill = agent_actions.create_agent(bob, name="Quill", handle="quill", backend="scripted")
        general = create_conversation(
            alice,
            team,
            kind="channel",
            title="general",
            user_ids=[bob.id],
            agent_ids=[nova.id, scout.id],
        )
        dm, _ = open_direct(alice, team, agent_ids=[scout.id])
        post_message(alice, dm, "@scout please research the tide tables for Lisbon")
        work = Task.objects.get(conversation=dm).work_conversation
        post_message(scout, work, "@quill please write up the tide tables as a short note")
        publish_artifact(scout, work, "Tide notes", "markdown", "# Tides\nHigh water at 06:12.")
        post_message(nova, general, 'On it. <dm target="Scout">Which source did you use?</dm>')
        secret, _ = open_direct(bob, team, agent_ids=[quill.id])
        post_message(bob, secret, "@quill please plan a surprise party for Alice")
        write_up = Task.objects.get(conversation=work)
        return team, general, quill, write_up

    return orm(build)


def test_the_map_draws_follows_and_filters_the_work(orm, story, browser):
    team, general, quill, write_up = story
    chromium, server = browser
    alice = live(log_in(chromium, server, "alice"))
    alice.goto(f"/w/{team.id}/")
    alice.get_by_role("link", name="Work map").click()
    alice.wait_for_url(f"**/w/{team.id}/map/")
    live(alice)

    # Three agents, four conversations (#general, the direct one, the task's own, the side
    # thread), two tasks and the notes; nothing of Bob's private request.
    wait_for_js(alice, f"{MAP_NODES} === 10")
    kinds = alice.evaluate(
        "() => window.workMap.cy.nodes().map(n => n.data('kind')).sort().join(',')"
    )
    assert (
        kinds
        == "agent,agent,agent,artifact,conversation,conversation,conversation,task,task,thread"
    )
    labels = alice.evaluate("() => window.workMap.cy.nodes().map(n => n.data('label'))")
    assert not any("surprise" in label for label in labels)
    # The research waits on the write-up Scout handed to Quill.
    waits_on = alice.evaluate(
        "() => window.workMap.cy.edges('[kind = \"waits_on\"]').map(e => e.target().id())"
    )
    assert waits_on == [f"task:{write_up.id}"]
    expect(alice.locator("[data-map-count]")).to_have_text("10 nodes · 2 tasks")

    # A refresh that changes nothing leaves every node where it was: the person may be aiming.
    where = "() => JSON.stringify(window.workMap.cy.nodes().map(n => [n.id(), n.position()]))"
    placed = alice.evaluate(where)
    loads = alice.evaluate("() => window.workMap.loads()")
    alice.evaluate(
        "() => document.dispatchEvent(new CustomEvent('live:event', "
        "{detail: {type: 'live.connected'}}))"
    )
    wait_for_js(alice, f"() => window.workMap.loads() > {loads}")
    assert alice.evaluate(where) == placed

    # Clicking the write-up task shows what it is, with a link to its page.
    node = f"task:{write_up.id}"
    point = alice.evaluate(
        """id => {
          const box = window.workMap.cy.container().getBoundingClientRect();
          const at = window.workMap.cy.getElementById(id).renderedPosition();
          return { x: box.left + at.x, y: box.top + at.y };
        }""",
        node,
    )
    alice.mouse.click(point["x"], point["y"])
    details = alice.locator("[data-map-details]")
    expect(details).to_contain_text("write up the tide tables")
    expect(details).to_contain_text("queued")
    expect(details).to_contain_text("By Scout")
    expect(details).to_contain_text("Quill works on this")
    expect(details.locator("[data-map-open]")).to_have_attribute(
        "href", f"/w/{team.id}/tasks/{write_up.id}/"
    )
    assert alice.evaluate("id => window.workMap.cy.getElementById(id).selected()", node)
    shot(alice, "map-01-desktop")

    # Bob, in his own session, asks Nova for something in #general: it appears on Alice's map.
    bob = live(log_in(chromium, server, "bob"))
    bob.goto(f"/w/{team.id}/c/{general.id}/")
    composer = bob.get_by_label("Message #general")
    composer.fill("/task @nova summarise this week's tide readings")
    composer.press("Enter")
    wait_for_js(alice, f"{MAP_NODES} === 11")
    assert alice.evaluate(
        "() => window.workMap.cy.nodes('[kind = \"task\"]').some(n => n.data('label').includes('summarise'))"
    )
    expect(alice.locator("[data-map-count]")).to_have_text("11 nodes · 3 tasks")
    # The task selected before the refresh stays selected, its details shown.
    expect(details).to_contain_text("write up the tide tables")

    # Picking Quill narrows the map to Quill's work: its task, who handed it over, where.
    alice.get_by_label("Agent", exact=True).select_option(label="Quill")
    wait_for_js(alice, f"{MAP_NODES} === 4")
    tasks = alice.evaluate("() => window.workMap.cy.nodes('[kind = \"task\"]').map(n => n.id())")
    assert tasks == [node]
    assert f"agent={quill.id}" in alice.url
    shot(alice, "map-02-agent-filter")

    # At phone width the graph stays on top, details and legend below.
    phone = live(log_in(chromium, server, "alice", viewport=PHONE))
    phone.goto(f"/w/{team.id}/map/")
    wait_for_js(phone, f"{MAP_NODES} === 11")
    shot(phone, "map-03-phone")
