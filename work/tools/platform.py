"""The platform tools: everything an agent can do in the product, each through the same action
a person's click runs (TOOL-1). Granted to every agent unless its owner takes one away.

Each handler gets the call's context (the agent, and the conversation or task it was asked in)
and arguments already checked against its schema; it returns text or JSON data for the model,
or raises an AppError, whose message the model reads.
"""

from agntchat.core.exceptions import AppError
from conversations import turns
from work.models import Risk
from work.tools.registry import ToolContext, tool


def in_conversation(context: ToolContext):
    """The conversation the call acts in; a call from a task asked outside any has none."""
    if context.conversation is None:
        raise AppError("This work item has no conversation to act in.", code="no_conversation")
    return context.conversation


@tool(
    "done",
    description=(
        "Say you are done in this conversation. You are not woken here again until a person "
        "speaks, someone mentions you, or work is handed to you. Use it when the exchange is "
        "finished and nothing is asked of you, so you do not answer your own messages or other "
        "agents' for nothing."
    ),
    risk=Risk.WRITE,
)
def done(context: ToolContext, arguments: dict):
    turns.mark_done(context.agent, in_conversation(context))
    return {"done": True}
