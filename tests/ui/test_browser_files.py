"""Files in a real browser (INT-4): Alice attaches a picture and a table to a message in #general
and sends it; the picture shows inline (loaded through its signed link), the table as a chip
with its name and size, for her and, live, for Bob. A file of a type not allowed is refused in
the tray in the server's words. A reply in a thread takes files the same way. Database work goes through ``orm`` (tests/ui/browser.py)."""

import struct
import zlib

import pytest
from playwright.sync_api import expect, sync_playwright

from conversations.actions import create_conversation, post_message
from conversations.models import Attachment
from tests.socket_helpers import Daphne
from tests.ui.browser import (
    CHROMIUM,
    CHROMIUM_ARGS,
    MARKS,
    WAIT,
    live,
    log_in,
    person,
    shot,
    wait_for_js,
)
from workspaces.actions import accept_invitation, create_invitation, create_team_workspace
from workspaces.models import User

pytestmark = MARKS


def tide_picture(width=480, height=270) -> bytes:
    """A PNG of sea under sky, with a sine of a tide line (no imaging library needed)."""
    import math

    rows = []
    for y in range(height):
        row = bytearray(b"\x00")
        for x in range(width):
            water = y > height * (0.55 + 0.2 * math.sin(x / width * 2 * math.pi))
            row += bytes((22, 92, 170) if water else (200, 226, 246))
        rows.append(bytes(row))

    def chunk(kind, data):
        return (
            struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
        )

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(b"".join(rows)))
        + chunk(b"IEND", b"")
    )


@pytest.fixture
def story(orm):
    def build():
        alice, bob = person("alice", "Alice Martin"), person("bob", "Bob Okafor")
        team = create_team_workspace(alice, "Tide Lab")
        _, token = create_invitation(team.memberships.get(user=alice))
        accept_invitation(bob, token)
        general = create_conversation(alice, team, kind="channel", title="general")
        return team, general

    return orm(build)


@pytest.fixture
def media(tmp_path):
    return tmp_path / "media"


@pytest.fixture
def browser(story, media):
    """As tests/ui/conftest.py's, with the server's files in a folder of this test's own."""
    server = Daphne(extra_env={"MEDIA_ROOT": str(media)})
    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield chromium, server
        chromium.close()
    server.stop()


def test_a_picture_attached_shows_inline_and_a_table_as_a_chip(orm, story, browser, media):
    team, general = story
    chromium, server = browser
    alice = live(log_in(chromium, server, "alice"))
    alice.goto(f"/w/{team.id}/c/{general.id}/")
    live(alice)
    bob = live(log_in(chromium, server, "bob"))
    bob.goto(f"/w/{team.id}/c/{general.id}/")
    live(bob)

    picture = tide_picture()
    table = b"date,high water\n2025-06-01,14:02\n2025-06-02,14:49\n"
    tray = alice.locator("[data-composer] [data-attachments]")
    alice.locator("[data-composer] [data-attach-input]").set_input_files(
        [
            {"name": "tide-chart.png", "mimeType": "image/png", "buffer": picture},
            {"name": "tides.csv", "mimeType": "text/csv", "buffer": table},
            {"name": "page.html", "mimeType": "text/html", "buffer": b"<script></script>"},
        ]
    )
    expect(tray.locator(".file-chip.is-ready")).to_have_count(2, timeout=WAIT)
    expect(tray.locator(".file-chip.is-failed")).to_contain_text("cannot be attached", timeout=WAIT)
    shot(alice, "files-00-tray")
    tray.get_by_role("button", name="Remove page.html").click()

    composer = alice.get_by_label("Message #general")
    composer.fill("Today's tides, with the table.")
    composer.press("Enter")
    expect(tray).to_be_hidden()

    for page in (alice, bob):
        message = page.locator("[data-messages] > li", has_text="Today's tides").last
        image = message.locator(".msg__image img")
        expect(image).to_be_visible(timeout=WAIT)
        # Loaded through its signed link: the browser decoded the picture itself.
        wait_for_js(page, "img => img.complete && img.naturalWidth === 480", image.element_handle())
        chip = message.locator("a.file-chip")
        expect(chip).to_contain_text("tides.csv")
        expect(chip).to_contain_text(f"{len(table)} bytes")
        assert "/files/" in chip.get_attribute("href") and "s=" in chip.get_attribute("href")
    box = alice.locator("[data-messages] .msg__image img").last.bounding_box()
    assert box["width"] <= 360 and box["height"] <= 280  # shown at most thumbnail size
    shot(alice, "files-01-picture-inline")

    names = orm(lambda: sorted(Attachment.objects.values_list("name", flat=True)))
    assert names == ["tide-chart.png", "tides.csv"]
    assert sorted(p.name for p in media.rglob("*") if p.is_file()) == names


def test_files_dropped_on_the_composer_or_pasted_into_it_land_in_the_tray(orm, story, browser):
    team, general = story
    chromium, server = browser
    alice = live(log_in(chromium, server, "alice"))
    alice.goto(f"/w/{team.id}/c/{general.id}/")
    live(alice)
    tray = alice.locator("[data-composer] [data-attachments]")
    composer = alice.get_by_label("Message #general")
    # A drop: the DataTransfer a file dragged from the desktop carries.
    dropped = alice.evaluate_handle(
        """() => {
          const data = new DataTransfer();
          data.items.add(new File(["month,total\\n6,14\\n"], "dropped.csv", { type: "text/csv" }));
          return data;
        }"""
    )
    alice.locator("[data-composer]").dispatch_event("drop", {"dataTransfer": dropped})
    expect(tray.locator(".file-chip.is-ready")).to_contain_text("dropped.csv", timeout=WAIT)
    # A paste: a picture on the clipboard (a screenshot), pasted into the message box.
    composer.evaluate(
        """(box) => {
          const data = new DataTransfer();
          data.items.add(new File(["low,high\\n"], "pasted.csv", { type: "text/csv" }));
          box.dispatchEvent(new ClipboardEvent("paste", { clipboardData: data, bubbles: true, cancelable: true }));
        }"""
    )
    expect(tray.locator(".file-chip.is-ready")).to_have_count(2, timeout=WAIT)
    expect(composer).to_have_value("")  # the files went to the tray, not as text into the box
    composer.fill("Both tables.")
    composer.press("Enter")
    expect(tray).to_be_hidden(timeout=WAIT)
    names = orm(lambda: sorted(Attachment.objects.values_list("name", flat=True)))
    assert names == ["dropped.csv", "pasted.csv"]


def test_a_reply_in_a_thread_carries_a_picture_and_a_pasted_file(orm, story, browser):
    """The thread panel's box takes files as the conversation's does (the same tray): chosen
    with its button or pasted; the reply shows the picture inline, for Bob too."""
    team, general = story
    chromium, server = browser
    orm(lambda: post_message(User.objects.get(username="bob"), general, "Who has the tide chart?"))
    pages = {}
    for who in ("alice", "bob"):
        pages[who] = live(log_in(chromium, server, who))
        pages[who].goto(f"/w/{team.id}/c/{general.id}/")
        live(pages[who])
    alice, bob = pages["alice"], pages["bob"]
    asked = alice.locator("[data-messages] > li", has_text="Who has the tide chart?")
    asked.hover()
    asked.get_by_role("button", name="Reply in thread").click()
    panel = alice.locator("[data-thread-panel]")
    tray = panel.locator("[data-attachments]")
    panel.locator("[data-attach-input]").set_input_files(
        [{"name": "tide-chart.png", "mimeType": "image/png", "buffer": tide_picture()}]
    )
    box = panel.get_by_label("Reply in thread")
    box.evaluate(
        """(box) => {
          const data = new DataTransfer();
          data.items.add(new File(["low,high\\n"], "pasted.csv", { type: "text/csv" }));
          box.dispatchEvent(new ClipboardEvent("paste", { clipboardData: data, bubbles: true, cancelable: true }));
        }"""
    )
    expect(tray.locator(".file-chip.is-ready")).to_have_count(2, timeout=WAIT)
    expect(alice.locator("[data-composer] [data-attachments]")).to_be_hidden()  # not the main one
    shot(alice, "files-02-thread-tray")
    box.fill("Here it is, and the table.")
    box.press("Enter")
    expect(tray).to_be_hidden(timeout=WAIT)
    reply = panel.locator("[data-replies] > li", has_text="Here it is")
    image = reply.locator(".msg__image img")
    expect(image).to_be_visible(timeout=WAIT)
    wait_for_js(alice, "img => img.complete && img.naturalWidth === 480", image.element_handle())
    expect(reply.locator("a.file-chip")).to_contain_text("pasted.csv")
    expect(alice.locator("[data-messages]")).not_to_contain_text("Here it is")
    shot(alice, "files-03-thread-reply")

    # Bob opens the thread from "1 reply": the picture is there for him too.
    replies = bob.locator("[data-messages] > li", has_text="Who has the tide chart?").locator(
        "[data-open-replies]"
    )
    expect(replies).to_have_text("1 reply", timeout=WAIT)
    replies.click()
    seen = bob.locator("[data-thread-panel] [data-replies] > li", has_text="Here it is")
    wait_for_js(
        bob,
        "img => img.complete && img.naturalWidth === 480",
        seen.locator(".msg__image img").element_handle(timeout=WAIT),
    )
    rows = orm(
        lambda: list(Attachment.objects.order_by("name").values_list("name", "conversation__kind"))
    )
    assert rows == [("pasted.csv", "thread"), ("tide-chart.png", "thread")]
