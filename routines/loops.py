"""Goal loops (PRO-3): an agent iterates on a goal, one task per iteration, each ending with a
``loop_report`` (continue, complete or blocked, and why). The server, not the agent, decides
whether there is another iteration: a sweep every minute (``advance_loops``) weighs each
finished iteration against the loop's guardrails and starts the next one when it is due."""

import hashlib
from contextlib import suppress
from datetime import timedelta

from django.db import transaction
from django.db.models import Exists, F, OuterRef, Q, Sum
from django.utils import timezone

from agents.access import agent_appears_in, is_agent_owner
from agents.exceptions import AgentNotFound, NotAgentOwner
from agents.models import Agent
from agntchat.core.exceptions import AppError
from agntchat.core.sweeps import sweep
from conversations.actions import open_direct, post_message
from conversations.models import Task, TurnUsage
from conversations.tasks import cancel_for_good, create_task, request_cancel
from routines.models import Loop, LoopIteration
from routines.reminders import MAX_AHEAD
from work.actions import set_tool_grant
from work.tools.registry import REGISTRY, granted_tool

MAX_ITERATIONS = 100
MIN_INTERVAL_MINUTES = 1
# Each runs a task per iteration on the agent's queue: as routines (10) and reminders (100).
MAX_LOOPS_PER_AGENT = 10


class LoopInvalid(AppError):
    code = "loop_invalid"


def start_loop(
    user,
    agent,
    workspace,
    goal: str,
    *,
    interval_minutes: int | None = None,
    max_iterations: int = 10,
    token_budget: int | None = None,
    deadline=None,
    no_progress_limit: int = 3,
    now=None,
) -> Loop:
    """A loop of USER's AGENT on GOAL in WORKSPACE; its first iteration starts at the next
    sweep. The agent is given ``loop_report``."""
    now = now or timezone.now()
    if not is_agent_owner(user, agent):
        raise NotAgentOwner()
    if not agent_appears_in(agent, workspace.id):
        raise AgentNotFound()
    goal = (goal or "").strip()
    if not goal or len(goal) > 5000:
        raise LoopInvalid(
            "A loop needs a goal of at most 5,000 characters.",
            fields={"goal": "Empty or longer than 5,000 characters."},
        )
    if not 1 <= max_iterations <= MAX_ITERATIONS:
        raise LoopInvalid(f"maxIterations is 1 to {MAX_ITERATIONS}.")
    if interval_minutes is not None and interval_minutes < MIN_INTERVAL_MINUTES:
        raise LoopInvalid("intervalMinutes is at least 1 (leave it out to run continuously).")
    if deadline is not None and deadline <= now:
        raise LoopInvalid("The deadline has passed.", fields={"deadline": "In the past."})
    if deadline is not None and deadline > now + MAX_AHEAD:
        raise LoopInvalid(
            "A loop's deadline is at most two years ahead.", fields={"deadline": "Too far."}
        )
    if not 1 <= no_progress_limit <= 20:
        raise LoopInvalid("noProgressLimit is 1 to 20.")
    with transaction.atomic():
        # Counted under the agent's row lock: two requests at once cannot both be the last.
        Agent.objects.select_for_update().filter(pk=agent.pk).first()
        live = Loop.objects.filter(
            agent=agent, status__in=(Loop.Status.RUNNING, Loop.Status.PAUSED)
        )
        if live.count() >= MAX_LOOPS_PER_AGENT:
            raise AppError(
                f"{agent.name} has {MAX_LOOPS_PER_AGENT} loops running or paused already, the "
                "most an agent may have. Stop one of them first.",
                code="loop_limit",
                status=409,
            )
        dm, _ = open_direct(user, workspace, agent_ids=[agent.id])
        if granted_tool(agent, "loop_report") is None:
            set_tool_grant(user, agent, REGISTRY["loop_report"], True)
        return Loop.objects.create(
            agent=agent,
            workspace=workspace,
            conversation=dm,
            created_by=user,
            goal=goal,
            interval_minutes=interval_minutes,
            max_iterations=max_iterations,
            token_budget=token_budget,
            deadline=deadline,
            no_progress_limit=no_progress_limit,
            next_run_at=now,
        )


def set_loop_status(user, loop: Loop, status: str, now=None) -> Loop:
    """Pause, resume or stop a loop (a finished loop stays finished)."""
    if not is_agent_owner(user, loop.agent):
        raise NotAgentOwner()
    now = now or timezone.now()
    with transaction.atomic():
        loop = Loop.objects.select_for_update().get(pk=loop.pk)
        if loop.status not in (Loop.Status.RUNNING, Loop.Status.PAUSED):
            raise AppError(f"The loop is {loop.status} already.", code="loop_finished", status=409)
        if status == Loop.Status.PAUSED:
            loop.status, loop.next_run_at = Loop.Status.PAUSED, None
            _withdraw_waiting_iteration(loop, f"The loop was paused by {user.label}.")
        elif status == Loop.Status.RUNNING:
            loop.status = Loop.Status.RUNNING
            if not _running_iteration(loop):
                loop.next_run_at = now
        elif status == Loop.Status.STOPPED:
            _finish(loop, Loop.Status.STOPPED, f"stopped by {user.label}")
            # Its iteration under way is not wanted any more: queued, it never starts.
            iteration = _running_iteration(loop)
            task = Task.objects.filter(pk=iteration.task_id).first() if iteration else None
            if task is not None and not task.is_terminal:
                with suppress(AppError):  # it ended meanwhile: nothing to cancel
                    request_cancel(task)
        else:
            raise AppError("status is running, paused or stopped.", code="invalid")
        loop.save()
    return loop


def _withdraw_waiting_iteration(loop: Loop, reason: str) -> None:
    """LOOP's iteration still waiting for its agent (offline) is cancelled with REASON and
    forgotten: the agent, back, does no work for a paused loop, and its resumption starts the
    iteration afresh, not counted twice. One the agent is working on is left to finish."""
    iteration = _running_iteration(loop)
    if iteration is None or iteration.task_id is None:
        return
    waiting = Task.objects.select_for_update(skip_locked=True).filter(
        pk=iteration.task_id,
        status=Task.Status.QUEUED,
        claimed_by__isnull=True,  # and locked: no claim takes it meanwhile
    )
    if waiting.exists():
        cancel_for_good(iteration.task_id, reason)
        iteration.delete()


def report(iteration: LoopIteration, outcome: str, reason: str, progress: str = "") -> None:
    """What the agent says of its iteration (the ``loop_report`` tool); saying it again
    replaces it until the server has weighed the iteration."""
    if iteration.evaluated_at is not None:
        raise AppError("This iteration was weighed already.", code="loop_reported", status=409)
    iteration.outcome, iteration.reason, iteration.progress = outcome, reason, progress
    iteration.save(update_fields=["outcome", "reason", "progress", "updated_at"])


def _running_iteration(loop: Loop) -> LoopIteration | None:
    return loop.iterations.filter(evaluated_at__isnull=True).first()


def _finish(loop: Loop, status: str, reason: str) -> None:
    """End LOOP (the caller saves it) and tell its owner how and why."""
    loop.status, loop.stop_reason, loop.next_run_at = status, reason, None
    words = {
        Loop.Status.COMPLETE: "✅ Goal complete",
        Loop.Status.BLOCKED: "⛔ I am blocked on the goal",
        Loop.Status.STOPPED: "⏹ The loop stopped",
    }[status]
    post_message(loop.agent, loop.conversation, f"{words}: {loop.goal[:200]}\n\n{reason}", wake=[])


def without_progress(iterations) -> int:
    """How many of the latest weighed ITERATIONS (newest first) in a row brought no new
    progress signal (none, or one heard before) or gave the same output each time: what the
    no-progress guardrail counts towards its limit."""
    weighed = [i for i in iterations if i.evaluated_at is not None]
    stale = 0
    for n, iteration in enumerate(weighed):
        older = {i.progress for i in weighed[n + 1 :] if i.progress}
        if iteration.progress and iteration.progress not in older:
            break
        stale += 1
    same = 0
    for iteration in weighed:
        if not iteration.output_hash or iteration.output_hash != weighed[0].output_hash:
            break
        same += 1
    return max(stale, same if same > 1 else 0)


def _no_progress(loop: Loop) -> bool:
    latest = loop.iterations.filter(evaluated_at__isnull=False).order_by("-number")[:100]
    return without_progress(list(latest)) >= loop.no_progress_limit


def _tokens(task: Task) -> int:
    """What TASK has spent so far (its usage is recorded turn by turn, RUN-8)."""
    spent = TurnUsage.objects.filter(task=task).aggregate(
        n=Sum(F("input_tokens") + F("output_tokens"))
    )["n"]
    return spent or 0


def _weigh(loop: Loop, iteration: LoopIteration, task: Task, now) -> None:
    iteration.tokens = _tokens(task)
    text = (task.result or {}).get("text", "") if task.status == Task.Status.COMPLETED else ""
    iteration.output_hash = hashlib.sha256(text.strip().encode()).hexdigest() if text else ""
    if task.status != Task.Status.COMPLETED and not iteration.outcome:
        error = task.error.strip()[:300]
        iteration.reason = f"the iteration's task {task.status}" + (f": {error}" if error else "")
    iteration.evaluated_at = now
    iteration.save()
    loop.tokens_used += iteration.tokens
    if loop.status != Loop.Status.RUNNING:
        return  # it ended while this iteration ran: what it did and spent is kept, no more
    done = loop.iterations.count()
    if iteration.outcome == LoopIteration.Outcome.COMPLETE:
        _finish(loop, Loop.Status.COMPLETE, iteration.reason or "The agent reports it done.")
    elif iteration.outcome == LoopIteration.Outcome.BLOCKED:
        _finish(loop, Loop.Status.BLOCKED, iteration.reason or "The agent reports it is stuck.")
    elif done >= loop.max_iterations:
        noun = "iteration" if loop.max_iterations == 1 else "iterations"
        _finish(loop, Loop.Status.STOPPED, f"It ran its {loop.max_iterations} {noun}.")
    elif loop.token_budget is not None and loop.tokens_used >= loop.token_budget:
        _finish(
            loop,
            Loop.Status.STOPPED,
            f"It spent {loop.tokens_used} tokens of its budget of {loop.token_budget}.",
        )
    elif loop.deadline is not None and now >= loop.deadline:
        _finish(loop, Loop.Status.STOPPED, "Its deadline passed.")
    elif _no_progress(loop):
        _finish(
            loop,
            Loop.Status.STOPPED,
            f"No progress in its last {loop.no_progress_limit} iterations.",
        )
    else:
        wait = timedelta(minutes=loop.interval_minutes or 0)
        loop.next_run_at = now + wait


def _over_while_running(loop: Loop, task: Task, now) -> bool:
    """LOOP's iteration TASK still runs: past the deadline, or past the token budget with what
    it has spent so far, the loop stops now (a guardrail holds while an iteration goes on, not
    only once it ends) and the agent is asked to stop; the iteration is weighed once it ends."""
    spent = loop.tokens_used + _tokens(task)
    if loop.deadline is not None and now >= loop.deadline:
        reason = "Its deadline passed."
    elif loop.token_budget is not None and spent >= loop.token_budget:
        reason = f"It spent {spent} tokens of its budget of {loop.token_budget}."
    else:
        return False
    _finish(loop, Loop.Status.STOPPED, reason)
    with suppress(AppError):  # it ended meanwhile: nothing to cancel
        request_cancel(task)
    return True


def _begin(loop: Loop, now) -> None:
    """The next iteration: a task for the agent with the goal and where it stands."""
    number = loop.iterations.count() + 1
    previous = loop.iterations.filter(evaluated_at__isnull=False).order_by("-number").first()
    lines = [
        f"Goal loop, iteration {number} of at most {loop.max_iterations}.",
        f"Goal: {loop.goal}",
    ]
    if previous is not None:
        lines.append(
            f"Last iteration: {previous.outcome or 'no report'}"
            + (f" — {previous.reason}" if previous.reason else "")
            + (f". Progress so far: {previous.progress}" if previous.progress else "")
        )
    if loop.token_budget is not None:
        lines.append(f"Tokens used so far: {loop.tokens_used} of {loop.token_budget}.")
    lines.append(
        "Work towards the goal, then end with loop_report: continue (with the progress you "
        "made), complete (the goal is met) or blocked (you cannot go on without help), and why."
    )
    task = create_task(None, loop.workspace, loop.agent, "\n\n".join(lines), where_set_up=True)
    LoopIteration.objects.create(loop=loop, number=number, task=task)
    loop.next_run_at = None


def _waiting_past_deadline(loop: Loop, task, now) -> bool:
    """TASK, LOOP's iteration, still waits for its agent (offline) at the deadline: it is not to
    start after it."""
    return (
        task is not None
        and task.status == Task.Status.QUEUED
        and task.claimed_by is None
        and loop.deadline is not None
        and now >= loop.deadline
    )


def advance_loops(now=None) -> int:
    """Weigh every finished iteration and start every due one; how many loops moved. Safe to
    run from several schedulers at once (SKIP LOCKED)."""
    now = now or timezone.now()

    def advance(loop) -> int:
        # Stopped while an iteration ran: that one's outcome and cost are recorded, no more.
        ended = loop.status != Loop.Status.RUNNING
        iteration = _running_iteration(loop)
        changed = False
        if iteration is not None:
            task = Task.objects.filter(pk=iteration.task_id).first()
            if _waiting_past_deadline(loop, task, now):
                cancel_for_good(task.pk, "The loop's deadline passed before it started.")
                task.refresh_from_db()
            if task is not None and task.is_terminal:
                _weigh(loop, iteration, task, now)
                changed = True
            elif task is not None and not ended:
                changed = _over_while_running(loop, task, now)
        if loop.status == Loop.Status.RUNNING and loop.next_run_at and loop.next_run_at <= now:
            if loop.deadline is not None and now >= loop.deadline:
                _finish(loop, Loop.Status.STOPPED, "Its deadline passed.")
            else:
                _begin(loop, now)
            changed = True
        if changed:
            loop.save()
        return int(changed and not ended)

    # A loop that ended (stopped) while an iteration ran is still weighed once that ends, not
    # counted as moved: its cost counts and its outcome shows. A paused one is weighed when it
    # resumes.
    unweighed = LoopIteration.objects.filter(loop=OuterRef("pk"), evaluated_at__isnull=True)
    moving = Loop.objects.filter(
        Q(status=Loop.Status.RUNNING) | (~Q(status=Loop.Status.PAUSED) & Exists(unweighed))
    ).select_related("agent", "workspace", "conversation")
    return sweep(moving, advance, "loop")
