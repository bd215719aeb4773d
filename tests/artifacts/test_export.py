"""The workspace archive (artifacts/export.py): its owner downloads a zip of the conversations
they can read, every artifact version and the files attached to their messages, with a manifest,
recorded in the audit log. Bob, a member, is refused; Charlie, of another workspace, finds nothing
there."""

import hashlib
import io
import json
import os
import tracemalloc
import zipfile

import pytest
from django.test import Client

from agents.actions import create_agent
from artifacts import actions as artifact_actions
from conversations.actions import open_direct, post_message
from conversations.models import Conversation
from tests.conftest import client_for
from tests.conversations.test_files import PICTURE, upload
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


# ---- attached files --------------------------------------------------------------------------


@pytest.fixture
def media(settings, tmp_path):
    settings.MEDIA_ROOT = tmp_path / "media"
    return settings.MEDIA_ROOT


def post_with_files(api, who, conversation, *files) -> dict:
    ids = [upload(api(who), conversation, name, content).json()["id"] for name, content in files]
    posted = api(who).post(
        f"/api/v1/conversations/{conversation.id}/messages/",
        {"body": "Files", "attachments": ids},
        format="json",
    )
    assert posted.status_code == 201, posted.json()
    return posted.json()


def test_the_archive_holds_the_attached_files_byte_for_byte(
    api, alice, bob, team_a, channel, nova, media
):
    notes = b"month,total\n2026-11,41\n"
    posted = post_with_files(api, alice, channel, ("tide chart.png", PICTURE), ("notes.csv", notes))
    picture_id, notes_id = [a["id"] for a in posted["attachments"]]
    # Not in the archive: an upload never posted, and a file in Bob's private conversation.
    upload(api(alice), channel, "draft.csv", b"unposted\n")
    bobs, _ = open_direct(bob, team_a, agent_ids=[nova.id])
    post_with_files(api, bob, bobs, ("secret.csv", b"just between us\n"))

    archive = archive_of(client_for(alice).get(url(team_a)))
    manifest = json.loads(archive.read("manifest.json"))
    listed = {entry["id"]: entry for entry in manifest["attachments"]}
    assert set(listed) == {picture_id, notes_id}
    picture = listed[picture_id]
    assert picture["file"] == f"attachments/{picture_id}/tide_chart.png"
    assert archive.read(picture["file"]) == PICTURE
    assert picture["sha256"] == hashlib.sha256(PICTURE).hexdigest()
    assert (picture["size"], picture["content_type"]) == (len(PICTURE), "image/png")
    assert picture["message"] == posted["id"] and picture["conversation"] == str(channel.id)
    assert archive.read(listed[notes_id]["file"]) == notes
    files = [n for n in archive.namelist() if n.startswith("attachments/")]
    assert sorted(files) == sorted(entry["file"] for entry in listed.values())

    # The message points at its files in the archive; the transcript links them.
    general = next(c for c in manifest["conversations"] if c["title"] == "general")
    [message] = json.loads(archive.read(general["file"]))["messages"]
    refs = message["payload"]["attachments"]
    assert [(r["id"], r["file"]) for r in refs] == [
        (picture_id, picture["file"]),
        (notes_id, listed[notes_id]["file"]),
    ]
    transcript = archive.read(general["transcript"]).decode()
    assert f"📎 [tide_chart.png]({picture['file']})" in transcript
    assert not any(b"just between us" in archive.read(n) for n in archive.namelist())


def test_files_are_copied_into_the_archive_a_chunk_at_a_time(api, alice, team_a, channel, media):
    """Three files of 4 MB: building the archive never holds a whole one in memory."""
    size = 4 * 1024 * 1024
    contents = [os.urandom(size) for _ in range(3)]  # random: deflate cannot shrink them
    post_with_files(api, alice, channel, *((f"scan-{i}.pdf", c) for i, c in enumerate(contents)))
    client = client_for(alice)
    tracemalloc.start()
    try:
        response = client.get(url(team_a))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < size // 2, peak
    archive = archive_of(response)
    manifest = json.loads(archive.read("manifest.json"))
    stored = sorted(archive.read(entry["file"]) for entry in manifest["attachments"])
    assert stored == sorted(contents)
