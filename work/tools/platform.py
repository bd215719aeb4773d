"""The platform tools: everything an agent can do in the product, each through the same action
a person's click runs (TOOL-1). Granted to every agent unless its owner takes one away.

Each handler gets the call's context (the agent, and the conversation or task it was asked in)
and arguments already checked against its schema; it returns text or JSON data for the model,
or raises an AppError, whose message the model reads.

This module holds the conversation, personality and task tools; artifacts and cards, reading
(history, search) and the web have modules of their own beside it (``platform_*.py``).
"""

from django.db.models import Q

from agents import actions as agent_actions
from agents.access import agents_visible_in
from agents.models import Agent
from agntchat.core.exceptions import AppError, NotFound
from agntchat.core.ids import as_uuid
from conversations import tasks, threads, turns
from conversations.models import Conversation, Task
from work.models import Risk
from work.tools.registry import ToolContext, tool, tool_reach

# A summary of a resolved thread: what ResolveInput (REST and the socket frame) allows.
MAX_SUMMARY = 4000
MAX_TASKS_LISTED = 50


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


@tool(
    "thread_resolve",
    description=(
        "Resolve the side thread you are working in, bringing its result back to the "
        "conversation it came from. The summary is what the people there read on the thread's "
        "card, so make it the answer itself, not a note that there is one. Only works inside a "
        "side thread that is still in progress."
    ),
    risk=Risk.WRITE,
    input_schema={
        "type": "object",
        "properties": {
            "summary": {
                "type": "string",
                "minLength": 1,
                "maxLength": MAX_SUMMARY,
                "description": "The thread's result, as the origin conversation should read it.",
            }
        },
        "required": ["summary"],
        "additionalProperties": False,
    },
)
def thread_resolve(context: ToolContext, arguments: dict):
    conversation = in_conversation(context)
    if conversation.kind != Conversation.Kind.THREAD:
        raise AppError(
            "You are not in a side thread: only a side thread can be resolved, from inside it.",
            code="not_a_thread",
        )
    thread = threads.resolve_thread(context.agent, conversation, arguments["summary"])
    return {"thread_id": str(thread.id), "status": thread.thread_status}


@tool(
    "personality_read",
    description=(
        "Read your personality document: who you are, how you work, what you keep in mind. "
        "Read it before rewriting it with personality_write."
    ),
    risk=Risk.READ,
)
def personality_read(context: ToolContext, arguments: dict):
    # Read afresh: the agent object of the connection may predate the last write.
    text = Agent.objects.values_list("personality", flat=True).get(pk=context.agent.pk)
    return {"personality": text, "length": len(text)}


@tool(
    "personality_write",
    description=(
        "Replace your personality document with new text; every earlier revision is kept. "
        "Send the whole document, not a change: what you send is all of it. A write that cuts "
        "a long document to less than half is refused as a likely mistake; only your owner can "
        "force that."
    ),
    risk=Risk.WRITE,
    input_schema={
        "type": "object",
        "properties": {
            "text": {
                "type": "string",
                "maxLength": agent_actions.PERSONALITY_MAX,
                "description": "The whole new personality document (markdown).",
            }
        },
        "required": ["text"],
        "additionalProperties": False,
    },
)
def personality_write(context: ToolContext, arguments: dict):
    revision = agent_actions.set_personality(context.agent, arguments["text"], author=context.agent)
    return {"revision_id": str(revision.id), "length": len(revision.text)}


def task_summary(task: Task) -> dict:
    """What the model reads of a task."""
    return {
        "id": str(task.id),
        "agent": task.agent.handle,
        "instructions": task.instructions,
        "status": task.status,
        "cancel_state": task.cancel_state or None,
        "created_at": task.created_at.isoformat(),
        "finished_at": task.finished_at.isoformat() if task.finished_at else None,
        "result": task.result or None,
        "error": task.error or None,
    }


def agent_by_handle(context: ToolContext, handle: str) -> Agent:
    """The agent called HANDLE that appears in the call's workspace (itself included)."""
    handle = handle.lstrip("@")
    if handle == context.agent.handle:
        return context.agent
    found = list(agents_visible_in(context.workspace.id).filter(handle=handle)[:2])
    if not found:
        raise NotFound(
            f"No agent called @{handle} appears in this workspace.", code="agent_not_found"
        )
    if len(found) > 1:
        raise AppError(
            f"Several agents called @{handle} appear in this workspace; ask a person which.",
            code="agent_ambiguous",
        )
    return found[0]


@tool(
    "task_create",
    description=(
        "Hand work over as a task: queued for one agent (an agent of this workspace by its "
        "handle, or yourself; left out, the best placed agent is chosen, counting the tools "
        "you say the work needs), which runs it and reports one result. Write instructions that "
        "stand on their own; the agent running them does not see this conversation unless the "
        "task is asked in it. Returns the task with its id, for task_list and task_cancel."
    ),
    risk=Risk.WRITE,
    input_schema={
        "type": "object",
        "properties": {
            "agent": {
                "type": "string",
                "minLength": 1,
                "maxLength": 41,
                "pattern": "^@?[-a-zA-Z0-9_]+$",
                "description": "The handle of the agent to run it (e.g. nova); yours for yourself.",
            },
            "instructions": {
                "type": "string",
                "minLength": 1,
                "maxLength": tasks.MAX_INSTRUCTIONS,
                "description": "What to do, complete enough to act on alone.",
            },
            "tools": {
                "type": "array",
                "items": {"type": "string", "minLength": 1, "maxLength": 64},
                "maxItems": 50,
                "uniqueItems": True,
                "description": "Tools the work needs, by name: agents that have them are preferred.",
            },
        },
        "required": ["instructions"],
        "additionalProperties": False,
    },
)
def task_create(context: ToolContext, arguments: dict):
    agent = agent_by_handle(context, arguments["agent"]) if "agent" in arguments else None
    task = tasks.create_task(
        context.agent,
        context.workspace,
        agent,
        arguments["instructions"],
        conversation=context.conversation,
        tools=arguments.get("tools", ()),
        tool_reach=tool_reach,
        parent=context.task,  # asked while it runs a task: that task's sub-task
    )
    return task_summary(task)


def own_tasks(agent: Agent):
    """Tasks AGENT runs (tasks_visible_to) or created for others."""
    return Task.objects.filter(
        tasks.owner_is_member(agent), Q(agent=agent) | Q(created_by_agent=agent)
    )


@tool(
    "task_list",
    description=(
        "List the tasks you run or created, newest first, with their status and result. "
        "Filter by status to find what is still queued or running."
    ),
    risk=Risk.READ,
    input_schema={
        "type": "object",
        "properties": {
            "status": {
                "type": "string",
                "enum": Task.Status.values,
                "description": "Only tasks with this status.",
            },
            "limit": {"type": "integer", "minimum": 1, "maximum": MAX_TASKS_LISTED},
        },
        "additionalProperties": False,
    },
)
def task_list(context: ToolContext, arguments: dict):
    found = own_tasks(context.agent).filter(workspace=context.workspace)
    if "status" in arguments:
        found = found.filter(status=arguments["status"])
    limit = arguments.get("limit", 20)
    rows = found.select_related("agent").order_by("-created_at")[:limit]
    return {"tasks": [task_summary(task) for task in rows]}


@tool(
    "task_cancel",
    description=(
        "Cancel a task you run or created, by its id: a queued task ends at once, a running "
        "one is asked to stop. A task that already ended cannot be cancelled."
    ),
    risk=Risk.WRITE,
    input_schema={
        "type": "object",
        "properties": {"task_id": {"type": "string", "minLength": 1, "maxLength": 64}},
        "required": ["task_id"],
        "additionalProperties": False,
    },
)
def task_cancel(context: ToolContext, arguments: dict):
    mine = own_tasks(context.agent).filter(workspace=context.workspace)
    try:
        task = mine.get(pk=as_uuid(arguments["task_id"]))
    except Task.DoesNotExist:
        raise NotFound("No task with this id is yours to cancel.", code="task_not_found") from None
    return task_summary(tasks.request_cancel(task))
