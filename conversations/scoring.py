"""Who should own a task nobody assigned (TASK-2): a weighted score over every eligible agent.

Each part is a number in [0, 1]; the total is their weighted sum. Every candidate's parts are
stored with the task, so the choice can be inspected. Ties break deterministically: by total,
then by the agent's creation time, then by id.
"""

from collections.abc import Callable

from django.conf import settings
from django.contrib.postgres.expressions import ArraySubquery
from django.db.models import Count, OuterRef, Q

from agents.access import agents_visible_in
from agents.models import Agent
from agntchat.core import claims, presence
from conversations.models import Delivery, Task, TurnUsage
from conversations.turns import capability_hits, message_words

DEFAULT_WEIGHTS = {
    "capability": 3.0,  # declared capabilities matching the task's words
    "role": 1.0,  # the role's words matching the task
    "online": 2.0,  # connected right now
    "load": 1.5,  # fewer items queued or in flight
    "trust": 1.5,  # share of its finished tasks that completed
    "cost": 0.5,  # cheaper per turn
    "latency": 0.5,  # faster per turn
    "tools": 2.0,  # has the tools the task needs (only when the task names some)
}


# {agent id: the names of the tools it has}, for a list of agent ids.
ToolReach = Callable[[list], dict]

# The turns an agent's typical cost and latency are taken from, newest first.
RECENT_TURNS = 100


def _mean(values) -> float | None:
    known = [v for v in values if v is not None]
    return sum(known) / len(known) if known else None


def weights() -> dict:
    return {**DEFAULT_WEIGHTS, **getattr(settings, "TASK_SCORE_WEIGHTS", {})}


def score_candidates(
    workspace_id, instructions: str, tools=(), tool_reach: ToolReach | None = None
) -> list[dict]:
    """Every eligible agent with its parts and total, best first. TOOLS are the tools the task
    needs; TOOL_REACH tells which of them each agent has (the tool registry sits above this
    app, so whoever names tools passes it)."""
    task_words = message_words(instructions)
    agents = list(agents_visible_in(workspace_id).order_by("created_at", "id"))
    if not agents:
        return []
    ids = [a.id for a in agents]
    online = presence.online(ids)
    loads = agent_loads(ids)
    history = {
        row["agent_id"]: row
        for row in Task.objects.filter(agent_id__in=ids, status__in=Task.TERMINAL)
        .values("agent_id")
        .annotate(
            finished=Count("id"), completed=Count("id", filter=Q(status=Task.Status.COMPLETED))
        )
    }
    # Typical cost and latency: of each agent's last RECENT_TURNS turns (an index walk that
    # stops there), not of every turn it ever took.
    recent = TurnUsage.objects.filter(agent=OuterRef("pk")).order_by("-created_at")
    usage = {
        row["id"]: {"cost": _mean(row["costs"]), "latency": _mean(row["latencies"])}
        for row in Agent.objects.filter(pk__in=ids).values(
            "id",
            costs=ArraySubquery(recent.values("cost_usd")[:RECENT_TURNS]),
            latencies=ArraySubquery(recent.values("latency_ms")[:RECENT_TURNS]),
        )
    }
    needed = set(tools)
    reach = tool_reach(ids) if needed and tool_reach is not None else {}
    w = weights()
    candidates = []
    for agent in agents:
        matched = [c for c in agent.capabilities if capability_hits(c, task_words)]
        done = history.get(agent.id, {})
        used = usage.get(agent.id, {})
        parts = {
            "capability": len(matched) / len(agent.capabilities) if agent.capabilities else 0.0,
            "role": 1.0 if capability_hits(agent.role, task_words) else 0.0,
            "online": 1.0 if online[agent.id] else 0.0,
            "load": 1.0 / (1 + loads[agent.id]),
            # No history yet: neither trusted nor distrusted.
            "trust": (done["completed"] / done["finished"]) if done.get("finished") else 0.5,
            "cost": 1.0 / (1 + float(used["cost"]) * 10) if used.get("cost") is not None else 0.5,
            "latency": 1.0 / (1 + float(used["latency"]) / 10_000)
            if used.get("latency") is not None
            else 0.5,
        }
        if needed:
            parts["tools"] = len(needed & reach.get(agent.id, set())) / len(needed)
        total = round(sum(w[name] * value for name, value in parts.items()), 6)
        candidates.append(
            {
                "agent_id": str(agent.id),
                "name": agent.name,
                "total": total,
                "parts": {k: round(v, 4) for k, v in parts.items()},
                "matched": matched,
                "_order": (agent.created_at, str(agent.id)),
            }
        )
    candidates.sort(key=lambda c: (-c["total"], c["_order"]))
    for c in candidates:
        del c["_order"]
    return candidates


def choose_owner(
    workspace_id, instructions: str, tools=(), tool_reach: ToolReach | None = None
) -> tuple[str | None, dict]:
    """The winner's id and the record to store with the task."""
    candidates = score_candidates(workspace_id, instructions, tools, tool_reach)
    record = {
        "weights": weights(),
        "candidates": candidates,
        "winner": candidates[0]["agent_id"] if candidates else None,
    }
    return record["winner"], record


def agent_loads(agent_ids) -> dict:
    """{agent id: items queued or in flight}, in one query per queue (messages, tasks)."""
    loads = dict.fromkeys(agent_ids, 0)
    for model in (Delivery, Task):
        for agent_id, count in claims.open_counts(model, loads).items():
            loads[agent_id] += count
    return loads
