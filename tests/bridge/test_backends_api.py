"""API backends against loopback stand-ins, through the real anthropic/openai SDK clients."""

import json

import pytest
from agntchat_bridge.backends import (
    BackendError,
    Event,
    Result,
    Turn,
    Usage,
    make_backend,
    run_to_result,
)
from agntchat_bridge.backends.base import chat_messages

from .standins import ANTHROPIC_500, ANTHROPIC_OVERLOADED, StandinServer, tokens

STABLE = "You are Bo, a helpful teammate.\nRules: be brief.\n" * 20
HISTORY = [
    {"role": "user", "author": "Ana", "text": "Morning all"},
    {"role": "user", "author": "Cy", "text": "Bo, can you check the build?"},
    {"role": "assistant", "author": "Bo", "text": "On it."},
]


@pytest.fixture
def server():
    s = StandinServer().start()
    yield s
    s.stop()


@pytest.fixture(autouse=True)
def clean_env(monkeypatch):
    for name in ("ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL", "OPENAI_API_KEY", "OPENAI_BASE_URL"):
        monkeypatch.delenv(name, raising=False)


def turn(
    server,
    prompt="Is it green?",
    stable=STABLE,
    volatile="Next speaker: Bo. Reply in one line.",
    **kw,
):
    return Turn(
        stable,
        volatile,
        prompt,
        HISTORY,
        base_url=server.url if server else None,
        api_key="test-key",
        **kw,
    )


def cached_block(request):
    blocks = [b for b in request["json"]["system"] if b.get("cache_control")]
    assert len(blocks) == 1
    return json.dumps(blocks[0]).encode()


# -- Anthropic -------------------------------------------------------------------------------


async def test_anthropic_streams_text_and_caches_stable_block(server):
    backend = make_backend("anthropic_api", max_retries=0)
    events = []
    first = await run_to_result(backend, turn(server, volatile="Next speaker: Bo."), events.append)
    second = await run_to_result(
        backend, turn(server, prompt="And now?", volatile="Next speaker: Bo, then Ana.")
    )

    assert first.text == server.reply
    assert "".join(e.data["text"] for e in events if e.kind == "text_delta") == server.reply
    r1, r2 = server.requests
    assert r1["path"] == "/v1/messages" and r1["json"]["stream"] is True
    assert r1["json"]["model"] == "claude-sonnet-4-6"
    # The cached system block is byte-identical although the volatile part changed.
    assert cached_block(r1) == cached_block(r2)
    assert (
        cached_block(r1)
        == json.dumps(
            {"type": "text", "text": STABLE, "cache_control": {"type": "ephemeral"}}
        ).encode()
    )
    assert "Next speaker" not in json.dumps(r1["json"]["system"])
    assert "Next speaker: Bo, then Ana." in json.dumps(r2["json"]["messages"][-1])
    assert first.usage.cache_write_tokens > 0 and first.usage.cache_read_tokens == 0
    assert second.usage.cache_read_tokens > 0 and second.usage.cache_write_tokens == 0
    assert second.usage.output_tokens > 0 and second.usage.input_tokens > 0
    assert second.usage.latency_ms >= 0

    third = await run_to_result(backend, turn(server, stable=STABLE + "New rule: use emoji.\n"))
    assert third.usage.cache_write_tokens > 0 and third.usage.cache_read_tokens == 0


async def test_anthropic_messages_alternate_and_name_authors(server):
    await run_to_result(make_backend("anthropic_api", max_retries=0), turn(server))
    messages = server.requests[0]["json"]["messages"]
    assert [m["role"] for m in messages] == ["user", "assistant", "user"]
    assert messages[0]["content"] == "Ana: Morning all\n\nCy: Bo, can you check the build?"
    assert messages[1]["content"] == "On it."
    assert messages[2]["content"].endswith("Is it green?")
    # The key travels the way the SDK sends it.
    assert server.requests[0]["headers"].get("Authorization") == "Bearer test-key"


def test_chat_messages_edge_cases():
    t = Turn(
        "",
        "",
        "hi",
        [
            {"role": "assistant", "author": "Bo", "text": "hello"},
            {"role": "user", "author": "Ana", "text": "hi"},
        ],
    )
    # Leading assistant gets a user opener; a trailing copy of the prompt is not sent twice.
    assert chat_messages(t, ["ctx", t.prompt]) == [
        {"role": "user", "content": "(earlier conversation)"},
        {"role": "assistant", "content": "hello"},
        {"role": "user", "content": "ctx\n\nhi"},
    ]


async def test_anthropic_wrong_key_is_backend_error(server):
    t = turn(server)
    t.api_key = "wrong"
    with pytest.raises(BackendError, match="401: invalid x-api-key"):
        await run_to_result(make_backend("anthropic_api", max_retries=0), t)


async def test_anthropic_server_error_and_midstream_error(server):
    server.errors.append((500, ANTHROPIC_500))
    with pytest.raises(BackendError, match="500: Internal server error"):
        await run_to_result(make_backend("anthropic_api", max_retries=0), turn(server))
    server.midstream_error = ANTHROPIC_OVERLOADED
    with pytest.raises(BackendError, match="Overloaded"):
        await run_to_result(make_backend("anthropic_api", max_retries=0), turn(server))


async def test_anthropic_retries_once_then_succeeds(server):
    server.errors.append((500, ANTHROPIC_500))
    result = await run_to_result(make_backend("anthropic_api", max_retries=1), turn(server))
    assert result.text == server.reply and len(server.requests) == 2


async def test_anthropic_missing_key_and_unreachable():
    with pytest.raises(BackendError, match="ANTHROPIC_API_KEY is not set"):
        await run_to_result(make_backend("anthropic_api"), Turn("s", "v", "p", []))
    t = Turn("s", "v", "p", [], api_key="k", base_url="http://127.0.0.1:9")
    with pytest.raises(BackendError, match="cannot reach the Anthropic API"):
        await run_to_result(make_backend("anthropic_api", max_retries=0), t)


async def test_anthropic_key_from_env(server, monkeypatch):
    monkeypatch.setenv("ANTHROPIC_API_KEY", "test-key")
    monkeypatch.setenv("ANTHROPIC_BASE_URL", server.url)
    result = await run_to_result(
        make_backend("anthropic_api", max_retries=0), Turn("s", "", "p", [])
    )
    assert result.text == server.reply


# -- OpenAI ----------------------------------------------------------------------------------


async def test_openai_streams_with_usage_and_cached_tokens(server):
    backend = make_backend("openai_api", max_retries=0)
    events = []
    first = await run_to_result(backend, oturn(server), events.append)
    second = await run_to_result(backend, oturn(server, volatile="Different volatile"))

    assert first.text == server.reply
    assert "".join(e.data["text"] for e in events if e.kind == "text_delta") == server.reply
    r1 = server.requests[0]
    assert r1["path"] == "/v1/chat/completions"
    assert r1["json"]["stream"] is True and r1["json"]["stream_options"] == {"include_usage": True}
    messages = r1["json"]["messages"]
    assert messages[0] == {"role": "system", "content": STABLE}
    assert messages[1] == {"role": "system", "content": "Next speaker: Bo. Reply in one line."}
    assert [m["role"] for m in messages[2:]] == ["user", "assistant", "user"]
    assert messages[-1]["content"] == "Is it green?"
    assert first.usage.cache_read_tokens == 0 and first.usage.output_tokens > 0
    assert second.usage.cache_read_tokens > 0
    # input_tokens is the uncached part; prompt_tokens (which includes cached ones) is split up.
    prompt_tokens = sum(tokens(m["content"]) for m in server.requests[1]["json"]["messages"])
    assert second.usage.input_tokens + second.usage.cache_read_tokens == prompt_tokens
    assert second.usage.cache_read_tokens == tokens("openai:" + STABLE)


def oturn(server, **kw):
    t = turn(server, **kw)
    t.base_url = server.url + "/v1"
    t.model = "llama3"
    return t


async def test_openai_compatible_server_without_details_and_key(server, monkeypatch):
    # Ollama-style: a base_url without a key, usage without *_details.
    server.api_key = "unused"
    server.omit_usage_details = True
    t = oturn(server)
    t.api_key = None
    result = await run_to_result(make_backend("openai_api", max_retries=0), t)
    assert result.text == server.reply
    assert result.usage.cache_read_tokens == 0 and result.usage.input_tokens > 0
    assert server.requests[0]["json"]["model"] == "llama3"


async def test_openai_chunks_with_null_choices_are_passed_over(server):
    # Some compatible servers send "choices": null (the SDK builds chunks without checking).
    server.null_choices = True
    result = await run_to_result(make_backend("openai_api", max_retries=0), oturn(server))
    assert result.text == server.reply and result.usage.output_tokens > 0


async def test_openai_errors(server):
    t = oturn(server)
    t.api_key = "wrong"
    with pytest.raises(BackendError, match="401: Incorrect API key"):
        await run_to_result(make_backend("openai_api", max_retries=0), t)
    with pytest.raises(BackendError, match="OPENAI_API_KEY is not set"):
        await run_to_result(make_backend("openai_api"), Turn("s", "v", "p", []))
    t = Turn("s", "v", "p", [], api_key="k", base_url="http://127.0.0.1:9/v1")
    with pytest.raises(BackendError, match="cannot reach the OpenAI API"):
        await run_to_result(make_backend("openai_api", max_retries=0), t)


# -- scripted, make_backend, run_to_result ---------------------------------------------------


async def test_scripted_backend():
    backend = make_backend("scripted", replies={"ping": "pong"}, default="Echo: {prompt}")
    events = []
    result = await run_to_result(backend, Turn("", "", " PING ", []), events.append)
    assert result.text == "pong" and result.blocks == [{"type": "label", "text": "scripted"}]
    assert [e.kind for e in events] == ["session", "text_delta"]
    result = await run_to_result(backend, Turn("", "", "what {x} now", [], session_id="s1"))
    assert result.text == "Echo: what {x} now" and result.session_id == "s1"
    with pytest.raises(BackendError, match="scripted failure"):
        await run_to_result(backend, Turn("", "", "please [[fail]]", []))


async def test_scripted_delay_is_measured():
    result = await run_to_result(make_backend("scripted", delay_ms=120), Turn("", "", "x", []))
    assert result.usage.latency_ms >= 120


def test_make_backend_rejects_unknown_names_and_options():
    with pytest.raises(BackendError, match="unknown backend"):
        make_backend("gpt_magic")
    with pytest.raises(BackendError, match="bad options"):
        make_backend("scripted", bogus=1)


class _Broken:
    name = "broken"

    def __init__(self, items):
        self.items = items

    async def run(self, turn):
        for item in self.items:
            yield item


async def test_run_to_result_enforces_exactly_one_result_last():
    ok = Result("a", Usage())
    with pytest.raises(BackendError, match="without a result"):
        await run_to_result(_Broken([Event("progress", {"message": "x"})]), Turn("", "", "", []))
    with pytest.raises(BackendError, match="more after its result"):
        await run_to_result(_Broken([ok, ok]), Turn("", "", "", []))
    with pytest.raises(BackendError, match="more after its result"):
        await run_to_result(_Broken([ok, Event("progress", {})]), Turn("", "", "", []))
    seen = []

    async def on_event(e):
        seen.append(e)

    result = await run_to_result(
        _Broken([Event("progress", {"message": "x"}), ok]), Turn("", "", "", []), on_event
    )
    assert result is ok and len(seen) == 1


# -- native tool calling ---------------------------------------------------------------------

TOOLS = [
    {
        "name": "artifact_publish",
        "description": "Publish a document.",
        "inputSchema": {
            "type": "object",
            "properties": {"title": {"type": "string"}, "content": {"type": "string"}},
            "required": ["title", "content"],
        },
    },
    {
        "name": "card_post",
        "description": "Post a card.",
        "inputSchema": {"type": "object", "properties": {"template": {"type": "string"}}},
    },
    {"name": "done", "description": "Say you are done.", "inputSchema": {"type": "object"}},
]

SCRIPT = [
    {
        "tool": "artifact_publish",
        "input": {"title": "Plan", "content": "# Plan"},
        "say": "Publishing.",
    },
    {"tool": "card_post", "input": {"template": "status", "artifact": "{result.id}"}},
    {"tool": "done", "input": {}},
    {"text": "All set."},
]


class Tools:
    """A stand-in for the bridge's tool.call: records each call and answers from OUTPUTS."""

    def __init__(self, outputs=None, fail=()):
        self.calls = []
        self.outputs = outputs or {"artifact_publish": '{"id": "art_1", "version": 1}'}
        self.fail = set(fail)

    async def __call__(self, name, arguments, *, checkpoint=None):
        from agntchat_bridge.backends import ToolOutcome

        self.calls.append((name, arguments, checkpoint))
        if name in self.fail:
            return ToolOutcome(False, error=f"{name} is not granted to you")
        return ToolOutcome(True, output=self.outputs.get(name, "{}"))


def tool_turn(server, path="", tools=None, **kw):
    t = turn(server, **kw)
    t.base_url = server.url + path
    t.tools = TOOLS
    t.call_tool = tools
    return t


async def test_anthropic_calls_tools_streamed_and_sums_usage(server):
    server.tool_script = SCRIPT
    tools = Tools()
    events = []
    result = await run_to_result(
        make_backend("anthropic_api", max_retries=0), tool_turn(server, tools=tools), events.append
    )
    assert [(n, a) for n, a, _ in tools.calls] == [
        ("artifact_publish", {"title": "Plan", "content": "# Plan"}),
        ("card_post", {"template": "status", "artifact": "art_1"}),  # the streamed input, parsed
        ("done", {}),
    ]
    assert result.text == "Publishing.\n\nAll set."
    # The text streams as it is written, each round's set apart as in the result (a chat
    # turn's drafts grow into the reply).
    assert "".join(e.data["text"] for e in events if e.kind == "text_delta") == result.text
    assert [e.data["name"] for e in events if e.kind == "tool"] == [
        "artifact_publish",
        "card_post",
        "done",
    ]
    requests = [r["json"] for r in server.requests]
    assert len(requests) == 4
    assert requests[0]["tools"][0] == {
        "name": "artifact_publish",
        "description": "Publish a document.",
        "input_schema": TOOLS[0]["inputSchema"],
    }
    # Each round sends back the model's tool_use and our tool_result, in order.
    last = requests[-1]["messages"]
    assert [m["role"] for m in last[-6:]] == ["assistant", "user"] * 3
    assert last[-6]["content"][1]["type"] == "tool_use"
    assert last[-5]["content"] == [{"type": "tool_result", "tool_use_id": last[-6]["content"][1]["id"],
                                    "content": '{"id": "art_1", "version": 1}'}]  # fmt: skip
    # The tools ride inside the cached prefix: later rounds read it, and it is the same bytes.
    assert all(r["tools"] == requests[0]["tools"] for r in requests)
    assert result.usage.cache_write_tokens == tokens(
        json.dumps([requests[0]["tools"], requests[0]["system"]], sort_keys=True)
    )
    assert result.usage.cache_read_tokens == 3 * result.usage.cache_write_tokens
    assert result.usage.output_tokens > tokens("All set.")


async def test_anthropic_not_streamed_and_a_failed_call_goes_back_as_an_error(server):
    server.tool_script = SCRIPT[2:]
    tools = Tools(fail={"done"})
    result = await run_to_result(
        make_backend("anthropic_api", max_retries=0, stream=False), tool_turn(server, tools=tools)
    )
    assert result.text == "All set." and server.requests[0]["json"].get("stream") is not True
    block = server.requests[-1]["json"]["messages"][-1]["content"][0]
    assert block["is_error"] is True and block["content"] == "done is not granted to you"


@pytest.mark.parametrize("stream", [True, False])
async def test_openai_calls_tools_in_parallel(server, stream):
    server.tool_script = [
        {"calls": [{"tool": "artifact_publish", "input": {"title": "A", "content": "x" * 40}},
                   {"tool": "done", "input": {}}]},
        {"text": "Both done."},
    ]  # fmt: skip
    tools = Tools()
    result = await run_to_result(
        make_backend("openai_api", max_retries=0, stream=stream),
        tool_turn(server, "/v1", tools=tools),
    )
    assert [(n, a) for n, a, _ in tools.calls] == [
        ("artifact_publish", {"title": "A", "content": "x" * 40}),
        ("done", {}),
    ]
    assert result.text == "Both done."
    first, second = (r["json"] for r in server.requests)
    assert first["tools"][2] == {
        "type": "function",
        "function": {
            "name": "done",
            "description": "Say you are done.",
            "parameters": {"type": "object"},
        },
    }
    assert first.get("stream", False) is stream
    reply, *answers = second["messages"][-3:]
    assert [c["function"]["name"] for c in reply["tool_calls"]] == ["artifact_publish", "done"]
    assert [a["tool_call_id"] for a in answers] == [c["id"] for c in reply["tool_calls"]]
    assert answers[0] == {"role": "tool", "tool_call_id": reply["tool_calls"][0]["id"],
                          "content": '{"id": "art_1", "version": 1}'}  # fmt: skip
    assert result.usage.input_tokens + result.usage.cache_read_tokens > 0


async def test_a_model_that_never_stops_calling_is_told_to_answer(server):
    server.tool_script = [{"tool": "done", "input": {}}] * 10
    tools = Tools()
    result = await run_to_result(
        make_backend("openai_api", max_retries=0, max_tool_rounds=2),
        tool_turn(server, "/v1", tools=tools),
    )
    assert len(tools.calls) == 2 and len(server.requests) == 3
    assert server.requests[-1]["json"]["tool_choice"] == "none"
    assert "tool_choice" not in server.requests[0]["json"]
    # The stand-in ignores tool_choice: the loop stops anyway, and says so.
    assert result.text == "(Stopped after 2 rounds of tool calls, a turn's limit.)"


@pytest.mark.parametrize("backend,path", [("anthropic_api", ""), ("openai_api", "/v1")])
async def test_a_model_that_goes_quiet_times_out_saying_so(server, backend, path):
    """The API was reached and began to answer, then went quiet past the request timeout: not
    "cannot reach", which sends an owner to look at the network."""
    server.chunk_seconds = 1.5
    t = turn(server)
    t.base_url = server.url + path
    with pytest.raises(BackendError, match=r"API went 0\.5 seconds without answering"):
        await run_to_result(make_backend(backend, max_retries=0, timeout=0.5), t)


@pytest.mark.parametrize("backend,path", [("anthropic_api", ""), ("openai_api", "/v1")])
async def test_a_parked_turn_resumes_at_its_call(server, backend, path):
    """A call that waited for approval saved a checkpoint; a redelivered turn resumes there:
    the calls before it are not made again, nor is the model asked again for that round."""
    server.tool_script = SCRIPT
    tools = Tools()
    await run_to_result(make_backend(backend, max_retries=0), tool_turn(server, path, tools=tools))
    name, arguments, checkpoint = tools.calls[1]  # the card_post call, as if it had parked
    assert name == "card_post"
    before = len(server.requests)

    resumed = Tools()
    t = tool_turn(server, path, tools=resumed)
    t.resume = {
        "checkpoint": json.loads(json.dumps(checkpoint)),
        "name": name,
        "arguments": arguments,
    }
    result = await run_to_result(make_backend(backend, max_retries=0), t)
    assert [n for n, _, _ in resumed.calls] == ["card_post", "done"]
    assert result.text == "All set."
    assert len(server.requests) - before == 2  # after done, and the final answer


async def test_waiting_for_a_person_does_not_count_toward_the_time_limit(server):
    import asyncio

    async def slow(name, arguments, *, checkpoint=None):
        from agntchat_bridge.backends import ToolOutcome

        async with t.deadline.paused():
            await asyncio.sleep(1.2)
        return ToolOutcome(True, output="{}")

    server.tool_script = [{"tool": "done", "input": {}}, {"text": "Finished."}]
    t = tool_turn(server, "/v1", tools=slow)
    result = await run_to_result(make_backend("openai_api", max_retries=0), t, time_limit=1)
    assert result.text == "Finished."

    async def unpaused(name, arguments, *, checkpoint=None):
        await asyncio.sleep(1.2)

    with pytest.raises(BackendError, match="time limit of 1 second"):
        await run_to_result(
            make_backend("openai_api", max_retries=0),
            tool_turn(server, "/v1", tools=unpaused),
            time_limit=1,
        )
