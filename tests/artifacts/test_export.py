"""The workspace archive (artifacts/export.py): its owner downloads a zip of the conversations
they can read and every artifact version, with a manifest, recorded in the audit log. Bob, a
member, is refused; Charlie, of another workspace, finds nothing there."""

import io
import json
import zipfile

import pytest
from django.test import Client

from agents.actions import create_agent
from artifacts import actions as artifact_actions
from conversations.actions import open_direct, post_message
from conversations.models import Conversation
from tests.conftest import client_for
from workspaces.models import AuditEntry

pytestmark = pytest.mark.django_db


def url(workspace) -> str:
    return f"/api/v1/workspaces/{workspace.id}/export/"


def archive_of(response) -> zipfile.ZipFile:
    assert response.status_code == 200, response.content
    assert response["Content-Type"] == "application/zip"
    assert response["Content-Disposition"].startswith('attachment; filename="team-a-')
    return zipfile.ZipFile(io.BytesIO(b"".join(response.streaming_content)))


@pytest.fixture
def history(alice, bob, team_a, channel, nova):
    hello = post_message(alice, channel, "Hello team, the plan is ready.")
    create_agent(alice, name="Rex", handle="rex", backend="scripted")
    answer = post_message(nova, channel, 'Noted.\n<dm target="Rex">Can you check the costs?</dm>')
    artifact = artifact_actions.publish_artifact(nova, channel, "The plan", "markdown", "# v1")
    artifact_actions.update_artifact(alice, artifact, "# v2, with costs", note="costs")
    # Bob's direct conversation with Nova is his, not the owner's to read.
    bobs, _ = open_direct(bob, team_a, agent_ids=[nova.id])
    post_message(bob, bobs, "Just between us.")
    thread = Conversation.objects.get(parent_message=answer)
    return {"hello": hello, "answer": answer, "artifact": artifact, "thread": thread}


def test_the_owner_downloads_conversations_artifacts_and_a_manifest(alice, team_a, history):
    archive = archive_of(client_for(alice).get(url(team_a)))
    manifest = json.loads(archive.read("manifest.json"))
    assert manifest["format"] == "agntchat-export" and manifest["workspace"]["name"] == "Team A"
    assert manifest["exported_by"]["username"] == "alice"
    listed = {c["id"]: c for c in manifest["conversations"]}
    general = next(c for c in manifest["conversations"] if c["title"] == "general")
    assert set(listed) == {str(history["hello"].conversation_id), str(history["thread"].id)}
    assert set(archive.namelist()) >= {general["file"], general["transcript"]}

    conversation = json.loads(archive.read(general["file"]))
    messages = conversation["messages"]
    assert general["messages"] == len(messages) >= 3
    first = messages[0]
    assert first["body"] == "Hello team, the plan is ready." and first["author"]["name"] == "alice"
    assert first["created_at"].startswith(history["hello"].created_at.date().isoformat())
    answer = next(m for m in messages if m["id"] == str(history["answer"].id))
    assert answer["author"] == {
        "type": "agent", "id": str(history["answer"].author_agent_id), "name": "Nova",
        "handle": "nova",
    }  # fmt: skip
    assert answer["threads"] == [str(history["thread"].id)]
    thread_entry = listed[str(history["thread"].id)]
    thread = json.loads(archive.read(thread_entry["file"]))
    assert thread["parent_message"] == str(history["answer"].id)
    assert thread["messages"][0]["body"] == "Can you check the costs?"

    transcript = archive.read(general["transcript"]).decode()
    assert transcript.startswith("# general")
    assert "**alice** ·" in transcript and "Hello team, the plan is ready." in transcript
    assert f"→ side thread `{history['thread'].id}`" in transcript

    (entry,) = manifest["artifacts"]
    assert entry["title"] == "The plan" and entry["versions"] == 2
    assert archive.read(f"{entry['folder']}/v1.md").decode() == "# v1"
    assert archive.read(f"{entry['folder']}/v2.md").decode() == "# v2, with costs"
    about = json.loads(archive.read(f"{entry['folder']}/artifact.json"))
    assert [v["note"] for v in about["versions"]] == ["", "costs"]
    assert about["versions"][1]["author"]["name"] == "alice"
    # Nothing of Bob's private conversation.
    assert not any(b"Just between us" in archive.read(n) for n in archive.namelist())

    (audit,) = AuditEntry.objects.filter(action="workspace.exported")
    assert audit.workspace_id == team_a.id and audit.actor_user == alice
    assert audit.details == {"conversations": 2, "artifacts": 1}


def test_the_settings_page_offers_the_owner_the_archive(alice, bob, team_a):
    owner, member = Client(), Client()
    owner.force_login(alice)
    member.force_login(bob)
    link = f'href="{url(team_a)}" download'
    assert link in owner.get(f"/w/{team_a.id}/members/").content.decode()
    assert link not in member.get(f"/w/{team_a.id}/members/").content.decode()
    # The page's link, with the person's session.
    assert zipfile.is_zipfile(io.BytesIO(b"".join(owner.get(url(team_a)).streaming_content)))


def test_a_member_who_is_not_the_owner_is_refused(bob, team_a, history):
    response = client_for(bob).get(url(team_a))
    assert response.status_code == 403
    assert response.json()["error"]["code"] == "not_allowed"
    assert not AuditEntry.objects.filter(action="workspace.exported").exists()


def test_another_workspaces_user_gets_404(charlie, team_a, team_b, history):
    response = client_for(charlie).get(url(team_a))
    assert response.status_code == 404
    assert response.json()["error"]["code"] == "workspace_not_found"
    assert not AuditEntry.objects.filter(action="workspace.exported").exists()
    # Charlie's own workspace, empty, still exports.
    archive = zipfile.ZipFile(
        io.BytesIO(b"".join(client_for(charlie).get(url(team_b)).streaming_content))
    )
    assert json.loads(archive.read("manifest.json"))["conversations"] == []
