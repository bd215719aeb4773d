"""What each turn cost (RUN-8), written when a message item is acked or a task ends."""

from agents.models import Agent
from agntchat.core import metrics
from conversations.models import TurnUsage

USAGE_FIELDS = (
    "input_tokens",
    "output_tokens",
    "cache_read_tokens",
    "cache_write_tokens",
    "latency_ms",
)


def record_usage(
    agent: Agent, workspace_id, usage: dict, *, conversation_id=None, task_id=None
) -> TurnUsage | None:
    """Store what one turn cost (RUN-8). Unknown or negative figures are dropped, not trusted."""
    if not isinstance(usage, dict):
        return None
    counts = {}
    for name in USAGE_FIELDS:
        value = usage.get(name, 0)
        counts[name] = value if isinstance(value, int) and 0 <= value < 2**31 else 0
    cost = usage.get("cost_usd")
    backend = str(usage.get("backend", agent.backend))[:20]
    if counts["latency_ms"]:
        # The bridge names its backend: only the known ones become a label (bounded series).
        label = backend if backend in Agent.Backend.values else "other"
        metrics.TURN_SECONDS.labels(label).observe(counts["latency_ms"] / 1000)
    return TurnUsage.objects.create(
        agent=agent,
        workspace_id=workspace_id,
        conversation_id=conversation_id,
        task_id=task_id,
        backend=backend,
        model=str(usage.get("model", agent.model))[:100],
        cost_usd=cost if isinstance(cost, (int, float)) and cost >= 0 else None,
        **counts,
    )
