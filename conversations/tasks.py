"""Tasks and the task contract (TASK-1, TASK-3): create, run events, one terminal result, cancel.

Every path that creates a task (REST, delegation, routines, loops, MCP) calls ``create_task``.
A task is queue work claimed through ``core.claims``; its claim is acknowledged when the terminal
result arrives. Contract violations are recorded on the task and never change a terminal state.
"""

import json
import logging
from datetime import timedelta

from django.conf import settings
from django.core.serializers.json import DjangoJSONEncoder
from django.db import transaction
from django.db.models import Exists, OuterRef, Q
from django.utils import timezone

from agents.access import agent_appears_in, owner_belongs_to
from agents.exceptions import AgentNotFound, TaskNotFound
from agents.models import Agent
from agntchat.core import throttle
from agntchat.core.claims import NotHeld
from agntchat.core.events import json_bytes, publish, publish_live, wake_agent
from agntchat.core.exceptions import AppError
from agntchat.core.ids import as_uuid
from agntchat.core.limits import count_held
from agntchat.core.text import clipped, counted
from conversations import actions, live
from conversations.access import conversations_visible_to
from conversations.models import Conversation, Participant, Task, TaskEvent
from conversations.scoring import choose_owner
from workspaces.exceptions import NotAllowed
from workspaces.models import Membership

log = logging.getLogger(__name__)

CANCEL_DEADLINE = timedelta(seconds=30)
MAX_INSTRUCTIONS = 20_000
# Tasks given by tasks (an agent delegating while it runs one): the longest chain below a task
# that someone (or something set up) gave. A model asking for ever must stop somewhere.
MAX_DEPTH = 5
# A task's progress is for watching, not storage: a bridge looping or sending whole files must
# not grow a task without bound (the task page and REST read its events).
MAX_EVENTS = 5_000
MAX_EVENT_BYTES = 16_000
EVENT_SHOWN = ("kind", "message", "text", "name", "tool")  # what a page shows of an event
MAX_PROTOCOL_ERRORS = 20  # the latest violations kept on a task


class QueueFull(AppError):
    """An agent has as many queued tasks from people other than its owner as it takes."""

    code = "task_queue_full"
    status = 409


class ProtocolError(AppError):
    """A run broke the task contract (missing, repeated or post-terminal event)."""

    code = "protocol_error"
    status = 409


# Task visibility lives here, not in agents/access.py: it is its conversation's, and
# conversations.access imports agents.access.
def tasks_visible_to(actor):
    """A task is visible exactly where the conversation it was asked in is. One asked outside any
    conversation: by a person or an agent (REST without one), to every member of its workspace;
    a private one (nobody gave it, or a private task did), to its agent's owner only, as the
    loops and pulses it comes from are. An agent sees the tasks it works on, in the workspaces its
    owner is still a member of (a pinned-away agent finishes its tasks there: PRO-2)."""
    if isinstance(actor, Agent):
        return Task.objects.filter(owner_is_member(actor), agent=actor)
    user = actor
    member = Membership.objects.filter(workspace_id=OuterRef("workspace_id"), user=user)
    return Task.objects.filter(Exists(member)).filter(
        Q(conversation__in=conversations_visible_to(user))
        | (Q(conversation__isnull=True) & (Q(private=False) | Q(agent__owner=user)))
    )


def owner_is_member(agent: Agent) -> Exists:
    """A condition on tasks: AGENT's owner is a member of the task's workspace. Once they leave,
    the workspace's tasks (cancelled then) are no longer their agent's to read."""
    return Exists(
        Membership.objects.filter(workspace_id=OuterRef("workspace_id"), user_id=agent.owner_id)
    )


def access_task(actor, task_id) -> Task:
    """A task the person (or agent) can see, or not found (also when its conversation is hidden
    from them)."""
    try:
        return tasks_visible_to(actor).get(pk=as_uuid(task_id))
    except Task.DoesNotExist:
        raise TaskNotFound() from None


def task_topics(task: Task) -> list[str]:
    """Who follows a task live: whoever may read it (tasks_visible_to)."""
    if task.conversation is not None:
        return live.audience_topics(task.conversation)
    if task.private:  # nobody gave it, or a private task did: its agent's owner's only
        return [f"user.{task.agent.owner_id}"]
    return [f"workspace.{task.workspace_id}"]


def task_data(task: Task) -> dict:
    return {
        "id": task.id,
        "agent_id": task.agent_id,
        "workspace_id": task.workspace_id,
        "conversation_id": task.conversation_id,
        "instructions": task.instructions,
        "status": task.status,
        "cancel_state": task.cancel_state or None,
        "result": task.result,
        "error": task.error,
        "protocol_errors": task.protocol_errors,
        "attempts": task.attempts,
        "event_count": task.event_count,
        "created_at": task.created_at,
        "work_conversation_id": task.work_conversation_id,
        "owner_scores": task.owner_scores or None,
        "tools": task.tools,
        "started_at": task.started_at,
        "finished_at": task.finished_at,
    }


# What a live event shows of a result: every browser that may read the task hears it, and pages
# fetch what they show; REST has it whole.
RESULT_PREVIEW_BYTES = 16_000


def _announce(task: Task, event_type: str) -> None:
    data = task_data(task)
    if len(json_bytes(task.result)) > RESULT_PREVIEW_BYTES:
        data["result"], data["result_truncated"] = None, True
    publish_live(task_topics(task), event_type, task=data)


def create_task(
    creator,
    workspace,
    agent: Agent | None,
    instructions: str,
    *,
    conversation=None,
    tools=(),
    tool_reach=None,
    where_set_up: bool = False,
    own_conversation: bool = False,
    parent: Task | None = None,
) -> Task:
    """Queue a task for AGENT in WORKSPACE. CREATOR is a person, an agent, or None (a routine).

    With no AGENT, the owner is chosen by score (TASK-2) and the scores are kept with the task;
    TOOLS (the tools the work needs) count for agents that have them, as TOOL_REACH tells.
    Asked inside a direct conversation, the task works in a conversation of its own and only
    its final result comes back (THR-5). WHERE_SET_UP: the work of something set up in WORKSPACE
    earlier (a routine), which runs there even if the agent is pinned elsewhere since (PRO-2),
    while its owner is a member.
    OWN_CONVERSATION: a task asked from outside any conversation (MCP) works in one of its own
    too, where it publishes, its progress shows and its giver reads it.
    PARENT: the task whose run asks for this one; chains stop at MAX_DEPTH."""
    instructions = (instructions or "").strip()
    if not instructions:
        raise AppError(
            "A task needs instructions.",
            code="invalid",
            fields={"instructions": "This field may not be blank."},
        )
    if len(instructions) > MAX_INSTRUCTIONS:
        raise AppError(
            "Task instructions are too long.", code="invalid", fields={"instructions": "Too long."}
        )
    depth = 0 if parent is None else parent.depth + 1
    if depth > MAX_DEPTH:
        raise AppError(
            f"This task was given by a chain of {MAX_DEPTH} tasks, the longest there may be: "
            "do this part yourself, or finish with what you have.",
            code="task_chain_too_long",
            status=409,
        )
    owner_scores = {}
    if agent is None:
        winner, owner_scores = choose_owner(workspace.id, instructions, tools, tool_reach)
        if winner is None:
            raise AppError(
                "No agent appears in this workspace to take the task.",
                code="no_candidate",
                status=409,
            )
        agent = Agent.objects.get(pk=winner)
    if where_set_up:
        if not owner_belongs_to(agent, workspace.id):  # its owner left: it works there no more
            raise AgentNotFound()
    elif not agent_appears_in(agent, workspace.id):
        raise AgentNotFound()
    _count_task(creator)
    with transaction.atomic():
        if _given_by_another(creator, agent):
            _check_queue_room(agent)
        work_conversation = None
        if own_conversation or (conversation is not None and conversation.kind == "direct"):
            work_conversation = _open_work_conversation(creator, workspace, agent, instructions)
        task = Task.objects.create(
            agent=agent,
            workspace=workspace,
            instructions=instructions,
            conversation=conversation,
            work_conversation=work_conversation,
            owner_scores=owner_scores,
            tools=sorted(set(tools)),
            created_by_user=creator
            if creator is not None and not isinstance(creator, Agent)
            else None,
            created_by_agent=creator if isinstance(creator, Agent) else None,
            parent=parent,
            depth=depth,
            private=creator is None or (parent is not None and parent.private),
        )
        wake_agent(agent.id, "task")
        _announce(task, "task.created")
    return task


def _count_task(creator) -> None:
    """One task more given by CREATOR, a person or an agent: RateLimited over
    settings.TASKS_PER_MINUTE (every way in: REST, delegation, MCP, the task_create tool). The
    scheduled side (routines, loops, pulses) has limits of its own."""
    if creator is None:
        return
    who = "agent" if isinstance(creator, Agent) else "person"
    rate = throttle.Rate(f"tasks:{who}", settings.TASKS_PER_MINUTE, burst=settings.TASKS_BURST)
    throttle.limit(rate, creator.pk, "tasks")


def _given_by_another(creator, agent: Agent) -> bool:
    """Whether CREATOR is someone other than AGENT's owner: another person, or an agent of
    another person."""
    if creator is None:
        return False
    giver = creator.owner_id if isinstance(creator, Agent) else creator.pk
    return giver != agent.owner_id


def _check_queue_room(agent: Agent) -> None:
    """Refuse a task for AGENT from someone other than its owner when QUEUED_TASKS_FROM_OTHERS
    (a setting; 0: no cap) of those already wait: tasks are taken oldest first, so a flood from
    others would hold up the owner's own work. The owner's tasks are never refused. Counted
    under a lock (core.limits): two tasks at once cannot both be the last one."""
    if settings.QUEUED_TASKS_FROM_OTHERS <= 0:
        return
    others = (Q(created_by_user__isnull=False) & ~Q(created_by_user=agent.owner_id)) | (
        Q(created_by_agent__isnull=False) & ~Q(created_by_agent__owner=agent.owner_id)
    )
    waiting = count_held(
        f"tasks-from-others:{agent.pk}",
        Task.objects.filter(others, agent=agent, status=Task.Status.QUEUED),
    )
    if waiting >= settings.QUEUED_TASKS_FROM_OTHERS:
        raise QueueFull(
            f"{agent.name} has {counted(waiting, 'task')} from others waiting already, the most "
            "it takes: try again once some have started."
        )


def _open_work_conversation(creator, workspace, agent: Agent, instructions: str):
    """A task's own conversation: its own history and live topic, outside the DM (THR-5)."""
    title = "Task: " + (instructions[:60] + "…" if len(instructions) > 60 else instructions)
    work = Conversation.objects.create(
        workspace=workspace, kind=Conversation.Kind.TASK, title=title
    )
    rows = [Participant(conversation=work, agent=agent)]
    if creator is not None and not isinstance(creator, Agent):
        rows.append(Participant(conversation=work, user=creator))
    elif isinstance(creator, Agent) and creator.id != agent.id:
        rows.append(Participant(conversation=work, agent=creator))
    Participant.objects.bulk_create(rows)
    return work


def _locked(task_id) -> Task:
    return Task.objects.select_for_update().get(pk=task_id)


def _record_violation(task: Task, what: str) -> ProtocolError:
    """Record a contract violation (committed with the caller's transaction) and return the error
    to raise once that transaction is over; the task's state stays as it is."""
    Task.objects.filter(pk=task.pk).update(protocol_errors=_with_violation(task, what))
    return ProtocolError(what)


def _with_violation(task: Task, what: str) -> list:
    """TASK's violations with WHAT added: the latest MAX_PROTOCOL_ERRORS (a bridge repeating a
    bad frame must not grow the task's row with every frame)."""
    errors = task.protocol_errors + [{"at": timezone.now().isoformat(), "error": what}]
    return errors[-MAX_PROTOCOL_ERRORS:]


def mark_started(task_id) -> None:
    """Called when a connection claims the task: it is running now, and its watchers hear so."""
    started = Task.objects.filter(pk=task_id, status=Task.Status.QUEUED).update(
        status=Task.Status.RUNNING, started_at=timezone.now()
    )
    if started:
        _announce(Task.objects.get(pk=task_id), "task.started")


def record_event(task_id, data: dict) -> TaskEvent | None:
    """A progress event of a running task. After the terminal result it is a protocol error.
    Bounded (MAX_EVENTS, MAX_EVENT_BYTES): one too large keeps what a page shows of it, and
    past MAX_EVENTS the run goes on without its events being kept or streamed (None)."""
    event = violation = None
    with transaction.atomic():
        task = _locked(task_id)
        if task.is_terminal:
            violation = _record_violation(task, "event after the terminal result")
        elif task.event_count < MAX_EVENTS:
            data = _fitted_event(data)
            task.event_count += 1
            task.save(update_fields=["event_count", "updated_at"])
            event = TaskEvent.objects.create(task=task, seq=task.event_count, data=data)
            publish_live(
                task_topics(task), "task.progress", task_id=task.id, seq=event.seq, data=data
            )
            if (
                task.work_conversation_id
                and isinstance(data.get("message"), str)
                and data["message"].strip()
            ):
                # Progress stays in the task's own conversation, out of the DM it came from.
                actions.post_notice(
                    task.work_conversation,
                    data["message"][:2000],
                    payload={"task_id": str(task.id)},
                )
    if violation:
        raise violation
    return event


def _fitted_event(data: dict) -> dict:
    """DATA, or when its JSON is over MAX_EVENT_BYTES what a page shows of it (EVENT_SHOWN, each
    text cut to 2000 characters), marked ``cut``."""
    if len(json.dumps(data, cls=DjangoJSONEncoder)) <= MAX_EVENT_BYTES:
        return data
    shown = {key: data[key][:2000] for key in EVENT_SHOWN if isinstance(data.get(key), str)}
    return {**shown, "cut": True}


def record_result(
    task_id, status: str, *, connection_id: str, result: dict | None = None, error: str = ""
) -> Task:
    """The one terminal result, from the connection holding the task. A second one is a protocol
    error and changes nothing."""
    if status not in Task.TERMINAL:
        raise AppError("status must be completed, failed or cancelled.", code="bad_frame")
    now = timezone.now()
    with transaction.atomic():
        task = _locked(task_id)
        if task.is_terminal:
            violation = _record_violation(
                task, f"second terminal result ({status}) after {task.status}"
            )
        else:
            violation = None
            _finish(task, status, connection_id, result, error, now)
    if violation:
        raise violation
    return task


def _finish(task: Task, status: str, connection_id: str, result, error: str, now) -> None:
    """Write the terminal result; the caller holds the task's row lock."""
    if task.claimed_by != connection_id:
        raise NotHeld("This connection does not hold that task (its lease may have expired).")
    task.status = status
    task.result = result or {}
    task.error = error[:2000]
    task.finished_at = now
    task.acked_at = now  # the claim is done: nothing to redeliver
    fields = ["status", "result", "error", "finished_at", "acked_at", "updated_at"]
    if task.cancel_state == Task.Cancel.REQUESTED:
        task.cancel_state = (
            Task.Cancel.CONFIRMED if status == Task.Status.CANCELLED else Task.Cancel.UNKNOWN
        )
        fields.append("cancel_state")
    task.save(update_fields=fields)
    _announce(task, "task.finished")
    if status == Task.Status.COMPLETED and (result or {}).get("text"):
        _relay_result(task, result["text"])


def _relay_result(task: Task, text: str) -> None:
    """The result closes the task's own conversation, and only the result is relayed back to
    where the task was asked (THR-5). A relay wakes nobody and is not chatter. It is a copy:
    one a conversation refuses (a channel archived meanwhile, the agent over its post rate) is
    left out rather than losing the result the task keeps, and a text longer than a message is
    cut short there."""
    text = clipped(text, actions.MAX_BODY)
    for where in (task.work_conversation, task.conversation):
        if where is None:
            continue
        try:
            with transaction.atomic():
                actions.post_message(
                    task.agent, where, text, payload={"task_id": str(task.id)}, wake=[]
                )
        except AppError as refused:
            log.warning(
                "task result not relayed",
                extra={"task": str(task.id), "conversation": str(where.id), "why": refused.code},
            )


def record_missing_result(task_id, reason: str, connection_id: str) -> None:
    """The run's connection closed before a result: recorded, and the claim is released for a retry
    (a cancel-requested task is not retried: its outcome is unknown). CONNECTION_ID, the closing
    connection: a task another connection has taken since (this one's lease ran out) is that
    one's run, and is left alone."""
    with transaction.atomic():
        task = _locked(task_id)
        if task.is_terminal or task.claimed_by != connection_id:
            return
        task.protocol_errors = _with_violation(task, reason)
        fields = ["protocol_errors", "updated_at"]
        if task.cancel_state == Task.Cancel.REQUESTED:
            task.status, task.cancel_state = Task.Status.CANCELLED, Task.Cancel.UNKNOWN
            task.finished_at = task.acked_at = timezone.now()
            fields += ["status", "cancel_state", "finished_at", "acked_at"]
        task.save(update_fields=fields)
        if task.is_terminal:
            _announce(task, "task.finished")


def cancel_refusal(person, task: Task, membership=None) -> AppError | None:
    """Why PERSON may not cancel TASK (None: they may): the person who gave it, its agent's
    owner and the workspace's admins may; other members see it but cannot stop someone else's
    work. MEMBERSHIP: PERSON's in the task's workspace, if the caller has it."""
    if person.pk in (task.created_by_user_id, task.agent.owner_id):
        return None
    if membership is None:
        membership = Membership.objects.filter(workspace_id=task.workspace_id, user=person).first()
    if membership is not None and membership.is_manager:
        return None
    return NotAllowed(
        "Only the person who gave this task, its agent's owner or an admin of the workspace "
        "can cancel it."
    )


def request_cancel(task: Task) -> Task:
    """Ask for cancellation. A queued task is cancelled at once; a running one is asked to stop."""
    now = timezone.now()
    with transaction.atomic():
        task = _locked(task.pk)
        if task.is_terminal:
            raise AppError(
                f"The task already ended ({task.status}).", code="task_finished", status=409
            )
        task.cancel_requested_at = now
        if task.claimed_by is None or (task.lease_expires_at and task.lease_expires_at < now):
            task.status, task.cancel_state = Task.Status.CANCELLED, Task.Cancel.CONFIRMED
            task.finished_at = task.acked_at = now
        else:
            task.cancel_state = Task.Cancel.REQUESTED
            publish(f"agent.{task.agent_id}", {"type": "task.cancel", "id": task.id})
        task.save(
            update_fields=[
                "cancel_requested_at",
                "status",
                "cancel_state",
                "finished_at",
                "acked_at",
                "updated_at",
            ]
        )
        _announce(task, "task.finished" if task.is_terminal else "task.cancel_requested")
    return task


def cancel_for_good(task_id, reason: str) -> None:
    """End a task at once as cancelled, with REASON as its error (whoever follows it reads
    why), when its agent is gone from where it was asked: nobody waits for a confirmation that
    may never come. A running one's bridge is told to stop, and what it did is unknown."""
    now = timezone.now()
    with transaction.atomic():
        task = _locked(task_id)
        if task.is_terminal:
            return
        running = task.status == Task.Status.RUNNING
        task.status = Task.Status.CANCELLED
        task.cancel_state = Task.Cancel.UNKNOWN if running else Task.Cancel.CONFIRMED
        task.cancel_requested_at = task.finished_at = task.acked_at = now
        task.error = reason
        task.save(
            update_fields=[
                *("status", "cancel_state", "cancel_requested_at", "finished_at", "acked_at"),
                *("error", "updated_at"),
            ]
        )
        if running:
            publish(f"agent.{task.agent_id}", {"type": "task.cancel", "id": task.id})
        _announce(task, "task.finished")


def settle_cancellations(now=None) -> int:
    """Cancel requests nobody answered within the deadline end as cancelled, outcome unknown."""
    now = now or timezone.now()
    count = 0
    for task_id in Task.objects.filter(
        cancel_state=Task.Cancel.REQUESTED, cancel_requested_at__lt=now - CANCEL_DEADLINE
    ).values_list("id", flat=True):
        with transaction.atomic():
            task = _locked(task_id)
            if task.is_terminal or task.cancel_state != Task.Cancel.REQUESTED:
                continue
            task.status, task.cancel_state = Task.Status.CANCELLED, Task.Cancel.UNKNOWN
            task.finished_at = task.acked_at = now
            task.save(
                update_fields=["status", "cancel_state", "finished_at", "acked_at", "updated_at"]
            )
            _announce(task, "task.finished")
            count += 1
    return count
