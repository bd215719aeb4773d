"""Probes of Telegram as an outside channel, against the Bot API stand-in
(tests/integrations/telegram_standin.py) and the real webhook, pipeline and database: updates
that come in an order or with ids the first version did not expect."""

from conversations.actions import post_message
from integrations import telegram
from integrations.models import TelegramBot, TelegramLink, TelegramSend
from tests.integrations import test_telegram
from tests.integrations.test_telegram import (
    DANA,
    GROUP,
    TOKEN,
    make_link,
    post_update,
    run_jobs,
    set_bot,
)
from workspaces import actions as workspace_actions

tg = test_telegram.tg
webhook_mode = test_telegram.webhook_mode
linked = test_telegram.linked


def test_the_webhook_is_set_for_one_update_at_a_time(webhook_mode, tg, api, alice, team_a):
    """An update below the stored offset is taken for one seen before. Telegram posts to a
    webhook over up to 40 connections at once by default, so update 11 could be handled before
    update 10, and 10, never seen, was dropped: one connection keeps them in order."""
    assert set_bot(api, alice, team_a).status_code == 200
    assert tg.calls_of("setWebhook")[-1].params["max_connections"] in (1, "1")


def test_a_new_sequence_of_update_ids_after_a_quiet_week_is_not_taken_for_replays(
    webhook_mode, tg, api, alice, team_a, channel, clock
):
    """Telegram: "If there are no new updates for at least a week, then identifier of the next
    update will be chosen randomly instead of sequentially." A lower id then is a new update, not
    a replay (Telegram keeps an update 24 hours at most): the chat was deaf until its ids passed
    the old offset."""
    assert set_bot(api, alice, team_a).status_code == 200
    code = make_link(api, alice, channel)["code"]
    assert post_update(*tg.webhook_request(TOKEN, tg.say(TOKEN, GROUP, DANA, f"/start {code}")))
    first = tg.say(TOKEN, GROUP, DANA, "Before the quiet week")
    assert post_update(*tg.webhook_request(TOKEN, first)).status_code == 200
    # Telegram resending it within the day (our answer got lost): skipped.
    clock.advance(3600)
    assert post_update(*tg.webhook_request(TOKEN, first)).status_code == 200
    assert channel.messages.filter(body="Before the quiet week").count() == 1

    clock.advance(8 * 24 * 3600)
    later = tg.say(TOKEN, GROUP, DANA, "After the quiet week")
    later["update_id"] = 52_000
    assert post_update(*tg.webhook_request(TOKEN, later)).status_code == 200
    assert channel.messages.filter(body="After the quiet week").exists()
    assert TelegramBot.objects.get().update_offset == 52_001
    # The new sequence goes on; a replay in it is still skipped.
    again = tg.say(TOKEN, GROUP, DANA, "And the day after")
    again["update_id"] = 52_001
    for _ in range(2):
        assert post_update(*tg.webhook_request(TOKEN, again)).status_code == 200
    assert channel.messages.filter(body="And the day after").count() == 1
    assert telegram.bot_of(team_a.id).update_offset == 52_002


def test_a_bot_serves_one_workspace(webhook_mode, tg, api, alice, bob, team_a, channel):
    """Telegram sends a bot's updates to one webhook (or one poller). The same token saved in a
    second workspace moved the webhook there: the first workspace's linked chats went silent,
    their messages handled where no link knows them. Refused, and nothing changes."""
    assert set_bot(api, alice, team_a).status_code == 200
    hook = tg.calls_of("setWebhook")[-1].params
    team_c = workspace_actions.create_team_workspace(alice, "Team C")
    response = set_bot(api, alice, team_c)
    assert response.status_code == 409, response.content
    assert response.json()["error"]["code"] == "telegram_bot_in_use"
    assert tg.calls_of("setWebhook")[-1].params == hook
    assert tg.bots[TOKEN].webhook_url.endswith(
        f"/telegram/{telegram.bot_of(team_a.id).id}/webhook/"
    )
    assert telegram.bot_of(team_c.id) is None
    # Saved again where it is, it is the same bot: fine.
    assert set_bot(api, alice, team_a).status_code == 200


SUPERGROUP = -1009876543210


def test_a_linked_group_upgraded_to_a_supergroup_stays_linked(linked, tg, nova, channel, team_a):
    """Telegram turns a group into a supergroup (past 200 members, or as its admins change some
    settings) under a new chat id, and says so in the old chat: ``migrate_to_chat_id``. The link
    kept the old id: the chat went silent both ways, with nothing said anywhere."""
    old = tg.chats[GROUP]
    tg.chats[SUPERGROUP] = {"id": SUPERGROUP, "type": "supergroup", "title": old["title"]}
    with tg.lock:
        tg.bots[TOKEN].updates.append(
            {
                "update_id": next(tg.update_ids),
                "message": {
                    "message_id": next(tg.message_ids),
                    "from": {"is_bot": False, **DANA},
                    "chat": old,
                    "date": 1_800_000_000,
                    "migrate_to_chat_id": SUPERGROUP,
                },
            }
        )
    tg.say(TOKEN, SUPERGROUP, DANA, "Now in the supergroup")
    assert telegram.poll_once(telegram.bot_of(team_a.id)) == 2
    assert channel.messages.filter(body="Now in the supergroup").exists()
    assert TelegramLink.objects.get(pk=linked.pk).chat_id == SUPERGROUP
    post_message(nova, channel, "Welcome to the bigger room.")
    run_jobs()
    assert [m["text"] for m in tg.sent(TOKEN, SUPERGROUP)] == ["Nova: Welcome to the bigger room."]


def test_telegram_asking_to_slow_down_is_waited_out_however_often(linked, tg, nova, channel, clock):
    """A 429 is Telegram saying when to try again (a group takes about 20 messages a minute), not
    a failure of the send: counted as one, a busy conversation's backlog ran out of attempts
    and its later messages were given up on, never shown in the chat."""
    tg.fail(
        "sendMessage",
        429,
        "Too Many Requests: retry after 5",
        times=telegram.MAX_ATTEMPTS,
        retry_after=5,
    )
    post_message(nova, channel, "Patience.")
    assert run_jobs() == [False]
    for _ in range(telegram.MAX_ATTEMPTS - 1):
        clock.advance(6)
        assert telegram.retry_sends() == 0
    send = TelegramSend.objects.get(message__body="Patience.")
    assert send.status == TelegramSend.Status.PENDING, send.problem
    clock.advance(6)
    assert telegram.retry_sends() == 1
    assert [m["text"] for m in tg.sent(TOKEN, GROUP)] == ["Nova: Patience."]


def test_a_message_agntchat_refuses_is_answered_in_the_chat(
    webhook_mode, tg, api, alice, team_a, channel
):
    """A refused post (the channel archived, the linking person over their post rate) was
    logged and dropped: the chat's people never knew their message went nowhere."""
    from conversations.actions import update_channel

    assert set_bot(api, alice, team_a).status_code == 200
    code = make_link(api, alice, channel)["code"]
    assert post_update(*tg.webhook_request(TOKEN, tg.say(TOKEN, GROUP, DANA, f"/start {code}")))
    update_channel(alice, channel, archived=True)
    said = tg.say(TOKEN, GROUP, DANA, "Anyone there?")
    assert post_update(*tg.webhook_request(TOKEN, said)).status_code == 200
    assert not channel.messages.filter(body="Anyone there?").exists()
    answer = tg.calls_of("sendMessage")[-1].params
    assert str(answer["chat_id"]) == str(GROUP)
    assert answer["text"].startswith("Not posted in agntchat: This channel is archived")
