"""Agents' tool calls and approvals in the pages: the calls under the messages they belong to,
the approval prompt for those who may decide, an agent's tools for its owner and a workspace's
tool permissions for its admins. Alice owns team A and Nova; Bob is a member; Charlie, an
outsider with team B, sees nothing. Calls are made through the real call path
(tests/work/tooling.py)."""

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from conversations.actions import post_message
from tests.work.tooling import held_message
from work import actions
from work.access import access_tool
from work.models import PermissionRequest, ToolPermission

pytestmark = pytest.mark.django_db

PLAN = {"title": "Plan", "kind": "markdown", "content": "# Plan"}


def ask_for(agent, owner, tool="artifact_publish"):
    """Nova's owner makes TOOL wait for a person's approval."""
    actions.set_agent_permission(owner, agent, access_tool(tool), "ask")


def fragment(client, *messages) -> str:
    return client.get(
        f"/app/messages/?ids={','.join(str(m.id) for m in messages)}"
    ).content.decode()


def test_a_call_shows_under_the_agents_reply_with_its_input_and_output(
    client, alice, bob, channel, nova
):
    held = held_message(nova, channel, alice, "Write the plan.")
    output = held.output("artifact_publish", PLAN)
    question = channel.messages.get(body="Write the plan.")
    reply = post_message(nova, channel, "Here it is.", reply_to=question)
    client.force_login(bob)  # anyone who reads the conversation sees it
    html = fragment(client, question, reply)
    under_reply = html.split(f'id="msg-{reply.id}"')[1]
    assert "used <code>artifact_publish</code>" in under_reply
    assert "tool-call--succeeded" in under_reply and "succeeded" in under_reply
    assert "&quot;title&quot;: &quot;Plan&quot;" in under_reply  # the input, as JSON
    assert output["artifact_id"] in under_reply  # the output
    assert "data-tool-calls" not in html.split(f'id="msg-{reply.id}"')[0]


def test_a_call_before_the_reply_shows_under_the_message_answered(client, alice, channel, nova):
    held = held_message(nova, channel, alice, "Write the plan.")
    held.error("artifact_publish", {"title": "x"})  # does not fit the schema
    question = channel.messages.get(body="Write the plan.")
    client.force_login(alice)
    html = fragment(client, question)
    assert "Nova used <code>artifact_publish</code>" in html
    assert "tool-call--failed" in html and "do not fit its input schema" in html


def test_a_waiting_call_asks_those_who_may_decide_and_tells_the_others(
    client, alice, bob, channel, nova
):
    ask_for(nova, alice)
    held = held_message(nova, channel, alice, "Publish it.")
    answer = held.call("artifact_publish", PLAN)
    assert answer.pending is not None
    question = channel.messages.get(body="Publish it.")
    client.force_login(alice)
    mine = fragment(client, question)
    assert f'data-approval="{answer.pending["request_id"]}"' in mine
    assert 'data-decide="approve"' in mine and 'data-decide="always"' in mine
    assert "waiting for approval" in mine
    client.force_login(bob)
    theirs = fragment(client, question)
    assert 'data-decide="approve"' not in theirs
    assert "Waiting for approval from alice (Nova" in theirs


def test_a_page_shows_many_calls_in_the_same_reads_as_one(client, alice, channel, nova):
    client.force_login(alice)

    def turn(i):
        held = held_message(nova, channel, alice, f"Question {i}")
        held.output("artifact_publish", dict(PLAN, title=f"Plan {i}"))
        held.error("artifact_publish", {"title": "x"})
        question = channel.messages.get(body=f"Question {i}")
        post_message(nova, channel, f"Answer {i}", reply_to=question)
        return question

    url = f"/w/{channel.workspace_id}/c/{channel.id}/"
    turn(0)
    client.get(url)
    with CaptureQueriesContext(connection) as one:
        client.get(url)
    for i in range(1, 5):
        turn(i)
    with CaptureQueriesContext(connection) as five:
        page = client.get(url).content.decode()
    assert page.count("used <code>artifact_publish</code>") == 10
    assert len(five) == len(one), [q["sql"][:80] for q in five.captured_queries]


def test_an_outsider_finds_no_calls_and_cannot_decide(client, alice, charlie, channel, nova, api):
    ask_for(nova, alice)
    held = held_message(nova, channel, alice, "Publish it.")
    request_id = held.call("artifact_publish", PLAN).pending["request_id"]
    question = channel.messages.get(body="Publish it.")
    client.force_login(charlie)
    assert client.get(f"/app/messages/?ids={question.id}").status_code == 404
    refused = api(charlie).post(
        f"/api/v1/permission-requests/{request_id}/decision/",
        {"decision": "approve"},
        format="json",
    )
    assert refused.status_code == 404
    assert PermissionRequest.objects.get(pk=request_id).status == "pending"


def test_a_bad_decision_is_refused_and_changes_nothing(client, alice, channel, nova, api):
    ask_for(nova, alice)
    held = held_message(nova, channel, alice, "Publish it.")
    request_id = held.call("artifact_publish", PLAN).pending["request_id"]
    url = f"/api/v1/permission-requests/{request_id}/decision/"
    for body in ({"decision": "maybe"}, {"decision": "deny", "always": True}, {}):
        response = api(alice).post(url, body, format="json")
        assert response.status_code == 400, body
        assert response.json()["error"]["code"]
    assert PermissionRequest.objects.get(pk=request_id).status == "pending"
    assert not ToolPermission.objects.filter(workspace__isnull=False, agent=nova).exists()
