"""Agents' tool calls and approvals in the pages: the calls under the messages they belong to
and on the page of the task they were made for, the approval prompt for those who may decide,
an agent's tools for its owner and a workspace's tool permissions for its admins. Alice owns team A and Nova; Bob is a member; Charlie, an
outsider with team B, sees nothing. Calls are made through the real call path
(tests/work/tooling.py)."""

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from conversations.actions import create_conversation, post_message
from conversations.models import Task
from tests.work.tooling import held_message, held_task
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


def test_a_calls_huge_input_shows_its_start(client, alice, channel, nova):
    """A page may list 200 calls: each call's input was shown whole, megabytes of them."""
    held = held_message(nova, channel, alice, "Write the plan.")
    long = "x" * 300_000
    held.output("artifact_publish", {**PLAN, "content": long})
    question = channel.messages.get(body="Write the plan.")
    client.force_login(alice)
    html = fragment(client, question)
    assert 'Input <span class="muted">(the start of it)</span>' in html
    assert len(html) < 50_000 and "x" * 3000 in html


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


def task_page(client, task) -> str:
    response = client.get(f"/w/{task.workspace_id}/tasks/{task.id}/")
    assert response.status_code == 200
    return response.content.decode()


def test_a_tasks_page_shows_the_calls_made_for_it_to_whoever_may_see_the_task(
    client, alice, bob, charlie, team_a, team_b, nova
):
    ask_for(nova, alice, "artifact_publish")
    held = held_task(nova, team_a, alice, "Publish the plan.")  # asked outside a conversation
    task = Task.objects.get(pk=held.item_id)
    held.error("artifact_publish", {"title": "x"})  # does not fit the schema
    request_id = held.call("artifact_publish", PLAN).pending["request_id"]

    client.force_login(bob)  # a member: he may see the task, so its calls
    html = task_page(client, task)
    tools = html.split('id="tools-used-title"')[1]
    assert tools.count("data-call-id=") == 2 and "2 calls" in tools
    assert "used <code>artifact_publish</code>" in tools and "do not fit its input schema" in tools
    assert "wants to use <code>artifact_publish</code>" in tools  # the waiting one, last
    assert tools.index("used <code>") < tools.index("wants to use <code>")
    assert "&quot;title&quot;: &quot;Plan&quot;" in tools  # its input, as JSON
    assert f'data-approval="{request_id}"' in tools and 'data-decide="approve"' not in tools
    assert "Waiting for approval from alice (Nova" in tools

    client.force_login(alice)  # Nova's owner decides, with the time left to do it
    mine = task_page(client, task)
    assert 'data-decide="approve"' in mine and 'data-decide="always"' in mine
    expires = PermissionRequest.objects.get(pk=request_id).expires_at
    assert f'data-countdown="{expires.isoformat()}"' in mine and "data-server-now=" in mine

    client.force_login(charlie)  # an outsider finds neither the task nor its calls
    assert client.get(f"/w/{team_a.id}/tasks/{task.id}/").status_code == 404
    assert client.get(f"/w/{team_b.id}/tasks/{task.id}/").status_code == 404
    assert client.get(f"/api/v1/tool-calls/{task.tool_calls.first().id}/").status_code == 404


def test_a_task_without_calls_shows_no_tools_section(client, alice, team_a, nova):
    held = held_task(nova, team_a, alice)
    client.force_login(alice)
    assert 'id="tools-used-title"' not in task_page(client, Task.objects.get(pk=held.item_id))


def test_calls_in_a_tasks_own_conversation_show_only_to_who_may_read_it(
    client, alice, bob, team_a, nova
):
    """Asked in a direct conversation, a task works in one of its own (Alice's, who asked): Bob
    may see the task from the direct conversation, not the calls made in Alice's."""
    direct = create_conversation(
        alice, team_a, kind="direct", user_ids=[bob.id], agent_ids=[nova.id]
    )
    held = held_task(nova, team_a, alice, "Publish the plan.", conversation=direct)
    task = Task.objects.get(pk=held.item_id)
    assert task.work_conversation_id is not None
    held.output("artifact_publish", PLAN)
    client.force_login(alice)
    assert "used <code>artifact_publish</code>" in task_page(client, task)
    client.force_login(bob)
    theirs = task_page(client, task)
    assert "Publish the plan." in theirs and "data-call-id=" not in theirs


def test_a_tasks_page_shows_many_calls_in_the_same_reads_as_one(client, alice, team_a, nova):
    ask_for(nova, alice, "artifact_publish")
    held = held_task(nova, team_a, alice)
    task = Task.objects.get(pk=held.item_id)
    held.error("artifact_publish", {"title": "x"})
    held.call("artifact_publish", PLAN)  # waits: who may decide is asked
    client.force_login(alice)
    task_page(client, task)
    with CaptureQueriesContext(connection) as one:
        task_page(client, task)
    for i in range(4):
        held.error("artifact_publish", {"title": f"x{i}"})
        held.call("artifact_publish", dict(PLAN, title=f"Plan {i}"))
    with CaptureQueriesContext(connection) as five:
        page = task_page(client, task)
    assert page.count("data-call-id=") == 10 and page.count('data-decide="approve"') == 5
    assert len(five) == len(one), [q["sql"][:80] for q in five.captured_queries]
