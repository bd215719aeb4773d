"""Memory tools (MEM-1, MEM-2): remember, recall, forget. What an agent learns in a
conversation is recalled only where everyone present could see that conversation."""

from work import memory
from work.access import MemoryNotFound, access_own_memory
from work.models import MemoryItem, Risk
from work.tools.registry import ToolContext, tool


def item_out(item: MemoryItem) -> dict:
    return {
        "id": str(item.id),
        "content": item.content,
        "shared": item.scope == MemoryItem.Scope.FAMILY,
        "pinned": item.pinned,
        "learned": item.created_at.isoformat(),
    }


@tool(
    "memory_remember",
    description=(
        "Remember something for later turns: a fact, a preference, a decision, how someone "
        "wants things done. One self-contained statement per call. It is recalled only where "
        "everyone present could see this conversation. Set shared to true for what every agent "
        "of this workspace should know (the family layer)."
    ),
    risk=Risk.WRITE,
    input_schema={
        "type": "object",
        "properties": {
            "content": {"type": "string", "minLength": 1, "maxLength": memory.MAX_CONTENT},
            "shared": {"type": "boolean", "description": "For every agent of the workspace."},
            "pinned": {"type": "boolean", "description": "Always loaded; never fades."},
        },
        "required": ["content"],
        "additionalProperties": False,
    },
)
def memory_remember(context: ToolContext, arguments: dict):
    item = memory.remember(
        context.agent,
        context.workspace.id,
        arguments["content"],
        conversation=context.conversation,
        message=context.message,
        family=arguments.get("shared", False),
        pinned=arguments.get("pinned", False),
    )
    return item_out(item)


@tool(
    "memory_recall",
    description=(
        "Search what you remember (and what this workspace's agents share), ranked by how well "
        "it matches. Your strongest memories already come with each turn; use this to look "
        "for something specific."
    ),
    risk=Risk.READ,
    input_schema={
        "type": "object",
        "properties": {
            "query": {"type": "string", "minLength": 1, "maxLength": 500},
            "limit": {"type": "integer", "minimum": 1, "maximum": 20},
        },
        "required": ["query"],
        "additionalProperties": False,
    },
)
def memory_recall(context: ToolContext, arguments: dict):
    found = memory.recall(
        context.agent,
        arguments["query"],
        context.conversation,
        context.workspace.id,
        limit=arguments.get("limit", 10),
    )
    return {"memories": [item_out(item) for item in found]}


@tool(
    "memory_forget",
    description="Forget one of your memories by its id (from memory_recall): no longer recalled.",
    risk=Risk.WRITE,
    input_schema={
        "type": "object",
        "properties": {"memory_id": {"type": "string", "format": "uuid"}},
        "required": ["memory_id"],
        "additionalProperties": False,
    },
)
def memory_forget(context: ToolContext, arguments: dict):
    item = access_own_memory(context.agent, arguments["memory_id"])
    if item.workspace_id != context.workspace.id:
        # Acting for one workspace, an agent in two never changes what it keeps for the other.
        raise MemoryNotFound()
    memory.forget(item)
    return {"forgotten": str(item.id)}
