"""What an agent connection can claim: the kinds of work, each a Claimable queue (MSG-6).

Every kind is claimed by the same ``core.claims`` functions; a kind only says which table holds
it and how to describe one item to the bridge (with the turn's directives, RUN-3).
"""

import logging
from contextlib import nullcontext, suppress

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from agents.models import Agent
from agntchat.core import claims, metrics
from agntchat.core.compiled import compiled_read
from agntchat.core.events import wire
from agntchat.core.exceptions import AppError
from agntchat.core.logs import traced
from conversations import tasks, turns
from conversations.actions import post_notice
from conversations.models import Delivery, Message, Task
from conversations.payloads import (
    AUTHOR_UNSHOWN,
    conversation_data,
    message_data,
    with_thread_cards,
)
from conversations.usage import record_usage
from work import approvals, directives
from work.models import PermissionRequest

# Columns a work payload never shows, left out of its read: each costs every push (a timestamp
# is parsed in Python). A deferred column the payload does read would cost a query per item:
# tests/conversations/test_query_budget.py catches that.
UNSHOWN = (
    "created_at",
    "updated_at",
    "claimed_at",
    "lease_expires_at",
    "acked_at",
    "message__updated_at",
    "message__conversation__updated_at",
    "message__conversation__workspace__created_at",
    "message__conversation__workspace__updated_at",
    "message__conversation__workspace__kind",
    "message__conversation__workspace__owner",
    *(f"message__{name}" for name in AUTHOR_UNSHOWN),
    "message__turn__created_at",
    "message__turn__updated_at",
    "message__turn__finished_at",
)


def message_read():
    """A claim's final SELECT for message deliveries: each with its message, conversation,
    workspace, author, turn and history window (compiled once; core.claims runs it on the rows
    taken, so a claim and its payloads are one round trip)."""
    return compiled_read(
        ("message_work",),
        lambda: (
            Delivery.objects.select_related(
                "message__conversation__workspace",
                "message__author_user",
                "message__author_agent",
                "message__turn",
            )
            .defer(*UNSHOWN)
            .annotate(history_window=directives.history_window("message__conversation_id"))
            .order_by("created_at", "id")
        ),
    )


def message_work(agent: Agent, deliveries) -> dict:
    """Work payloads for message deliveries read by ``message_read``, by delivery id."""
    messages = []
    for delivery in deliveries:
        delivery.message.history_window = delivery.history_window
        messages.append(delivery.message)
    with_thread_cards(messages)
    guidance = directives.for_messages(agent, messages)
    out = {}
    for delivery in deliveries:
        message = delivery.message
        conversation = message.conversation
        out[delivery.id] = {
            "message": message_data(message),
            "conversation": conversation_data(conversation),
            "workspace": {"id": conversation.workspace_id, "name": conversation.workspace.name},
            "attempt": delivery.attempts,
            "time_limit_seconds": agent.turn_time_limit_seconds,
            "directives": guidance[message.id],
        }
    return out


def task_read():
    """A claim's final SELECT for tasks (as ``message_read``)."""
    return compiled_read(
        ("task_work",),
        lambda: Task.objects.select_related(
            "workspace", "conversation", "created_by_user", "created_by_agent"
        ).order_by("created_at", "id"),
    )


def task_work(agent: Agent, claimed_tasks) -> dict:
    """Work payloads for tasks read by ``task_read``, by task id; claiming a task starts its
    run."""
    out = {}
    for task in claimed_tasks:
        tasks.mark_started(task.id)
        out[task.id] = {
            "task": tasks.task_data(task),
            "workspace": {"id": task.workspace_id, "name": task.workspace.name},
            "attempt": task.attempts,
            "time_limit_seconds": agent.turn_time_limit_seconds,
            "directives": directives.for_task(agent, task),
        }
    return out


def permission_read():
    """A claim's final SELECT for decided permission requests (as ``message_read``)."""
    return compiled_read(
        ("permission_work",),
        lambda: PermissionRequest.objects.select_related("call", "decided_by").order_by(
            "created_at", "id"
        ),
    )


def permission_work(agent: Agent, requests) -> dict:
    """Work payloads for decided permission requests, by request id: the decision, for the turn
    whose tool call waits on it (MSG-6)."""
    return {request.id: approvals.decision_payload(request) for request in requests}


# kind name → (queue model, its claim's read, payload builder). Claimed in this order.
WORK_KINDS = {
    "message": (Delivery, message_read, message_work),
    "task": (Task, task_read, task_work),
    "permission": (PermissionRequest, permission_read, permission_work),
}

log = logging.getLogger(__name__)


def trace_of(kind: str, item):
    """The id an item is followed by in logs (and its work frame's ``trace``): a message
    delivery's message, otherwise the item itself (a task, a permission request). With when it
    was queued. Both read columns the claim's read has (a Delivery's own created_at is not)."""
    if kind == "message":
        return item.message_id, item.message.created_at
    return item.id, item.created_at


def claim_work(
    agent: Agent, connection_id: str, rooms: dict, lease_seconds: int | None = None
) -> list[dict]:
    """Claim up to ROOMS[kind] items of each kind; return ready-to-send work frames."""
    lease = lease_seconds or settings.CLAIM_LEASE_SECONDS
    frames = []
    for kind, (model, read, build) in WORK_KINDS.items():
        room = rooms.get(kind, 0)
        if room <= 0:
            continue
        compiled = read()
        elapsed = metrics.stopwatch()
        rows = claims.claim(
            model,
            agent.id,
            connection_id,
            room,
            timezone.now(),
            lease,
            read=(compiled.sql, compiled.params({})),
        )
        if rows:
            items = compiled.objects(rows)
            if kind in GIVE_UP:
                items = [i for i in items if not GIVE_UP[kind](agent, i, connection_id)]
                if not items:
                    continue
            payloads = build(agent, items)
            metrics.CLAIM_SECONDS.labels(kind).observe(elapsed())
            now = timezone.now()
            wait = metrics.CLAIM_WAIT_SECONDS.labels(kind)
            logging_claims = log.isEnabledFor(logging.INFO)
            for item in items:
                trace, queued_at = trace_of(kind, item)
                wait.observe(max(0.0, (now - queued_at).total_seconds()))
                frames.append(
                    wire(
                        {
                            "type": "work",
                            "kind": kind,
                            "id": item.id,
                            "trace": trace,
                            "payload": payloads[item.id],
                        }
                    )
                )
                if not logging_claims:
                    continue
                log.info(
                    "work claimed",
                    extra={
                        "trace": str(trace),
                        "kind": kind,
                        "item": str(item.id),
                        "agent": str(agent.id),
                        "connection": connection_id,
                        "attempt": item.attempts,
                    },
                )
    return frames


def _give_up_message(agent: Agent, delivery: Delivery, connection_id: str) -> bool:
    """Past WORK_MAX_ATTEMPTS claims, a message is acked unanswered (its turn passes on) and the
    conversation told why; True if so."""
    if delivery.attempts <= settings.WORK_MAX_ATTEMPTS:
        return False
    trace = str(delivery.message_id)  # the notice below is logged on the message's path too
    log.warning(
        "message item given up",
        extra={"trace": trace, "item": str(delivery.id), "agent": str(agent.id)},
    )
    if ack_work(delivery.id, connection_id):
        with suppress(AppError), traced(trace):  # archived since: nowhere to say it
            post_notice(
                delivery.message.conversation,
                f"{agent.name} could not answer a message: its bridge failed on it "
                f"{delivery.attempts - 1} times. Ask again, or tell its owner.",
                payload={"about_message_id": str(delivery.message_id)},
            )
    return True


def _give_up_task(agent: Agent, task: Task, connection_id: str) -> bool:
    """Past WORK_MAX_ATTEMPTS claims, a task fails, saying why; True if so."""
    if task.attempts <= settings.WORK_MAX_ATTEMPTS:
        return False
    log.warning(
        "task given up",
        extra={"trace": str(task.id), "item": str(task.id), "agent": str(agent.id)},
    )
    with suppress(AppError):  # finished or taken meanwhile: nothing to give up
        tasks.record_result(
            task.id,
            Task.Status.FAILED,
            connection_id=connection_id,
            error=f"Given up: its bridge failed on it {task.attempts - 1} times.",
        )
    return True


# Kinds whose items a claim gives up on past WORK_MAX_ATTEMPTS (a permission decision is acked
# by the bridge as it arrives).
GIVE_UP = {"message": _give_up_message, "task": _give_up_task}


def ack_messages(ids, connection_id: str, returning=()) -> tuple[list[dict], set]:
    """Acks of message items in one statement, which also finishes the turn queues they end
    (relaxed outside a transaction, as every ack). Returns the rows newly acked, each with
    ``hand_on`` (its turn still goes on to a next agent), and the ids this connection does not
    hold."""
    return claims.ack_many(
        Delivery,
        ids,
        connection_id,
        timezone.now(),
        returning=("message_id", "holds_turn", *returning),
        then=turns.finish_last_turn(),
    )


def ack_work(item_id, connection_id: str, done: bool = False, usage=None) -> bool:
    """Acknowledge a message item, with the turn's usage (RUN-8). DONE says the agent is done
    in that conversation (TURN-3); a delivery that holds a turn hands it on to the next agent.
    False if it was acked already."""
    reports = isinstance(usage, dict) or done
    # A bare ack is one relaxed statement. An ack that reports usage or "done" commits together
    # with them (durably): nobody sees the item acked without what its turn cost.
    with transaction.atomic() if reports else nullcontext():
        acked, not_held = ack_messages([item_id], connection_id, ("agent_id", "workspace_id"))
        if not_held:
            raise claims.NotHeld()
        if not acked:
            return False
        (acked,) = acked
        if reports:
            agent = Agent.objects.get(pk=acked["agent_id"])
            conversation_id = Message.objects.values_list("conversation_id", flat=True).get(
                pk=acked["message_id"]
            )
            if isinstance(usage, dict):
                record_usage(agent, acked["workspace_id"], usage, conversation_id=conversation_id)
            if done:
                turns.mark_done(agent, conversation_id)
    if acked["hand_on"]:
        turns.hand_on(item_id)
    return True


def write_bare_acks(acks, connection_id: str) -> set:
    """Bare acks of message items (one relaxed statement; turns they hold are handed on).
    Returns the acked ids this connection did not hold."""
    acked, not_held = ack_messages(acks, connection_id)
    for row in acked:
        if row["hand_on"]:
            turns.hand_on(row["id"])
    return not_held


def waiting_kinds(agent: Agent, kinds) -> set[str]:
    """Of KINDS, those where AGENT has an item a claim would take now: a heartbeat looks for work
    whose push was lost with this one probe, and claims only where it finds some."""
    kinds = list(kinds)
    found = claims.waiting([WORK_KINDS[kind][0] for kind in kinds], agent.id, timezone.now())
    return {kind for kind, waits in zip(kinds, found, strict=True) if waits}


def ack_permission(item_id, connection_id: str) -> bool:
    """The connection has the decision: a permission request leaves the queue."""
    return claims.ack(PermissionRequest, item_id, connection_id, timezone.now()) is not None


def extend_work(kind: str, item_id, connection_id: str, lease_seconds: int | None = None):
    return claims.extend(
        WORK_KINDS[kind][0],
        item_id,
        connection_id,
        timezone.now(),
        lease_seconds or settings.CLAIM_LEASE_SECONDS,
    )


def release_work(agent_id, connection_id: str, held: dict) -> int:
    """Give back what a closing connection held; a task left without its result is recorded."""
    for item_id, kind in held.items():
        if kind == "task":
            tasks.record_missing_result(
                item_id, "the connection closed before the terminal result", connection_id
            )
    return sum(claims.release(model, agent_id, connection_id) for model, *_ in WORK_KINDS.values())


def agents_with_work(agent_ids) -> set:
    """Which of AGENT_IDS have work queued or in flight, of any kind (a host's supervisor wakes
    those whose bridges are down)."""
    waiting = set()
    for model, _, _ in WORK_KINDS.values():
        waiting |= set(claims.open_counts(model, agent_ids))
    return waiting
