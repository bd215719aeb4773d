"""The CLI backends against a CLI that prints what they do not expect: lines of JSON in a shape
they do not know, an error that is a plain string. The fake executable replays the lines."""

import json
from pathlib import Path

import pytest
from agntchat_bridge.backends import BackendError, Turn, make_backend, run_to_result

HERE = Path(__file__).parent
FAKE_BIN = HERE / "fake_bin"
FIXTURES = HERE / "fixtures"


@pytest.fixture
def prints(tmp_path, monkeypatch):
    """Have the fake CLI print LINES (JSON values, or text as is) and exit 0."""
    for name in ("FAKE_CLI_EXIT", "FAKE_CLI_STDERR", "FAKE_CLI_HANG", "FAKE_CLI_LOG"):
        monkeypatch.delenv(name, raising=False)

    def set_lines(*lines):
        fixture = tmp_path / "lines.jsonl"
        text = [line if isinstance(line, str) else json.dumps(line) for line in lines]
        fixture.write_text("\n".join(text) + "\n")
        monkeypatch.setenv("FAKE_CLI_FIXTURE", str(fixture))

    return set_lines


def turn(tmp_path):
    work = tmp_path / "agent"
    work.mkdir(exist_ok=True)
    return Turn("", "", "hi", [], workdir=str(work))


def claude_success():
    return (FIXTURES / "claude_success.jsonl").read_text().splitlines()


async def test_claude_lines_of_an_unknown_shape_are_passed_over(prints, tmp_path):
    """A newer CLI (or a broken one) prints a known type with another shape: reading it raised
    AttributeError, which is no BackendError, so the item was never answered and came back,
    the CLI ran again every lease, ten times, before the server gave up on it."""
    prints(
        {"type": "assistant", "message": "not an object"},
        {"type": "assistant", "message": {"content": ["a bare string block"]}},
        {"type": "stream_event", "event": "message_start"},
        *claude_success(),
    )
    backend = make_backend("claude_cli", executable=str(FAKE_BIN / "claude"))
    result = await run_to_result(backend, turn(tmp_path), time_limit=20)
    assert result.text == "The build is green: 42 tests passed."


async def test_a_codex_failure_said_as_a_plain_string_fails_the_turn_saying_so(prints, tmp_path):
    prints(
        {"type": "thread.started", "thread_id": "01a22d03-dc34-7743-9d3e-b66460eaaa4e"},
        {"type": "item.completed", "item": "not an object"},
        {"type": "turn.failed", "error": "quota exceeded"},
    )
    backend = make_backend("codex_cli", executable=str(FAKE_BIN / "codex"))
    with pytest.raises(BackendError, match="the codex CLI failed: quota exceeded"):
        await run_to_result(backend, turn(tmp_path), time_limit=20)
