"""An agent is told which files a message carries and reads a text file's content with
file_read; a file of a conversation it is not in is not found."""

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile

from conversations.actions import create_conversation, post_message, upload_attachment
from tests.conftest import directives_for
from tests.work.tooling import held_message

pytestmark = pytest.mark.django_db


def attach(user, conversation, name, content: bytes, text="see attached"):
    upload = upload_attachment(user, conversation, SimpleUploadedFile(name, content))
    return post_message(user, conversation, text, attachments=[str(upload.id)]), upload


def test_the_agent_is_told_of_the_files_and_reads_a_text_one(alice, channel, nova):
    message, upload = attach(alice, channel, "figures.csv", b"month,total\njan,12\nfeb,30\n")
    given = directives_for(nova, message)
    line = f"- figures.csv (text/csv, {upload.size} bytes), id {upload.id}"
    assert line in given["volatile"] and line in given["prompt"]
    output = held_message(nova, channel, alice).output("file_read", {"file_id": str(upload.id)})
    assert output["text"] == "month,total\njan,12\nfeb,30\n"
    assert output["name"] == "figures.csv" and output["url"].startswith(f"/files/{upload.id}/")


def test_a_picture_is_described_not_read(alice, channel, nova):
    png = b"\x89PNG\r\n\x1a\n" + b"\x00" * 64
    _, upload = attach(alice, channel, "chart.png", png)
    output = held_message(nova, channel, alice).output("file_read", {"file_id": str(upload.id)})
    assert output["content_type"] == "image/png" and "text" not in output


def test_a_file_of_another_conversation_is_not_found(alice, bob, team_a, channel, nova):
    private = create_conversation(alice, team_a, kind="channel", title="private")
    _, upload = attach(alice, private, "secret.txt", b"the launch date")
    error = held_message(nova, channel, alice).error("file_read", {"file_id": str(upload.id)})
    assert error["code"] == "file_not_found", error
    assert "launch" not in str(error)


def test_a_file_of_another_workspace_is_not_found_even_where_the_agent_sees_it(
    alice, channel, nova
):
    """Nova is in Alice's personal workspace too, and sees the file there; but what a call
    gives is kept with team A's work, for team A's people to read."""
    from workspaces.models import Workspace

    personal = Workspace.objects.get(owner=alice, kind=Workspace.Kind.PERSONAL)
    direct = create_conversation(alice, personal, kind="channel", title="mine", agent_ids=[nova.id])
    _, upload = attach(alice, direct, "secret.txt", b"the launch date")
    assert held_message(nova, direct, alice).output("file_read", {"file_id": str(upload.id)})
    error = held_message(nova, channel, alice).error("file_read", {"file_id": str(upload.id)})
    assert error["code"] == "file_not_found", error
    assert "launch" not in str(error)
