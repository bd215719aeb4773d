"""The work map (MAP-1): nodes and edges of a delegation chain (a task handed off inside another
task's own conversation waits on it), side threads, artifacts and who made them; only what the
person may read; the agent and time filters; the REST endpoint, its bad input and another
workspace's user. The story is built through the real actions."""

from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from agents import actions as agent_actions
from agents.exceptions import AgentNotFound
from artifacts.actions import publish_artifact
from conversations.actions import open_direct, post_message
from conversations.models import Conversation, Task
from conversations.tasks import create_task
from work.map import work_map

pytestmark = pytest.mark.django_db


@pytest.fixture
def story(alice, bob, team_a, nova, channel):
    """In team A: Alice asks Scout in their direct conversation to research tides; Scout hands the
    write-up to Quill (Bob's agent) inside that task's own conversation and publishes its notes
    there; Nova pulls Scout aside in #general. Bob, privately, asks Quill for a surprise."""
    scout = agent_actions.create_agent(alice, name="Scout", handle="scout", backend="scripted")
    quill = agent_actions.create_agent(bob, name="Quill", handle="quill", backend="scripted")
    dm, _ = open_direct(alice, team_a, agent_ids=[scout.id])
    post_message(alice, dm, "@scout please research the tide tables for Lisbon")
    research = Task.objects.get(conversation=dm)
    work = research.work_conversation
    post_message(scout, work, "@quill please write up the tide tables as a short note")
    write_up = Task.objects.get(conversation=work)
    notes = publish_artifact(scout, work, "Tide notes", "markdown", "# Tides\nHigh at 06:12.")
    post_message(nova, channel, 'Checking. <dm target="Scout">Which source did you use?</dm>')
    thread = Conversation.objects.get(kind=Conversation.Kind.THREAD)
    secret_dm, _ = open_direct(bob, team_a, agent_ids=[quill.id])
    post_message(bob, secret_dm, "@quill please plan Alice's surprise party")
    secret = Task.objects.get(conversation=secret_dm)
    secret_notes = publish_artifact(bob, secret_dm, "Party plan", "markdown", "Cake at 5.")
    return {
        "scout": scout,
        "quill": quill,
        "dm": dm,
        "research": research,
        "work": work,
        "write_up": write_up,
        "notes": notes,
        "thread": thread,
        "secret_dm": secret_dm,
        "secret": secret,
        "secret_notes": secret_notes,
    }


def ids(graph) -> set[str]:
    return {n["id"] for n in graph["nodes"]}


def edges(graph) -> set[tuple[str, str, str]]:
    return {(e["source"], e["kind"], e["target"]) for e in graph["edges"]}


def test_it_draws_the_delegation_chain(alice, team_a, story):
    graph = work_map(alice, team_a)
    research, write_up = f"task:{story['research'].id}", f"task:{story['write_up'].id}"
    scout, quill = f"agent:{story['scout'].id}", f"agent:{story['quill'].id}"
    dm, work = f"conversation:{story['dm'].id}", f"conversation:{story['work'].id}"
    assert {
        (scout, "works_on", research),
        (research, "asked_in", dm),
        (research, "works_in", work),
        (research, "waits_on", write_up),
        (scout, "handed_off", write_up),
        (quill, "works_on", write_up),
        (write_up, "asked_in", work),
    } <= edges(graph)
    node = next(n for n in graph["nodes"] if n["id"] == write_up)
    assert node["kind"] == "task"
    assert node["status"] == "queued"
    assert node["by"] == "Scout"
    assert node["url"] == f"/w/{team_a.id}/tasks/{story['write_up'].id}/"
    # Every edge joins two nodes of the map.
    assert {e["source"] for e in graph["edges"]} | {e["target"] for e in graph["edges"]} <= ids(
        graph
    )
    assert graph["truncated"] is False


def test_it_shows_artifacts_with_who_and_what_produced_them(alice, team_a, story):
    graph = work_map(alice, team_a)
    notes = f"artifact:{story['notes'].id}"
    assert {
        (f"conversation:{story['work'].id}", "contains", notes),
        (f"agent:{story['scout'].id}", "made", notes),
        (f"task:{story['research'].id}", "produced", notes),
    } <= edges(graph)
    node = next(n for n in graph["nodes"] if n["id"] == notes)
    assert (node["kind"], node["label"], node["by"]) == ("artifact", "Tide notes", "Scout")


def test_it_hangs_side_threads_off_their_conversation(alice, team_a, nova, channel, story):
    graph = work_map(alice, team_a)
    thread = f"conversation:{story['thread'].id}"
    node = next(n for n in graph["nodes"] if n["id"] == thread)
    assert node["kind"] == "thread"
    # Named by its first words (threads of one channel share titles), its title in the details.
    assert node["label"] == "“Which source did you use?”"
    assert (node["detail"], node["status"]) == ("Nova ↔ Scout", "in_progress")
    assert {
        (thread, "thread_of", f"conversation:{channel.id}"),
        (f"agent:{nova.id}", "takes_part", thread),
        (f"agent:{story['scout'].id}", "takes_part", thread),
        (f"agent:{nova.id}", "takes_part", f"conversation:{channel.id}"),
    } <= edges(graph)


def test_it_shows_nobody_what_they_may_not_read(alice, bob, team_a, story):
    hidden = {
        f"conversation:{story['secret_dm'].id}",
        f"task:{story['secret'].id}",
        f"artifact:{story['secret_notes'].id}",
    }
    assert not hidden & ids(work_map(alice, team_a))
    # Bob sees his own, and not Alice's direct conversation with Scout nor what grew in it.
    bobs = ids(work_map(bob, team_a))
    assert hidden <= bobs
    assert (
        not {
            f"conversation:{story['dm'].id}",
            f"task:{story['research'].id}",
            f"task:{story['write_up'].id}",
            f"artifact:{story['notes'].id}",
        }
        & bobs
    )


def test_it_narrows_to_one_agents_work(alice, team_a, nova, channel, story):
    graph = work_map(alice, team_a, agent_id=story["quill"].id)
    tasks = {n["id"] for n in graph["nodes"] if n["kind"] == "task"}
    assert tasks == {f"task:{story['write_up'].id}"}
    assert f"conversation:{channel.id}" not in ids(graph)
    nova_only = work_map(alice, team_a, agent_id=nova.id)
    assert not [n for n in nova_only["nodes"] if n["kind"] == "task"]
    assert f"conversation:{story['thread'].id}" in ids(nova_only)


def test_it_refuses_an_agent_that_does_not_appear_here(alice, charlie, team_a, team_b, story):
    outsider = agent_actions.create_agent(charlie, name="Echo", backend="scripted")
    with pytest.raises(AgentNotFound):
        work_map(alice, team_a, agent_id=outsider.id)


def test_it_keeps_the_time_window(alice, team_a, story):
    two_days_on = timezone.now() + timedelta(days=2)
    assert work_map(alice, team_a, window="24h", now=two_days_on)["nodes"] == []
    assert f"task:{story['research'].id}" in ids(
        work_map(alice, team_a, window="7d", now=two_days_on)
    )
    forty_days_on = timezone.now() + timedelta(days=40)
    assert work_map(alice, team_a, window="30d", now=forty_days_on)["nodes"] == []
    assert f"task:{story['research'].id}" in ids(
        work_map(alice, team_a, window="all", now=forty_days_on)
    )


def test_a_task_finished_late_stays_in_the_window(alice, team_a, story):
    """A task queued long ago that ended recently is recent work."""
    task = create_task(alice, team_a, story["scout"], "Tidy the archive")
    later = timezone.now() + timedelta(days=3)
    assert f"task:{task.id}" not in ids(work_map(alice, team_a, window="24h", now=later))
    Task.objects.filter(pk=task.pk).update(status="completed", finished_at=later)
    assert f"task:{task.id}" in ids(work_map(alice, team_a, window="24h", now=later))


def test_its_queries_do_not_grow_with_the_work(alice, team_a, nova, channel, story):
    def queries() -> int:
        with CaptureQueriesContext(connection) as captured:
            work_map(alice, team_a)
        return len(captured)

    before, nodes = queries(), len(work_map(alice, team_a)["nodes"])
    for n in range(3):
        dm, _ = open_direct(alice, team_a, agent_ids=[story["scout"].id, nova.id], title=f"p{n}")
        create_task(alice, team_a, story["quill"], f"Proofread part {n}", conversation=dm)
        publish_artifact(nova, channel, f"Draft {n}", "markdown", "Text.")
        post_message(nova, channel, f'<dm target="Scout">Question {n}?</dm>')
    # Three conversations, tasks, artifacts and threads more, in as many queries.
    assert len(work_map(alice, team_a)["nodes"]) == nodes + 12
    assert queries() == before


# ---- REST ---------------------------------------------------------------------------------


def url(workspace) -> str:
    return f"/api/v1/workspaces/{workspace.id}/map/"


def test_the_api_answers_nodes_and_edges_in_camel_case(api, alice, team_a, story):
    response = api(alice).get(url(team_a), {"since": "24h"})
    assert response.status_code == 200
    body = response.json()
    assert set(body) == {"nodes", "edges", "truncated"}
    task = next(n for n in body["nodes"] if n["id"] == f"task:{story['write_up'].id}")
    assert task["agentId"] == str(story["quill"].id)
    assert "createdAt" in task
    assert {"id", "source", "target", "kind"} == set(body["edges"][0])


def test_the_api_filters_by_agent(api, alice, team_a, story):
    response = api(alice).get(url(team_a), {"agent": str(story["quill"].id), "since": "all"})
    tasks = [n["id"] for n in response.json()["nodes"] if n["kind"] == "task"]
    assert tasks == [f"task:{story['write_up'].id}"]


@pytest.mark.parametrize(
    "params, field",
    [({"since": "yesterday"}, "since"), ({"agent": "not-a-uuid"}, "agent")],
)
def test_the_api_refuses_bad_parameters(api, alice, team_a, params, field):
    response = api(alice).get(url(team_a), params)
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "invalid"
    assert field in response.json()["error"]["fields"]


def test_the_api_answers_404_for_an_agent_not_here(api, alice, charlie, team_a, team_b):
    outsider = agent_actions.create_agent(charlie, name="Echo", backend="scripted")
    response = api(alice).get(url(team_a), {"agent": str(outsider.id)})
    assert response.status_code == 404


def test_another_workspaces_user_gets_404(api, charlie, team_a, team_b, story):
    response = api(charlie).get(url(team_a))
    assert response.status_code == 404
    assert "nodes" not in response.json()
    assert api(charlie).get(url(team_b)).json()["nodes"] == []


def test_the_page_draws_from_the_api(client, alice, team_a, story):
    client.force_login(alice)
    response = client.get(f"/w/{team_a.id}/map/")
    assert response.status_code == 200
    html = response.content.decode()
    assert f'data-api="/api/v1/workspaces/{team_a.id}/map/"' in html
    assert "vendor/cytoscape/cytoscape.min.js" in html
    assert f'href="/w/{team_a.id}/map/" aria-current="page"' in html
    # Quill (Bob's agent, shown in team A) is among the agents to filter by.
    assert f'<option value="{story["quill"].id}">Quill</option>' in html


def test_another_workspaces_user_gets_the_404_page(client, charlie, team_a):
    client.force_login(charlie)
    assert client.get(f"/w/{team_a.id}/map/").status_code == 404
