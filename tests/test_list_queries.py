"""Every GET endpoint of the REST API takes as many queries with five times the rows as with
one of each: none reads once per row it returns (an N+1 is invisible in a test with one row)."""

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from agents import actions as agent_actions
from artifacts.actions import comment_on_artifact, publish_artifact, update_artifact
from conversations.actions import create_conversation, post_message
from conversations.tasks import create_task, mark_started, record_event
from conversations.usage import record_usage
from workspaces import actions as workspace_actions

pytestmark = pytest.mark.django_db


def add_one_of_each(alice, bob, team_a, channel, nova, i: int) -> dict:
    helper = agent_actions.create_agent(alice, name=f"Helper {i}", backend="scripted")
    agent_actions.create_agent_key(nova, f"key {i}")
    agent_actions.set_personality(nova, f"Curious, take {i}.", author=alice)
    record_usage(nova, team_a.id, {"input_tokens": 10, "cost_usd": 0.01})
    workspace_actions.issue_api_token(alice, f"token {i}")
    workspace_actions.create_invitation(team_a.memberships.get(user=alice))
    workspace_actions.create_team_workspace(alice, f"Team {i}")
    post_message(bob, channel, f"**more** {i}")
    post_message(nova, channel, f"an answer {i}")
    task = create_task(alice, team_a, helper, f"Task {i}")
    mark_started(task.id)
    record_event(task.id, {"message": f"step {i}"})
    artifact = publish_artifact(nova, channel, f"Note {i}", "markdown", f"# Note {i}")
    update_artifact(nova, artifact, f"# Note {i}, again")
    comment_on_artifact(bob, artifact, f"comment {i}")
    create_conversation(alice, team_a, kind="channel", title=f"room-{i}", agent_ids=[helper.id])
    return {"task": task, "artifact": artifact}


def test_no_list_endpoint_reads_once_per_row(api, alice, bob, team_a, channel, nova):
    first = add_one_of_each(alice, bob, team_a, channel, nova, 0)
    task, artifact = first["task"], first["artifact"]
    client = api(alice)
    urls = [
        "/api/v1/me/",
        "/api/v1/auth/tokens/",
        "/api/v1/workspaces/",
        f"/api/v1/workspaces/{team_a.id}/",
        f"/api/v1/workspaces/{team_a.id}/members/",
        f"/api/v1/workspaces/{team_a.id}/invitations/",
        f"/api/v1/workspaces/{team_a.id}/credentials/",
        "/api/v1/agents/",
        f"/api/v1/agents/?workspace={team_a.id}",
        f"/api/v1/agents/{nova.id}/",
        f"/api/v1/agents/{nova.id}/keys/",
        f"/api/v1/agents/{nova.id}/personality/revisions/",
        f"/api/v1/agents/{nova.id}/usage/",
        "/api/v1/tasks/",
        f"/api/v1/tasks/{task.id}/",
        "/api/v1/conversations/",
        f"/api/v1/conversations/{channel.id}/",
        f"/api/v1/conversations/{channel.id}/messages/",
        f"/api/v1/conversations/{channel.id}/turns/",
        f"/api/v1/conversations/{channel.id}/artifacts/",
        f"/api/v1/artifacts/{artifact.id}/",
        f"/api/v1/artifacts/{artifact.id}/versions/",
        f"/api/v1/artifacts/{artifact.id}/comments/",
        "/api/v1/card-templates/",
    ]

    def queries_per_url() -> dict:
        counts = {}
        for url in urls:
            client.get(url)  # warm: compiled statements, caches
            with CaptureQueriesContext(connection) as captured:
                response = client.get(url)
            assert response.status_code == 200, (url, response.content[:300])
            counts[url] = len(captured)
        return counts

    before = queries_per_url()
    for i in range(1, 5):
        add_one_of_each(alice, bob, team_a, channel, nova, i)
        update_artifact(nova, artifact, f"# Note 0, take {i}")
        comment_on_artifact(bob, artifact, f"more on it {i}")
        record_event(task.id, {"message": f"step 0.{i}"})
    after = queries_per_url()
    assert {url: (before[url], after[url]) for url in urls if after[url] != before[url]} == {}
