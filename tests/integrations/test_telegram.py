"""Telegram as an outside channel (API-3): the stories of docs/telegram.md, against a local
stand-in of the Bot API (tests/integrations/telegram_standin.py) driven through
python-telegram-bot's real Bot, and the real endpoints, pipeline, jobs and database."""

import json
from importlib import import_module

import pytest
from django.db import connection
from django.test import Client
from django_q.models import OrmQ

from agntchat.core import crypto
from conversations.actions import post_message
from conversations.models import Delivery, Message
from integrations import telegram
from integrations.models import TelegramBot, TelegramLink, TelegramSend
from tests.conftest import directives_for
from tests.integrations.telegram_standin import TelegramStandin

TOKEN = "7000001:AAH" + "k" * 32
OTHER_TOKEN = "7000002:AAH" + "z" * 32
GROUP = -1001234
OTHER_GROUP = -1005678
DANA = {"id": 4242, "first_name": "Dana", "last_name": "Scully", "username": "dscully"}


@pytest.fixture
def tg(settings):
    standin = TelegramStandin().start()
    settings.TELEGRAM_API_BASE = standin.url
    settings.TELEGRAM_WEBHOOK_BASE = ""
    standin.add_bot(TOKEN, "team_a_bot")
    standin.add_chat(GROUP, title="Family")
    standin.add_chat(OTHER_GROUP, title="Work")
    yield standin
    standin.stop()


def after_commit() -> None:
    """Run what actions left for after their commit (announcements, the relay), as the commit
    would: a test's transaction never commits."""
    while connection.run_on_commit:
        pending = list(connection.run_on_commit)
        connection.run_on_commit.clear()
        for _, callback, _ in pending:
            callback()


def run_jobs() -> list:
    """Run the django-q2 jobs queued so far, as the worker would; returns their results."""
    after_commit()
    results = []
    while OrmQ.objects.exists():
        for queued in OrmQ.objects.all():
            task = queued.task
            queued.delete()
            module, name = task["func"].rsplit(".", 1)
            results.append(getattr(import_module(module), name)(*task["args"]))
    return results


def bot_url(team) -> str:
    return f"/api/v1/workspaces/{team.id}/telegram/"


def links_url(conversation) -> str:
    return f"/api/v1/conversations/{conversation.id}/telegram-links/"


def set_bot(api, who, team, token=TOKEN):
    return api(who).put(bot_url(team), {"token": token}, format="json")


def make_link(api, who, conversation) -> dict:
    response = api(who).post(links_url(conversation), format="json")
    assert response.status_code == 201, response.content
    return response.json()


@pytest.fixture
def linked(tg, api, alice, team_a, channel):
    """#general linked to the Family group: Alice set the bot up and sent the code there."""
    assert set_bot(api, alice, team_a).status_code == 200
    link = make_link(api, alice, channel)
    tg.say(TOKEN, GROUP, DANA, f"/start {link['code']}")
    assert telegram.poll_once(telegram.bot_of(team_a.id)) == 1
    run_jobs()  # the "linked" notice, relayed to the chat
    tg.bots[TOKEN].sent.clear()
    channel.refresh_from_db()  # as every request reads it: now listing the relay
    return TelegramLink.objects.get(pk=link["id"])


def texts(conversation) -> list[str]:
    return list(conversation.messages.order_by("created_at").values_list("body", flat=True))


# ---- the bot token --------------------------------------------------------------------------------


def test_an_admin_stores_the_bot_token_checked_with_telegram_encrypted_and_never_shown(
    tg, api, alice, bob, team_a
):
    response = set_bot(api, alice, team_a)
    assert response.status_code == 200
    body = response.json()
    assert body["configured"] is True and body["username"] == "team_a_bot"
    assert body["receivesBy"] == "polling"
    assert TOKEN.split(":")[1] not in response.content.decode()
    row = TelegramBot.objects.get(workspace=team_a)
    assert TOKEN not in row.token_ciphertext and crypto.decrypt(row.token_ciphertext) == TOKEN
    assert row.telegram_id == 7000001
    # Checked with getMe; no public URL here, so the webhook is cleared for polling.
    assert [c.method for c in tg.calls] == ["getMe", "deleteWebhook"]
    # A member sees that there is a bot, and who; nobody reads the token back.
    seen = api(bob).get(bot_url(team_a))
    assert seen.status_code == 200 and seen.json()["username"] == "team_a_bot"
    assert TOKEN.split(":")[1] not in seen.content.decode()


def test_a_bad_token_is_refused_and_nothing_is_stored(tg, api, alice, bob, team_a):
    refused = set_bot(api, alice, team_a, token=OTHER_TOKEN)  # well formed, unknown to Telegram
    assert refused.status_code == 400
    assert refused.json()["error"]["code"] == "telegram_token_refused"
    assert [c.method for c in tg.calls] == ["getMe"]
    malformed = set_bot(api, alice, team_a, token="not a token")
    assert malformed.status_code == 400 and malformed.json()["error"]["fields"]["token"]
    assert len(tg.calls) == 1  # never sent to Telegram
    # A member is not an admin.
    assert set_bot(api, bob, team_a).status_code == 403
    assert not TelegramBot.objects.exists()
    assert api(alice).get(bot_url(team_a)).json() == {"configured": False}


def test_clearing_the_bot_unlinks_its_chats(linked, api, alice, channel, team_a):
    assert api(alice).delete(bot_url(team_a)).status_code == 204
    assert not TelegramBot.objects.exists() and not TelegramLink.objects.exists()
    channel.refresh_from_db()
    assert "relays" not in channel.settings
    assert api(alice).delete(bot_url(team_a)).status_code == 404


# ---- linking --------------------------------------------------------------------------------------


def test_a_link_code_sent_to_the_bot_binds_the_chat(tg, api, alice, bob, team_a, channel):
    set_bot(api, alice, team_a)
    assert api(bob).post(links_url(channel), format="json").status_code == 201  # replaced below
    link = make_link(api, bob, channel)
    assert link["status"] == "pending" and link["botUsername"] == "team_a_bot"
    assert link["startUrl"] == f"https://t.me/team_a_bot?start={link['code']}"
    row = TelegramLink.objects.get()  # the first, pending, was replaced
    assert row.code_hash == crypto.hash_secret(link["code"]) and link["code"] not in row.code_hash

    tg.say(TOKEN, GROUP, DANA, f"/start@team_a_bot {link['code']}")
    assert telegram.poll_once(telegram.bot_of(team_a.id)) == 1
    row.refresh_from_db()
    assert row.chat_id == GROUP and row.chat_title == "Family" and row.code_hash is None
    channel.refresh_from_db()
    assert channel.settings["relays"] == ["telegram"]
    listed = api(alice).get(links_url(channel)).json()["results"]
    assert [(x["status"], x["chatTitle"]) for x in listed] == [("linked", "Family")]
    assert "code" not in listed[0]
    # The notice of the link is the chat's confirmation.
    notice = channel.messages.get(kind=Message.Kind.NOTICE)
    assert "Family" in notice.body
    run_jobs()
    assert [m["text"] for m in tg.sent(TOKEN, GROUP)] == [f"ⓘ {notice.body}"]
    # One chat per conversation: a second link is refused while this one stands.
    again = api(alice).post(links_url(channel), format="json")
    assert again.status_code == 409 and again.json()["error"]["code"] == "telegram_already_linked"


def test_expired_and_used_codes_are_refused(tg, api, alice, team_a, channel, clock):
    set_bot(api, alice, team_a)
    bot = telegram.bot_of(team_a.id)
    stale = make_link(api, alice, channel)
    clock.advance(16 * 60)
    tg.say(TOKEN, GROUP, DANA, f"/start {stale['code']}")
    telegram.poll_once(bot)
    assert TelegramLink.objects.get().chat_id is None
    assert "not valid" in tg.sent(TOKEN, GROUP)[-1]["text"]

    fresh = make_link(api, alice, channel)
    tg.say(TOKEN, GROUP, DANA, fresh["code"])  # the code alone works too
    tg.say(TOKEN, OTHER_GROUP, DANA, f"/start {fresh['code']}")  # used already
    assert telegram.poll_once(bot) == 2
    assert TelegramLink.objects.get().chat_id == GROUP
    assert "not valid" in tg.sent(TOKEN, OTHER_GROUP)[-1]["text"]
    assert not TelegramLink.objects.filter(chat_id=OTHER_GROUP).exists()


def test_no_bot_no_link(tg, api, alice, channel):
    refused = api(alice).post(links_url(channel), format="json")
    assert refused.status_code == 409 and refused.json()["error"]["code"] == "telegram_not_set_up"
    assert not TelegramLink.objects.exists()


# ---- messages in ------------------------------------------------------------------------------


def test_a_message_in_the_chat_is_posted_as_the_telegram_person_and_wakes_the_agent(
    linked, tg, alice, nova, channel, team_a
):
    tg.say(TOKEN, GROUP, DANA, "Is dinner at eight?")
    bot = telegram.bot_of(team_a.id)
    assert telegram.poll_once(bot) == 1
    message = channel.messages.get(body="Is dinner at eight?")
    # Posted on behalf of the person who linked the chat, shown as the Telegram person.
    assert message.author_user == alice
    assert message.payload["external_author"] == {
        "channel": "telegram",
        "name": "Dana Scully",
        "username": "dscully",
        "id": 4242,
    }
    assert Delivery.objects.filter(message=message, agent=nova).exists()
    assert "From Dana Scully (via Telegram)" in directives_for(nova, message)["volatile"]
    # Asked again, Telegram hands out nothing new: the offset was stored.
    assert telegram.poll_once(bot) == 0
    assert telegram.handle_update(bot, _update_of(tg, message)) is False
    assert channel.messages.filter(body="Is dinner at eight?").count() == 1
    # What came from the chat is not sent back to it.
    run_jobs()
    assert tg.sent(TOKEN) == []


def _update_of(tg, message):
    from telegram import Update

    return Update.de_json(
        {
            "update_id": 700_001,
            "message": {"message_id": 1, "date": 0, "chat": tg.chats[GROUP], "text": message.body},
        },
        None,
    )


def test_the_page_shows_the_telegram_person_via_telegram(linked, tg, alice, channel, team_a):
    tg.say(TOKEN, GROUP, DANA, "Hello from the group")
    telegram.poll_once(telegram.bot_of(team_a.id))
    client = Client()
    client.force_login(alice)
    page = client.get(f"/w/{team_a.id}/c/{channel.id}/").content.decode()
    item = page[page.index("Hello from the group") - 2500 : page.index("Hello from the group")]
    assert "Dana Scully" in item and "via Telegram" in item
    settings_page = client.get(f"/w/{team_a.id}/c/{channel.id}/settings/").content.decode()
    assert "Family" in settings_page and "Unlink" in settings_page


@pytest.fixture
def webhook_mode(settings, tg):
    settings.TELEGRAM_WEBHOOK_BASE = "https://chat.example.com"


def post_update(url: str, body: bytes, headers: dict):
    path = url.removeprefix("https://chat.example.com")
    extra = {
        f"HTTP_{k.upper().replace('-', '_')}": v for k, v in headers.items() if k != "Content-Type"
    }
    return Client().post(path, body, content_type="application/json", **extra)


def test_updates_through_the_webhook_need_its_secret(
    webhook_mode, tg, api, alice, nova, team_a, channel
):
    assert set_bot(api, alice, team_a).status_code == 200
    bot = TelegramBot.objects.get()
    hook = tg.calls_of("setWebhook")[-1].params
    assert hook["url"] == f"https://chat.example.com/telegram/{bot.id}/webhook/"
    assert bot.webhook_secret_hash == crypto.hash_secret(hook["secret_token"])
    assert hook["secret_token"] not in bot.webhook_secret_hash
    assert api(alice).get(bot_url(team_a)).json()["receivesBy"] == "webhook"

    code = make_link(api, alice, channel)["code"]
    response = post_update(*tg.webhook_request(TOKEN, tg.say(TOKEN, GROUP, DANA, f"/start {code}")))
    assert response.status_code == 200
    assert TelegramLink.objects.get().chat_id == GROUP

    update = tg.say(TOKEN, GROUP, DANA, "Via the webhook")
    url, body, headers = tg.webhook_request(TOKEN, update)
    for wrong in ({**headers, "X-Telegram-Bot-Api-Secret-Token": "guess"}, {}):
        assert post_update(url, body, wrong).status_code == 404
    assert post_update(url.replace(str(bot.id), str(nova.id)), body, headers).status_code == 404
    assert not channel.messages.filter(body="Via the webhook").exists()
    assert post_update(url, body, headers).status_code == 200
    assert post_update(url, body, headers).status_code == 200  # Telegram retrying: skipped
    message = channel.messages.get(body="Via the webhook")
    assert message.payload["external_author"]["name"] == "Dana Scully"
    assert Delivery.objects.filter(message=message, agent=nova).exists()
    # Not an update at all, or not one whose parts have the types we read: nothing done, and
    # taken (200), so that Telegram does not hold the later ones back to send it again.
    assert post_update(url, b"[1, 2]", headers).status_code == 200
    offset = TelegramBot.objects.get().update_offset
    good = json.loads(body)
    message = good["message"]
    for bad in (
        {**good, "update_id": 2**63},
        {**good, "update_id": True},
        {**good, "message": {k: v for k, v in message.items() if k != "chat"}},
        {**good, "message": {**message, "text": {"a": 1}}},
        {**good, "message": {**message, "chat": {**message["chat"], "id": "12"}}},
        {**good, "message": {**message, "from": "dana"}},
    ):
        assert post_update(url, json.dumps(bad).encode(), headers).status_code == 200, bad
    assert TelegramBot.objects.get().update_offset == offset


# ---- messages out -----------------------------------------------------------------------------


def test_replies_in_the_conversation_are_sent_to_the_chat_once(linked, tg, bob, nova, channel):
    reply = post_message(nova, channel, "Yes, at eight.")
    dessert = post_message(bob, channel, "I'll bring dessert.")
    after_commit()
    assert TelegramSend.objects.filter(message__in=[reply, dessert]).count() == 2
    assert OrmQ.objects.count() == 2  # sent by the worker, not by the post
    assert tg.sent(TOKEN) == []
    assert run_jobs() == [True, True]
    assert [m["text"] for m in tg.sent(TOKEN, GROUP)] == [
        "Nova: Yes, at eight.",
        "bob: I'll bring dessert.",
    ]
    # Running the job again, or the retry job, sends nothing twice.
    send = TelegramSend.objects.get(message=reply)
    assert telegram.deliver(send.id) is False and telegram.retry_sends() == 0
    assert send.status == TelegramSend.Status.SENT and send.telegram_message_id
    assert len(tg.sent(TOKEN)) == 2


def test_a_failed_send_is_tried_again(linked, tg, nova, channel, clock):
    tg.fail("sendMessage", 500, "Internal Server Error")
    lost = post_message(nova, channel, "Lost the first time.")
    assert run_jobs() == [False]
    send = TelegramSend.objects.get(message=lost)
    assert send.status == TelegramSend.Status.PENDING and send.attempts == 1 and send.problem
    assert telegram.retry_sends() == 0  # not due yet
    clock.advance(31)
    assert telegram.retry_sends() == 1
    assert [m["text"] for m in tg.sent(TOKEN)] == ["Nova: Lost the first time."]
    # Telegram asking to slow down is waited out too.
    tg.fail("sendMessage", 429, "Too Many Requests: retry after 5", retry_after=5)
    post_message(nova, channel, "Slow down.")
    assert run_jobs() == [False]
    clock.advance(6)
    assert telegram.retry_sends() == 1
    assert len(tg.sent(TOKEN)) == 2


def test_an_edit_here_is_an_edit_in_the_chat(linked, tg, api, bob, nova, channel):
    said = post_message(bob, channel, "Dinner at seven.")
    run_jobs()
    [copy] = tg.sent(TOKEN, GROUP)
    assert copy["text"] == "bob: Dinner at seven."
    edited = api(bob).patch(
        f"/api/v1/messages/{said.id}/", {"body": "Dinner at eight."}, format="json"
    )
    assert edited.status_code == 200, edited.json()
    # The request only queued it; the worker edits the chat's copy, not a new message.
    assert tg.calls_of("editMessageText") == []
    assert run_jobs() == [1]
    [copy] = tg.sent(TOKEN, GROUP)
    assert (copy["message_id"], copy["text"]) == (
        TelegramSend.objects.get(message=said).telegram_message_id,
        "bob: Dinner at eight.",
    )
    [call] = tg.calls_of("editMessageText")
    assert (
        int(call.params["chat_id"]) == GROUP
        and int(call.params["message_id"]) == copy["message_id"]
    )
    assert TelegramSend.objects.get(message=said).status == TelegramSend.Status.SENT
    assert tg.calls_of("sendMessage")[-1].params["text"] == "bob: Dinner at seven."  # sent once


def test_a_deletion_here_deletes_the_chats_copy(linked, tg, api, bob, nova, channel):
    keep = post_message(nova, channel, "Noted.")
    said = post_message(bob, channel, "Wrong chat, sorry.")
    run_jobs()
    assert len(tg.sent(TOKEN, GROUP)) == 2
    assert api(bob).delete(f"/api/v1/messages/{said.id}/").status_code == 200
    assert run_jobs() == [1]
    assert [m["text"] for m in tg.sent(TOKEN, GROUP)] == ["Nova: Noted."]
    send = TelegramSend.objects.get(message=said)
    assert send.status == TelegramSend.Status.DELETED
    # Done once: the job again, or the retry job, calls Telegram no more.
    assert telegram.message_changed(said.id) == 0 and telegram.retry_sends() == 0
    assert len(tg.calls_of("deleteMessage")) == 1
    assert TelegramSend.objects.get(message=keep).status == TelegramSend.Status.SENT


def test_a_message_deleted_before_it_was_sent_is_never_sent(linked, tg, api, bob, channel):
    said = post_message(bob, channel, "Oops.")
    after_commit()  # its send is queued, not yet made
    assert api(bob).delete(f"/api/v1/messages/{said.id}/").status_code == 200
    run_jobs()
    assert tg.sent(TOKEN) == [] and tg.calls_of("deleteMessage") == []
    assert TelegramSend.objects.get(message=said).status == TelegramSend.Status.DELETED


def test_an_edit_sent_before_its_message_is_sent_as_edited(linked, tg, api, bob, channel):
    said = post_message(bob, channel, "Draft.")
    after_commit()
    edit = api(bob).patch(f"/api/v1/messages/{said.id}/", {"body": "Final."}, format="json")
    assert edit.status_code == 200
    run_jobs()  # the send reads the edited text; the change's job finds the chat already so
    assert [m["text"] for m in tg.sent(TOKEN)] == ["bob: Final."]
    # (The first send was the link's notice.)
    assert [c.params["text"] for c in tg.calls_of("sendMessage")][1:] == ["bob: Final."]
    assert TelegramSend.objects.get(message=said).status == TelegramSend.Status.SENT


def test_a_failed_edit_is_tried_again(linked, tg, api, bob, channel, clock):
    said = post_message(bob, channel, "At seven.")
    run_jobs()
    tg.fail("editMessageText", 500, "Internal Server Error")
    edit = api(bob).patch(f"/api/v1/messages/{said.id}/", {"body": "At eight."}, format="json")
    assert edit.status_code == 200
    assert run_jobs() == [0]
    send = TelegramSend.objects.get(message=said)
    assert (send.status, send.attempts) == (TelegramSend.Status.PENDING, 1) and send.problem
    clock.advance(31)
    assert telegram.retry_sends() == 1
    assert [m["text"] for m in tg.sent(TOKEN)] == ["bob: At eight."]
    # The chat already showing the text (an edit back and forth in between) is no error.
    TelegramSend.objects.filter(pk=send.pk).update(status=TelegramSend.Status.PENDING)
    assert telegram.deliver(send.id) is True


def test_unlinking_stops_both_directions(linked, tg, api, alice, bob, nova, channel, team_a):
    url = f"{links_url(channel)}{linked.id}/"
    assert api(bob).delete(url).status_code == 403  # neither its maker nor an admin
    assert api(alice).delete(url).status_code == 204
    channel.refresh_from_db()
    assert "relays" not in channel.settings and not TelegramLink.objects.exists()
    tg.say(TOKEN, GROUP, DANA, "Anyone there?")
    telegram.poll_once(telegram.bot_of(team_a.id))
    assert not channel.messages.filter(body="Anyone there?").exists()
    post_message(nova, channel, "Not relayed.")
    assert run_jobs() == []
    assert not TelegramSend.objects.exists()
    assert "Send the code" not in json.dumps(tg.sent(TOKEN))  # group chats are not answered
    assert api(alice).delete(url).status_code == 404


def lose_access(person, team, lost: str) -> None:
    """PERSON can no longer read TEAM's conversations: removed from it, or their account
    deactivated (its memberships kept)."""
    if lost == "removed":
        team.memberships.filter(user=person).delete()
    else:
        person.is_active = False
        person.save(update_fields=["is_active"])


@pytest.mark.parametrize("lost", ["removed", "deactivated"])
def test_a_chat_reaches_no_further_than_the_person_who_linked_it(
    linked, tg, bob, channel, team_a, lost
):
    """The link is made by Bob this time; once Bob loses access, the chat posts nothing."""
    TelegramLink.objects.filter(pk=linked.pk).update(created_by=bob)
    lose_access(bob, team_a, lost)
    tg.say(TOKEN, GROUP, DANA, "Still here?")
    assert telegram.poll_once(telegram.bot_of(team_a.id)) == 1
    assert not channel.messages.filter(body="Still here?").exists()


def test_the_webhook_posts_nothing_for_a_deactivated_linker(
    webhook_mode, tg, api, alice, bob, team_a, channel
):
    assert set_bot(api, alice, team_a).status_code == 200
    code = make_link(api, bob, channel)["code"]
    bound = post_update(*tg.webhook_request(TOKEN, tg.say(TOKEN, GROUP, DANA, f"/start {code}")))
    assert bound.status_code == 200 and TelegramLink.objects.get().chat_id == GROUP
    lose_access(bob, team_a, "deactivated")
    answer = post_update(*tg.webhook_request(TOKEN, tg.say(TOKEN, GROUP, DANA, "Still here?")))
    assert answer.status_code == 200  # taken, so that Telegram does not send it again
    assert not channel.messages.filter(body="Still here?").exists()


def test_a_code_of_a_deactivated_person_binds_nothing(tg, api, alice, bob, team_a, channel):
    set_bot(api, alice, team_a)
    code = make_link(api, bob, channel)["code"]
    lose_access(bob, team_a, "deactivated")
    tg.say(TOKEN, GROUP, DANA, f"/start {code}")
    assert telegram.poll_once(telegram.bot_of(team_a.id)) == 1
    assert TelegramLink.objects.get().chat_id is None
    assert "not valid" in tg.sent(TOKEN, GROUP)[-1]["text"]
    assert not channel.messages.filter(kind=Message.Kind.NOTICE).exists()


@pytest.mark.parametrize("lost", ["removed", "deactivated"])
def test_nothing_is_sent_to_the_chat_once_its_linker_loses_access(
    linked, tg, bob, nova, channel, lost
):
    """Outbound too: what is posted after Bob (who linked the chat) loses access is not relayed,
    and what was queued for the chat before is not sent."""
    TelegramLink.objects.filter(pk=linked.pk).update(created_by=bob)
    queued = post_message(nova, channel, "Queued before Bob lost access.")
    after_commit()
    lose_access(bob, channel.workspace, lost)
    post_message(nova, channel, "Posted after.")
    run_jobs()
    assert tg.sent(TOKEN) == []
    (send,) = TelegramSend.objects.exclude(status=TelegramSend.Status.SENT)  # the "Linked" one
    assert send.message_id == queued.id and send.status == TelegramSend.Status.FAILED
    assert "can no longer read" in send.problem
    assert telegram.retry_sends() == 0 and tg.sent(TOKEN) == []


# ---- tenancy --------------------------------------------------------------------------------------


def test_another_workspaces_people_get_404_on_every_endpoint(linked, api, charlie, team_a, channel):
    client = api(charlie)
    link_url = f"{links_url(channel)}{linked.id}/"
    answers = [
        client.get(bot_url(team_a)),
        client.put(bot_url(team_a), {"token": TOKEN}, format="json"),
        client.delete(bot_url(team_a)),
        client.get(links_url(channel)),
        client.post(links_url(channel), format="json"),
        client.get(link_url),
        client.delete(link_url),
    ]
    assert [a.status_code for a in answers] == [404] * 7
    assert all("error" in a.json() for a in answers)
    assert TelegramBot.objects.count() == 1 and TelegramLink.objects.get().chat_id == GROUP


def test_setting_and_removing_the_bot_token_are_in_the_audit_log(tg, api, alice, bob, team_a):
    from workspaces.models import AuditEntry

    assert set_bot(api, bob, team_a).status_code == 403  # a member may not: no row
    assert set_bot(api, alice, team_a).status_code == 200
    assert api(alice).delete(bot_url(team_a)).status_code == 204
    rows = AuditEntry.objects.filter(action__startswith="telegram_bot.").order_by("created_at")
    assert [(r.action, r.actor_user_id, r.workspace_id) for r in rows] == [
        ("telegram_bot.set", alice.id, team_a.id),
        ("telegram_bot.removed", alice.id, team_a.id),
    ]
    assert TOKEN not in str(list(rows.values()))


def test_replacing_the_bot_tells_the_old_one_to_stop_posting_here(
    webhook_mode, tg, api, alice, team_a
):
    tg.add_bot(OTHER_TOKEN, "newer_bot")
    assert set_bot(api, alice, team_a).status_code == 200
    assert set_bot(api, alice, team_a, token=OTHER_TOKEN).status_code == 200
    # The old bot's webhook would go on posting its chats' updates here, refused (404) forever.
    assert [c.token for c in tg.calls_of("deleteWebhook")] == [TOKEN]
    assert [c.token for c in tg.calls_of("setWebhook")] == [TOKEN, OTHER_TOKEN]
