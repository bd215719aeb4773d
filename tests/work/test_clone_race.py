"""Clones of one listing made at the same moment by one person (probe F8): each gets its own
handle, numbered as docs/directory.md says, instead of a 409 for all but the first. Alice
publishes Scout; Bob clones it from several requests at once."""

import pytest

from agents import actions as agent_actions
from agents.models import Agent
from tests.concurrency import run_together
from work import directory, skills
from work.models import AgentClone, AgentListing

pytestmark = pytest.mark.django_db(transaction=True)

AT_ONCE = 6


@pytest.fixture
def listing(alice):
    scout = agent_actions.create_agent(alice, name="Scout", handle="scout", backend="scripted")
    # A skill to copy keeps each clone's transaction open a little longer: a wider race.
    skill_md = "---\nname: cite-sources\ndescription: Cite every source.\n---\n# Cite\nSteps.\n"
    skills.create_skill(alice, skills.parse_skill_md(skill_md), agent=scout)
    directory.publish_agent(alice, scout, description="Finds sources.")
    return AgentListing.objects.get(agent=scout)


def test_clones_made_at_once_each_take_the_next_free_handle(bob, listing):
    # An exception in the list is what a 409 (or a 500) would have been.
    made = run_together(
        lambda: directory.clone_listing(bob, listing).handle, [()] * AT_ONCE, catching=Exception
    )
    assert [m for m in made if isinstance(m, Exception)] == []
    expected = ["scout"] + [f"scout-{n}" for n in range(2, AT_ONCE + 1)]
    assert sorted(made) == sorted(expected)
    assert sorted(Agent.objects.filter(owner=bob).values_list("handle", flat=True)) == sorted(
        expected
    )
    assert AgentClone.objects.filter(cloned_by=bob).count() == AT_ONCE


def test_a_handle_asked_for_by_clones_at_once_goes_to_one_and_the_others_get_409(bob, listing):
    """A handle the cloner chose is not renumbered: only a free one is."""
    made = run_together(
        lambda: directory.clone_listing(bob, listing, handle="mine").handle,
        [()] * 3,
        catching=Exception,
    )
    handles = [m for m in made if isinstance(m, str)]
    refused = [m for m in made if not isinstance(m, str)]
    assert handles == ["mine"]
    assert [e.code for e in refused] == ["handle_taken", "handle_taken"]
    assert Agent.objects.filter(owner=bob).count() == 1
