"""What browsers hear of agents' tool calls and permission requests, and the one shape of a
call as REST, pages and live events show it."""

from agntchat.core.events import Verbatim, json_bytes, publish_live
from agntchat.core.text import clipped
from conversations import tasks
from conversations.live import audience_topics
from work.models import PermissionRequest, ToolCall

# What a page or a live event shows of a call's output; REST's detail has it all.
OUTPUT_PREVIEW = 4000
# Arguments longer than this (bytes of JSON) are left out the same way: a call's live event goes
# to every browser that may read its conversation, each time the call changes.
ARGUMENTS_PREVIEW = 16_000


def request_data(request: PermissionRequest | None) -> dict | None:
    if request is None:
        return None
    return {
        "id": request.id,
        "status": request.status,
        "expires_at": request.expires_at,
        "decided_at": request.decided_at,
        "decided_by": (
            {"id": request.decided_by_id, "name": request.decided_by.label}
            if request.decided_by_id
            else None
        ),
        "always": request.always,
    }


def tool_call_data(call: ToolCall, full_output: bool = False) -> dict:
    try:
        request = call.request
    except PermissionRequest.DoesNotExist:
        request = None
    output = call.output if full_output else call.output[:OUTPUT_PREVIEW]
    arguments_cut = not full_output and len(json_bytes(call.arguments)) > ARGUMENTS_PREVIEW
    return {
        "id": call.id,
        "call_id": call.call_id,
        "agent_id": call.agent_id,
        "conversation_id": call.conversation_id,
        "message_id": call.message_id,
        "task_id": call.task_id,
        "tool": call.tool,
        "arguments": None if arguments_cut else Verbatim(call.arguments),
        "arguments_truncated": arguments_cut,
        "risk": call.risk,
        "status": call.status,
        "output": output,
        "output_truncated": len(output) < len(call.output),
        "error_code": call.error_code,
        # A schema's words may quote the arguments whole ("'…' is too long").
        "error": call.error if full_output else clipped(call.error, OUTPUT_PREVIEW),
        "request": request_data(request),
        "created_at": call.created_at,
        "finished_at": call.finished_at,
    }


def call_topics(call: ToolCall) -> list[str]:
    """Whoever may read where the call happened: its conversation, or its task."""
    if call.conversation_id is not None:
        return audience_topics(call.conversation)
    if call.task_id is not None:
        return tasks.task_topics(call.task)
    return []


def announce_call(call: ToolCall) -> None:
    """A call started, waits, was decided or finished: every browser that may read where it
    happened hears it (after commit)."""
    topics = call_topics(call)
    if topics:
        publish_live(topics, "tool.updated", call=tool_call_data(call))
