"""Probes of what agents do with tools: memory and skills under attack and under a demanding user.
Alice owns Nova; Nova works in Team A and in Alice's Team C; Charlie, in Team B, sees nothing."""

import base64
import io
import zipfile

import pytest

from agents import actions as agent_actions
from conversations.actions import create_conversation
from tests.work.tooling import held_message
from work import actions as work_actions
from work import approvals, memory, skills
from work.models import MemoryItem, PermissionRequest, Skill, ToolCall
from work.tools.registry import NO_ARGUMENTS, REGISTRY, Tool, register
from workspaces import actions as workspace_actions
from workspaces.models import Notification

pytestmark = pytest.mark.django_db


@pytest.fixture
def team_c_room(alice, nova):
    """A channel of Alice's other team, Team C, where Nova works too."""
    team_c = workspace_actions.create_team_workspace(alice, "Team C")
    return create_conversation(alice, team_c, kind="channel", title="c", agent_ids=[nova.id])


def test_an_agent_forgets_only_what_it_learned_in_the_workspace_it_works_in(
    alice, channel, nova, team_c_room
):
    learned_in_a = memory.remember(nova, channel.workspace_id, "Team A's launch is on Monday")
    held = held_message(nova, team_c_room, alice)
    error = held.error("memory_forget", {"memory_id": str(learned_in_a.id)})
    assert error["code"] == "memory_not_found"
    assert MemoryItem.objects.get(pk=learned_in_a.pk).archived_at is None


def test_a_skill_name_with_a_trailing_newline_is_refused():
    text = '---\nname: "inbox\\n"\ndescription: Sort an inbox.\n---\nSteps.\n'
    with pytest.raises(skills.SkillInvalid):
        skills.parse_skill_md(text)


def test_changing_a_zipped_skills_instructions_keeps_its_files(alice, api):
    front = "---\nname: triage\ndescription: Sort an inbox. Use for email.\n---\n"
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("triage/SKILL.md", front + "See [ref](references/REF.md).\n")
        archive.writestr("triage/references/REF.md", "The reference.")
    client = api(alice)
    made = client.post(
        "/api/v1/skills/",
        {"package": base64.b64encode(buffer.getvalue()).decode()},
        format="json",
    )
    assert made.status_code == 201 and made.json()["files"] == ["references/REF.md"]
    changed = client.patch(
        f"/api/v1/skills/{made.json()['id']}/",
        {"skillMd": front + "Read [ref](references/REF.md) first.\n"},
        format="json",
    )
    assert changed.status_code == 200 and changed.json()["files"] == ["references/REF.md"]
    skill = Skill.objects.get()
    assert skill.files == {"references/REF.md": "The reference."}
    assert skill.body == "Read [ref](references/REF.md) first."


def asked_in(channel, alice, nova):
    """Nova's call to ``done`` in CHANNEL, waiting for a person (Alice set it to ask)."""
    work_actions.set_agent_permission(alice, nova, REGISTRY["done"], "ask")
    answer = held_message(nova, channel, alice).call("done", {})
    assert answer.pending is not None
    return PermissionRequest.objects.get(pk=answer.pending["request_id"])


def test_a_request_ends_when_its_agent_no_longer_works_where_it_asked(
    alice, channel, nova, team_c_room
):
    request = asked_in(channel, alice, nova)
    agent_actions.set_agent_pins(nova, [team_c_room.workspace_id])
    request.refresh_from_db()
    assert request.status == "expired"
    (item,) = Notification.objects.filter(user=alice, target_id=request.pk)
    assert item.read_at is not None
    assert item.text == "Nova asked to use done: its agent no longer works in this workspace"
    assert approvals.decidable(alice, [request.pk]) == set()


def test_a_deleted_agents_requests_ask_nobody_any_more(alice, channel, nova):
    request = asked_in(channel, alice, nova)
    agent_actions.delete_agent(nova)
    (item,) = Notification.objects.filter(user=alice, target_id=request.pk)
    assert item.read_at is not None and "approve or deny" not in item.text


@pytest.fixture
def raw_tool():
    """A tool whose output, like a fetched page's, holds what PostgreSQL cannot store."""
    tool = register(
        Tool("test_raw", "Give raw text.", NO_ARGUMENTS, "read", lambda c, a: "a\x00b\ud800c")
    )
    yield tool
    REGISTRY.pop(tool.name, None)


def test_an_output_postgresql_cannot_store_still_reaches_the_model_and_is_recorded(
    alice, channel, nova, raw_tool
):
    answer = held_message(nova, channel, alice).call("test_raw")
    assert answer.ok and answer.output == "a\ufffdb\ufffdc"
    call = ToolCall.objects.get(tool="test_raw")
    assert (call.status, call.output) == ("succeeded", "a\ufffdb\ufffdc")


def test_data_with_a_lone_surrogate_is_recorded_too(alice, channel, nova):
    tool = register(
        Tool("test_raw_data", "Data.", NO_ARGUMENTS, "read", lambda c, a: {"t": "\ud800"})
    )
    try:
        answer = held_message(nova, channel, alice).call("test_raw_data")
    finally:
        REGISTRY.pop(tool.name, None)
    assert answer.ok and answer.output == '{"t": "\ufffd"}'


def test_a_skill_md_over_the_size_limit_in_bytes_is_refused(alice, api):
    front = "---\nname: wide\ndescription: Wide letters.\n---\n"
    text = front + "é" * (skills.MAX_PACKAGE_BYTES // 2)  # within the limit in characters
    refused = api(alice).post("/api/v1/skills/", {"skillMd": text}, format="json")
    assert refused.status_code == 400 and refused.json()["error"]["code"] == "skill_invalid"
    assert "256 KB" in refused.json()["error"]["message"]
    assert not Skill.objects.exists()


def test_a_call_nobody_who_may_approve_can_see_is_refused_at_once_saying_why(
    alice, bob, team_a, nova
):
    """Bob talks with Nova alone: Alice, its owner and Team A's owner, cannot read that."""
    bobs_dm = create_conversation(bob, team_a, kind="direct", agent_ids=[nova.id])
    work_actions.set_agent_permission(alice, nova, REGISTRY["done"], "ask")
    answer = held_message(nova, bobs_dm, bob).call("done", {})
    assert answer.pending is None and answer.error["code"] == "approval_unreachable"
    assert "nothing was done" in answer.error["message"]
    assert not PermissionRequest.objects.exists()
    assert ToolCall.objects.get().status == "failed"
    assert not Notification.objects.filter(kind="approval").exists()
