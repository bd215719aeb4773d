"""Files attached to messages in an S3-compatible bucket (INT-4, docs/files.md "Storage"): the
same API as on local disk, with django-storages' S3Storage talking to a real S3 server on this
machine (moto's, over HTTP), so uploads, presigned URLs and downloads all cross the wire.

moto does not check the signature or the expiry of a presigned URL: what the bucket accepts is
not tested here, only that agntchat checks its own link before it hands out the bucket's.
"""

import hashlib
import os
import socket
import subprocess
import sys
from urllib.parse import parse_qs, urlsplit

import boto3
import httpx
import pytest
from django.conf import settings as django_settings
from django.core.files.storage import default_storage, storages
from django.test import Client, override_settings
from moto.server import ThreadedMotoServer
from storages.backends.s3 import S3Storage

from conversations.models import Attachment
from tests.conversations.test_files import PICTURE, upload, with_query

BUCKET = "agntchat-files"
CREDENTIALS = {"aws_access_key_id": "testing", "aws_secret_access_key": "testing"}


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture(scope="module")
def s3_server():
    """A real S3 server (moto's) on a free local port, for the module."""
    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.stop()


@pytest.fixture(scope="module")
def bucket_client(s3_server):
    client = boto3.client("s3", endpoint_url=s3_server, region_name="us-east-1", **CREDENTIALS)
    client.create_bucket(Bucket=BUCKET)
    return client


def keys(client) -> list[str]:
    return [o["Key"] for o in client.list_objects_v2(Bucket=BUCKET).get("Contents", [])]


@pytest.fixture
def s3(s3_server, bucket_client, tmp_path):
    """Django's default storage is the bucket for the test (an empty one), as settings.py makes
    it when AWS_STORAGE_BUCKET_NAME is set. Overriding STORAGES resets the cached storages
    (django/test/signals.py), and the FileField holds the lazy ``default_storage``, not a
    storage bound at import, so the model follows."""
    for key in keys(bucket_client):
        bucket_client.delete_object(Bucket=BUCKET, Key=key)
    media = tmp_path / "media"
    configured = {
        **django_settings.STORAGES,
        "default": {
            "BACKEND": "storages.backends.s3.S3Storage",
            "OPTIONS": {
                "bucket_name": BUCKET,
                "endpoint_url": s3_server,
                "access_key": "testing",
                "secret_key": "testing",
                "region_name": "us-east-1",
                "querystring_auth": True,
                "querystring_expire": django_settings.FILE_URL_MAX_AGE,
                "addressing_style": "path",
                "signature_version": "s3v4",  # as settings.py sets it
            },
        },
    }
    with override_settings(STORAGES=configured, AWS_STORAGE_BUCKET_NAME=BUCKET, MEDIA_ROOT=media):
        assert Attachment.file.field.storage is default_storage
        assert isinstance(storages["default"], S3Storage)
        assert default_storage.bucket_name == BUCKET
        yield bucket_client
    assert not isinstance(storages["default"], S3Storage)
    assert not media.exists(), "nothing goes to local disk while the bucket is the storage"


def posted(client, channel, name, content, claimed="application/octet-stream") -> dict:
    sent = upload(client, channel, name, content, claimed)
    assert sent.status_code == 201, sent.json()
    message = client.post(
        f"/api/v1/conversations/{channel.id}/messages/",
        {"body": "see", "attachments": [sent.json()["id"]]},
        format="json",
    )
    assert message.status_code == 201, message.json()
    [attached] = message.json()["attachments"]
    assert attached["id"] == sent.json()["id"]
    assert sent.json()["sha256"] == hashlib.sha256(content).hexdigest()
    return attached


def object_key(attached: dict) -> str:
    row = Attachment.objects.get(pk=attached["id"])
    return row.file.name


def test_upload_goes_to_the_bucket_and_the_link_redirects_to_a_presigned_url(
    alice, bob, channel, api, s3_server, s3
):
    # The client claims HTML: the type still comes from the name.
    attached = posted(api(alice), channel, "tide chart.png", PICTURE, "text/html")
    key = object_key(attached)
    assert key == f"attachments/{channel.workspace_id}/{attached['id']}/tide_chart.png"
    assert keys(s3) == [key]
    stored = s3.get_object(Bucket=BUCKET, Key=key)
    assert stored["Body"].read() == PICTURE
    head = s3.head_object(Bucket=BUCKET, Key=key)
    assert head["ContentLength"] == len(PICTURE) and head["ContentType"] == "image/png"

    # Bob reads the conversation and follows his own link: agntchat checks it, then sends him
    # to the bucket's presigned URL, which answers with the bytes, the type and disposition.
    history = api(bob).get(f"/api/v1/conversations/{channel.id}/messages/").json()
    [listed] = history["results"][0]["attachments"]
    got = Client().get(listed["url"])
    assert got.status_code == 302
    location = got["Location"]
    parts = urlsplit(location)
    assert f"{parts.scheme}://{parts.netloc}" == s3_server
    assert parts.path == f"/{BUCKET}/{key}"
    query = parse_qs(parts.query)
    assert query["response-content-type"] == ["image/png"]
    assert query["response-content-disposition"] == ["inline; filename*=UTF-8''tide_chart.png"]
    assert "X-Amz-Signature" in query  # SigV4
    fetched = httpx.get(location)
    assert fetched.status_code == 200
    assert fetched.content == PICTURE
    assert fetched.headers["content-type"] == "image/png"
    assert fetched.headers["content-disposition"].startswith("inline")

    # Not a picture or a PDF: saved, not opened. The fresh link of the file endpoint works too.
    notes = posted(api(bob), channel, "notes.txt", b"high water 14:02\n")
    fresh = api(bob).get(f"/api/v1/files/{notes['id']}/").json()["url"]
    fetched = httpx.get(Client().get(fresh)["Location"])
    assert fetched.content == b"high water 14:02\n"
    assert fetched.headers["content-disposition"] == "attachment; filename*=UTF-8''notes.txt"
    assert sorted(keys(s3)) == sorted([key, object_key(notes)])


def test_a_bad_link_or_a_file_gone_is_a_404_without_a_redirect(alice, channel, api, s3):
    attached = posted(api(alice), channel, "tide.png", PICTURE)
    url = attached["url"]
    assert Client().get(url).status_code == 302
    signature = parse_qs(urlsplit(url).query)["s"][0]
    expiry = int(parse_qs(urlsplit(url).query)["e"][0])
    for bad in (
        with_query(url, s=signature[:-2] + "xx"),
        with_query(url, e=expiry + 3600),
        url.split("?")[0],
    ):
        got = Client().get(bad)
        assert got.status_code == 404, bad
        assert not got.has_header("Location")
    # The object deleted from the bucket: the row's link no longer leads anywhere.
    s3.delete_object(Bucket=BUCKET, Key=object_key(attached))
    got = Client().get(url)
    assert got.status_code == 404
    assert not got.has_header("Location")


def test_a_refused_upload_leaves_nothing_in_the_bucket(alice, channel, api, s3):
    # Nested inside the fixture's override (pytest-django's `settings` would be undone after
    # it, and put the bucket's settings back for the tests that follow).
    with override_settings(FILE_UPLOAD_MAX_SIZE=1000):
        for size in (1001, 200_000):
            refused = upload(api(alice), channel, "big.txt", b"x" * size)
            assert refused.status_code == 413, size
    for name in ("page.html", "logo.svg", "run"):
        refused = upload(api(alice), channel, name, b"<script>alert(1)</script>", "image/png")
        assert refused.status_code == 415, name
    assert Attachment.objects.count() == 0
    assert keys(s3) == []


SAVE_THROUGH_SETTINGS = """
from django.conf import settings
from django.core.files.base import ContentFile
from django.core.files.storage import default_storage
from conversations.models import Attachment

assert settings.STORAGES["default"]["BACKEND"] == "storages.backends.s3.S3Storage"
assert settings.AWS_QUERYSTRING_EXPIRE == settings.FILE_URL_MAX_AGE == 600
assert Attachment.file.field.storage.bucket_name == "agntchat-files"
name = default_storage.save("from-settings/hello.txt", ContentFile(b"hello"))
print(default_storage.url(name))
"""


def test_the_documented_environment_reaches_the_bucket(s3_server, s3):
    """settings.py as shipped, configured only by the environment docs/files.md names."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env |= {
        "DJANGO_SETTINGS_MODULE": "agntchat.settings",
        "AWS_STORAGE_BUCKET_NAME": BUCKET,
        "AWS_S3_ENDPOINT_URL": s3_server,
        "AWS_S3_REGION_NAME": "us-east-1",
        "AWS_S3_ADDRESSING_STYLE": "path",
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "FILE_URL_MAX_AGE": "600",
    }
    code = "import django; django.setup()\n" + SAVE_THROUGH_SETTINGS
    done = subprocess.run(
        [sys.executable, "-c", code],
        env=env,
        cwd=django_settings.BASE_DIR,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert keys(s3) == ["from-settings/hello.txt"]
    assert httpx.get(done.stdout.strip()).content == b"hello"
