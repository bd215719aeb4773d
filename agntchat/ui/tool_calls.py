"""Agents' tool calls as the conversation page shows them, under the messages they belong to.

A call is made while an agent answers a message (``ToolCall.message``). Once the agent replied
(its message's ``reply_to`` is that message), the calls show under its reply; until then, under
the message being answered, so a call running or waiting for approval is seen where the answer
will come. Each call is ``work.live.tool_call_data`` plus what the page needs to draw it.
"""

import json

from conversations.models import Message
from work.approvals import may_decide
from work.live import tool_call_data
from work.models import PermissionRequest, ToolCall

# What a call's outcome reads as, by its error code (a plain "failed" otherwise).
FAILED_AS = {
    "approval_denied": "denied",
    "approval_expired": "expired",
    "tool_denied": "not allowed",
}
# A call that waits, by its request's status: pending, or decided but not run yet.
WAITING_AS = {
    PermissionRequest.Status.PENDING: ("waiting", "waiting for approval"),
    PermissionRequest.Status.APPROVED: ("running", "approved, running"),
    PermissionRequest.Status.DENIED: ("failed", "denied"),
    PermissionRequest.Status.EXPIRED: ("failed", "expired"),
}


def _state(call: ToolCall) -> tuple[str, str]:
    """(css state, words) of CALL: running, waiting, succeeded or failed."""
    if call.status == ToolCall.Status.WAITING:
        return WAITING_AS[call.request.status]
    if call.status == ToolCall.Status.FAILED:
        return "failed", FAILED_AS.get(call.error_code, "failed")
    return call.status, call.status


def _readable(output: str) -> str:
    """A JSON output laid out to read (tools return data as compact JSON); text as it is."""
    if not output.startswith(("{", "[")):
        return output
    try:
        return json.dumps(json.loads(output), indent=2, ensure_ascii=False)
    except ValueError:  # not JSON after all, or cut short by the preview
        return output


def tool_calls_by_message(messages, viewer) -> dict:
    """{message id: [call row, …]} for MESSAGES (ones VIEWER may read), oldest call first.
    Two reads whatever the number of messages and calls, one when there is no call."""
    answered = {m.id for m in messages} | {
        m.reply_to_id for m in messages if m.author_agent_id and m.reply_to_id
    }
    if not answered:
        return {}
    calls = list(
        ToolCall.objects.filter(
            message_id__in=answered,
            conversation_id__in={m.conversation_id for m in messages},
        )
        .select_related("agent__owner", "request__decided_by")
        .order_by("created_at", "id")
    )
    if not calls:
        return {}
    # Each agent's first visible reply to each message answered: where its calls go.
    replies = {}
    for reply_to, agent_id, message_id in (
        Message.objects.filter(
            reply_to_id__in={c.message_id for c in calls},
            author_agent_id__in={c.agent_id for c in calls},
            held_at__isnull=True,
        )
        .order_by("-created_at")
        .values_list("reply_to_id", "author_agent_id", "id")
    ):
        replies[reply_to, agent_id] = message_id
    deciders = {}
    shown = {}
    for call in calls:
        home = replies.get((call.message_id, call.agent_id), call.message_id)
        row = tool_call_data(call)
        row["state"], row["state_label"] = _state(call)
        row["agent_name"] = call.agent.name
        row["owner_name"] = call.agent.owner.label
        row["arguments_json"] = json.dumps(call.arguments, indent=2, ensure_ascii=False)
        row["output"] = _readable(row["output"])
        row["pending"] = row["request"] is not None and row["request"]["status"] == "pending"
        if row["pending"]:
            key = (call.agent_id, call.workspace_id)
            if key not in deciders:  # the same answer for every call of one agent here
                deciders[key] = may_decide(viewer, call.request)
            row["may_decide"] = deciders[key]
        shown.setdefault(home, []).append(row)
    return shown
