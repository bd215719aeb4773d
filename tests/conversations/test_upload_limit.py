"""Uploads are limited in megabytes per uploader (UPLOAD_MB_PER_HOUR, UPLOAD_MB_BURST), in the
real Redis: an upload not yet posted stays on disk for a day, so without it any member or agent
could fill the disk. Past the limit: 429 with Retry-After, and nothing stored."""

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile

from agntchat.core.exceptions import RateLimited
from conversations.actions import upload_attachment
from conversations.models import Attachment

pytestmark = pytest.mark.django_db

MB = 1024 * 1024


@pytest.fixture(autouse=True)
def media(settings, tmp_path):
    settings.MEDIA_ROOT = tmp_path / "media"
    settings.UPLOAD_MB_PER_HOUR, settings.UPLOAD_MB_BURST = 4, 4
    return settings.MEDIA_ROOT


def upload(client, conversation, size):
    return client.post(
        f"/api/v1/conversations/{conversation.id}/files/",
        {"file": SimpleUploadedFile("notes.txt", b"x" * size, content_type="text/plain")},
        format="multipart",
    )


def test_an_uploader_gets_so_many_megabytes_and_then_a_429(alice, bob, nova, channel, api, media):
    assert upload(api(alice), channel, 2 * MB).status_code == 201  # counts 2
    assert upload(api(alice), channel, 10).status_code == 201  # a small file counts 1
    refused = upload(api(alice), channel, 2 * MB)  # 2 more: past the 4
    assert refused.status_code == 429, refused.content
    assert refused.json()["error"]["code"] == "rate_limited"
    assert "uploads" in refused.json()["error"]["message"] and int(refused["Retry-After"]) >= 1
    assert Attachment.objects.filter(uploaded_by_user=alice).count() == 2
    assert len([p for p in media.rglob("*") if p.is_file()]) == 2  # no bytes for the refused one
    # Each person has their own: Bob is not held up by Alice. Her agent Nova counts as her, or
    # she could multiply her allowance by making agents.
    assert upload(api(bob), channel, 2 * MB).status_code == 201
    with pytest.raises(RateLimited):
        upload_attachment(nova, channel, SimpleUploadedFile("a.txt", b"x" * (2 * MB)))


def test_artifact_versions_and_skills_draw_on_the_same_budget(alice, channel, nova, media):
    """Artifact versions and skills are stored too (up to 500 KB and 256 KB each): without a
    budget a person stored hundreds of megabytes of them in minutes."""
    from artifacts.actions import publish_artifact, update_artifact
    from work import skills

    artifact = publish_artifact(nova, channel, "Plan", "markdown", "x" * 500_000)  # 8 × 64 KB
    for n in range(6):
        update_artifact(alice, artifact, str(n) * 500_000)
    package = skills.parse_skill_md("---\nname: notes\ndescription: Notes.\n---\nBody.")
    skills.create_skill(alice, package)  # 57 of the 64 × 64 KB in 4 MB
    with pytest.raises(RateLimited, match="artifact versions"):
        update_artifact(nova, artifact, "z" * 500_000)


def test_small_writes_count_their_size_not_a_megabyte_each(alice, channel, nova, media):
    # An agent editing a short document often: each version counted a whole megabyte, so the
    # fifth small edit within the hour was refused.
    from artifacts.actions import publish_artifact, update_artifact

    artifact = publish_artifact(nova, channel, "Notes", "markdown", "v0")
    for n in range(1, 40):
        update_artifact(nova, artifact, f"v{n}")
    assert artifact.versions.count() == 40
