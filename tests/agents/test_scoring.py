"""Task ownership by weighted score (TASK-2): the expected winner, every part recorded,
deterministic ties."""

import pytest

from agents import actions
from agntchat.core import presence
from agntchat.core.exceptions import AppError
from conversations import scoring, tasks
from conversations.models import Task
from conversations.usage import record_usage
from work import actions as work_actions
from work.tools.registry import REGISTRY, tool_reach

pytestmark = pytest.mark.django_db


@pytest.fixture
def pair(alice, team_a):
    ada = actions.create_agent(alice, name="Ada", capabilities=["research"], backend="scripted")
    bea = actions.create_agent(alice, name="Bea", capabilities=["research"], backend="scripted")
    return ada, bea


def test_capability_match_wins(alice, team_a, pair):
    ada, _ = pair
    cal = actions.create_agent(alice, name="Cal", capabilities=["finance"], backend="scripted")
    task = tasks.create_task(alice, team_a, None, "Forecast the finance numbers")
    assert task.agent == cal
    by_name = {c["name"]: c for c in task.owner_scores["candidates"]}
    assert (
        by_name["Cal"]["parts"]["capability"] == 1.0
        and by_name["Ada"]["parts"]["capability"] == 0.0
    )
    # The tools part counts only for a task that names tools.
    assert set(by_name["Cal"]["parts"]) == set(scoring.DEFAULT_WEIGHTS) - {"tools"}
    assert task.owner_scores["weights"] == scoring.DEFAULT_WEIGHTS


def test_ties_break_by_creation_order_both_ways(alice, team_a, pair):
    ada, bea = pair
    assert tasks.create_task(alice, team_a, None, "research this").agent == ada
    # Give Bea an edge: online now. Then she wins.
    presence.beat(bea.id, "test-conn")
    try:
        assert tasks.create_task(alice, team_a, None, "research that").agent == bea
    finally:
        presence.leave(bea.id, "test-conn")


def test_current_load_counts_against(alice, team_a, pair):
    ada, bea = pair
    for i in range(3):
        tasks.create_task(alice, team_a, ada, f"busy {i}")
    task = tasks.create_task(alice, team_a, None, "research more")
    assert task.agent == bea
    parts = {c["name"]: c["parts"]["load"] for c in task.owner_scores["candidates"]}
    assert parts == {"Ada": 0.25, "Bea": 1.0}


def test_earned_trust_counts(alice, team_a, pair):
    ada, bea = pair
    failed = tasks.create_task(alice, team_a, ada, "x")
    Task.objects.filter(pk=failed.pk).update(status="failed", acked_at=failed.created_at)
    done = tasks.create_task(alice, team_a, bea, "y")
    Task.objects.filter(pk=done.pk).update(status="completed", acked_at=done.created_at)
    task = tasks.create_task(alice, team_a, None, "research again")
    assert task.agent == bea
    trust = {c["name"]: c["parts"]["trust"] for c in task.owner_scores["candidates"]}
    assert trust == {"Ada": 0.0, "Bea": 1.0}


def test_weights_are_configurable(alice, team_a, pair, settings):
    ada, bea = pair
    for i in range(2):
        tasks.create_task(alice, team_a, bea, f"busy {i}")
    settings.TASK_SCORE_WEIGHTS = {"load": 0.0}
    assert (
        tasks.create_task(alice, team_a, None, "research").agent == ada
    )  # load ignored: tie → Ada


def test_only_agents_appearing_in_the_workspace_are_candidates(alice, charlie, team_a, team_b):
    actions.create_agent(charlie, name="Outsider", capabilities=["research"], backend="scripted")
    with pytest.raises(AppError, match="No agent appears"):
        tasks.create_task(alice, team_a, None, "research")


def test_the_api_shows_the_breakdown(alice, team_a, pair, api):
    response = api(alice).post(
        "/api/v1/tasks/",
        {"workspace": str(team_a.id), "instructions": "research it"},
        format="json",
    )
    assert response.status_code == 201, response.json()
    body = response.json()
    assert body["ownerScores"]["winner"] == body["agentId"]
    assert len(body["ownerScores"]["candidates"]) == 2


def test_cost_and_latency_are_those_of_the_recent_turns(alice, team_a, pair, settings):
    """Typical means recent: Ada was slow and dear long ago and is fast and cheap now; Bea never
    reported a cost. Only the last RECENT_TURNS turns are read (tests/plans.py counts them)."""
    from datetime import timedelta

    from django.db import connection
    from django.utils import timezone

    from conversations.models import TurnUsage
    from tests.plans import executed_plan, selects_run_by, table_rows_read

    ada, bea = pair
    settings.TASK_SCORE_WEIGHTS = {"latency": 0.0, "cost": 0.0}  # recorded, not deciding
    long_ago = timezone.now() - timedelta(days=30)
    old = [
        TurnUsage(agent=ada, workspace=team_a, cost_usd="5.0", latency_ms=90_000)
        for _ in range(500)
    ]
    TurnUsage.objects.bulk_create(old)
    TurnUsage.objects.filter(agent=ada).update(created_at=long_ago)
    for _ in range(scoring.RECENT_TURNS):
        record_usage(ada, team_a.id, {"cost_usd": 0.1, "latency_ms": 1000})
        record_usage(bea, team_a.id, {"latency_ms": 10_000})
    task, statements = selects_run_by(
        lambda: tasks.create_task(alice, team_a, None, "research this")
    )
    parts = {c["name"]: c["parts"] for c in task.owner_scores["candidates"]}
    assert parts["Ada"]["cost"] == 0.5 and parts["Ada"]["latency"] == round(1 / 1.1, 4)
    assert parts["Bea"]["cost"] == 0.5 and parts["Bea"]["latency"] == 0.5
    # The statement as the application ran it: the usage rows its plan reads.
    (window,) = [(sql, p) for sql, p in statements if "conversations_turnusage" in sql]
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE conversations_turnusage")
    plan = executed_plan(*window)
    assert table_rows_read(plan, "conversations_turnusage") <= 2 * 2 * scoring.RECENT_TURNS


def test_an_agent_with_the_tools_the_task_needs_wins(alice, team_a, pair, api):
    """TASK-2's tool part: Ada, created first (she wins ties), had web_fetch taken away; a task
    that needs it goes to Bea, and the parts say why."""
    ada, bea = pair
    work_actions.set_tool_grant(alice, ada, REGISTRY["web_fetch"], False)
    body = {
        "workspace": str(team_a.id),
        "instructions": "research the page",
        "tools": ["web_fetch", "done"],
    }
    response = api(alice).post("/api/v1/tasks/", body, format="json")
    assert response.status_code == 201, response.json()
    task = Task.objects.get(pk=response.json()["id"])
    assert task.agent == bea and task.tools == ["done", "web_fetch"]
    parts = {c["name"]: c["parts"]["tools"] for c in task.owner_scores["candidates"]}
    assert parts == {"Ada": 0.5, "Bea": 1.0}
    assert response.json()["tools"] == ["done", "web_fetch"]
    # Without tools named, Ada wins as before.
    assert tasks.create_task(alice, team_a, None, "research more").agent == ada


def test_a_tool_nobody_has_is_kept_and_scores_for_nobody(alice, team_a, pair, api):
    body = {"workspace": str(team_a.id), "instructions": "x", "tools": ["teleport"]}
    response = api(alice).post("/api/v1/tasks/", body, format="json")
    assert response.status_code == 201
    task = Task.objects.get(pk=response.json()["id"])
    assert task.tools == ["teleport"]
    assert {c["parts"]["tools"] for c in task.owner_scores["candidates"]} == {0.0}


def test_tool_reach_reads_every_agent_in_one_query(alice, pair, django_assert_num_queries):
    ada, bea = pair
    work_actions.set_tool_grant(alice, bea, REGISTRY["done"], False)
    with django_assert_num_queries(2):  # tool grants, and grants of outside sources' tools
        reach = tool_reach([ada.id, bea.id])
    assert "done" in reach[ada.id] and "done" not in reach[bea.id]
    assert reach[ada.id] - reach[bea.id] == {"done"}
