"""A tool call from an agent's turn, from the ``tool.call`` frame to its one outcome (TOOL-1,
TOOL-5, TURN-4).

``call_tool`` checks, in order: the work item is held by the calling connection, and its agent
still reads its conversation (a task: appears in its workspace); the call was made before
(same ``call_id``: its stored outcome is the answer, so a redelivered turn never runs a call
twice); the tool is granted, and (a workspace's own tool) belongs to the workspace the work is
in; the arguments fit its schema; the same call has not failed too often in this turn; the
standing permission (allow → run, deny → refused, ask → a permission request a person decides,
refused at once if nobody who may decide can see where it was made).
The handler runs in one transaction with the call's row: it is recorded with its effects or not
at all, and a timeout rolls its effects back.
"""

import hashlib
import json
import logging
import threading
from dataclasses import dataclass, field

import jsonschema
from django.db import IntegrityError, connection, transaction
from django.utils import timezone

from agents.access import owner_belongs_to
from agents.models import Agent
from agntchat.core.claims import NotHeld
from agntchat.core.exceptions import AppError
from agntchat.core.text import clipped
from agntchat.core.validation import UNSTORABLE_TEXT
from conversations.access import access_conversation
from conversations.exceptions import ConversationNotFound
from conversations.models import Delivery, Task
from work import approvals, live
from work.models import Decision, PermissionRequest, ToolCall
from work.permissions import permission_for
from work.tools.registry import Tool, ToolContext, granted_tool

log = logging.getLogger(__name__)

# The same tool with the same arguments failing this many times in one turn is not run again
# with them (TURN-4): the model is told so, instead of retrying for ever.
MAX_SAME_FAILURES = 3
# What is kept of a tool's output (the model gets all of it; the record and the page, this).
MAX_STORED_OUTPUT = 200_000


@dataclass
class Answer:
    """The ``tool.result`` frame's content: an output, an error, or a pending approval."""

    call_id: str
    ok: bool
    output: str = ""
    error: dict | None = None  # {"code", "message"}
    pending: dict | None = None  # {"request_id", "expires_at"}

    def frame(self) -> dict:
        frame = {"type": "tool.result", "call_id": self.call_id, "ok": self.ok}
        if self.ok:
            frame["output"] = self.output
        elif self.pending is not None:
            frame["pending"] = self.pending
        else:
            frame["error"] = self.error
        return frame


class ToolRefused(AppError):
    """A call that is not run: the model reads why."""

    code = "tool_refused"


@dataclass
class Guard:
    """Between a handler running in its thread and the socket waiting for it: once the socket
    gave up (the tool's time ran out), the handler's work is rolled back, not committed."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    timed_out: bool = False
    finishing: bool = False

    def give_up(self) -> bool:
        """The socket stops waiting. False if the handler is already committing its outcome."""
        with self.lock:
            if self.finishing:
                return False
            self.timed_out = True
            return True


class TimedOut(Exception):
    pass


def arguments_hash(name: str, arguments: dict) -> str:
    text = json.dumps([name, arguments], sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


def as_text(value) -> str:
    """A handler's result as the model reads it: text as it is, data as JSON. A NUL or a lone
    surrogate (a fetched page's, an outside tool's) becomes U+FFFD: PostgreSQL cannot store
    them, and the call would fail unrecorded after its handler ran (a retry would run it again)."""
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
    return UNSTORABLE_TEXT.sub("\ufffd", text)


def _error(call_id: str, code: str, message: str) -> Answer:
    return Answer(call_id, False, error={"code": code, "message": message})


def stored_answer(call: ToolCall) -> Answer:
    if call.status == ToolCall.Status.SUCCEEDED:
        return Answer(call.call_id, True, output=call.output)
    return _error(call.call_id, call.error_code or "tool_failed", call.error)


@dataclass
class Item:
    """The work item a call belongs to, as held by the calling connection."""

    delivery: Delivery | None = None
    task: Task | None = None


class OutOfReach(AppError):
    """A held item whose agent was taken out of where it is since the claim."""

    code = "work_out_of_reach"
    status = 404
    default_message = (
        "You no longer take part where this work is (taken out of its conversation, or your "
        "owner left its workspace), so no tool runs for it; nothing was done. End this turn."
    )


def held_item(agent: Agent, kind: str, item_id, connection_id: str) -> Item:
    """The message delivery or task ITEM_ID, if CONNECTION_ID holds it now (else NotHeld) and
    AGENT still reads its conversation (a message's) or may still work in its workspace (a
    task's: task_in_reach): else OutOfReach. Its work is dropped when the agent is taken out,
    but a tool call that comes first, or work a post queued meanwhile, must not act there
    either."""
    if kind == "message":
        delivery = (
            Delivery.objects.select_related("message__conversation__workspace")
            .filter(id=item_id, agent=agent, claimed_by=connection_id, acked_at__isnull=True)
            .first()
        )
        if delivery is None:
            raise NotHeld()
        try:
            access_conversation(agent, delivery.message.conversation_id)
        except ConversationNotFound:
            raise OutOfReach() from None
        return Item(delivery=delivery)
    task = (
        Task.objects.select_related("workspace", "conversation", "work_conversation")
        .filter(id=item_id, agent=agent, claimed_by=connection_id, acked_at__isnull=True)
        .first()
    )
    if task is None:
        raise NotHeld()
    task_in_reach(agent, task.workspace_id)
    return Item(task=task)


def task_in_reach(agent: Agent, workspace_id) -> None:
    """A task, once given (or set up, PRO-2), is worked where it was asked while the agent's
    owner is a member there, whatever its pins say since; else OutOfReach."""
    if not owner_belongs_to(agent, workspace_id):
        raise OutOfReach()


def context_for(agent: Agent, item: Item, call_id: str) -> ToolContext:
    if item.delivery is not None:
        message = item.delivery.message
        return ToolContext(
            agent, message.conversation.workspace, message.conversation, message=message,
            call_id=call_id,
        )  # fmt: skip
    task = item.task
    return ToolContext(
        agent, task.workspace, task.work_conversation or task.conversation, task=task,
        call_id=call_id,
    )  # fmt: skip


def without_regexes(schema: dict) -> dict:
    """An outside source's SCHEMA without what runs a regular expression on the arguments:
    ``pattern``, and ``patternProperties`` with the ``additionalProperties`` (and unevaluated
    ones) they qualify. Python's matcher holds the interpreter, every connection's thread with
    it, for as long as a pattern backtracks; the outside server checks its own patterns."""

    def strip(node: dict) -> dict:
        if isinstance(node.get("pattern"), str):
            del node["pattern"]
        if isinstance(node.get("patternProperties"), dict):
            for key in ("patternProperties", "additionalProperties", "unevaluatedProperties"):
                node.pop(key, None)
        return node

    return json.loads(json.dumps(schema), object_hook=strip)


def schema_problem(tool: Tool, arguments) -> str | None:
    """What is wrong with ARGUMENTS for TOOL, in words the model can act on; None if fine."""
    schema = tool.input_schema if tool.workspace_id is None else without_regexes(tool.input_schema)
    validator = jsonschema.Draft202012Validator(schema)
    errors = sorted(validator.iter_errors(arguments), key=lambda e: list(e.absolute_path))
    if not errors:
        return None
    parts = []
    for error in errors[:5]:
        where = "/".join(str(p) for p in error.absolute_path) or "arguments"
        # A message may quote the value whole ("'…' is too long"): the model and every page
        # that shows the call need its gist, not megabytes.
        parts.append(clipped(f"{where}: {error.message}", 500))
    return f"The arguments for {tool.name} do not fit its input schema: " + "; ".join(parts)


def call_tool(
    agent: Agent, connection_id: str, kind: str, item_id, call_id: str, name: str, arguments
) -> tuple[Answer | None, "Prepared | None"]:
    """The first half of a call, quick and in the socket's pool: either the answer at once
    (stored, refused, or pending approval), or what to run (``run_prepared``, with a timeout)."""
    try:
        item = held_item(agent, kind, item_id, connection_id)
    except OutOfReach as exc:
        # Not recorded: the record would show in a conversation the agent no longer reads.
        return _error(call_id, exc.code, exc.message), None
    existing = ToolCall.objects.filter(agent=agent, call_id=call_id).first()
    if existing is not None:
        if not _same_work(existing, item):
            # An approval (or an outcome) is for the work it was asked in: resent from another
            # item, a call would run in another conversation, or workspace, than was approved.
            return _error(call_id, "call_id_reused", (
                "This call id belongs to a call made for other work. Give each call its own "
                "id; nothing was done."
            )), None  # fmt: skip
        return _again(agent, existing, item)
    context = context_for(agent, item, call_id)
    tool = granted_tool(agent, name, context.workspace.id)
    if tool is None:
        return _refuse(context, item, name, arguments, "tool_not_granted", (
            f"There is no tool named {name!r} among the tools you may use."
        )), None  # fmt: skip
    if not_here(tool, context):
        return _refuse(context, item, name, arguments, "tool_not_here", (
            f"{name} belongs to another workspace than the one this conversation is in, so it "
            "cannot be used here; nothing was done. Use it only in work of its own workspace."
        ), tool), None  # fmt: skip
    problem = schema_problem(tool, arguments)
    if problem:
        return _refuse(context, item, name, arguments, "tool_input_invalid", problem, tool), None
    digest = arguments_hash(name, arguments)
    failures = ToolCall.objects.filter(
        agent=agent,
        delivery=item.delivery,
        task=item.task,
        arguments_hash=digest,
        status=ToolCall.Status.FAILED,
    ).exclude(error_code="tool_repeated_failure")
    if failures.count() >= MAX_SAME_FAILURES:
        return _refuse(context, item, name, arguments, "tool_repeated_failure", (
            f"{name} already failed {MAX_SAME_FAILURES} times with these same arguments in this "
            "turn, so it is not run again with them. Change the arguments, try another way, or "
            "tell the people in the conversation what went wrong."
        ), tool), None  # fmt: skip
    decision = permission_for(agent, context.workspace.id, tool)
    if decision == Decision.DENY:
        return _refuse(context, item, name, arguments, "tool_denied", (
            f"A standing permission forbids you to use {name} here."
        ), tool), None  # fmt: skip
    if decision == Decision.ASK:
        return _ask(context, item, tool, arguments), None
    return None, Prepared(context, item, tool, arguments, None)


def not_here(tool: Tool, context: ToolContext) -> bool:
    """A workspace's own tool (an outside source's) called from work of another workspace: an
    agent in two workspaces never uses one's server or credential while acting in the other."""
    return tool.workspace_id is not None and str(tool.workspace_id) != str(context.workspace.id)


@dataclass
class Prepared:
    """A call ready to run: its context, tool and arguments, and its row if one exists (a call
    approved after waiting)."""

    context: ToolContext
    item: Item
    tool: Tool
    arguments: dict
    call: ToolCall | None


def _new_call(context: ToolContext, item: Item, name: str, arguments, risk: str, **fields):
    return ToolCall(
        agent=context.agent,
        workspace=context.workspace,
        conversation=context.conversation,
        delivery=item.delivery,
        message=context.message,
        task=item.task,
        call_id=context.call_id,
        tool=name,
        arguments=arguments if isinstance(arguments, dict) else {"value": arguments},
        arguments_hash=arguments_hash(name, arguments),
        risk=risk,
        **fields,
    )


def _store(call: ToolCall) -> ToolCall | None:
    """Insert CALL; None if a call with its id was stored meanwhile (the same call, racing)."""
    try:
        with transaction.atomic():
            call.save(force_insert=True)
    except IntegrityError:
        return None
    return call


def _refuse(context, item, name, arguments, code, message, tool: Tool | None = None) -> Answer:
    """Record a call that does not run (the page shows it, TURN-4 counts it); changes nothing
    else."""
    call = _new_call(
        context, item, name, arguments, tool.risk if tool else "read",
        status=ToolCall.Status.FAILED, error_code=code, error=message, finished_at=timezone.now(),
    )  # fmt: skip
    with transaction.atomic():
        stored = _store(call)
        if stored is not None:
            live.announce_call(stored)
    if stored is None:
        return stored_answer(ToolCall.objects.get(agent=context.agent, call_id=context.call_id))
    return _error(context.call_id, code, message)


def _ask(context: ToolContext, item: Item, tool: Tool, arguments) -> Answer:
    """Park the call until a person decides: its row waits with a permission request."""
    call = _new_call(context, item, tool.name, arguments, tool.risk, status=ToolCall.Status.WAITING)
    if not approvals.anyone_may_decide(call):
        return _refuse(context, item, tool.name, arguments, "approval_unreachable", (
            f"{tool.name} needs a person's approval here, and nobody who may give it (your "
            "owner, an admin of this workspace, or the person whose account it would use) can "
            "see this conversation, so nothing was done. Go on without it, or say what you would "
            "need."
        ), tool)  # fmt: skip
    with transaction.atomic():
        stored = _store(call)
        if stored is None:
            existing = ToolCall.objects.get(agent=context.agent, call_id=context.call_id)
            return _again(context.agent, existing, item)[0]
        request = approvals.request_permission(stored)
    return pending_answer(stored, request)


def pending_answer(call: ToolCall, request: PermissionRequest) -> Answer:
    return Answer(
        call.call_id,
        False,
        pending={"request_id": str(request.id), "expires_at": request.expires_at.isoformat()},
    )


def _same_work(call: ToolCall, item: Item) -> bool:
    return call.delivery_id == (item.delivery and item.delivery.id) and call.task_id == (
        item.task and item.task.id
    )


def _again(agent: Agent, call: ToolCall, item: Item) -> tuple[Answer | None, Prepared | None]:
    """The same call made again (a redelivered turn, or the call resent once its approval was
    decided): its stored outcome, or, approved meanwhile, run it now."""
    if call.status != ToolCall.Status.WAITING:
        return stored_answer(call), None
    request = call.request
    if request.status == PermissionRequest.Status.PENDING:
        return pending_answer(call, request), None
    if request.status == PermissionRequest.Status.APPROVED:
        context = context_for(agent, item, call.call_id)
        tool = granted_tool(agent, call.tool, context.workspace.id)
        if tool is None or not_here(tool, context):  # taken away while the call waited
            return _finish_refused(call, "tool_not_granted", (
                f"{call.tool} was taken away from your tools while this call waited."
            )), None  # fmt: skip
        if permission_for(agent, context.workspace.id, tool) == Decision.DENY:
            return _finish_refused(call, "tool_denied", (
                f"A standing permission set while this call waited forbids you to use "
                f"{call.tool} here."
            )), None  # fmt: skip
        return None, Prepared(context, item, tool, call.arguments, call)
    if request.status == PermissionRequest.Status.DENIED:
        who = request.decided_by.label if request.decided_by else "A person"
        return _finish_refused(call, "approval_denied", (
            f"{who} denied this call to {call.tool}. Do not try it again; go on without it or "
            "ask what they would like instead."
        )), None  # fmt: skip
    return _finish_refused(call, "approval_expired", (
        f"approval expired: nobody approved this call to {call.tool} in time, so it was not run."
    )), None  # fmt: skip


def _finish_refused(call: ToolCall, code: str, message: str) -> Answer:
    with transaction.atomic():
        updated = ToolCall.objects.filter(pk=call.pk, status=ToolCall.Status.WAITING).update(
            status=ToolCall.Status.FAILED, error_code=code, error=message,
            finished_at=timezone.now(), updated_at=timezone.now(),
        )  # fmt: skip
        call.refresh_from_db()
        if updated:
            live.announce_call(call)
    return stored_answer(call)


def run_prepared(prepared: Prepared, guard: Guard) -> Answer:
    """Run the handler, in one transaction with the call's row (inserted here, or the waiting
    row taken under lock), so the call and its effects are stored together or not at all. Runs
    in a worker thread; GUARD says whether the socket still waits for it."""
    context, tool = prepared.context, prepared.tool
    with transaction.atomic():
        with connection.cursor() as cursor:
            # A handler stuck in the database stops with the tool's time, too.
            cursor.execute(
                "SELECT set_config('statement_timeout', %s, true)",
                [str(int(tool.timeout_seconds * 1000))],
            )
        if prepared.call is None:
            call = _store(
                _new_call(context, prepared.item, tool.name, prepared.arguments, tool.risk)
            )
            if call is None:  # the same call ran meanwhile on another connection
                return stored_answer(
                    ToolCall.objects.get(agent=context.agent, call_id=context.call_id)
                )
        else:
            call = ToolCall.objects.select_for_update().get(pk=prepared.call.pk)
            if call.status != ToolCall.Status.WAITING:
                return stored_answer(call)
        try:
            with transaction.atomic():
                output = as_text(tool.handler(context, prepared.arguments))
                with guard.lock:
                    if guard.timed_out:
                        raise TimedOut()
                    guard.finishing = True
        except TimedOut:
            call.status, call.error_code = ToolCall.Status.FAILED, "tool_timeout"
            call.error = timeout_message(tool)
        except AppError as exc:
            call.status, call.error_code = ToolCall.Status.FAILED, exc.code
            call.error = refusal_text(exc)
        except Exception:
            log.exception("tool %s failed", tool.name)
            call.status, call.error_code = ToolCall.Status.FAILED, "tool_error"
            call.error = f"{tool.name} failed unexpectedly on the server; nothing was changed."
        else:
            call.status, call.output = ToolCall.Status.SUCCEEDED, output[:MAX_STORED_OUTPUT]
        call.finished_at = timezone.now()
        call.save()
        live.announce_call(call)
    answer = stored_answer(call)
    if call.status == ToolCall.Status.SUCCEEDED:
        answer.output = output  # all of it, even past what is stored
    return answer


def timeout_message(tool: Tool) -> str:
    return (
        f"{tool.name} did not finish within its time limit of {tool.timeout_seconds:g} seconds "
        "and was stopped; nothing was changed."
    )


def refusal_text(exc: AppError) -> str:
    """An action's refusal as the model reads it: the message and each refused field."""
    text = exc.message
    if exc.fields:
        text += " " + "; ".join(f"{k}: {v}" for k, v in _flat(exc.fields))
    return text


def _flat(fields, prefix=""):
    if isinstance(fields, dict):
        for key, value in fields.items():
            yield from _flat(value, f"{prefix}{key}" if not prefix else f"{prefix}.{key}")
    elif isinstance(fields, list):
        yield prefix, " ".join(str(v) for v in fields)
    else:
        yield prefix, str(fields)


def timeout_answer(prepared: Prepared) -> Answer:
    """The socket gave up on a call whose handler did not come back in time (its thread may
    still be stuck): what the model is told. The thread, when it ends, records the failure."""
    return _error(prepared.context.call_id, "tool_timeout", timeout_message(prepared.tool))
