"""Model backends of the agent bridge behind one interface (pure Python, no Django)."""

from .base import (
    Backend,
    BackendError,
    Deadline,
    Event,
    Result,
    ToolCaller,
    ToolOutcome,
    Turn,
    Usage,
    make_backend,
    run_to_result,
)

__all__ = [
    "Backend",
    "BackendError",
    "Deadline",
    "Event",
    "Result",
    "ToolCaller",
    "ToolOutcome",
    "Turn",
    "Usage",
    "make_backend",
    "run_to_result",
]
