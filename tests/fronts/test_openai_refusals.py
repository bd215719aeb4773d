"""The OpenAI-compatible front's refusals, in process (no daphne): OpenAI's error shape, the
statuses its client maps to exceptions, and nothing written on any of them."""

import httpx
import pytest
from asgiref.sync import async_to_sync

from agents import actions as agent_actions
from agntchat.asgi import application
from conversations import actions as conversation_actions
from conversations.models import Conversation, Message
from fronts import openai as front
from fronts.models import ApiSession
from workspaces import actions as workspace_actions

# The front reads the database from its own thread, through Channels (which closes stale
# connections): committed rows, as a server sees them.
pytestmark = pytest.mark.django_db(transaction=True)


def call(method: str, path: str, token: str | None = None, headers=None, **kwargs):
    """One request to the ASGI application, the front as mounted."""
    head = {"authorization": f"Bearer {token}"} if token else {}
    head.update(headers or {})

    async def go():
        transport = httpx.ASGITransport(app=application)
        async with httpx.AsyncClient(transport=transport, base_url="http://testserver") as client:
            return await client.request(method, path, headers=head, **kwargs)

    return async_to_sync(go)()


@pytest.fixture
def token(alice):
    return workspace_actions.issue_api_token(alice)[1]


def nothing_written():
    return not (
        Conversation.objects.filter(kind="api").exists()
        or Message.objects.exists()
        or ApiSession.objects.exists()
    )


def error_of(response, status: int) -> dict:
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/json"
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["message"]
    return error


def ask(**overrides):
    body = {"model": "nova", "messages": [{"role": "user", "content": "hi"}]}
    body.update(overrides)
    return body


def test_no_token_a_bad_one_or_a_revoked_one_is_a_401(alice, nova):
    api_token, secret = workspace_actions.issue_api_token(alice)
    assert call("GET", "/v1/models", secret).status_code == 200
    workspace_actions.revoke_api_token(api_token)
    for token in (None, "apt_not-a-token", secret, "ags_an-agent-session"):
        error = error_of(call("POST", "/v1/chat/completions", token, json=ask()), 401)
        assert error["code"] == "invalid_api_key"
    assert nothing_written()


def test_models_lists_what_the_person_sees_with_qualified_ids_where_handles_clash(
    alice, bob, charlie, team_a, team_b, nova, token
):
    agent_actions.create_agent(bob, name="Nova", backend="scripted")  # bob's "nova", in team A
    agent_actions.create_agent(charlie, name="Secret", backend="scripted")  # not alice's to see
    agent_actions.create_agent(alice, name="Atlas", backend="scripted")
    listed = call("GET", "/v1/models", token).json()
    assert listed["object"] == "list"
    assert [m["id"] for m in listed["data"]] == ["atlas", "nova.alice", "nova.bob"]
    assert {m["object"] for m in listed["data"]} == {"model"}
    assert listed["data"][1]["owned_by"] == "alice"
    assert isinstance(listed["data"][1]["created"], int)
    # One model by id, qualified or, where it is unambiguous, bare.
    assert call("GET", "/v1/models/nova.bob", token).json()["owned_by"] == "bob"
    assert call("GET", "/v1/models/atlas.alice", token).json()["id"] == "atlas"
    assert error_of(call("GET", "/v1/models/secret", token), 404)["code"] == "model_not_found"
    # The bare handle two agents share is refused, naming the choices.
    error = error_of(call("POST", "/v1/chat/completions", token, json=ask()), 400)
    assert error["code"] == "model_ambiguous" and error["param"] == "model"
    assert "`nova.alice`" in error["message"] and "`nova.bob`" in error["message"]
    # Another person's agent, or none at all: not found.
    for model in ("secret", "secret@charlie", "nobody", "nova@charlie"):
        error = error_of(call("POST", "/v1/chat/completions", token, json=ask(model=model)), 404)
        assert error["code"] == "model_not_found"
    assert nothing_written()


BAD = [
    ({"model": "nova"}, "messages"),
    (ask(messages=[]), "messages"),
    (ask(messages="hi"), "messages"),
    (ask(messages=[{"role": "wizard", "content": "hi"}]), "messages[0].role"),
    # Unhashable: they were 500s (a TypeError), in daphne's HTML.
    (ask(messages=[{"role": ["user"], "content": "hi"}]), "messages[0].role"),
    (ask(messages=[{"role": {"user": 1}, "content": "hi"}]), "messages[0].role"),
    (ask(messages=[{"role": "tool", "content": "x", "tool_call_id": "1"}]), "messages[0].role"),
    (ask(messages=[{"role": "user", "content": "   "}]), "messages[0].content"),
    (ask(messages=[{"role": "user", "content": 3}]), "messages[0].content"),
    (
        ask(messages=[{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}]),
        "messages[0].content[0]",
    ),
    (
        ask(
            messages=[
                {"role": "user", "content": "hi"},
                {"role": "assistant", "content": "hello"},
            ]
        ),
        "messages[1]",
    ),
    (ask(model=""), "model"),
    (ask(model=3), "model"),
    (ask(n=2), "n"),
    (ask(tools=[{"type": "function", "function": {"name": "f"}}]), "tools"),
    (ask(tool_choice="required"), "tool_choice"),
    (ask(response_format={"type": "json_object"}), "response_format"),
    (ask(logprobs=True), "logprobs"),
    (ask(stream="yes"), "stream"),
    (ask(user="x" * 201), "user"),
    (ask(messages=[{"role": "user", "content": "/task"}]), "messages"),
    (ask(messages=[{"role": "user", "content": "/task @nova write the report"}]), "messages"),
]


def test_bad_requests_are_400s_naming_the_parameter_and_write_nothing(nova, token):
    for body, param in BAD:
        error = error_of(call("POST", "/v1/chat/completions", token, json=body), 400)
        assert error["type"] == "invalid_request_error"
        assert error["param"] == param, (body, error)
    assert nothing_written()


def test_bodies_that_are_not_one_json_object_or_too_large(nova, token, settings):
    # The last two: text PostgreSQL cannot store (a NUL, in the message or the session key);
    # they were 500s, in daphne's HTML, retried by the SDK.
    nul_text = b'{"model": "nova", "messages": [{"role": "user", "content": "a\\u0000b"}]}'
    nul_user = (
        b'{"model": "nova", "user": "k\\u0000", "messages": [{"role": "user", "content": "hi"}]}'
    )
    for content in (b"{not json", b"[1, 2]", b"[" * 200 + b"]" * 200, nul_text, nul_user):
        error = error_of(call("POST", "/v1/chat/completions", token, content=content), 400)
        assert error["code"] == "invalid_body"
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 1000
    huge = ask(messages=[{"role": "user", "content": "x" * 2000}])
    error = error_of(call("POST", "/v1/chat/completions", token, json=huge), 413)
    assert error["code"] == "request_too_large"
    assert nothing_written()


def test_unknown_paths_and_methods(nova, token):
    assert error_of(call("GET", "/v1/embeddings", token), 404)["code"] == "unknown_url"
    assert error_of(call("POST", "/v1/responses", token, json={}), 404)["code"] == "unknown_url"
    assert error_of(call("GET", "/v1/chat/completions", token), 405)["code"] == "method_not_allowed"
    assert error_of(call("POST", "/v1/models", token), 405)["code"] == "method_not_allowed"
    assert nothing_written()


def test_earlier_history_is_not_posted_again_only_the_new_user_text(alice, nova, token):
    """Parsing only: what a client resending the whole history makes of one request."""
    completion = front.parse_completion(
        {
            "model": "nova",
            "messages": [
                {"role": "system", "content": "Be brief."},
                {"role": "user", "content": "first"},
                {"role": "assistant", "content": "Echo: first"},
                {"role": "user", "content": [{"type": "text", "text": "second"}]},
                {"role": "user", "content": "third"},
            ],
            "temperature": 0.2,
            "max_tokens": 50,
            "user": "session-1",
        },
        {},
    )
    assert completion.text == "second\n\nthird"
    assert completion.system == "Be brief."
    assert completion.session_key == "session-1"
    header = front.parse_completion(ask(user="u"), {"x-agntchat-session": "s"})
    assert header.session_key == "s"


def test_an_agent_no_bridge_takes_the_message_for_is_a_503_saying_it_is_offline(
    alice, nova, token, settings
):
    """Its turn may last ten minutes, but no bridge takes the message at all: after
    FRONT_START_SECONDS the client hears that the agent is offline (before, a plain request
    outlasted the SDK's own ten-minute timeout, and it never saw why). The message stays."""
    settings.FRONT_START_SECONDS = 1
    body = ask(messages=[{"role": "user", "content": "anyone?"}])
    response = call("POST", "/v1/chat/completions", token, json=body)
    error = error_of(response, 503)
    assert error["code"] == "agent_offline" and "bridge is not connected" in error["message"]
    assert response.headers["x-should-retry"] == "false"
    post = Message.objects.get()
    assert str(post.conversation_id) in error["message"]
    assert post.deliveries.get().acked_at is None  # still queued: answered once a bridge is on


def test_no_answer_in_time_is_a_504_that_keeps_the_message_and_a_retry_posts_nothing_new(
    alice, nova, token, monkeypatch
):
    """No bridge runs: past the agent's turn time limit (and the grace), OpenAI's shape with a
    504, which the client must not retry (the post is in the conversation). A retry all the
    same, by the client library (x-stainless-retry-count) or with the same Idempotency-Key,
    waits for the reply to the same post instead of posting again."""
    agent_actions.update_agent(nova, turn_time_limit_seconds=1)
    monkeypatch.setattr(front, "GRACE_SECONDS", 0)
    body = ask(messages=[{"role": "user", "content": "anyone?"}])
    response = call("POST", "/v1/chat/completions", token, json=body)
    error = error_of(response, 504)
    assert error["code"] == "agent_timeout" and error["type"] == "timeout"
    assert response.headers["x-should-retry"] == "false"
    post = Message.objects.get()
    assert (post.author_user, post.body, post.conversation.kind) == (alice, "anyone?", "api")
    assert response.headers["x-agntchat-conversation"] == str(post.conversation_id)
    assert str(post.conversation_id) in error["message"]

    retry = {"x-stainless-retry-count": "1"}
    error_of(call("POST", "/v1/chat/completions", token, headers=retry, json=body), 504)
    assert Message.objects.count() == 1
    # Streamed, the same: the role chunk, then an error event the client raises, no [DONE].
    streamed = call(
        "POST", "/v1/chat/completions", token, headers=retry, json=ask(**body, stream=True)
    )
    assert streamed.status_code == 200
    events = [line for line in streamed.text.split("\n") if line.startswith("data: ")]
    assert '"role":"assistant"' in events[0]
    assert '"code":"agent_timeout"' in events[-1] and "[DONE]" not in streamed.text
    assert Message.objects.count() == 1

    once = {"idempotency-key": "abc-1"}
    again = ask(messages=[{"role": "user", "content": "again?"}])
    for _ in range(2):
        error_of(call("POST", "/v1/chat/completions", token, headers=once, json=again), 504)
    assert [m.body for m in Message.objects.order_by("created_at")] == ["anyone?", "again?"]
    assert Conversation.objects.filter(kind="api").count() == 1


def test_a_session_header_is_utf_8_text_without_control_characters(alice, nova, token, settings):
    """The key names the session and its conversation: it was stored as it came, control
    characters and all, and UTF-8 read as latin-1 (``café`` became ``cafÃ©``)."""
    settings.FRONT_START_SECONDS = 0  # no bridge: a request let through is answered 503 at once
    for bad in (b"a\x01b", b"tab\there", b"\xff\xfe"):
        response = call(
            "POST", "/v1/chat/completions", token, headers={"x-agntchat-session": bad}, json=ask()
        )
        assert error_of(response, 400)["param"] == "X-Agntchat-Session", bad
    assert nothing_written()
    headers = {"x-agntchat-session": "café".encode()}
    error_of(call("POST", "/v1/chat/completions", token, headers=headers, json=ask()), 503)
    session = ApiSession.objects.get()
    assert session.key == "café" and session.conversation.title.endswith(" · café")


def test_a_rate_limited_completion_is_a_429_with_retry_after_and_writes_nothing(
    alice, channel, token, settings
):
    """OpenAI's clients wait Retry-After and try again on a 429; a 400 they give up on."""
    settings.PERSON_POSTS_PER_MINUTE = settings.PERSON_POSTS_BURST = 1
    conversation_actions.post_message(alice, channel, "hello")  # her one post of the minute
    response = call("POST", "/v1/chat/completions", token, json=ask())
    error = error_of(response, 429)
    assert (error["type"], error["code"]) == ("rate_limit_error", "rate_limit_exceeded")
    assert error["message"].startswith("Too many messages")
    assert int(response.headers["retry-after"]) >= 1
    assert "x-should-retry" not in response.headers  # nothing was posted: a retry is welcome
    assert Message.objects.count() == 1
    assert not Conversation.objects.filter(kind="api").exists()
    assert not ApiSession.objects.exists()


def test_a_system_text_too_long_for_a_message_says_so(alice, nova):
    """The client's system text is quoted at the head of the post: past what a message holds,
    every request was refused as if the user's message were too long."""
    secret = workspace_actions.issue_api_token(alice)[1]
    system = {"role": "system", "content": "Answer in French. " * 1200}
    body = ask(messages=[system, {"role": "user", "content": "hi"}])
    error = error_of(call("POST", "/v1/chat/completions", secret, json=body), 400)
    assert error["code"] == "context_length_exceeded" and error["param"] == "messages"
    assert error["message"].startswith("The system and developer messages (21,599 characters)")
    assert nothing_written()
