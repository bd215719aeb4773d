"""Stored bytes follow their rows: an upload nobody posts is deleted after its hours, and a file
whose message or conversation is deleted leaves nothing on disk."""

from datetime import timedelta

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.utils import timezone

from conversations import files, jobs
from conversations.actions import post_message, upload_attachment
from conversations.models import Attachment

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def media(settings, tmp_path):
    settings.MEDIA_ROOT = tmp_path / "media"
    return settings.MEDIA_ROOT


def on_disk(media) -> list:
    return sorted(p.name for p in media.rglob("*") if p.is_file()) if media.exists() else []


def uploaded(user, conversation, name):
    return upload_attachment(user, conversation, SimpleUploadedFile(name, b"month,total\n"))


def test_an_upload_never_posted_is_deleted_after_its_hours(alice, channel, media, settings):
    kept = uploaded(alice, channel, "posted.csv")
    post_message(alice, channel, "the figures", attachments=[str(kept.id)])
    uploaded(alice, channel, "fresh.csv")
    stale = uploaded(alice, channel, "stale.csv")
    Attachment.objects.filter(pk=stale.pk).update(created_at=timezone.now() - timedelta(hours=25))
    assert on_disk(media) == ["fresh.csv", "posted.csv", "stale.csv"]
    assert jobs.delete_unposted_files() == 1
    assert set(Attachment.objects.values_list("name", flat=True)) == {"posted.csv", "fresh.csv"}
    assert on_disk(media) == ["fresh.csv", "posted.csv"]
    # The posted one stays however old it is.
    Attachment.objects.update(created_at=timezone.now() - timedelta(days=30))
    assert files.delete_unposted(timezone.now()) == 1
    assert on_disk(media) == ["posted.csv"]


def test_deleting_a_conversation_deletes_its_files_bytes(alice, channel, media):
    upload = uploaded(alice, channel, "posted.csv")
    post_message(alice, channel, "the figures", attachments=[str(upload.id)])
    assert on_disk(media) == ["posted.csv"]
    channel.delete()
    assert not Attachment.objects.exists() and on_disk(media) == []
