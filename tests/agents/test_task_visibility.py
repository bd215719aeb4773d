"""A task is visible exactly where the conversation it came from is (REST, pages, live events).

Alice asks her agent Nova for something in their direct conversation; Bob, her teammate, cannot
read that conversation, so he sees nothing of the task either.
"""

import pytest
from django.test import Client

from conversations import tasks
from conversations.actions import create_conversation
from conversations.models import Task
from tests.socket_helpers import TopicInbox

pytestmark = pytest.mark.django_db

PRIVATE = "Draft my resignation letter"


@pytest.fixture
def direct(alice, team_a, nova):
    return create_conversation(alice, team_a, kind="direct", agent_ids=[nova.id])


@pytest.fixture
def private_task(alice, team_a, nova, direct):
    return tasks.create_task(alice, team_a, nova, PRIVATE, conversation=direct)


def page_client(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def test_a_task_from_a_hidden_conversation_is_not_found_over_rest(
    alice, bob, team_a, direct, private_task, api
):
    client = api(bob)
    assert client.get(f"/api/v1/conversations/{direct.id}/").status_code == 404
    detail = client.get(f"/api/v1/tasks/{private_task.id}/")
    assert detail.status_code == 404 and detail.json()["error"]["code"] == "task_not_found"
    cancel = client.post(f"/api/v1/tasks/{private_task.id}/cancel/")
    assert cancel.status_code == 404 and cancel.json()["error"]["code"] == "task_not_found"
    for listing in (
        client.get("/api/v1/tasks/"),
        client.get(f"/api/v1/tasks/?workspace={team_a.id}"),
    ):
        assert listing.status_code == 200
        assert listing.json()["results"] == []
    task = Task.objects.get(pk=private_task.pk)
    assert (task.status, task.cancel_state, task.cancel_requested_at) == ("queued", "", None)
    # Alice, who can read the conversation, sees and cancels it.
    assert api(alice).get(f"/api/v1/tasks/{private_task.id}/").json()["instructions"] == PRIVATE
    assert api(alice).post(f"/api/v1/tasks/{private_task.id}/cancel/").status_code == 200


def test_tasks_from_a_channel_or_no_conversation_are_the_workspaces(
    alice, bob, team_a, channel, nova, private_task, api
):
    in_channel = tasks.create_task(alice, team_a, nova, "Summarise #general", conversation=channel)
    loose = tasks.create_task(alice, team_a, nova, "Tidy the wiki")
    listed = api(bob).get(f"/api/v1/tasks/?workspace={team_a.id}").json()["results"]
    assert {t["id"] for t in listed} == {str(in_channel.id), str(loose.id)}
    assert api(bob).get(f"/api/v1/tasks/{in_channel.id}/").status_code == 200
    assert {t["id"] for t in api(alice).get("/api/v1/tasks/").json()["results"]} == {
        str(in_channel.id),
        str(loose.id),
        str(private_task.id),
    }


def test_pages_show_nothing_of_a_task_from_a_hidden_conversation(
    alice, bob, team_a, nova, private_task
):
    bobs = page_client(bob)
    listing = bobs.get(f"/w/{team_a.id}/tasks/")
    assert listing.status_code == 200 and PRIVATE not in listing.content.decode()
    assert listing.context["side"]["active_tasks"] == 0
    assert bobs.get(f"/w/{team_a.id}/tasks/{private_task.id}/").status_code == 404
    agent_page = bobs.get(f"/w/{team_a.id}/agents/{nova.id}/")
    assert agent_page.status_code == 200 and PRIVATE not in agent_page.content.decode()
    alices = page_client(alice).get(f"/w/{team_a.id}/tasks/")
    assert PRIVATE in alices.content.decode() and alices.context["side"]["active_tasks"] == 1


def test_live_task_events_go_only_to_those_who_can_read_the_conversation(
    alice, bob, team_a, nova, direct, django_capture_on_commit_callbacks
):
    workspace_inbox = TopicInbox(f"workspace.{team_a.id}")
    bobs_inbox = TopicInbox(f"user.{bob.id}")
    alices_inbox = TopicInbox(f"user.{alice.id}")
    with django_capture_on_commit_callbacks(execute=True):
        task = tasks.create_task(alice, team_a, nova, PRIVATE, conversation=direct)
    with django_capture_on_commit_callbacks(execute=True):
        tasks.request_cancel(task)
    assert [e["event"]["type"] for e in alices_inbox.all(quiet=0.5)] == [
        "task.created",
        "task.finished",
    ]
    assert [e for e in workspace_inbox.all(quiet=0.2) if "task" in e["event"]] == []
    assert bobs_inbox.all(quiet=0.2) == []
