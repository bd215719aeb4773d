"""Files attached to messages (INT-4): uploaded, posted with a message, downloaded through signed
links that expire; refused uploads store nothing; another workspace sees nothing; an agent gets
the files in its work and answers with one of its own."""

import struct
import zlib
from urllib.parse import parse_qs, urlsplit

import pytest
from asgiref.sync import sync_to_async
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client
from rest_framework.test import APIClient

from conversations import actions
from conversations.models import Attachment, Message
from tests.conftest import agent_session
from tests.socket_helpers import agent_communicator, frames_until, live_socket_for, next_frame


def png(width=4, height=3, rgb=(30, 120, 200)) -> bytes:
    """A real PNG of one colour (no imaging library needed)."""

    def chunk(kind, data):
        return (
            struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
        )

    rows = b"".join(b"\x00" + bytes(rgb) * width for _ in range(height))
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(rows))
        + chunk(b"IEND", b"")
    )


PICTURE = png()


@pytest.fixture(autouse=True)
def media(settings, tmp_path):
    settings.MEDIA_ROOT = tmp_path / "media"
    return settings.MEDIA_ROOT


def stored_files(media) -> list:
    return [p for p in media.rglob("*") if p.is_file()] if media.exists() else []


def upload(client, conversation, name, content, content_type="application/octet-stream"):
    return client.post(
        f"/api/v1/conversations/{conversation.id}/files/",
        {"file": SimpleUploadedFile(name, content, content_type=content_type)},
        format="multipart",
    )


def download(url):
    return Client().get(url)


def content_of(response) -> bytes:
    return b"".join(response.streaming_content)


def test_upload_post_and_download_round_trip(alice, bob, channel, api, media):
    sent = upload(api(alice), channel, "tide chart.png", PICTURE, "image/png")
    assert sent.status_code == 201, sent.json()
    uploaded = sent.json()
    assert uploaded["name"] == "tide_chart.png"
    assert (uploaded["size"], uploaded["contentType"]) == (len(PICTURE), "image/png")

    posted = api(alice).post(
        f"/api/v1/conversations/{channel.id}/messages/",
        {"body": "Today's tides", "attachments": [uploaded["id"]]},
        format="json",
    )
    assert posted.status_code == 201, posted.json()
    [attached] = posted.json()["attachments"]
    assert attached["id"] == uploaded["id"] and attached["inline"] is True
    assert "attachments" not in posted.json()["payload"]
    row = Attachment.objects.get(pk=uploaded["id"])
    assert str(row.message_id) == posted.json()["id"]

    # Bob reads the conversation: the file is there with a link of his own, which works.
    history = api(bob).get(f"/api/v1/conversations/{channel.id}/messages/").json()
    [message] = history["results"]
    [listed] = message["attachments"]
    assert listed["name"] == "tide_chart.png" and listed["size"] == len(PICTURE)
    got = download(listed["url"])
    assert got.status_code == 200
    assert content_of(got) == PICTURE
    assert got["Content-Type"] == "image/png"
    assert got["X-Content-Type-Options"] == "nosniff"
    assert got["Content-Disposition"].startswith("inline")

    # A file that is not a picture or a PDF is saved, not opened.
    notes = upload(api(bob), channel, "notes.txt", b"high water 14:02\n").json()
    posted = api(bob).post(
        f"/api/v1/conversations/{channel.id}/messages/",
        {"attachments": [notes["id"]]},  # a file alone is a message
        format="json",
    )
    assert posted.status_code == 201, posted.json()
    got = download(posted.json()["attachments"][0]["url"])
    assert content_of(got) == b"high water 14:02\n"
    assert got["Content-Disposition"].startswith("attachment")
    assert len(stored_files(media)) == 2

    # The file endpoint gives a fresh link too.
    detail = api(bob).get(f"/api/v1/files/{uploaded['id']}/").json()
    assert detail["messageId"] == message["id"]
    assert content_of(download(detail["url"])) == PICTURE


def test_a_file_not_shown_in_the_page_is_served_as_bytes_to_save(
    bob, channel, api, media, settings
):
    # An operator allowed scripts: served as one from our origin, a <script src> of its link
    # would run under the page's script-src 'self'.
    settings.FILE_UPLOAD_EXTENSIONS = ["js", "txt"]
    for name in ("tool.js", "notes.txt"):
        uploaded = upload(api(bob), channel, name, b"window.pwned = 1;\n").json()
        posted = api(bob).post(
            f"/api/v1/conversations/{channel.id}/messages/",
            {"attachments": [uploaded["id"]]},
            format="json",
        )
        got = download(posted.json()["attachments"][0]["url"])
        assert (got["Content-Type"], got["X-Content-Type-Options"]) == (
            "application/octet-stream",
            "nosniff",
        )
        assert got["Content-Disposition"].startswith("attachment")
    # What it is stays known to the API (the page names the kind of file).
    assert api(bob).get(f"/api/v1/files/{uploaded['id']}/").json()["contentType"] == "text/plain"


def test_too_large_or_wrong_type_is_refused_and_nothing_is_stored(
    alice, channel, api, settings, media
):
    settings.FILE_UPLOAD_MAX_SIZE = 1000
    # Just past the limit (read, then refused), and far past it (refused before it is read).
    for size in (1001, 200_000):
        refused = upload(api(alice), channel, "big.txt", b"x" * size)
        assert refused.status_code == 413, size
        assert refused.json()["error"]["code"] == "file_too_large"
    # The type comes from the name: what the client claims does not matter.
    for name, claimed in (("page.html", "image/png"), ("logo.svg", "image/svg+xml"), ("run", "")):
        refused = upload(api(alice), channel, name, b"<script>alert(1)</script>", claimed)
        assert refused.status_code == 415, name
        assert refused.json()["error"]["code"] == "file_type_not_allowed"
    missing = api(alice).post(f"/api/v1/conversations/{channel.id}/files/", {}, format="multipart")
    assert missing.status_code == 400
    assert Attachment.objects.count() == 0
    assert stored_files(media) == []


def posted_picture(client, channel) -> dict:
    uploaded = upload(client, channel, "tide.png", PICTURE).json()
    message = client.post(
        f"/api/v1/conversations/{channel.id}/messages/",
        {"body": "see", "attachments": [uploaded["id"]]},
        format="json",
    ).json()
    return message["attachments"][0]


def with_query(url, **changes) -> str:
    parts = urlsplit(url)
    query = {k: v[0] for k, v in parse_qs(parts.query).items()} | changes
    return f"{parts.path}?" + "&".join(f"{k}={v}" for k, v in query.items())


def test_a_tampered_or_expired_link_is_a_404(alice, channel, api, clock, settings):
    attached = posted_picture(api(alice), channel)
    url = attached["url"]
    assert download(url).status_code == 200
    expiry = int(parse_qs(urlsplit(url).query)["e"][0])
    signature = parse_qs(urlsplit(url).query)["s"][0]
    assert download(with_query(url, s=signature[:-2] + "xx")).status_code == 404
    assert download(with_query(url, e=expiry + 3600)).status_code == 404  # a longer life
    assert download(url.split("?")[0]).status_code == 404  # no signature at all
    other = Attachment.objects.create(
        workspace=channel.workspace,
        conversation=channel,
        uploaded_by_user=alice,
        file="x",
        name="x.txt",
        content_type="text/plain",
        size=1,
        sha256="",
    )
    # A valid signature is for one file only.
    assert download(url.replace(attached["id"], str(other.id))).status_code == 404
    clock.advance(settings.FILE_URL_MAX_AGE + 600)
    assert download(url).status_code == 404
    # The file endpoint signs afresh.
    fresh = api(alice).get(f"/api/v1/files/{attached['id']}/").json()["url"]
    assert content_of(download(fresh)) == PICTURE
    # A file deleted is gone for every link.
    Attachment.objects.filter(pk=attached["id"]).delete()
    assert download(fresh).status_code == 404
    assert api(alice).get(f"/api/v1/files/{attached['id']}/").status_code == 404


def test_a_link_with_a_malformed_expiry_is_a_404_to_anyone(alice, channel, api):
    url = posted_picture(api(alice), channel)["url"]
    # "²" passes str.isdigit() but int() refuses it; so does int() 5000 digits.
    for expiry in ("%C2%B2", "%D9%A3", "9" * 5000, "-1", "1e12", "+1", ""):
        assert download(with_query(url, e=expiry)).status_code == 404, expiry[:12]


def test_head_on_a_link_answers_as_get_does(alice, channel, api):
    url = posted_picture(api(alice), channel)["url"]
    head = Client().head(url)
    assert head.status_code == 200
    assert (head["Content-Type"], head["Content-Length"]) == ("image/png", str(len(PICTURE)))
    assert head["Content-Disposition"].startswith("inline")
    assert Client().head(with_query(url, s="x")).status_code == 404


def test_another_workspace_sees_nothing_and_nobody_attaches_anothers_upload(
    alice, bob, charlie, channel, team_b, api
):
    attached = posted_picture(api(alice), channel)
    assert api(charlie).get(f"/api/v1/files/{attached['id']}/").status_code == 404
    assert api(charlie).get("/api/v1/files/not-a-uuid/").status_code == 404
    assert upload(api(charlie), channel, "x.txt", b"x").status_code == 404

    # Alice's upload not posted yet: Bob (same channel) cannot see it or post it as his.
    pending = upload(api(alice), channel, "draft.txt", b"draft").json()
    assert api(bob).get(f"/api/v1/files/{pending['id']}/").status_code == 404
    theft = api(bob).post(
        f"/api/v1/conversations/{channel.id}/messages/",
        {"body": "mine now", "attachments": [pending["id"]]},
        format="json",
    )
    assert theft.status_code == 400
    assert theft.json()["error"]["fields"] == {"attachments": [pending["id"]]}
    # Nor can Charlie in his own workspace, nor Alice in another conversation.
    elsewhere = actions.create_conversation(charlie, team_b, kind="channel", title="b")
    theft = api(charlie).post(
        f"/api/v1/conversations/{elsewhere.id}/messages/",
        {"body": "x", "attachments": [pending["id"]]},
        format="json",
    )
    assert theft.status_code == 400
    # A file already posted cannot be posted again.
    again = api(alice).post(
        f"/api/v1/conversations/{channel.id}/messages/",
        {"body": "again", "attachments": [attached["id"]]},
        format="json",
    )
    assert again.status_code == 400
    assert Message.objects.filter(body__in=["mine now", "x", "again"]).count() == 0
    assert Attachment.objects.get(pk=pending["id"]).message_id is None


@pytest.mark.django_db(transaction=True)
async def test_an_agent_gets_the_file_in_its_work_and_answers_with_one(
    alice, bob, channel, nova, api, media
):
    token = await sync_to_async(agent_session)(nova)
    comm = agent_communicator(token)
    assert (await comm.connect())[0]
    assert (await next_frame(comm))["type"] == "hello"
    browser = await live_socket_for(bob)

    sent = await sync_to_async(lambda: upload(api(alice), channel, "tide.png", PICTURE))()
    uploaded = sent.json()
    await sync_to_async(actions.post_message)(
        alice, channel, "Nova, what does this show?", attachments=[uploaded["id"]]
    )
    work = await next_frame(comm)
    assert work["type"] == "work"
    [attached] = work["payload"]["message"]["attachments"]
    assert (attached["name"], attached["contentType"], attached["size"]) == (
        "tide.png",
        "image/png",
        len(PICTURE),
    )
    assert attached["urlExpiresAt"]
    # The link is all the bridge needs: no session, no cookie.
    got = await sync_to_async(download)(attached["url"])
    assert await sync_to_async(content_of)(got) == PICTURE

    # The agent uploads its answer with its session token, and posts it with its reply.
    agent_client = APIClient()
    agent_client.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    report = b"date,high\n2025-06-01,14:02\n"
    mine = await sync_to_async(upload)(agent_client, channel, "tides.csv", report)
    assert mine.status_code == 201, mine.json()
    await comm.send_json_to(
        {
            "type": "post",
            "conversationId": str(channel.id),
            "body": "High water at 14:02; the table is attached.",
            "replyTo": work["payload"]["message"]["id"],
            "attachments": [mine.json()["id"]],
            "ref": "r-1",
        }
    )
    posted = (await frames_until(comm, lambda f: f["type"] in ("posted", "error")))[-1]
    assert posted["type"] == "posted", posted
    # Bob's browser hears of it with the file listed, and his link downloads it.
    events = await frames_until(
        browser,
        lambda f: f["type"] == "message.created" and f["message"]["author"]["type"] == "agent",
    )
    [listed] = events[-1]["message"]["attachments"]
    assert listed["name"] == "tides.csv" and listed["contentType"] == "text/csv"
    got = await sync_to_async(download)(listed["url"])
    assert await sync_to_async(content_of)(got) == report
    row = await Attachment.objects.aget(pk=mine.json()["id"])
    assert row.uploaded_by_agent_id == nova.id and str(row.message_id) == posted["messageId"]
    await comm.disconnect()
    await browser.disconnect()


def test_a_reply_in_a_thread_carries_files_uploaded_to_the_messages_conversation(
    alice, bob, channel, api, media
):
    said = actions.post_message(bob, channel, "Who has the tide chart?")
    uploaded = upload(api(alice), channel, "chart.png", PICTURE, "image/png").json()
    replied = api(alice).post(
        f"/api/v1/messages/{said.id}/replies/", {"attachments": [uploaded["id"]]}, format="json"
    )  # a file alone is a reply
    assert replied.status_code == 201, replied.json()
    [attached] = replied.json()["attachments"]
    assert attached["id"] == uploaded["id"]
    row = Attachment.objects.get(pk=uploaded["id"])
    assert str(row.message_id) == replied.json()["id"]
    assert str(row.conversation_id) == replied.json()["conversationId"] != str(channel.id)
    # Bob reads the thread, and the file.
    listed = api(bob).get(f"/api/v1/messages/{said.id}/replies/").json()["results"]
    got = download(listed[0]["attachments"][0]["url"])
    assert content_of(got) == PICTURE


def test_a_reply_cannot_carry_someone_elses_upload_and_changes_nothing(
    alice, bob, channel, api, media
):
    said = actions.post_message(bob, channel, "Who has the tide chart?")
    uploaded = upload(api(alice), channel, "chart.png", PICTURE, "image/png").json()
    refused = api(bob).post(
        f"/api/v1/messages/{said.id}/replies/",
        {"body": "mine now", "attachments": [uploaded["id"]]},
        format="json",
    )
    assert refused.status_code == 400, refused.json()
    assert refused.json()["error"]["fields"] == {"attachments": [uploaded["id"]]}
    row = Attachment.objects.get(pk=uploaded["id"])
    assert (row.conversation_id, row.message_id) == (channel.id, None)
    assert api(bob).get(f"/api/v1/messages/{said.id}/replies/").json()["thread"] is None
