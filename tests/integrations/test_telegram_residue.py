"""Telegram, what the first versions left: an unreadable update held back every later one (the
webhook takes one at a time); replies past Telegram's 4,096 UTF-16 units were cut; a failed send
was retried after newer ones to the same chat had gone. Against the Bot API stand-in
(tests/integrations/telegram_standin.py) and the real webhook, jobs and database."""

import json
import logging

import pytest

from conversations.actions import post_message
from integrations import telegram
from integrations.models import TelegramBot, TelegramLink, TelegramSend
from tests.integrations import test_telegram
from tests.integrations.telegram_standin import Refused, utf16_len
from tests.integrations.test_telegram import (
    DANA,
    GROUP,
    OTHER_GROUP,
    TOKEN,
    after_commit,
    make_link,
    post_update,
    run_jobs,
    set_bot,
)

tg = test_telegram.tg
webhook_mode = test_telegram.webhook_mode
linked = test_telegram.linked


# ---- updates Telegram would send again and again ------------------------------------------------


@pytest.fixture
def hooked(webhook_mode, tg, api, alice, team_a, channel):
    """#general linked to the Family group through the webhook."""
    assert set_bot(api, alice, team_a).status_code == 200
    code = make_link(api, alice, channel)["code"]
    bound = post_update(*tg.webhook_request(TOKEN, tg.say(TOKEN, GROUP, DANA, f"/start {code}")))
    assert bound.status_code == 200 and TelegramLink.objects.get().chat_id == GROUP
    return TelegramBot.objects.get()


def test_an_unreadable_update_is_taken_and_logged_so_that_later_ones_come(
    hooked, tg, channel, caplog
):
    """The webhook takes one update at a time (max_connections=1) and Telegram sends again what
    is not answered 2xx: a 400 for an update we can never read held back every later one of the
    bot, every chat, until Telegram gave up on it."""
    said = tg.say(TOKEN, GROUP, DANA, "After the bad ones")
    url, body, headers = tg.webhook_request(TOKEN, said)
    good = json.loads(body)
    message = good["message"]
    offset, count = TelegramBot.objects.get().update_offset, channel.messages.count()
    unreadable = [
        b"{not json",
        b"[1, 2]",
        json.dumps({**good, "update_id": 777_001, "message": {**message, "text": {"a": 1}}}),
        json.dumps({**good, "update_id": 777_002, "message": {**message, "from": "dana"}}),
        # What PostgreSQL cannot store: failed as a 500, which Telegram sends again too.
        json.dumps({**good, "update_id": 777_003, "message": {**message, "text": "a\u0000b"}}),
        json.dumps(
            {**good, "update_id": 777_004, "message": {**message, "chat": {"id": 1, "title": 5}}}
        ),
        json.dumps(
            {**good, "update_id": 777_005, "message": {**message, "migrate_to_chat_id": "x"}}
        ),
    ]
    with caplog.at_level(logging.WARNING, logger="integrations.telegram_api"):
        for bad in unreadable:
            bad = bad.encode() if isinstance(bad, str) else bad
            assert post_update(url, bad, headers).status_code == 200, bad
    logged = " ".join(r.getMessage() for r in caplog.records)
    for update_id in range(777_001, 777_006):
        assert str(update_id) in logged
    assert TelegramBot.objects.get().update_offset == offset  # nothing handled
    assert channel.messages.count() == count
    # The next update comes, and is posted.
    assert post_update(url, body, headers).status_code == 200
    assert channel.messages.filter(body="After the bad ones").exists()
    # Not from Telegram (no secret, a wrong one): refused as before, nothing logged or read.
    caplog.clear()
    for wrong in ({**headers, "X-Telegram-Bot-Api-Secret-Token": "guess"}, {}):
        assert post_update(url, b"{not json", wrong).status_code == 404
    assert not [r for r in caplog.records if r.name == "integrations.telegram_api"]


def test_an_update_too_big_to_be_one_is_taken_unread(hooked, tg, channel, caplog):
    """A body past the bound is not read whole (no update of Telegram's comes near it), and is
    answered 200 too, so that it does not hold the bot's queue."""
    said = tg.say(TOKEN, GROUP, DANA, "x" * 100)
    url, body, headers = tg.webhook_request(TOKEN, said)
    huge = json.loads(body)
    huge["message"]["text"] = "x" * 1_000_001
    with caplog.at_level(logging.WARNING, logger="integrations.telegram_api"):
        assert post_update(url, json.dumps(huge).encode(), headers).status_code == 200
    assert "too big" in caplog.text
    assert not channel.messages.filter(body__startswith="xxx").exists()


# ---- long replies -------------------------------------------------------------------------------


def test_a_reply_past_telegrams_limit_is_sent_in_parts_at_paragraph_breaks(
    linked, tg, nova, channel
):
    paragraphs = [f"Paragraph {i}. " + "word " * 299 + "end." for i in range(6)]  # ~1,510 each
    said = post_message(nova, channel, "\n\n".join(paragraphs))
    assert run_jobs() == [True]
    parts = [m["text"] for m in tg.sent(TOKEN, GROUP)]
    assert len(parts) == 3 and all(utf16_len(p) <= 4096 for p in parts)
    # Cut between paragraphs, nothing lost, in order.
    assert parts[0].startswith("Nova: Paragraph 0.") and parts[1].startswith("Paragraph 2.")
    assert "\n\n".join(parts) == "Nova: " + said.body
    send = TelegramSend.objects.get(message=said)
    assert send.status == TelegramSend.Status.SENT
    assert [send.telegram_message_id, *send.part_message_ids] == [
        m["message_id"] for m in tg.sent(TOKEN, GROUP)
    ]


def test_the_limit_is_counted_as_telegram_counts_in_utf16_units(linked, tg, nova, channel):
    """An emoji outside the BMP is one character to Python and two to Telegram: 3,000 of them
    passed the cut unchanged, and Telegram refused the message, eight times."""
    said = post_message(nova, channel, "🙂" * 3000)
    assert run_jobs() == [True]
    parts = [m["text"] for m in tg.sent(TOKEN, GROUP)]
    assert [utf16_len(p) for p in parts] == [4096, 6 + 6000 - 4096]
    assert "".join(parts) == "Nova: " + said.body  # no pair cut in two
    # One long word: cut where it must be, at a character.
    post_message(nova, channel, "a" * 5000)
    run_jobs()
    assert [len(m["text"]) for m in tg.sent(TOKEN, GROUP)][2:] == [4096, 5006 - 4096]


def test_a_long_message_edited_or_deleted_here_changes_every_part(linked, tg, api, bob, channel):
    long = "\n".join(f"Line {i} " + "x" * 90 for i in range(100))  # ~9,900: three parts
    said = post_message(bob, channel, long)
    run_jobs()
    assert len(tg.sent(TOKEN, GROUP)) == 3
    edited = api(bob).patch(f"/api/v1/messages/{said.id}/", {"body": "Shorter."}, format="json")
    assert edited.status_code == 200
    run_jobs()
    assert [m["text"] for m in tg.sent(TOKEN, GROUP)] == ["bob: Shorter."]
    send = TelegramSend.objects.get(message=said)
    assert send.part_message_ids == [] and send.status == TelegramSend.Status.SENT
    # Longer again, then deleted: every part goes.
    api(bob).patch(f"/api/v1/messages/{said.id}/", {"body": long}, format="json")
    run_jobs()
    assert len(tg.sent(TOKEN, GROUP)) == 3
    assert api(bob).delete(f"/api/v1/messages/{said.id}/").status_code == 200
    run_jobs()
    assert tg.sent(TOKEN, GROUP) == []
    assert TelegramSend.objects.get(message=said).status == TelegramSend.Status.DELETED


def test_a_long_reply_cut_short_by_a_failure_goes_on_where_it_stopped(
    linked, tg, nova, channel, clock, monkeypatch
):
    calls = []
    real = tg.api_sendmessage

    def second_fails(bot, params):
        calls.append(params["text"])
        if len(calls) == 2:
            raise Refused(500, "Internal Server Error")
        return real(bot, params)

    monkeypatch.setattr(tg, "api_sendmessage", second_fails)
    said = post_message(nova, channel, "\n\n".join(["a" * 3000, "b" * 3000, "c" * 3000]))
    assert run_jobs() == [False]
    assert [m["text"][-1] for m in tg.sent(TOKEN, GROUP)] == ["a"]
    clock.advance(31)
    assert telegram.retry_sends() == 1
    # Each part once, in order.
    assert [m["text"][-1] for m in tg.sent(TOKEN, GROUP)] == ["a", "b", "c"]
    send = TelegramSend.objects.get(message=said)
    assert len(send.part_message_ids) == 2 and send.status == TelegramSend.Status.SENT


# ---- the order of a chat ------------------------------------------------------------------------


@pytest.fixture
def two_chats(linked, tg, api, alice, budget_room, team_a):
    """Also Alice's #room linked to the Work group."""
    room = budget_room[0]
    link = make_link(api, alice, room)
    tg.say(TOKEN, OTHER_GROUP, DANA, f"/start {link['code']}")
    telegram.poll_once(telegram.bot_of(team_a.id))
    run_jobs()
    tg.bots[TOKEN].sent.clear()
    room.refresh_from_db()
    return room


def test_a_failed_send_keeps_its_place_in_the_chat(two_chats, tg, nova, channel, alice, clock):
    """A failed send was tried again 30 s later while the newer ones to its chat went at once:
    the chat read the answer before the question."""
    tg.fail("sendMessage", 500, "Internal Server Error")
    post_message(nova, channel, "First.")
    assert run_jobs() == [False]
    post_message(nova, channel, "Second.")
    post_message(nova, channel, "Third.")
    post_message(alice, two_chats, "Another chat is not held back.")
    assert run_jobs() == [False, False, True]
    assert tg.sent(TOKEN, GROUP) == []
    assert [m["text"] for m in tg.sent(TOKEN, OTHER_GROUP)] == [
        "alice: Another chat is not held back."
    ]
    waiting = TelegramSend.objects.filter(message__body__in=["Second.", "Third."])
    assert {(s.status, s.attempts) for s in waiting} == {(TelegramSend.Status.PENDING, 0)}
    clock.advance(31)
    telegram.retry_sends()
    assert [m["text"] for m in tg.sent(TOKEN, GROUP)] == [
        "Nova: First.",
        "Nova: Second.",
        "Nova: Third.",
    ]
    assert telegram.retry_sends() == 0 and len(tg.sent(TOKEN, GROUP)) == 3


def test_a_newer_send_whose_job_runs_first_waits_and_goes_right_after(linked, tg, nova, channel):
    """Two workers may take the jobs in either order: the newer one waits, and the older one's
    job sends it next, without waiting for the retry job."""
    older = post_message(nova, channel, "Question?")
    newer = post_message(nova, channel, "Answer.")
    after_commit()
    newer_send = TelegramSend.objects.get(message=newer)
    assert telegram.deliver(newer_send.id) is False
    assert tg.sent(TOKEN, GROUP) == []
    assert telegram.deliver(TelegramSend.objects.get(message=older).id) is True
    assert [m["text"] for m in tg.sent(TOKEN, GROUP)] == ["Nova: Question?", "Nova: Answer."]
    newer_send.refresh_from_db()
    assert newer_send.status == TelegramSend.Status.SENT and newer_send.problem == ""
    run_jobs()
    assert len(tg.sent(TOKEN, GROUP)) == 2


def test_a_pending_edit_of_an_older_message_holds_nothing_back(
    linked, tg, api, bob, nova, channel, clock
):
    said = post_message(bob, channel, "At seven.")
    run_jobs()
    tg.fail("editMessageText", 500, "Internal Server Error")
    api(bob).patch(f"/api/v1/messages/{said.id}/", {"body": "At eight."}, format="json")
    assert run_jobs() == [0]
    post_message(nova, channel, "Noted.")
    assert run_jobs() == [True]
    assert [m["text"] for m in tg.sent(TOKEN, GROUP)] == ["bob: At seven.", "Nova: Noted."]


def test_a_waiting_send_whose_message_is_deleted_does_not_stop_the_ones_after_it(
    linked, tg, api, bob, nova, channel
):
    first = post_message(nova, channel, "One.")
    second = post_message(bob, channel, "Two, deleted.")
    third = post_message(nova, channel, "Three.")
    after_commit()
    sends = {m: TelegramSend.objects.get(message=m).id for m in (first, second, third)}
    assert telegram.deliver(sends[third]) is False and telegram.deliver(sends[second]) is False
    assert api(bob).delete(f"/api/v1/messages/{second.id}/").status_code == 200
    assert telegram.deliver(sends[first]) is True
    assert [m["text"] for m in tg.sent(TOKEN, GROUP)] == ["Nova: One.", "Nova: Three."]
    assert TelegramSend.objects.get(pk=sends[second]).status == TelegramSend.Status.DELETED


def test_a_send_failing_on_our_side_is_given_up_in_time_not_holding_its_chat(
    linked, tg, nova, channel, clock
):
    """A send that fails with an error of ours, not Telegram's, was never counted: its job
    crashed, and it stayed pending for good, and with it every later message to its chat."""
    from conversations.models import Message

    broken = post_message(nova, channel, "Broken.")
    after_commit()
    Message.objects.filter(pk=broken.pk).update(payload={"attachments": [{"id": "no name"}]})
    assert run_jobs() == [False]
    post_message(nova, channel, "Next.")
    assert run_jobs() == [False]  # behind the broken one
    for _ in range(telegram.MAX_ATTEMPTS - 1):
        clock.advance(3601)
        telegram.retry_sends()
    send = TelegramSend.objects.get(message=broken)
    assert (send.status, send.attempts) == (TelegramSend.Status.FAILED, telegram.MAX_ATTEMPTS)
    assert [m["text"] for m in tg.sent(TOKEN, GROUP)] == ["Nova: Next."]


def test_an_update_that_fails_on_our_side_is_logged_and_passed_not_fetched_forever(
    linked, tg, channel, team_a, caplog
):
    """Polling: an update whose handling failed (here, text PostgreSQL cannot store) left the
    offset where it was; the poller asked for it again, failed again, and heard nothing more."""
    tg.say(TOKEN, GROUP, DANA, "a\x00b")
    tg.say(TOKEN, GROUP, DANA, "Still heard.")
    bot = telegram.bot_of(team_a.id)
    with caplog.at_level(logging.ERROR, logger="integrations.telegram"):
        assert telegram.poll_once(bot) == 2
    assert "could not be handled" in caplog.text
    assert channel.messages.filter(body="Still heard.").exists()
    assert telegram.poll_once(bot) == 0
