"""Agents' tool calls as the pages show them: under the messages they belong to, and on the page
of the task they were made for.

A call is made while an agent answers a message (``ToolCall.message``). Once the agent replied
(its message's ``reply_to`` is that message), the calls show under its reply; until then, under
the message being answered, so a call running or waiting for approval is seen where the answer
will come. A call made while working on a task (``ToolCall.task``) shows on the task's page.
Each call is ``work.live.tool_call_data`` plus what the page needs to draw it.
"""

import json

from django.utils import timezone

from agntchat.core.text import clipped
from conversations.models import Message
from work.access import tool_calls_visible_to
from work.approvals import may_decide
from work.live import OUTPUT_PREVIEW, tool_call_data
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
        state, words = WAITING_AS[call.request.status]
    elif call.status == ToolCall.Status.FAILED:
        state, words = "failed", FAILED_AS.get(call.error_code, "failed")
    else:
        return call.status, call.status
    if words == "expired" and call.request.decided_at < call.request.expires_at:
        # Ended before its time ran out: withdrawn as a person stopped the turn
        # (work.approvals.withdraw_stopped_requests), which is what they need to read.
        words = "stopped"
    return state, words


def _readable(output: str) -> str:
    """A JSON output laid out to read (tools return data as compact JSON); text as it is."""
    if not output.startswith(("{", "[")):
        return output
    try:
        return json.dumps(json.loads(output), indent=2, ensure_ascii=False)
    except ValueError:  # not JSON after all, or cut short by the preview
        return output


# A task page shows its newest calls, as many as REST lists for a conversation.
TASK_CALLS_SHOWN = 200


class _Rows:
    """Call rows for one page: who may decide is asked once per agent and workspace, and every
    countdown to an expiry starts from the same server time (the browser corrects its clock by
    it)."""

    def __init__(self, viewer):
        self.viewer = viewer
        self.deciders = {}
        self.now = timezone.now()

    def row(self, call: ToolCall) -> dict:
        row = tool_call_data(call)
        row["state"], row["state_label"] = _state(call)
        row["agent_name"] = call.agent.name
        row["owner_name"] = call.agent.owner.label
        # The start of it, as of its output: a page may list 200 calls, each of megabytes.
        arguments = json.dumps(call.arguments, indent=2, ensure_ascii=False)
        row["arguments_json"] = clipped(arguments, OUTPUT_PREVIEW)
        row["arguments_cut"] = len(arguments) > OUTPUT_PREVIEW
        row["output"] = _readable(row["output"])
        row["pending"] = row["request"] is not None and row["request"]["status"] == "pending"
        if row["pending"]:
            key = (call.agent_id, call.workspace_id)
            if key not in self.deciders:  # the same answer for every call of one agent here
                self.deciders[key] = may_decide(self.viewer, call.request)
            row["may_decide"] = self.deciders[key]
            row["rendered_at"] = self.now
        return row


def tool_calls_of_task(task, viewer) -> list[dict]:
    """The calls its agent made for TASK that VIEWER may see (``tool_calls_visible_to``: a call made
    in the task's own conversation only to who may read it), oldest first, the newest
    ``TASK_CALLS_SHOWN``. One read, two with a call waiting for approval."""
    calls = list(
        tool_calls_visible_to(viewer)
        .filter(task=task)
        .select_related("agent__owner", "request__decided_by")
        .order_by("-created_at", "-id")[:TASK_CALLS_SHOWN]
    )
    rows = _Rows(viewer)
    return [rows.row(call) for call in reversed(calls)]


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
    rows = _Rows(viewer)
    shown = {}
    for call in calls:
        home = replies.get((call.message_id, call.agent_id), call.message_id)
        shown.setdefault(home, []).append(rows.row(call))
    return shown
