"""Native tool calling end to end, for each model backend: a stand-in model (real wire format)
that publishes an artifact, posts a card about it and says done, driven through the real SDKs
or CLIs by a real bridge process against a real daphne server. What it did is visible over
REST and in the page."""

import contextlib
import json
import os
import shutil
import signal
import subprocess
import threading

import pytest
from django.test import Client
from django.urls import reverse

from agents.models import Agent
from artifacts.models import Artifact
from conversations.actions import post_message
from conversations.models import Participant
from tests.bridge.standins import StandinServer
from tests.socket_helpers import agent_replies, start_bridge
from tests.waiting import wait_until
from tests.work.test_tools_e2e import ask_before
from work.models import PermissionRequest, ToolCall

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

HOTEL = {"title": "Memmo Alfama", "price": {"amount": 229, "currency": "EUR", "period": "night"}}
SCRIPT = [
    {
        "say": "Writing it up.",
        "tool": "artifact_publish",
        "input": {"title": "Lisbon plan", "kind": "markdown", "content": "# Lisbon\n\nDay one."},
    },
    {
        "tool": "card_post",
        "input": {
            "template": "hotels",
            "title": "Where to stay",
            "items": [HOTEL],
            "body": "Plan: {result.artifact_id}",
        },
    },  # fmt: skip
    {"tool": "done", "input": {}},
    {"text": "The plan is published."},
]

# backend → (the agent's base URL, relative to the stand-in; its model; the bridge's environment)
BACKENDS = {
    "anthropic_api": ("", "", {"ANTHROPIC_API_KEY": "test-key"}),
    "openai_api": ("/v1", "", {"OPENAI_API_KEY": "test-key"}),
    "claude_cli": ("", "claude-sonnet-4-6", {"ANTHROPIC_API_KEY": "test-key"}),
    # A model codex knows offers MCP tools up front (its default one defers them behind search).
    "codex_cli": ("/v1", "gpt-5.4", {"CODEX_API_KEY": "test-key"}),
}


@pytest.fixture
def model():
    standin = StandinServer().start()
    standin.tool_script = SCRIPT
    yield standin
    standin.stop()


def requires(backend):
    cli = {"claude_cli": "claude", "codex_cli": "codex"}.get(backend)
    return pytest.mark.skipif(
        cli is not None and shutil.which(cli) is None, reason=f"the {cli} CLI is not installed"
    )


@pytest.mark.parametrize("backend", [pytest.param(b, marks=requires(b)) for b in BACKENDS])
def test_a_model_publishes_posts_a_card_and_says_done(
    backend, alice, channel, nova, server, model, tmp_path, api
):
    path, model_name, env = BACKENDS[backend]
    Agent.objects.filter(pk=nova.pk).update(
        backend=backend, base_url=model.url + path, model=model_name
    )
    home = tmp_path / "home"  # the real CLIs must not see a real login or configuration
    home.mkdir()
    env = {**env, "HOME": str(home), "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1"}
    bridge = start_bridge(server, nova, tmp_path / "agents", **env)
    try:
        question = post_message(alice, channel, "Plan our Lisbon trip")
        wait_until(
            lambda: any(
                m.body.endswith("The plan is published.") for m in agent_replies(channel, nova)
            ),
            what="the final reply",
            timeout=120,
        )
        calls = list(ToolCall.objects.order_by("created_at").values_list("tool", "status"))
        assert calls == [
            ("artifact_publish", "succeeded"),
            ("card_post", "succeeded"),
            ("done", "succeeded"),
        ]
        assert ToolCall.objects.filter(message=question).count() == 3
        assert Participant.objects.get(conversation=channel, agent=nova).done_at is not None

        client = api(alice)
        (artifact,) = client.get(f"/api/v1/conversations/{channel.id}/artifacts/").json()["results"]
        assert artifact["title"] == "Lisbon plan"
        content = client.get(f"/api/v1/artifacts/{artifact['id']}/versions/1/").json()
        assert content["content"] == "# Lisbon\n\nDay one."
        messages = client.get(f"/api/v1/conversations/{channel.id}/messages/").json()["results"]
        (card,) = [m for m in messages if "card" in (m.get("payload") or {})]
        assert card["body"] == f"Plan: {artifact['id']}"
        html = client.get(f"/api/v1/messages/{card['id']}/card/").json()["html"]
        assert "Memmo Alfama" in html
        calls = client.get(f"/api/v1/conversations/{channel.id}/tool-calls/").json()["results"]
        assert [c["tool"] for c in calls] == ["artifact_publish", "card_post", "done"]

        page = conversation_page(alice, channel)
        assert "Lisbon plan" in page and "Memmo Alfama" in page
        # The model saw the tools, and got each result back.
        sent = json.dumps([r["json"] for r in model.requests])
        assert "artifact_publish" in sent and artifact["id"] in sent
    finally:
        bridge.terminate()
        output = bridge.communicate(timeout=10)[0]
    assert "Traceback" not in output, output
    # The HTTP clients' request lines (each URL) stay out of the log (bridge/agntchat_bridge/__main__.py).
    assert "HTTP Request:" not in output and "Processing request of type" not in output


def conversation_page(user, conversation) -> str:
    client = Client()
    client.force_login(user)
    response = client.get(
        reverse("conversation", args=[conversation.workspace_id, conversation.id])
    )
    assert response.status_code == 200
    return response.content.decode()


def test_a_call_redelivered_after_a_bridge_kill_runs_once(
    alice, channel, nova, server, model, tmp_path
):
    """The bridge dies (kill -9) after artifact_publish ran, while the model is still thinking:
    the turn is redelivered to the restarted bridge, the model makes the same call again, and
    the server answers it with the stored outcome: one artifact, one call, one reply."""
    model.tool_script = SCRIPT[:1] + [{"text": "The plan is published."}]
    model.after_tools_gate = threading.Event()
    Agent.objects.filter(pk=nova.pk).update(backend="openai_api", base_url=model.url + "/v1")
    env = {"OPENAI_API_KEY": "test-key"}
    bridge = start_bridge(server, nova, tmp_path, **env)
    post_message(alice, channel, "Plan our Lisbon trip")
    wait_until(lambda: ToolCall.objects.filter(status="succeeded").exists(), what="the publish")
    os.kill(bridge.pid, signal.SIGKILL)
    bridge.wait()
    model.after_tools_gate.set()  # the dead bridge's request is answered to nobody
    restarted = start_bridge(server, nova, tmp_path, **env)
    try:
        wait_until(
            lambda: (
                [m.body for m in agent_replies(channel, nova)]
                == ["📄 published “Lisbon plan”", "Writing it up.\n\nThe plan is published."]
            ),
            what="the reply of the redone turn",
            timeout=90,
        )
        assert Artifact.objects.filter(conversation=channel).count() == 1
        assert ToolCall.objects.count() == 1
        # Both bridges started the turn and had the model call the tool; the second heard
        # the stored outcome.
        # Model turns only (a CLI may make other requests, as a retry or a count, under load).
        turns = [r["json"]["messages"] for r in model.requests if "messages" in r["json"]]
        openings = [m for m in turns if m[-1]["role"] == "user"]
        assert len(openings) == 2
    finally:
        restarted.terminate()
        restarted.communicate(timeout=10)


CLIS = ["claude_cli", "codex_cli"]


@pytest.mark.parametrize("backend", [pytest.param(b, marks=requires(b)) for b in CLIS])
def test_a_cli_turn_killed_while_its_call_waits_runs_the_approved_call_after_a_restart(
    backend, alice, channel, nova, server, model, tmp_path, api
):
    """The real CLI's call waits for approval; the bridge is killed (kill -9); the owner
    approves; the restarted bridge redoes the turn, the CLI makes the same call, and the
    approved call runs once: one artifact, one call, the reply."""
    model.tool_script = SCRIPT[:1] + [{"text": "The plan is published."}]
    path, model_name, env = BACKENDS[backend]
    Agent.objects.filter(pk=nova.pk).update(
        backend=backend, base_url=model.url + path, model=model_name
    )
    ask_before(alice, nova, "artifact_publish")
    home = tmp_path / "home"
    home.mkdir()
    env = {**env, "HOME": str(home), "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1"}
    bridge = start_bridge(server, nova, tmp_path / "agents", **env)
    post_message(alice, channel, "Plan our Lisbon trip")
    request = wait_until(
        lambda: PermissionRequest.objects.filter(status="pending").first(),
        what="a permission request",
        timeout=90,
    )
    # The bridge, and the CLI it runs in a process group of its own.
    children = subprocess.run(["pgrep", "-P", str(bridge.pid)], capture_output=True, text=True)
    os.kill(bridge.pid, signal.SIGKILL)
    bridge.wait()
    for child in map(int, children.stdout.split()):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(child, signal.SIGKILL)
    decided = api(alice).post(
        f"/api/v1/permission-requests/{request.id}/decision/",
        {"decision": "approve"},
        format="json",
    )
    assert decided.status_code == 200
    restarted = start_bridge(server, nova, tmp_path / "agents", **env)
    try:
        wait_until(
            lambda: any(
                m.body.endswith("The plan is published.") for m in agent_replies(channel, nova)
            ),
            what="the reply of the redone turn",
            timeout=120,
        )
        assert list(ToolCall.objects.values_list("tool", "status")) == [
            ("artifact_publish", "succeeded")
        ]
        assert Artifact.objects.filter(conversation=channel).count() == 1
    finally:
        restarted.terminate()
        output = restarted.communicate(timeout=10)[0]
    assert "Traceback" not in output, output
