"""The OpenAI-compatible front with the official ``openai`` client, through a real daphne and a
real bridge (scripted backend): a completion is a turn of the one pipeline, in the person's API
session conversation, readable in the UI."""

import asyncio

import openai
import pytest
from asgiref.sync import sync_to_async
from django.test import Client
from openai import AsyncOpenAI, OpenAI

from agents import actions as agent_actions
from conversations.models import Conversation, Message
from fronts.models import ApiSession
from tests.socket_helpers import start_bridge
from tests.waiting import wait_until
from workspaces import actions as workspace_actions

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


def client_of(server, token: str) -> OpenAI:
    return OpenAI(base_url=server.url + "/v1", api_key=token, max_retries=0, timeout=60)


def stop(bridge):
    bridge.terminate()
    output = bridge.communicate(timeout=10)[0]
    assert "Traceback" not in output, output


def test_models_and_refusals_with_the_client(alice, bob, charlie, team_a, team_b, nova, server):
    secret_agent = agent_actions.create_agent(charlie, name="Secret", backend="scripted")
    _, token = workspace_actions.issue_api_token(alice)
    client = client_of(server, token)

    assert [m.id for m in client.models.list()] == ["nova"]
    assert client.models.retrieve("nova").owned_by == "alice"
    # Bob's own "nova" appears in team A, which Alice is in: both are listed, qualified.
    agent_actions.create_agent(bob, name="Nova", backend="scripted")
    assert [m.id for m in client.models.list()] == ["nova.alice", "nova.bob"]
    with pytest.raises(openai.BadRequestError) as ambiguous:
        client.chat.completions.create(model="nova", messages=[{"role": "user", "content": "hi"}])
    assert "nova.alice" in str(ambiguous.value) and ambiguous.value.code == "model_ambiguous"

    # Charlie's agent is nobody's business of Alice's: not found, and nothing made.
    with pytest.raises(openai.NotFoundError) as not_found:
        client.chat.completions.create(
            model=secret_agent.handle, messages=[{"role": "user", "content": "hi"}]
        )
    assert not_found.value.code == "model_not_found"
    with pytest.raises(openai.NotFoundError):
        client.models.retrieve(secret_agent.handle)
    with pytest.raises(openai.AuthenticationError):
        client_of(server, "apt_wrong").models.list()
    with pytest.raises(openai.AuthenticationError):
        client_of(server, "apt_wrong").chat.completions.create(
            model="nova.alice", messages=[{"role": "user", "content": "hi"}]
        )
    with pytest.raises(openai.BadRequestError) as bad:
        client.chat.completions.create(
            model="nova.alice", messages=[{"role": "user", "content": "hi"}], n=2
        )
    assert bad.value.param == "n"
    with pytest.raises(openai.BadRequestError):
        client.chat.completions.create(
            model="nova.alice", messages=[{"role": "narrator", "content": "hi"}]
        )
    assert not Conversation.objects.filter(kind="api").exists()
    assert not Message.objects.exists() and not ApiSession.objects.exists()


def test_completions_are_turns_in_one_session_conversation(alice, team_a, nova, server, tmp_path):
    _, token = workspace_actions.issue_api_token(alice, name="laptop")
    client = client_of(server, token)
    bridge = start_bridge(server, nova, tmp_path)
    try:
        answer = client.chat.completions.create(
            model="nova",
            messages=[{"role": "user", "content": "What is the plan?"}],
            temperature=0.3,
            max_tokens=100,
        )
        assert answer.object == "chat.completion"
        assert answer.choices[0].message.content == "Echo: What is the plan?"
        assert answer.choices[0].message.role == "assistant"
        assert answer.choices[0].finish_reason == "stop"
        # The turn's recorded usage (the scripted backend counts words).
        assert answer.usage.completion_tokens == 5 and answer.usage.prompt_tokens > 0
        assert answer.usage.total_tokens == answer.usage.prompt_tokens + 5

        conversation = Conversation.objects.get(kind="api")
        assert conversation.title == "Nova · API (laptop)"
        assert conversation.workspace.is_personal and conversation.workspace.owner == alice
        assert {(p.user_id, p.agent_id) for p in conversation.participants.all()} == {
            (alice.id, None),
            (None, nova.id),
        }
        question, reply = conversation.messages.order_by("created_at")
        assert (question.author_user, question.body) == (alice, "What is the plan?")
        assert (reply.author_agent, reply.body, reply.reply_to) == (
            nova,
            "Echo: What is the plan?",
            question,
        )

        # The same session, streamed, the whole history resent: only the new text is posted.
        stream = client.chat.completions.create(
            model="nova",
            messages=[
                {"role": "user", "content": "What is the plan?"},
                {"role": "assistant", "content": "Echo: What is the plan?"},
                {"role": "user", "content": "And then?"},
            ],
            stream=True,
            stream_options={"include_usage": True},
        )
        chunks = list(stream)
        assert chunks[0].choices[0].delta.role == "assistant"
        text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        assert text == "Echo: And then?"
        assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "stop"
        assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == 3
        assert Conversation.objects.filter(kind="api").count() == 1
        assert [m.body for m in conversation.messages.order_by("created_at")] == [
            "What is the plan?",
            "Echo: What is the plan?",
            "And then?",
            "Echo: And then?",
        ]
        # Another session key (the request's `user`): a conversation of its own.
        other = client.chat.completions.create(
            model="nova", messages=[{"role": "user", "content": "hello"}], user="ci-run-7"
        )
        assert other.choices[0].message.content == "Echo: hello"
        assert Conversation.objects.filter(kind="api").count() == 2
        session = Conversation.objects.get(title="Nova · API (laptop) · ci-run-7")
        # The agent could not answer: its notice as a server error the client does not retry.
        with pytest.raises(openai.InternalServerError) as failed:
            client.chat.completions.create(
                model="nova", messages=[{"role": "user", "content": "please [[fail]]"}]
            )
        assert failed.value.status_code == 502 and failed.value.code == "agent_failed"
        assert "Nova could not answer: scripted failure" in failed.value.message
    finally:
        stop(bridge)

    # The person reads both in the UI: listed in the sidebar, each page shows the turns.
    browser = Client()
    browser.force_login(alice)
    page = browser.get(f"/w/{conversation.workspace_id}/c/{conversation.id}/")
    html = page.content.decode()
    assert page.status_code == 200
    assert "API sessions" in html and "Nova · API (laptop) · ci-run-7" in html
    assert "API session · an OpenAI-compatible client" in html
    assert "Echo: And then?" in html
    assert session.id != conversation.id


async def test_the_async_client_streams_and_a_client_that_leaves_loses_nothing(
    alice, nova, server, tmp_path
):
    _, token = await sync_to_async(workspace_actions.issue_api_token)(alice)
    bridge = await sync_to_async(start_bridge)(server, nova, tmp_path, '{"delay_ms": 1500}')
    client = AsyncOpenAI(base_url=server.url + "/v1", api_key=token, max_retries=0, timeout=60)
    try:
        stream = await client.chat.completions.create(
            model="nova", messages=[{"role": "user", "content": "tell me a story"}], stream=True
        )
        parts = [chunk async for chunk in stream]
        assert "".join(c.choices[0].delta.content or "" for c in parts) == "Echo: tell me a story"
        assert all(c.usage is None for c in parts)

        # Hang up after the role chunk, while the agent still works: its reply still lands.
        stream = await client.chat.completions.create(
            model="nova", messages=[{"role": "user", "content": "are you there?"}], stream=True
        )
        first = await anext(aiter(stream))
        assert first.choices[0].delta.role == "assistant"
        await stream.close()

        def replied():
            return Message.objects.filter(
                conversation__kind="api", body="Echo: are you there?", author_agent=nova
            ).exists()

        await sync_to_async(wait_until)(replied, what="the reply after the client left")
        assert await Message.objects.filter(conversation__kind="api").acount() == 4
    finally:
        await client.close()
        await asyncio.to_thread(stop, bridge)
