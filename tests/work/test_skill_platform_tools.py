"""Tools only the platform grants (probe F9): ``pulse_report`` comes with a pulse and
``loop_report`` with a loop, never with a skill naming them, nor with a clone's copy of such a
skill; the skill's other tools are granted as before. Alice owns Nova; Bob clones."""

import pytest

from agents import actions as agent_actions
from routines import actions as routine_actions
from work import directory, skills
from work.models import AgentListing, ToolGrant
from work.tools.registry import GRANTED_BY_PLATFORM_ONLY, REGISTRY, granted_tools

pytestmark = pytest.mark.django_db

CHECKS = (
    "---\nname: status-checks\ndescription: Check the services and report.\n"
    "allowed-tools: [pulse_report, loop_report, gmail_read]\n---\n# Checks\nLook around.\n"
)


def holds(agent) -> set[str]:
    return {t.name for t in granted_tools(agent)}


def test_the_list_names_registered_tools_no_agent_holds_by_default():
    assert GRANTED_BY_PLATFORM_ONLY == {"pulse_report", "loop_report"}
    assert all(not REGISTRY[name].platform for name in GRANTED_BY_PLATFORM_ONLY)


def test_a_skill_grants_its_tools_but_not_the_platform_only_ones(alice, nova, api):
    made = api(alice).post(
        "/api/v1/skills/", {"skillMd": CHECKS, "agent": str(nova.id)}, format="json"
    )
    assert made.status_code == 201, made.json()
    assert made.json()["grantedTools"] == ["gmail_read"]
    assert made.json()["allowedTools"] == ["pulse_report", "loop_report", "gmail_read"]
    assert "gmail_read" in holds(nova)
    assert not holds(nova) & GRANTED_BY_PLATFORM_ONLY
    assert not ToolGrant.objects.filter(tool__in=GRANTED_BY_PLATFORM_ONLY).exists()


def test_changing_a_skill_to_name_them_grants_neither(alice, nova):
    skill = skills.create_skill(
        alice, skills.parse_skill_md(CHECKS.replace("pulse_report, loop_report, ", "")), agent=nova
    )
    changed = skills.update_skill(alice, skill, skills.parse_skill_md(CHECKS))
    assert changed.granted_tools == []  # gmail_read was held already
    assert not holds(nova) & GRANTED_BY_PLATFORM_ONLY


def test_a_clone_of_an_agent_with_such_a_skill_gets_neither(alice, bob, nova):
    skills.create_skill(alice, skills.parse_skill_md(CHECKS), agent=nova)
    directory.publish_agent(alice, nova, description="Checks the services.")
    clone = directory.clone_listing(bob, AgentListing.objects.get(agent=nova))
    assert "gmail_read" in holds(clone)
    assert not holds(clone) & GRANTED_BY_PLATFORM_ONLY


def test_a_pulse_still_gives_its_tool(alice, team_a):
    rover = agent_actions.create_agent(alice, name="Rover", backend="scripted")
    skills.create_skill(alice, skills.parse_skill_md(CHECKS), agent=rover)
    routine_actions.create_routine(
        alice, rover, team_a, name="", instructions="", interval_minutes=60, checklist=["Deploys"]
    )
    assert "pulse_report" in holds(rover) and "loop_report" not in holds(rover)
