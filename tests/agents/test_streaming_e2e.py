"""Streaming replies end to end (issue 28): a real bridge process against a real daphne server,
its model a loopback stand-in that streams slowly in the real wire format (or the scripted
backend writing a word at a time). The browsers' topic hears several growing drafts before the
reply is posted; Stop ends a turn with one reply, marked stopped, acked and never redone."""

import json
import shutil
import time

import pytest

from agents.models import Agent
from conversations.actions import post_message
from conversations.models import Delivery
from tests.bridge.standins import StandinServer
from tests.conftest import client_for
from tests.socket_helpers import TopicInbox, agent_replies, start_bridge
from tests.waiting import wait_until

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

REPLY = "The quick brown fox jumps over the lazy dog while the cat watches from the warm window"

# backend → (the agent's base URL, relative to the stand-in; its model; the bridge's environment)
BACKENDS = {
    "scripted": None,
    "anthropic_api": ("", "", {"ANTHROPIC_API_KEY": "test-key"}),
    "openai_api": ("/v1", "", {"OPENAI_API_KEY": "test-key"}),
    "claude_cli": ("", "claude-sonnet-4-6", {"ANTHROPIC_API_KEY": "test-key"}),
    "codex_cli": ("/v1", "gpt-5.4", {"CODEX_API_KEY": "test-key"}),
}


def requires(backend):
    cli = {"claude_cli": "claude", "codex_cli": "codex"}.get(backend)
    return pytest.mark.skipif(
        cli is not None and shutil.which(cli) is None, reason=f"the {cli} CLI is not installed"
    )


@pytest.fixture
def model():
    standin = StandinServer(reply=REPLY).start()
    standin.chunk_seconds = 0.06
    yield standin
    standin.stop()


def bridge_for(backend, nova, server, model, tmp_path, **options):
    """A bridge for NOVA on BACKEND: the stand-in model, or the scripted backend with OPTIONS."""
    if BACKENDS[backend] is None:
        return start_bridge(server, nova, tmp_path, json.dumps(options))
    path, model_name, env = BACKENDS[backend]
    Agent.objects.filter(pk=nova.pk).update(
        backend=backend, base_url=model.url + path, model=model_name
    )
    home = tmp_path / "home"  # the real CLIs must not see a real login or configuration
    home.mkdir()
    env = {**env, "HOME": str(home), "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1"}
    return start_bridge(server, nova, tmp_path / "agents", **env)


def live_events(inbox: TopicInbox, until_type: str, timeout: float = 120) -> list[dict]:
    """Live events on the inbox's topics, in order, up to the first of UNTIL_TYPE by an agent."""
    seen, deadline = [], time.monotonic() + timeout
    while time.monotonic() < deadline:
        seen.append(inbox.next(timeout=deadline - time.monotonic())["event"])
        if seen[-1]["type"] == until_type and seen[-1]["message"]["author"]["type"] == "agent":
            return seen
    raise AssertionError(f"no {until_type} event; saw {seen}")


@pytest.mark.parametrize("backend", [pytest.param(b, marks=requires(b)) for b in BACKENDS])
def test_drafts_grow_before_the_reply_is_posted(
    backend, alice, channel, nova, server, model, tmp_path
):
    inbox = TopicInbox(f"workspace.{channel.workspace_id}")
    bridge = bridge_for(backend, nova, server, model, tmp_path, word_ms=60, default=REPLY)
    try:
        question = post_message(alice, channel, "Tell me about the fox")
        events = live_events(inbox, "message.created")
        (reply,) = agent_replies(channel, nova)
        assert reply.body == REPLY and reply.payload == {}
        draft_events = [e for e in events if e["type"] == "message.draft"]
        assert all(e["replyTo"] == str(question.id) for e in draft_events)
        drafts = [e["text"] for e in draft_events]
        # Each draft is the reply so far: growing, never the same twice, a prefix of the reply.
        assert drafts == sorted(set(drafts), key=len), drafts
        assert all(REPLY.startswith(d) for d in drafts), drafts
        # codex exec --json hands over each agent message whole: one draft, the whole text.
        assert len(drafts) >= (1 if backend == "codex_cli" else 3), drafts
    finally:
        bridge.terminate()
        output = bridge.communicate(timeout=10)[0]
    assert "Traceback" not in output, output


STOPPABLE = ["scripted", "anthropic_api", "openai_api", "claude_cli"]


@pytest.mark.parametrize("backend", [pytest.param(b, marks=requires(b)) for b in STOPPABLE])
def test_stop_posts_what_was_written_once_and_acks(
    backend, alice, charlie, channel, nova, server, model, tmp_path
):
    """The model is cut off mid-stream (an API request aborted, a CLI killed): the reply holds
    what it had written."""
    model.chunk_seconds = 0.15
    inbox = TopicInbox(f"workspace.{channel.workspace_id}")
    bridge = bridge_for(backend, nova, server, model, tmp_path, word_ms=150, default=REPLY)
    try:
        question = post_message(alice, channel, "Tell me about the fox")
        draft = {}
        while draft.get("type") != "message.draft" or draft["text"].count(" ") < 2:
            draft = inbox.next(timeout=20)["event"]  # until a draft of three words
        url = f"/api/v1/conversations/{channel.id}/stop/"
        assert client_for(charlie).post(url, {"work": draft["workId"]}).status_code == 404
        response = client_for(alice).post(url, {"work": draft["workId"]}, format="json")
        assert response.status_code == 202
        (reply,) = wait_until(lambda: agent_replies(channel, nova), what="the stopped reply")
        assert reply.payload == {"stopped": True} and reply.reply_to_id == question.id
        assert draft["text"] in reply.body and REPLY.startswith(reply.body)
        assert len(reply.body) < len(REPLY)
        delivery = wait_until(
            lambda: Delivery.objects.filter(pk=draft["workId"], acked_at__isnull=False).first(),
            what="the ack",
        )
        assert delivery.attempts == 1
        # Nothing is redone: still one reply a while later, and the item stays acked.
        inbox.all(quiet=1.5)
        assert len(agent_replies(channel, nova)) == 1
        assert Delivery.objects.get(pk=draft["workId"]).attempts == 1
    finally:
        bridge.terminate()
        output = bridge.communicate(timeout=10)[0]
    assert "Traceback" not in output, output


def test_stop_before_any_text_ends_the_turn_with_an_empty_stopped_reply(
    alice, channel, nova, server, tmp_path
):
    """Stop from the start of a turn (the page's "working…" line, with the turn list's work
    id): a model that only works (progress steps, no text yet) is cut off and the reply is
    empty, marked stopped. A second question of the conversation, still waiting for the first
    to finish, is stopped before it starts: its reply is empty and stopped too, not an answer."""
    working = [{"progress": "thinking", "sleep_ms": 20_000}, {"text": "Never said"}]
    bridge = bridge_for(
        "scripted", nova, server, None, tmp_path, replies={"think hard": working, "and then": "No"}
    )
    turns_url = f"/api/v1/conversations/{channel.id}/turns/"
    stop_url = f"/api/v1/conversations/{channel.id}/stop/"

    def work_of(question):
        turns = client_for(alice).get(turns_url).json()["results"]
        return next(t["work"] for t in turns if t["messageId"] == str(question.id))

    try:
        first = post_message(alice, channel, "think hard")
        second = post_message(alice, channel, "and then")
        # Both held by the bridge (two chat lanes), the second waiting for the conversation.
        wait_until(
            lambda: Delivery.objects.filter(agent=nova, claimed_by__isnull=False).count() == 2,
            what="both claimed",
        )
        time.sleep(0.5)  # the first turn is under way
        for question in (second, first):
            response = client_for(alice).post(stop_url, {"work": work_of(question)}, format="json")
            assert response.status_code == 202
        replies = wait_until(
            lambda: len(agent_replies(channel, nova)) == 2 and agent_replies(channel, nova),
            timeout=15,
            what="both stopped replies",
        )
        assert {r.reply_to_id for r in replies} == {first.id, second.id}
        assert all(r.body == "" and r.payload == {"stopped": True} for r in replies), [
            (r.body, r.payload) for r in replies
        ]
        wait_until(
            lambda: not Delivery.objects.filter(agent=nova, acked_at__isnull=True).exists(),
            what="both acked",
        )
    finally:
        bridge.terminate()
        output = bridge.communicate(timeout=10)[0]
    assert "Traceback" not in output, output
