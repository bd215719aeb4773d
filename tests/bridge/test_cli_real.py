"""The real claude / codex CLIs through the backends, against the loopback stand-ins (skipped if not installed)."""

import json
import shutil

import pytest
from agntchat_bridge.backends import Turn, make_backend, run_to_result

from .standins import StandinServer, responses_prompt_tokens

pytestmark = pytest.mark.slow


@pytest.fixture
def server():
    s = StandinServer().start()
    yield s
    s.stop()


@pytest.fixture
def isolated(tmp_path, monkeypatch):
    """A throwaway HOME and workdir so the real CLIs never see a real login or config."""
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1")
    for name in (
        "ANTHROPIC_API_KEY",
        "ANTHROPIC_BASE_URL",
        "CODEX_API_KEY",
        "OPENAI_API_KEY",
        "OPENAI_BASE_URL",
    ):
        monkeypatch.delenv(name, raising=False)
    work = tmp_path / "agent-bo"
    work.mkdir()
    return str(work)


def posts(server, suffix):
    return [r for r in server.requests if r["path"].endswith(suffix)]


@pytest.mark.skipif(
    shutil.which("claude") is None,
    reason="claude CLI not on PATH (npm i -g @anthropic-ai/claude-code)",
)
async def test_real_claude_cli_two_turns_with_resume(server, isolated):
    backend = make_backend("claude_cli")
    stable = "You are Bo, a teammate in agntchat. STABLE-MARKER-123."
    common = {
        "workdir": isolated,
        "base_url": server.url,
        "api_key": "test-key",
        "model": "claude-sonnet-4-6",
    }
    events = []
    first = await run_to_result(
        backend, Turn(stable, "Next: Bo.", "first question", [], **common), events.append
    )
    assert first.text == server.reply and first.session_id
    assert any(e.kind == "session" for e in events) and any(e.kind == "text_delta" for e in events)
    assert first.usage.cache_write_tokens > 0 and first.usage.output_tokens > 0
    assert first.usage.cost_usd is not None

    second = await run_to_result(
        backend,
        Turn(
            stable, "Next: Bo again.", "second question", [], session_id=first.session_id, **common
        ),
    )
    assert second.session_id == first.session_id  # --resume keeps the id
    assert second.usage.cache_read_tokens > 0
    r1, r2 = posts(server, "/v1/messages")[-2:]
    # Our stable block rides in the system prompt, byte-identical; the volatile part does not.
    sys1, sys2 = (json.dumps(r["json"]["system"]) for r in (r1, r2))
    assert "STABLE-MARKER-123" in sys1 and sys1 == sys2
    assert "Next: Bo" not in sys1
    assert "first question" in json.dumps(
        r2["json"]["messages"]
    )  # the resumed session carried history


@pytest.mark.skipif(
    shutil.which("codex") is None, reason="codex CLI not on PATH (npm i -g @openai/codex)"
)
async def test_real_codex_cli_two_turns_with_resume_and_usage_deltas(server, isolated):
    backend = make_backend("codex_cli")
    common = {"workdir": isolated, "base_url": server.url + "/v1", "api_key": "test-key"}
    first = await run_to_result(
        backend, Turn("You are Bo.", "Next: Bo.", "first question", [], **common)
    )
    assert first.text == server.reply and first.session_id
    first_req = posts(server, "/v1/responses")[-1]
    assert first.usage.input_tokens + first.usage.cache_read_tokens == responses_prompt_tokens(
        first_req["json"]
    )

    turn2 = Turn("You are Bo.", "Next: Bo.", "second question", [], session_id=first.session_id,
                 cli_state=first.cli_state, **common)  # fmt: skip
    second = await run_to_result(backend, turn2)
    assert second.session_id == first.session_id
    second_req = posts(server, "/v1/responses")[-1]
    assert "first question" in json.dumps(second_req["json"]["input"])
    # codex reports the thread's running total; the backend turns it back into this turn's share.
    assert second.usage.input_tokens + second.usage.cache_read_tokens == responses_prompt_tokens(
        second_req["json"]
    )
    assert second.cli_state["cumulative_usage"]["input_tokens"] > responses_prompt_tokens(
        second_req["json"]
    )


@pytest.mark.parametrize(
    "cli, word",
    [("claude_cli", "doctor"), ("claude_cli", "update"), ("codex_cli", "help")],
)
async def test_a_one_word_message_naming_a_subcommand_is_a_prompt(server, isolated, cli, word):
    """A message of one word, with nothing around it, reaches the model: not the CLI's command
    of that name (codex exec help, claude update)."""
    if shutil.which(cli.split("_")[0]) is None:
        pytest.skip(f"{cli} not on PATH")
    url = server.url + ("/v1" if cli == "codex_cli" else "")
    common = {"workdir": isolated, "base_url": url, "api_key": "test-key"}
    result = await run_to_result(make_backend(cli), Turn("", "", word, [], **common))
    assert result.text == server.reply
