"""What a turn hands the server fits what the server takes: a real bridge process against a real
daphne. A reply or a failure's reason the server would refuse was never acked, so the item came
back and the model ran again, for ever, and the person saw nothing."""

import json
from pathlib import Path

import pytest

from agents import actions as agent_actions
from conversations import tasks
from conversations.actions import MAX_BODY, post_message, update_channel
from conversations.models import Delivery, Message, Task
from tests.socket_helpers import agent_replies, start_bridge
from tests.waiting import wait_until

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

FAKE_CODEX = Path(__file__).parent / "fake_bin" / "codex"


def test_a_reply_longer_than_a_message_holds_is_posted_cut(alice, channel, nova, server, tmp_path):
    long = " ".join(f"w{n}" for n in range(6000))  # 34,889 characters
    bridge = start_bridge(server, nova, tmp_path, json.dumps({"replies": {"all of it": long}}))
    try:
        post_message(alice, channel, "all of it")
        reply = wait_until(lambda: agent_replies(channel, nova), what="the reply")[0]
        wait_until(lambda: Delivery.objects.filter(acked_at__isnull=False).exists(), what="ack")
        assert len(reply.body) <= MAX_BODY and reply.kind == "text"
        assert long.startswith(reply.body.split("…")[0])
        assert reply.body.endswith(
            f"[cut: {len(long):,} characters, over the 20,000 a message holds]"
        )
    finally:
        bridge.terminate()
        output = bridge.communicate(timeout=10)[0]
    assert "Traceback" not in output, output


def test_a_long_failure_reason_reaches_the_person_cut(
    alice, team_a, channel, nova, server, tmp_path
):
    agent_actions.update_agent(nova, backend="codex_cli")
    failed = tmp_path / "failed.jsonl"
    failed.write_text(
        json.dumps({"type": "turn.failed", "error": {"message": "x" * 30_000}}) + "\n"
    )
    bridge = start_bridge(
        server, nova, tmp_path, json.dumps({"executable": str(FAKE_CODEX)}),
        FAKE_CLI_FIXTURE=str(failed),
    )  # fmt: skip
    try:
        post_message(alice, channel, "hello")
        task = tasks.create_task(alice, team_a, nova, "Summarise the quarter")
        notice = wait_until(
            lambda: Message.objects.filter(conversation=channel, kind="notice").first(),
            what="a notice",
        )
        assert notice.body.startswith("Nova could not answer: the codex CLI failed: xxx")
        assert notice.body.endswith("…") and len(notice.body) < 1100
        task = wait_until(
            lambda: Task.objects.filter(pk=task.pk, status="failed").first(), what="the task"
        )
        assert task.error.startswith("the codex CLI failed: xxx") and len(task.error) <= 1000
    finally:
        bridge.terminate()
        output = bridge.communicate(timeout=10)[0]
    assert "Traceback" not in output, output


def test_a_reply_refused_for_good_is_acked_not_answered_again(
    alice, channel, nova, server, tmp_path
):
    """The channel was archived while the item waited: the reply can never be posted. Unacked,
    the item came back after every lease and the model answered it again, for ever."""
    post_message(alice, channel, "hello")
    update_channel(alice, channel, archived=True)
    bridge = start_bridge(server, nova, tmp_path)
    try:
        delivery = wait_until(
            lambda: Delivery.objects.filter(agent=nova, acked_at__isnull=False).first(),
            what="the item acked",
        )
        assert delivery.attempts == 1
        assert not agent_replies(channel, nova)
    finally:
        bridge.terminate()
        output = bridge.communicate(timeout=10)[0]
    assert "refused, not retried: conversation_archived" in output, output
    assert "Traceback" not in output, output
