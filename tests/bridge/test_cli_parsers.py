"""CLI backends: pure parsers on recorded lines, then end to end against a fake executable."""

import asyncio
import json
import os
from pathlib import Path

import pytest
from agntchat_bridge.backends import BackendError, Event, Result, Turn, make_backend, run_to_result
from agntchat_bridge.backends.base import JsonlProcess
from agntchat_bridge.backends.claude_cli import parse_claude_line
from agntchat_bridge.backends.codex_cli import parse_codex_line, usage_delta

from tests.waiting import until

HERE = Path(__file__).parent
FIXTURES = HERE / "fixtures"
FAKE_BIN = HERE / "fake_bin"
SID = "8f4a2c1e-3b7d-4e9a-a1f2-5c6d7e8f9a0b"
TID = "01a22d03-dc34-7743-9d3e-b66460eaaa4e"


def lines(name):
    return [json.loads(line) for line in (FIXTURES / name).read_text().splitlines()]


def parse_all(parser, name, state=None):
    state = {} if state is None else state
    out = []
    for line in lines(name):
        out += parser(line, state)
    return out


def text_of(items):
    return "".join(i.data["text"] for i in items if isinstance(i, Event) and i.kind == "text_delta")


# -- claude parser ---------------------------------------------------------------------------


def test_claude_success_stream():
    items = parse_all(parse_claude_line, "claude_success.jsonl")
    assert items[0] == Event("session", {"session_id": SID})
    tools = [i for i in items if isinstance(i, Event) and i.kind == "tool"]
    assert tools == [
        Event(
            "tool",
            {
                "name": "Bash",
                "input": {"command": "make test", "description": "Run the test suite"},
                "id": "toolu_01XyZ",
            },
        )
    ]
    assert (
        text_of(items) == "Let me check the build status.\n\nThe build is green: 42 tests passed."
    )
    result = items[-1]
    assert isinstance(result, Result) and sum(isinstance(i, Result) for i in items) == 1
    assert result.text == "The build is green: 42 tests passed."
    assert result.session_id == SID
    u = result.usage
    assert (u.input_tokens, u.output_tokens, u.cache_read_tokens, u.cache_write_tokens) == (
        9,
        79,
        5210,
        5330,
    )
    assert u.cost_usd == pytest.approx(0.0271)


def test_claude_tool_result_and_status_lines_are_ignored():
    success = lines("claude_success.jsonl")
    assert parse_claude_line(success[3], {}) == []  # user/tool_result
    assert parse_claude_line(lines("claude_error_max_turns.jsonl")[1], {}) == []  # system/status


def test_claude_error_subtype_raises():
    with pytest.raises(
        BackendError, match=r"error_max_turns.*Reached maximum number of turns \(5\)"
    ):
        parse_all(parse_claude_line, "claude_error_max_turns.jsonl")


def test_claude_is_error_on_success_subtype_raises():
    with pytest.raises(BackendError, match="Invalid API key"):
        parse_all(parse_claude_line, "claude_auth_error.jsonl")


def test_claude_partial_messages_are_not_doubled():
    items = parse_all(parse_claude_line, "claude_partial.jsonl")
    assert text_of(items) == "All green."
    assert items[-1].text == "All green."


# -- codex parser ----------------------------------------------------------------------------


def test_codex_first_turn():
    items = parse_all(parse_codex_line, "codex_turn1.jsonl")
    assert items[0] == Event("session", {"session_id": TID})
    kinds = [(i.kind, i.data.get("name")) for i in items if isinstance(i, Event)][1:]
    assert kinds == [
        ("progress", None),
        ("tool", "command"),
        ("tool", "agntchat.post_message"),
        ("tool", "file_change"),
        ("text_delta", None),
    ]
    command = items[2].data
    assert command["command"] == "bash -lc 'make test'" and command["exit_code"] == 0
    assert command["output"] == "42 passed in 3.1s\n"
    assert items[3].data["input"] == {"text": "build ok"}
    result = items[-1]
    assert isinstance(result, Result) and result.text == "The build is green: 42 tests passed."
    assert result.session_id == TID
    assert (result.usage.input_tokens, result.usage.output_tokens) == (100, 7)
    assert result.cli_state["cumulative_usage"]["input_tokens"] == 100


def test_codex_resumed_turn_reports_deltas_not_cumulative():
    first = parse_all(parse_codex_line, "codex_turn1.jsonl")[-1]
    state = {"previous_usage": first.cli_state["cumulative_usage"]}
    items = parse_all(parse_codex_line, "codex_resume.jsonl", state)
    second = items[-1]
    # Cumulative input 100 then 200: this turn used 100, of which 40 came from the cache.
    total_in = (
        second.usage.input_tokens + second.usage.cache_read_tokens + second.usage.cache_write_tokens
    )
    assert (first.usage.input_tokens, total_in) == (100, 100)
    assert (
        second.usage.input_tokens,
        second.usage.cache_read_tokens,
        second.usage.output_tokens,
    ) == (60, 40, 5)
    assert second.text == "Still green."
    assert [i.data["message"] for i in items if isinstance(i, Event) and i.kind == "progress"] == [
        "Reconnecting... 1/5 (stream disconnected before completion)",
        "Falling back from WebSockets to HTTPS transport.",
    ]


def test_codex_usage_delta_falls_back_when_totals_shrink():
    assert usage_delta({"input_tokens": 50}, {"input_tokens": 200}) == {"input_tokens": 50}
    assert usage_delta({"input_tokens": 250}, None) == {"input_tokens": 250}


def test_codex_turn_failed_raises():
    with pytest.raises(BackendError, match="401 Unauthorized: Incorrect API key"):
        parse_all(parse_codex_line, "codex_turn_failed.jsonl")


# -- end to end against the fake executable --------------------------------------------------


@pytest.fixture
def fake(tmp_path, monkeypatch):
    """Configure the fake CLI; returns a function reading back its argv log."""
    log = tmp_path / "argv.jsonl"
    monkeypatch.setenv("FAKE_CLI_LOG", str(log))
    for name in (
        "FAKE_CLI_FIXTURE",
        "FAKE_CLI_EXIT",
        "FAKE_CLI_STDERR",
        "FAKE_CLI_HANG",
        "CLAUDE_BIN",
        "CODEX_BIN",
    ):
        monkeypatch.delenv(name, raising=False)

    def calls():
        return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []

    return calls


def alive(pid):
    """True while pid runs; a zombie nobody reaped (orphans in containers) counts as dead."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def workdir(tmp_path):
    d = tmp_path / "agent-bo"
    d.mkdir(exist_ok=True)
    return str(d)


async def test_claude_backend_end_to_end_with_resume(fake, tmp_path, monkeypatch):
    monkeypatch.setenv("FAKE_CLI_FIXTURE", str(FIXTURES / "claude_success.jsonl"))
    backend = make_backend(
        "claude_cli", executable=str(FAKE_BIN / "claude"), allowed_tools=["Read", "Bash(git *)"]
    )
    history = [{"role": "user", "author": "Ana", "text": "Morning"}]
    turn = Turn(
        "STABLE",
        "VOLATILE",
        "-is the build green?",
        history,
        model="sonnet",
        workdir=workdir(tmp_path),
    )
    events = []
    result = await run_to_result(backend, turn, events.append)
    assert result.text == "The build is green: 42 tests passed." and result.session_id == SID
    assert [e.kind for e in events] == ["session", "text_delta", "tool", "text_delta"]

    turn2 = Turn(
        "STABLE",
        "VOLATILE 2",
        "and now?",
        history,
        workdir=turn.workdir,
        session_id=result.session_id,
        api_key="sk-test",
        base_url="http://127.0.0.1:1",
    )
    await run_to_result(backend, turn2)

    first, second = fake()
    assert first["cwd"] == turn.workdir
    assert first["argv"] == [
        "-p", "VOLATILE\n\nConversation so far:\nAna: Morning\n\n-is the build green?",
        "--output-format", "stream-json", "--verbose", "--include-partial-messages",
        "--permission-mode", "acceptEdits",
        "--append-system-prompt", "STABLE",
        "--allowedTools", "Read,Bash(git *)",
        "--model", "sonnet",
    ]  # fmt: skip
    assert second["argv"][:2] == ["-p", "VOLATILE 2\n\nand now?"]  # resumed: no transcript
    assert second["argv"][-2:] == ["--resume", SID]
    assert second["env"]["ANTHROPIC_API_KEY"] == "sk-test"
    assert second["env"]["ANTHROPIC_BASE_URL"] == "http://127.0.0.1:1"


async def test_claude_backend_found_on_path_via_env(fake, tmp_path, monkeypatch):
    monkeypatch.setenv("FAKE_CLI_FIXTURE", str(FIXTURES / "claude_success.jsonl"))
    monkeypatch.setenv("PATH", f"{FAKE_BIN}{os.pathsep}{os.environ['PATH']}")
    result = await run_to_result(
        make_backend("claude_cli"), Turn("", "", "-v", [], workdir=workdir(tmp_path))
    )
    assert result.session_id == SID and fake()[0]["name"] == "claude"
    assert fake()[0]["argv"][:2] == [
        "-p",
        " -v",
    ]  # a leading dash must not turn the prompt into a flag


async def test_claude_backend_error_result_and_failed_exit(fake, tmp_path, monkeypatch):
    backend = make_backend("claude_cli", executable=str(FAKE_BIN / "claude"))
    turn = Turn("", "", "hi", [], workdir=workdir(tmp_path))
    monkeypatch.setenv("FAKE_CLI_FIXTURE", str(FIXTURES / "claude_error_max_turns.jsonl"))
    with pytest.raises(BackendError, match="error_max_turns"):
        await run_to_result(backend, turn)
    monkeypatch.delenv("FAKE_CLI_FIXTURE")
    monkeypatch.setenv("FAKE_CLI_EXIT", "1")
    monkeypatch.setenv(
        "FAKE_CLI_STDERR",
        "Error: When using --print, --output-format=stream-json requires --verbose",
    )
    with pytest.raises(BackendError, match=r"exit 1\): Error: When using --print"):
        await run_to_result(backend, turn)
    monkeypatch.setenv("FAKE_CLI_EXIT", "0")
    with pytest.raises(BackendError, match="ended without a result"):
        await run_to_result(backend, turn)


async def test_missing_executables_and_workdir(tmp_path):
    turn = Turn("", "", "hi", [], workdir=workdir(tmp_path))
    with pytest.raises(BackendError, match="the claude CLI is not installed"):
        await run_to_result(make_backend("claude_cli", executable="claude-does-not-exist"), turn)
    with pytest.raises(BackendError, match="the codex CLI is not installed"):
        await run_to_result(
            make_backend("codex_cli", executable=str(tmp_path / "nope" / "codex")), turn
        )
    turn.workdir = str(tmp_path / "missing")
    with pytest.raises(BackendError, match="working directory"):
        await run_to_result(make_backend("claude_cli", executable=str(FAKE_BIN / "claude")), turn)


async def test_closing_the_stream_kills_the_cli_and_its_children(fake, tmp_path, monkeypatch):
    monkeypatch.setenv("FAKE_CLI_FIXTURE", str(FIXTURES / "claude_partial.jsonl"))
    monkeypatch.setenv("FAKE_CLI_HANG", "1")  # prints, then never exits
    backend = make_backend("claude_cli", executable=str(FAKE_BIN / "claude"))
    gen = backend.run(Turn("", "", "hi", [], workdir=workdir(tmp_path)))
    first = await asyncio.wait_for(gen.__anext__(), 10)
    assert first.kind == "session"
    await asyncio.wait_for(gen.aclose(), 3)  # the fake sleeps 60s: only a kill ends it this fast
    record = fake()[0]
    assert not alive(record["pid"])
    # The orphaned child is killed by the same signal, which takes effect a moment later.
    await until(lambda: not alive(record["child_pid"]), timeout=5, what="the child killed")


async def test_cancelling_the_task_kills_the_cli(fake, tmp_path, monkeypatch):
    monkeypatch.setenv("FAKE_CLI_HANG", "1")
    backend = make_backend("codex_cli", executable=str(FAKE_BIN / "codex"))
    task = asyncio.create_task(
        run_to_result(backend, Turn("", "", "hi", [], workdir=workdir(tmp_path)))
    )
    await until(fake, what="the CLI started")
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(task, 3)
    assert not alive(fake()[0]["pid"])


async def test_a_turn_past_its_time_limit_kills_the_cli_and_fails(fake, tmp_path, monkeypatch):
    monkeypatch.setenv("FAKE_CLI_FIXTURE", str(FIXTURES / "claude_partial.jsonl"))
    monkeypatch.setenv("FAKE_CLI_HANG", "1")  # prints a little, then hangs for a minute
    backend = make_backend("claude_cli", executable=str(FAKE_BIN / "claude"))
    events = []
    with pytest.raises(BackendError) as failed:
        await asyncio.wait_for(
            run_to_result(
                backend,
                Turn("", "", "hi", [], workdir=workdir(tmp_path)),
                events.append,
                time_limit=1,
            ),
            10,
        )
    assert str(failed.value) == "the turn ran past its time limit of 1 second and was stopped"
    assert events and events[0].kind == "session"  # it was under way, not refused at the start
    record = fake()[0]
    assert not alive(record["pid"])
    # The CLI's own child dies by the same signal to the group, which takes effect a moment later.
    await until(lambda: not alive(record["child_pid"]), timeout=5, what="the child killed")


async def test_a_turn_within_its_time_limit_is_untouched(fake, tmp_path, monkeypatch):
    monkeypatch.setenv("FAKE_CLI_FIXTURE", str(FIXTURES / "claude_success.jsonl"))
    backend = make_backend("claude_cli", executable=str(FAKE_BIN / "claude"))
    turn = Turn("", "", "hi", [], workdir=workdir(tmp_path))
    result = await run_to_result(backend, turn, time_limit=30)
    assert result.text == "The build is green: 42 tests passed."


async def test_codex_backend_end_to_end_with_resume_and_usage_deltas(fake, tmp_path, monkeypatch):
    backend = make_backend("codex_cli", executable=str(FAKE_BIN / "codex"))
    wd = workdir(tmp_path)
    history = [{"role": "user", "author": "Ana", "text": "Morning"}]
    monkeypatch.setenv("FAKE_CLI_FIXTURE", str(FIXTURES / "codex_turn1.jsonl"))
    turn = Turn(
        "STABLE",
        "VOLATILE",
        "is it green?",
        history,
        model="gpt-5-codex",
        workdir=wd,
        base_url="http://127.0.0.1:1/v1",
        api_key="sk-codex",
    )
    events = []
    first = await run_to_result(backend, turn, events.append)
    assert first.session_id == TID and first.text == "The build is green: 42 tests passed."
    assert first.usage.input_tokens == 100
    assert [e.kind for e in events][:2] == ["session", "progress"]

    monkeypatch.setenv("FAKE_CLI_FIXTURE", str(FIXTURES / "codex_resume.jsonl"))
    turn2 = Turn(
        "STABLE",
        "VOLATILE 2",
        "and now?",
        history,
        workdir=wd,
        session_id=first.session_id,
        cli_state=first.cli_state,
    )
    second = await run_to_result(backend, turn2)
    assert (
        second.usage.input_tokens + second.usage.cache_read_tokens == 100
    )  # not the cumulative 200
    assert second.cli_state["cumulative_usage"]["input_tokens"] == 200

    # A changed stable block is re-sent on the resumed thread.
    turn3 = Turn(
        "STABLE v2", "V3", "again", history, workdir=wd, session_id=TID, cli_state=second.cli_state
    )
    await run_to_result(backend, turn3)

    a, b, c = fake()
    assert a["cwd"] == wd and a["env"]["CODEX_API_KEY"] == "sk-codex"
    assert a["argv"] == [
        "exec", "--json", "--skip-git-repo-check", "-C", wd,
        "-s", "workspace-write", "-c", 'approval_policy="never"',
        "-m", "gpt-5-codex",
        "-c", 'openai_base_url="http://127.0.0.1:1/v1"',
        "STABLE\n\nVOLATILE\n\nConversation so far:\nAna: Morning\n\nis it green?",
    ]  # fmt: skip
    assert b["argv"][-3:] == [
        "resume",
        TID,
        "VOLATILE 2\n\nand now?",
    ]  # stable already in the thread
    assert c["argv"][-3:] == ["resume", TID, "STABLE v2\n\nV3\n\nagain"]


async def test_codex_backend_turn_failed_and_fatal_error_exit(fake, tmp_path, monkeypatch):
    backend = make_backend("codex_cli", executable=str(FAKE_BIN / "codex"))
    turn = Turn("", "", "hi", [], workdir=workdir(tmp_path))
    monkeypatch.setenv("FAKE_CLI_FIXTURE", str(FIXTURES / "codex_turn_failed.jsonl"))
    with pytest.raises(BackendError, match="codex CLI failed: unexpected status 401"):
        await run_to_result(backend, turn)
    # Only transient error events, then a non-zero exit: the last error is the reason.
    lines_path = tmp_path / "errors.jsonl"
    lines_path.write_text(json.dumps({"type": "error", "message": "Reconnecting... 5/5"}) + "\n")
    monkeypatch.setenv("FAKE_CLI_FIXTURE", str(lines_path))
    monkeypatch.setenv("FAKE_CLI_EXIT", "1")
    with pytest.raises(BackendError, match=r"exit 1\): Reconnecting... 5/5"):
        await run_to_result(backend, turn)


async def test_a_cli_that_hangs_after_its_result_still_answers(fake, tmp_path, monkeypatch):
    """Claude Code can keep running after its result line (anthropics/claude-code#25629): the
    turn has its answer then, and the CLI and its children are stopped, not waited on."""
    monkeypatch.setenv("FAKE_CLI_FIXTURE", str(FIXTURES / "claude_success.jsonl"))
    monkeypatch.setenv("FAKE_CLI_HANG", "1")  # prints the whole turn, then sleeps a minute
    backend = make_backend("claude_cli", executable=str(FAKE_BIN / "claude"))
    turn = Turn("", "", "hi", [], workdir=workdir(tmp_path))
    result = await asyncio.wait_for(run_to_result(backend, turn, time_limit=20), 15)
    assert result.text == "The build is green: 42 tests passed."
    record = fake()[0]
    assert not alive(record["pid"])
    await until(lambda: not alive(record["child_pid"]), timeout=5, what="the child killed")


async def test_an_output_line_past_the_line_limit_is_skipped(fake, tmp_path, monkeypatch):
    """A line longer than the reader's limit (a huge tool input or output in one JSON line) is
    passed over; the turn goes on to its result."""
    monkeypatch.setattr(JsonlProcess, "LINE_LIMIT", 64 * 1024)
    huge = {
        "type": "user",
        "message": {"content": [{"type": "tool_result", "content": "x" * 200_000}]},
    }
    fixture = tmp_path / "huge.jsonl"
    fixture.write_text(json.dumps(huge) + "\n" + (FIXTURES / "claude_success.jsonl").read_text())
    monkeypatch.setenv("FAKE_CLI_FIXTURE", str(fixture))
    backend = make_backend("claude_cli", executable=str(FAKE_BIN / "claude"))
    result = await run_to_result(backend, Turn("", "", "hi", [], workdir=workdir(tmp_path)))
    assert result.text == "The build is green: 42 tests passed."


async def test_a_flood_on_stderr_fails_the_turn_with_a_short_reason(fake, tmp_path, monkeypatch):
    """One stderr line past the line limit neither stops stderr being read nor reaches the
    person whole: the reason is the start of the CLI's last line, cut."""
    monkeypatch.setattr(JsonlProcess, "LINE_LIMIT", 64 * 1024)
    monkeypatch.setenv("FAKE_CLI_STDERR", "Error: " + "E" * 100_000 + "\nError: " + "F" * 5_000)
    monkeypatch.setenv("FAKE_CLI_EXIT", "1")
    backend = make_backend("claude_cli", executable=str(FAKE_BIN / "claude"))
    with pytest.raises(BackendError) as failed:
        await run_to_result(backend, Turn("", "", "hi", [], workdir=workdir(tmp_path)))
    reason = str(failed.value)
    assert reason.startswith("the claude CLI failed (exit 1): Error: FFFF")
    assert reason.endswith("…") and len(reason) < 1100


async def test_the_bridges_agent_key_is_not_in_the_clis_environment(fake, tmp_path, monkeypatch):
    """A model given a shell (claude's Bash) reads the CLI's environment: the key the bridge was
    started with (AGNTCHAT_AGENT_KEY, as the tests and many setups start it) stays with it."""
    monkeypatch.setenv("AGNTCHAT_AGENT_KEY", "agk_secret")
    monkeypatch.setenv("FAKE_CLI_FIXTURE", str(FIXTURES / "claude_success.jsonl"))
    turn = Turn("", "", "hi", [], workdir=workdir(tmp_path), api_key="sk-test")
    await run_to_result(make_backend("claude_cli", executable=str(FAKE_BIN / "claude")), turn)
    record = fake()[0]
    assert record["env"]["ANTHROPIC_API_KEY"] == "sk-test"
    assert record["env"]["AGNTCHAT_AGENT_KEY"] is None


@pytest.mark.parametrize("cli", ["claude", "codex"])
async def test_on_a_shared_host_an_agent_with_its_own_key_has_cli_homes_of_its_own(
    fake, tmp_path, monkeypatch, cli
):
    """The shared CLI homes hold every agent's transcripts, readable by the others' models: an
    agent that brings its own key needs no shared login, so its CLIs keep their homes private."""
    shared, own = tmp_path / "shared", tmp_path / "agent" / "cli"
    monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(shared / "claude"))
    monkeypatch.setenv("CODEX_HOME", str(shared / "codex"))
    monkeypatch.setenv("AGNTCHAT_OWN_CLI_HOME", str(own))
    fixture = "claude_success.jsonl" if cli == "claude" else "codex_turn1.jsonl"
    monkeypatch.setenv("FAKE_CLI_FIXTURE", str(FIXTURES / fixture))
    backend = make_backend(f"{cli}_cli", executable=str(FAKE_BIN / cli))
    for api_key in ("sk-own", None):
        turn = Turn("", "", "hi", [], workdir=workdir(tmp_path), api_key=api_key)
        await run_to_result(backend, turn)
    with_key, without = (record["env"] for record in fake())
    assert (with_key["CLAUDE_CONFIG_DIR"], with_key["CODEX_HOME"]) == (
        str(own / "claude"),
        str(own / "codex"),
    )
    assert (own / cli).stat().st_mode & 0o777 == 0o700
    # Without a key of its own it uses the machine's one login, as before.
    assert (without["CLAUDE_CONFIG_DIR"], without["CODEX_HOME"]) == (
        str(shared / "claude"),
        str(shared / "codex"),
    )
