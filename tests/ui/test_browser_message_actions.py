"""Issue 28 in a real browser: Alice edits her message and Bob's page shows "(edited)" live; she
deletes one and both see the placeholder; Bob's reaction counts on Alice's page live, with who
reacted on hover; Bob replies in a thread and Alice's message shows "1 reply"; the Up arrow in
an empty composer edits one's last message; "/" opens the commands, filtered as typed."""

import re
from datetime import datetime, time, timedelta
from zoneinfo import ZoneInfo

import pytest
from playwright.sync_api import expect

from conversations.actions import post_message
from conversations.models import Message
from routines.models import Reminder
from tests.ui.browser import (
    MARKS,
    PHONE,
    SCREENSHOTS,
    WAIT,
    live,
    log_in,
    nova_in_general,
    shot,
)

pytestmark = MARKS


@pytest.fixture
def story(orm):
    def build():
        team, general, _ = nova_in_general(with_bob=True)
        bob = team.memberships.get(user__username="bob").user
        post_message(bob, general, "Morning! Tide tables are up on the board.")
        return team, general

    return orm(build)


def open_general(chromium, server, team, general, who, **kwargs):
    page = live(log_in(chromium, server, who, **kwargs))
    page.goto(f"/w/{team.id}/c/{general.id}/")
    return live(page)


def message(page, text):
    return page.locator("[data-messages] > li", has_text=text).last


def test_edit_delete_react_and_reply_show_live_for_others(orm, story, browser):
    team, general = story
    chromium, server = browser
    alice = open_general(chromium, server, team, general, "alice")
    bob = open_general(chromium, server, team, general, "bob")
    alice.on("dialog", lambda dialog: dialog.accept())

    composer = alice.get_by_label("Message #general")
    composer.fill("High tide at 14:02 today")
    composer.press("Enter")
    expect(message(bob, "High tide at 14:02")).to_be_visible(timeout=WAIT)

    # Edit through the message's own button: Bob sees the new text and "(edited)" live.
    mine = message(alice, "High tide at 14:02")
    mine.hover()
    mine.get_by_role("button", name="Edit").click()
    box = mine.get_by_label("Edit message")
    expect(box).to_have_value("High tide at 14:02 today")
    box.fill("High tide at 14:49 today")
    box.press("Enter")
    edited = message(bob, "High tide at 14:49")
    expect(edited.locator("[data-edited]")).to_have_text("(edited)", timeout=WAIT)
    expect(bob.locator("[data-messages]")).not_to_contain_text("14:02")

    # Esc cancels an edit, leaving the text as it was.
    mine = message(alice, "High tide at 14:49")
    mine.hover()
    mine.get_by_role("button", name="Edit").click()
    mine.get_by_label("Edit message").fill("never saved")
    mine.get_by_label("Edit message").press("Escape")
    expect(mine.get_by_label("Edit message")).to_have_count(0)
    expect(mine.locator(".msg__text")).to_have_text("High tide at 14:49 today")

    # The Up arrow in the empty composer edits Alice's last message.
    composer.fill("Bring boots")
    composer.press("Enter")
    expect(message(alice, "Bring boots")).not_to_have_class("is-local", timeout=WAIT)
    expect(message(alice, "Bring boots")).to_have_attribute(
        "data-message-id", re.compile(".+"), timeout=WAIT
    )
    composer.press("ArrowUp")
    box = message(alice, "Bring boots").get_by_label("Edit message")
    expect(box).to_be_focused(timeout=WAIT)
    box.fill("Bring boots and a torch")
    box.press("Enter")
    expect(message(bob, "Bring boots and a torch").locator("[data-edited]")).to_be_visible(
        timeout=WAIT
    )

    # Bob reacts to Alice's message: the count shows on Alice's page live, with his name.
    theirs = message(bob, "High tide at 14:49")
    theirs.hover()
    theirs.get_by_title("Add a reaction").click()
    theirs.get_by_title("React with 👍").click()
    chip = message(alice, "High tide at 14:49").locator(".reaction", has_text="👍")
    expect(chip.locator("[data-react-count]")).to_have_text("1", timeout=WAIT)
    expect(chip).to_have_attribute("title", "Bob Okafor")
    # Alice adds hers by clicking the chip: two, hers pressed.
    chip.click()
    expect(chip.locator("[data-react-count]")).to_have_text("2", timeout=WAIT)
    expect(chip).to_have_attribute("aria-pressed", "true")
    expect(message(bob, "High tide at 14:49").locator(".reaction [data-react-count]")).to_have_text(
        "2", timeout=WAIT
    )

    # Bob replies in a thread: the panel opens, his reply is in it, Alice sees "1 reply".
    theirs = message(bob, "High tide at 14:49")
    theirs.hover()
    theirs.get_by_role("button", name="Reply in thread").click()
    panel = bob.locator("[data-thread-panel]")
    expect(panel).to_be_visible()
    expect(panel.locator("[data-thread-origin]")).to_contain_text("High tide at 14:49")
    panel.get_by_label("Reply in thread").fill("I'll be there at 14:30")
    panel.get_by_label("Reply in thread").press("Enter")
    expect(panel.locator("[data-replies] > li")).to_contain_text("I'll be there", timeout=WAIT)
    replies = message(alice, "High tide at 14:49").locator("[data-open-replies]")
    expect(replies).to_have_text("1 reply", timeout=WAIT)
    # The reply stays out of the channel's own list.
    expect(alice.locator("[data-messages]")).not_to_contain_text("I'll be there")
    replies.click()
    alice_panel = alice.locator("[data-thread-panel]")
    expect(alice_panel.locator("[data-replies] > li")).to_contain_text("I'll be there")
    # A second reply from Bob arrives live in Alice's open panel.
    panel.get_by_label("Reply in thread").fill("Boots ready")
    panel.get_by_label("Reply in thread").press("Enter")
    expect(alice_panel.locator("[data-replies]")).to_contain_text("Boots ready", timeout=WAIT)
    expect(alice_panel.locator("[data-thread-count]")).to_have_text("2 replies", timeout=WAIT)
    shot(alice, "messages-01-thread-reactions")
    alice_panel.get_by_role("button", name="Close thread").click()
    expect(alice_panel).to_be_hidden()

    # Alice deletes "Bring boots…": both pages show the placeholder, the text is gone.
    doomed = message(alice, "Bring boots and a torch")
    doomed_id = doomed.get_attribute("data-message-id")
    doomed.hover()
    expect(doomed.locator("[data-msg-actions]")).to_be_visible()
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    alice.screenshot(path=str(SCREENSHOTS / "messages-04-hover-actions.png"))  # hovered: no shot()
    doomed.get_by_role("button", name="Delete").click()
    for page in (alice, bob):
        placeholder = page.locator(f'[data-message-id="{doomed_id}"]')
        expect(placeholder.locator("[data-deleted]")).to_have_text("message deleted", timeout=WAIT)
        expect(page.locator("[data-messages]")).not_to_contain_text("Bring boots and a torch")
    shot(alice, "messages-00-edited-deleted-reactions")
    assert orm(lambda: Message.objects.get(pk=doomed_id).body) == ""


def test_slash_opens_the_commands_filtered_as_typed(orm, story, browser):
    team, general = story
    chromium, server = browser
    alice = open_general(chromium, server, team, general, "alice")
    composer = alice.get_by_label("Message #general")
    popup = alice.locator("[data-slash-list]")
    composer.press_sequentially("/")
    expect(popup).to_be_visible()
    expect(popup.locator("[role=option]")).to_have_count(4)  # /task, /remind, /search, /task @nova
    expect(popup).to_contain_text("Hand a job to an agent")
    shot(alice, "messages-02-slash-commands")
    composer.press_sequentially("task @n")
    expect(popup.locator("[role=option]")).to_have_count(1)
    expect(popup.locator("[role=option]")).to_contain_text("/task @nova")
    composer.press("Enter")  # picks, does not send
    expect(composer).to_have_value("/task @nova ")
    expect(popup).to_be_hidden()
    # Esc closes it; arrows walk the options.
    composer.fill("")
    composer.press_sequentially("/t")
    expect(popup).to_be_visible()
    composer.press("ArrowDown")
    expect(popup.locator("[aria-selected=true]")).to_contain_text("/task @nova")
    composer.press("Tab")
    expect(composer).to_have_value("/task @nova ")
    composer.fill("")
    composer.press_sequentially("/")
    composer.press("Escape")
    expect(popup).to_be_hidden()
    expect(composer).to_have_value("/")
    # Nothing was sent meanwhile.
    assert orm(lambda: Message.objects.filter(conversation=general).count()) == 1
    # "/remind @nova in 30 minutes …": a reminder for Alice's own agent, said under the box.
    composer.fill("/remind @nova in 30 minutes check the high water")
    composer.press("Enter")
    status = alice.locator("[data-composer-status]")
    expect(status).to_contain_text("Reminder set: Nova will remind you", timeout=WAIT)
    expect(composer).to_have_value("")
    reminder = orm(lambda: Reminder.objects.get())
    assert reminder.text == "check the high water"
    assert timedelta(minutes=29) < reminder.due_at - reminder.created_at < timedelta(minutes=31)
    composer.fill("/remind @nova tomorrow")
    composer.press("Enter")
    expect(status).to_contain_text("Write it as: /remind @agent in 30 minutes")
    expect(composer).to_have_value("/remind @nova tomorrow")  # kept, to be fixed
    assert orm(lambda: Reminder.objects.count()) == 1
    # "/search words" is no message: it opens the workspace's search for the words.
    composer.fill("/search tide tables")
    composer.press("Enter")
    expect(alice).to_have_url(re.compile(rf"/w/{team.id}/search/\?q=tide%20tables$"))
    expect(alice.get_by_role("searchbox").first).to_have_value("tide tables")
    assert orm(lambda: Message.objects.filter(conversation=general).count()) == 1


def test_mentions_walk_with_the_keyboard_as_the_commands_do(orm, story, browser):
    """The @mention list answers the keys the "/" list does (one handler serves both): arrows
    walk it, round the ends; Tab or Enter picks; Escape closes and keeps what was typed."""
    team, general = story
    chromium, server = browser
    alice = open_general(chromium, server, team, general, "alice")
    composer = alice.get_by_label("Message #general")
    popup = alice.locator("#mention-list")
    options = popup.locator("[role=option]")
    composer.press_sequentially("@")
    expect(options).to_have_count(3)  # Nova, Alice and Bob
    handles = options.locator(".muted").all_inner_texts()
    assert sorted(handles) == ["@alice", "@bob", "@nova"]
    selected = popup.locator("[aria-selected=true]")
    expect(selected).to_contain_text(handles[0])
    composer.press("ArrowDown")
    expect(selected).to_contain_text(handles[1])
    expect(composer).to_have_attribute("aria-activedescendant", "mention-1")
    composer.press("ArrowUp")
    composer.press("ArrowUp")  # past the first: round to the last
    expect(selected).to_contain_text(handles[2])
    shot(alice, "messages-07-mention-keys")
    composer.press("Tab")
    expect(composer).to_have_value(f"{handles[2]} ")
    expect(popup).to_be_hidden()
    composer.fill("")
    composer.press_sequentially("ask @b")
    expect(options).to_have_count(1)
    composer.press("Escape")
    expect(popup).to_be_hidden()
    expect(composer).to_have_value("ask @b")
    composer.press_sequentially("o")
    composer.press("Enter")  # picks, does not send
    expect(composer).to_have_value("ask @bob ")
    assert orm(lambda: Message.objects.filter(conversation=general).count()) == 1


def test_remind_takes_clock_times_in_the_browsers_own_time(orm, story, browser):
    """Alice's browser is in São Paulo at 17:00: "at 15:30" is past, so tomorrow; "at 18:45" is
    today; "tomorrow at 9" and a bare "tomorrow" are 9:00 tomorrow, all São Paulo time. What
    cannot be read is said under the box, and kept there to be fixed."""
    team, general = story
    chromium, server = browser
    zone = ZoneInfo("America/Sao_Paulo")
    today = (datetime.now(zone) + timedelta(days=1)).date()  # a day ahead: every time is future
    tomorrow = today + timedelta(days=1)
    alice = log_in(chromium, server, "alice", timezone_id="America/Sao_Paulo")
    alice.clock.set_system_time(datetime.combine(today, time(17, 0), zone))
    alice.goto(f"/w/{team.id}/c/{general.id}/")
    live(alice)
    composer = alice.get_by_label("Message #general")
    status = alice.locator("[data-composer-status]")
    cases = [
        ("at 15:30", "check the high water", datetime.combine(tomorrow, time(15, 30), zone)),
        ("at 18:45", "bring the boat in", datetime.combine(today, time(18, 45), zone)),
        ("tomorrow at 9", "read the tide table", datetime.combine(tomorrow, time(9), zone)),
        ("tomorrow", "renew the mooring permit", datetime.combine(tomorrow, time(9), zone)),
        ("at 9:30pm", "lock the shed", datetime.combine(today, time(21, 30), zone)),
    ]
    for when, what, due in cases:
        composer.fill(f"/remind @nova {when} {what}")
        composer.press("Enter")
        expect(composer).to_have_value("", timeout=WAIT)
        day = "" if due.date() == today else f" {due:%A}"  # the weekday, unless today
        expect(status).to_have_text(f"Reminder set: Nova will remind you{day} at {due:%I:%M %p}.")
        reminder = orm(lambda: Reminder.objects.order_by("-created_at").first())
        assert (reminder.text, reminder.due_at) == (what, due)
    shot(alice, "messages-05-remind-at")
    for words, error in [
        ("at 25:00 check", "25:00 is not a time of day"),
        ("at 15:30", "Write it as: /remind @agent in 30 minutes, at 15:30, tomorrow at 9"),
        ("next week check", "Write it as: /remind @agent"),
    ]:
        composer.fill(f"/remind @nova {words}")
        composer.press("Enter")
        expect(status).to_contain_text(error)
        expect(status).to_have_class(re.compile("is-failed"))
        expect(composer).to_have_value(f"/remind @nova {words}")  # kept, to be fixed
    shot(alice, "messages-06-remind-error")
    assert orm(lambda: Reminder.objects.count()) == len(cases)
    assert orm(lambda: Message.objects.filter(conversation=general).count()) == 1


def test_on_a_phone_the_thread_takes_the_screen(orm, story, browser):
    team, general = story
    chromium, server = browser
    alice = open_general(chromium, server, team, general, "alice", viewport=PHONE)
    morning = message(alice, "Morning!")
    morning.click()  # a tap: the message's actions show
    morning.get_by_title("Add a reaction").click()
    morning.get_by_title("React with 🎉").click()
    expect(morning.locator(".reaction [data-react-count]")).to_have_text("1", timeout=WAIT)
    morning = message(alice, "Morning!")
    morning.click()
    morning.get_by_role("button", name="Reply in thread").click()
    panel = alice.locator("[data-thread-panel]")
    panel.get_by_label("Reply in thread").fill("Thanks Bob!")
    panel.get_by_label("Reply in thread").press("Enter")
    expect(panel.locator("[data-replies]")).to_contain_text("Thanks Bob!", timeout=WAIT)
    box = panel.bounding_box()
    assert box["width"] == PHONE["width"]
    shot(alice, "messages-03-phone-thread")


def test_closing_a_thread_puts_the_channel_back_where_it_was(orm, story, browser):
    """The thread panel narrows the channel's list while open (on a laptop): closing it leaves
    the channel at the bottom if it was there, else on the messages it showed."""
    team, general = story
    chromium, server = browser
    bob = orm(lambda: general.workspace.memberships.get(user__username="bob").user)
    for i in range(30):
        words = " ".join(["the tide turns at the harbour wall"] * (1 + i % 4))
        orm(post_message, bob, general, f"Note {i}: {words}")
    alice = open_general(chromium, server, team, general, "alice")
    scroller = alice.locator("[data-scroller]")
    gap = "(s) => s.scrollHeight - s.scrollTop - s.clientHeight"

    def reply_in_thread_and_close(text):
        note = message(alice, text)
        note.hover()
        note.get_by_role("button", name="Reply in thread").click()
        panel = alice.locator("[data-thread-panel]")
        panel.get_by_label("Reply in thread").fill("Noted")
        panel.get_by_label("Reply in thread").press("Enter")
        expect(panel.locator("[data-replies]")).to_contain_text("Noted", timeout=WAIT)
        expect(note.locator("[data-open-replies]")).to_have_text("1 reply", timeout=WAIT)
        panel.get_by_role("button", name="Close thread").click()
        expect(panel).to_be_hidden()

    # At the bottom: still there after the thread.
    assert scroller.evaluate(gap) < 2
    reply_in_thread_and_close("Note 29:")
    assert scroller.evaluate(gap) < 2

    # Up in the history: the same message at the top of the view again.
    message(alice, "Note 10:").evaluate("(li) => li.scrollIntoView({block: 'start'})")
    top = "(li) => Math.round(li.getBoundingClientRect().top)"
    before = message(alice, "Note 10:").evaluate(top)
    reply_in_thread_and_close("Note 10:")
    assert abs(message(alice, "Note 10:").evaluate(top) - before) <= 2
    shot(alice, "messages-08-thread-closed")


def test_unsent_text_is_kept_per_conversation_and_thread(orm, story, browser):
    """What Alice typed and did not send is there again when she comes back (the composer's and
    a reply thread's), and gone once sent."""
    team, general = story
    chromium, server = browser
    alice = open_general(chromium, server, team, general, "alice")
    composer = alice.get_by_label("Message #general")
    composer.fill("unsent draft text")
    morning = message(alice, "Morning!")
    morning.hover()
    morning.get_by_role("button", name="Reply in thread").click()
    panel = alice.locator("[data-thread-panel]")
    panel.get_by_label("Reply in thread").fill("half a reply")

    alice.goto(f"/w/{team.id}/tasks/")
    alice.goto(f"/w/{team.id}/c/{general.id}/")
    live(alice)
    expect(composer).to_have_value("unsent draft text")
    morning = message(alice, "Morning!")
    morning.hover()
    morning.get_by_role("button", name="Reply in thread").click()
    expect(panel.get_by_label("Reply in thread")).to_have_value("half a reply")
    expect(panel.locator("[data-thread-origin]")).to_contain_text("Morning!")
    shot(alice, "messages-09-drafts-kept")

    panel.get_by_label("Reply in thread").press("Enter")
    expect(panel.locator("[data-replies]")).to_contain_text("half a reply", timeout=WAIT)
    composer.press("Enter")
    expect(message(alice, "unsent draft text")).to_have_attribute(
        "data-message-id", re.compile(".+"), timeout=WAIT
    )
    alice.reload()
    live(alice)
    expect(composer).to_have_value("")
    message(alice, "Morning!").locator("[data-open-replies]").click()
    expect(panel.get_by_label("Reply in thread")).to_have_value("")


def test_an_artifacts_bad_json_is_said_once_under_its_field(orm, story, browser):
    team, general = story
    chromium, server = browser
    alice = open_general(chromium, server, team, general, "alice")
    alice.get_by_role("button", name="New artifact").click()
    dialog = alice.get_by_role("dialog", name="New artifact")
    dialog.get_by_label("Title").fill("Tide data")
    dialog.get_by_label("Kind").select_option(label="JSON data")
    dialog.get_by_label("Content").fill("{not json")
    dialog.get_by_role("button", name="Publish artifact").click()
    field = dialog.locator(".field", has=alice.locator("#artifact-content"))
    expect(field.locator(".field-error")).to_contain_text("Not valid JSON", timeout=WAIT)
    assert dialog.inner_text().count("Not valid JSON") == 1
    expect(dialog.locator("[data-form-error]")).to_have_text("A json artifact holds JSON data.")
    shot(alice, "messages-10-artifact-bad-json")
