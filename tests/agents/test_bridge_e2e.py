"""A real bridge process (scripted backend) against a real daphne server: replies arrive through
the normal pipeline; a bridge killed mid-turn loses nothing and doubles nothing."""

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path

import pytest
from agntchat_bridge.backends.scripted import ScriptedBackend
from agntchat_bridge.runtime import Bridge, Config
from asgiref.sync import sync_to_async
from django.conf import settings
from django.db.models import F

from agents import actions as agent_actions
from conversations import tasks
from conversations.actions import create_conversation, post_message
from conversations.models import Delivery, Message, Task
from tests.socket_helpers import Daphne, agent_replies, start_bridge
from tests.waiting import until, wait_until

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

FAKE_CLAUDE = Path(__file__).parents[1] / "bridge" / "fake_bin" / "claude"


def test_a_person_posts_and_the_bridge_replies_through_the_pipeline(
    alice, channel, nova, server, tmp_path
):
    bridge = start_bridge(server, nova, tmp_path)
    try:
        question = post_message(alice, channel, "What is the plan?")
        replies = wait_until(lambda: agent_replies(channel, nova), what="the agent's reply")
        assert [r.body for r in replies] == ["Echo: What is the plan?"]
        assert replies[0].reply_to_id == question.id and replies[0].kind == "text"
        wait_until(
            lambda: Delivery.objects.filter(acked_at__isnull=False).count() == 1, what="the ack"
        )
        # Usage of the turn is recorded.
        assert nova.usage.count() == 1 and nova.usage.get().backend == "scripted"
        # A backend failure is visible as a notice, never silence.
        post_message(alice, channel, "please [[fail]]")
        notice = wait_until(
            lambda: Message.objects.filter(conversation=channel, kind="notice").first(),
            what="a notice",
        )
        assert notice.body == "Nova could not answer: scripted failure"
        assert notice.author_agent_id == nova.id
    finally:
        bridge.terminate()
        output = bridge.communicate(timeout=10)[0]
    assert "Traceback" not in output, output


def test_a_bridge_killed_mid_turn_redoes_the_work_once(alice, channel, nova, server, tmp_path):
    bridge = start_bridge(server, nova, tmp_path, '{"delay_ms": 4000}')
    post_message(alice, channel, "slow question")
    wait_until(lambda: Delivery.objects.filter(claimed_by__isnull=False).exists(), what="the claim")
    time.sleep(0.5)  # the behaviour under test: killed half a second into its 4 s turn
    os.kill(bridge.pid, signal.SIGKILL)
    bridge.wait()
    assert agent_replies(channel, nova) == []
    restarted = start_bridge(server, nova, tmp_path, '{"delay_ms": 200}')
    try:
        replies = wait_until(lambda: agent_replies(channel, nova), what="the redone reply")
        wait_until(
            lambda: Delivery.objects.filter(acked_at__isnull=False).count() == 1, what="the ack"
        )
        # The bridge posts before it acks, and the killed one posts nothing: this is final.
        assert [r.body for r in agent_replies(channel, nova)] == ["Echo: slow question"]
        assert Delivery.objects.get().attempts == 2
        assert replies
    finally:
        restarted.terminate()
        restarted.wait(timeout=10)


def test_a_turn_that_hangs_is_stopped_at_the_agents_time_limit(
    alice, team_a, channel, nova, server, tmp_path
):
    """A CLI that never answers: past the agent's limit (3 s here: a loaded machine may take a second to start the stand-in CLI, which must log its run first) its process group is killed,
    each message gets a notice saying why and is acked, the task fails with that reason, and the
    lane goes on to the next item instead of extending the hung one's lease for ever."""
    agent_actions.update_agent(nova, backend="claude_cli", turn_time_limit_seconds=3)
    cli_log = tmp_path / "cli.jsonl"
    bridge = start_bridge(
        server,
        nova,
        tmp_path,
        json.dumps({"executable": str(FAKE_CLAUDE)}),
        AGNTCHAT_CHAT_LANES="1",
        FAKE_CLI_HANG="1",  # prints nothing and sleeps a minute, with a child of its own
        FAKE_CLI_LOG=str(cli_log),
    )
    reason = "the turn ran past its time limit of 3 seconds and was stopped"
    try:
        post_message(alice, channel, "first")
        post_message(alice, channel, "second")
        task = tasks.create_task(alice, team_a, nova, "Summarise the quarter")
        notices = wait_until(
            lambda: (
                found
                if len(found := list(Message.objects.filter(kind="notice", author_agent=nova))) == 2
                else None
            ),
            what="two notices",
        )
        assert [n.body for n in notices] == [f"Nova could not answer: {reason}"] * 2
        wait_until(lambda: Delivery.objects.filter(acked_at__isnull=True).count() == 0, what="acks")
        task = wait_until(
            lambda: Task.objects.filter(pk=task.pk, status="failed").first(), what="the task"
        )
        assert task.error == reason
        runs = [json.loads(line) for line in cli_log.read_text().splitlines()]
        assert len(runs) == 3
        pids = [pid for run in runs for pid in (run["pid"], run["child_pid"])]
        wait_until(lambda: not any(map(alive, pids)), timeout=3, what="the CLIs to be gone")
    finally:
        bridge.terminate()
        output = bridge.communicate(timeout=10)[0]
    assert "Traceback" not in output, output


def alive(pid) -> bool:
    """True while PID runs; a zombie nobody reaped (an orphan in a container) counts as gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def test_the_bridge_survives_a_server_restart(alice, channel, nova, tmp_path):
    first = Daphne()
    port = first.port
    bridge = start_bridge(first, nova, tmp_path)
    try:
        post_message(alice, channel, "before")
        wait_until(lambda: len(agent_replies(channel, nova)) == 1, what="first reply")
        first.stop()
        post_message(alice, channel, "while the server is down")
        second = Daphne(port=port)
        try:
            wait_until(
                lambda: len(agent_replies(channel, nova)) == 2,
                timeout=40,
                what="reply after restart",
            )
            assert agent_replies(channel, nova)[1].body == "Echo: while the server is down"
        finally:
            second.stop()
    finally:
        bridge.terminate()
        bridge.wait(timeout=10)


def test_the_bridge_imports_nothing_from_django():
    code = "import sys, agntchat_bridge.runtime, agntchat_bridge.__main__; print(any(m.startswith('django') for m in sys.modules))"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout.strip()
    assert out == "False"


def test_the_bridge_refreshes_its_session_before_it_expires(nova, server, tmp_path):
    """The bridge renews its session when less than a minute of it is left."""
    _, key = agent_actions.create_agent_key(nova)
    bridge = Bridge(Config(url=server.url, key=key, workdir=tmp_path))

    async def tokens():
        first = await bridge.ensure_token()
        expires = bridge.token_expires
        again = await bridge.ensure_token(now=expires - 61)  # more than a minute left
        renewed = await bridge.ensure_token(now=expires - 59)
        return first, again, renewed

    first, again, renewed = asyncio.run(tokens())
    assert first == again and renewed != first and renewed.startswith("ags_")
    assert bridge.agent["id"] == str(nova.id)


class SlowWhenAsked(ScriptedBackend):
    """The scripted echo, but a message saying "slow" is answered only once the test lets it."""

    def __init__(self):
        super().__init__()
        self.release = asyncio.Event()

    async def run(self, turn):
        if "slow" in turn.prompt:
            await self.release.wait()
        async for event in super().run(turn):
            yield event


@pytest.mark.timeout(60)
async def test_a_persons_burst_is_answered_in_full_and_in_order(alice, team_a, nova, tmp_path):
    """Several lanes, but one message of a conversation at a time: a slow first answer does not
    let the next ones overtake it, nor does it hold up another conversation, and the messages
    waiting for it keep their leases. None is held by the loop guard (TURN-2: answers to a
    person never count)."""
    dm, other = [
        await sync_to_async(create_conversation)(alice, team_a, kind="direct", agent_ids=[nova.id])
        for _ in range(2)
    ]
    _, key = await sync_to_async(agent_actions.create_agent_key)(nova)
    server = await sync_to_async(Daphne)()
    config = Config(url=server.url, key=key, workdir=tmp_path, chat_lanes=4, extend_seconds=0.5)
    backend = SlowWhenAsked()
    bridge = Bridge(config, backend=backend)
    running = asyncio.create_task(bridge.run_forever())
    try:
        burst = ["slow one"] + [f"quick {i}" for i in range(2, 8)]  # more than the DM's cap
        await sync_to_async(post_message)(alice, dm, burst[0])
        # Within the bridge's window (prefetch = its 4 lanes), with the slow one.
        elsewhere = await sync_to_async(post_message)(alice, other, "meanwhile")
        for text in burst[1:]:
            await sync_to_async(post_message)(alice, dm, text)

        async def answers(conversation):
            return [
                m
                async for m in Message.objects.filter(
                    conversation=conversation, author_agent=nova
                ).order_by("created_at")
            ]

        # The other conversation is answered while the slow one runs.
        (meanwhile,) = await until(lambda: answers(other), what="the other conversation's answer")
        assert meanwhile.reply_to_id == elsewhere.id
        assert await answers(dm) == []
        # The DM's items in the bridge's window, the slow one and those waiting for it, have
        # their leases extended (past what their claim gave them) while they wait: none runs
        # out, however long the slow one takes.
        held = Delivery.objects.filter(
            agent=nova, message__conversation=dm, acked_at__isnull=True, claimed_by__isnull=False
        )
        extended = held.filter(
            lease_expires_at__gt=F("claimed_at") + timedelta(seconds=settings.CLAIM_LEASE_SECONDS)
        )

        async def all_extended():
            count = await held.acount()  # the slow one and at least one waiting
            return count >= 2 and await extended.acount() == count

        await until(all_extended, what="the leases of the held items extended")
        backend.release.set()

        async def whole_burst():
            found = await answers(dm)
            return found if len(found) >= len(burst) else None

        replies = await until(whole_burst, what="every message of the burst answered")
        assert [m.body for m in replies] == [f"Echo: {text}" for text in burst]
        assert [m.held_at for m in replies] == [None] * len(burst)
        # Each was worked once.
        attempts = Delivery.objects.filter(agent=nova).values_list("attempts", flat=True)
        assert [a async for a in attempts] == [1] * (len(burst) + 1)
    finally:
        await bridge.stop()
        await running
        await sync_to_async(server.stop)()
