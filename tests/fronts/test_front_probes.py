"""Probes of the OpenAI-compatible front, in process (the ASGI application as mounted) and through
daphne with the ``openai`` client: what one person can make it hold at once, and for how long."""

import asyncio

import httpx
import openai
import pytest
from asgiref.sync import async_to_sync
from django.conf import settings as django_settings
from django.utils import timezone
from openai import OpenAI

from agntchat.asgi import application
from agntchat.core.presence import client as redis
from conversations.models import Message
from fronts import live
from fronts import openai as front
from tests.fronts.test_openai_refusals import ask, error_of
from tests.waiting import wait_until
from workspaces import actions as workspace_actions

pytestmark = pytest.mark.django_db(transaction=True)


def at_once(*requests):
    """REQUESTS ((method, path, token, headers, json) each) sent together; their responses."""

    async def go():
        transport = httpx.ASGITransport(app=application)
        async with httpx.AsyncClient(transport=transport, base_url="http://testserver") as client:
            return await asyncio.gather(
                *(
                    client.request(
                        method, path, headers={"authorization": f"Bearer {token}", **headers},
                        json=body,
                    )
                    for method, path, token, headers, body in requests
                )
            )  # fmt: skip

    return async_to_sync(go)()


def test_a_person_waits_on_a_bounded_number_of_completions_at_once(
    alice, bob, team_a, nova, monkeypatch, settings
):
    """Each waiting completion holds a live-event subscription and reads the database every few
    seconds for up to the agent's turn limit. A retry (X-Stainless-Retry-Count) of the same
    messages posts nothing, so no post limit held them back: one token could keep any number
    waiting. Past WAITS_PER_PERSON, a 429 the client library waits on, and nothing posted."""
    monkeypatch.setattr(live, "WAITS_PER_PERSON", 2)
    settings.FRONT_START_SECONDS = 2  # no bridge runs: each wait ends with a 503 after that
    token = workspace_actions.issue_api_token(alice)[1]
    retry = {"x-stainless-retry-count": "1"}
    first = (
        "POST",
        "/v1/chat/completions",
        token,
        {},
        ask(messages=[{"role": "user", "content": "a"}]),
    )
    assert error_of(at_once(first)[0], 503)["code"] == "agent_offline"
    again = (*first[:3], retry, first[4])
    responses = at_once(again, again, again, again)
    statuses = sorted(r.status_code for r in responses)
    assert statuses == [429, 429, 503, 503], [r.text for r in responses]
    refused = next(r for r in responses if r.status_code == 429)
    error = error_of(refused, 429)
    assert (error["type"], error["code"]) == ("rate_limit_error", "rate_limit_exceeded")
    assert int(refused.headers["retry-after"]) >= 1
    assert Message.objects.count() == 1
    # Ended waits free their places; another person has places of their own.
    assert error_of(at_once(again)[0], 503)["code"] == "agent_offline"
    bobs = workspace_actions.issue_api_token(bob)[1]
    bob_asks = ("POST", "/v1/chat/completions", bobs, {}, ask())
    statuses = sorted(r.status_code for r in at_once(again, again, bob_asks))
    assert statuses == [503, 503, 503]


@pytest.mark.slow
def test_a_client_that_hangs_up_ends_its_wait_at_once(alice, nova, server):
    """Through daphne, with the client library: a stream closed after its first chunk, and a
    plain request given up on by its client, stop waiting (their places among the person's waits
    are free again) long before the agent would have been given up on (FRONT_START_SECONDS)."""
    token = workspace_actions.issue_api_token(alice)[1]
    client = OpenAI(base_url=server.url + "/v1", api_key=token, max_retries=0, timeout=60)
    waits = f"{django_settings.REDIS_PREFIX}:front:waits:{alice.id}"
    stream = client.chat.completions.create(
        model="nova", messages=[{"role": "user", "content": "anyone?"}], stream=True
    )
    assert next(iter(stream)).choices[0].delta.role == "assistant"
    assert redis().zcard(waits) == 1
    stream.close()
    wait_until(lambda: redis().zcard(waits) == 0, what="the stream's wait to end", timeout=10)

    impatient = client.with_options(timeout=2)
    with pytest.raises(openai.APITimeoutError):
        impatient.chat.completions.create(
            model="nova", messages=[{"role": "user", "content": "still there?"}]
        )
    wait_until(lambda: redis().zcard(waits) == 0, what="the request's wait to end", timeout=10)
    assert Message.objects.filter(conversation__kind="api").count() == 2  # both kept


def test_a_turn_that_recorded_no_usage_is_not_given_a_later_ones(alice, nova):
    """usage_of took the first usage of the conversation after the ack: a turn that recorded
    none was given whatever turn came next, minutes later."""
    from datetime import timedelta

    from conversations.actions import create_conversation, post_message
    from conversations.models import Delivery, TurnUsage

    room = create_conversation(alice, alice.owned_workspaces.first(), kind="direct",
                               agent_ids=[nova.id])  # fmt: skip
    post = post_message(alice, room, "hello there")
    acked = timezone.now()
    Delivery.objects.filter(message=post, agent=nova).update(acked_at=acked)
    later = TurnUsage.objects.create(agent=nova, workspace=room.workspace, conversation=room,
                                     input_tokens=999, output_tokens=999)  # fmt: skip
    TurnUsage.objects.filter(pk=later.pk).update(created_at=acked + timedelta(minutes=3))
    usage = front.usage_of(nova, post, None)
    assert usage["prompt_tokens"] == front.estimate_tokens("hello there")
    assert usage["completion_tokens"] == 0
