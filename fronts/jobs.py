"""Jobs of the fronts (django-q2). Idempotent: safe to run late, twice, or after the fact."""

from datetime import timedelta

from django.conf import settings
from django.db import transaction
from django_q.models import Schedule
from django_q.tasks import schedule

from conversations import tasks
from conversations.models import Task
from fronts.actions import why_not_taken


def schedule_give_up(task: Task) -> None:
    """Have the worker run ``give_up_unstarted`` for TASK once FRONT_START_SECONDS have passed,
    whoever still waits on it: a call whose client left (or whose server process stopped) must
    not leave its task queued for whenever the agent's bridge next connects. Written in the
    caller's transaction, so it exists exactly when the task does."""
    schedule(
        "fronts.jobs.give_up_unstarted",
        str(task.id),
        schedule_type=Schedule.ONCE,  # deleted once it has run
        next_run=task.created_at + timedelta(seconds=settings.FRONT_START_SECONDS),
    )


def give_up_unstarted(task_id) -> bool:
    """Cancel a front's task that no bridge has taken in FRONT_START_SECONDS, saying why; one
    taken meanwhile, or ended, is left as it is. Whether it was given up."""
    with transaction.atomic():
        task = Task.objects.select_for_update().filter(pk=task_id).first()
        if task is None or task.status != Task.Status.QUEUED or task.claimed_by is not None:
            return False
        tasks.request_cancel(task)
        Task.objects.filter(pk=task_id).update(
            error=f"{task.agent.name} did not start it within {settings.FRONT_START_SECONDS} s: "
            f"{why_not_taken(task.agent_id)}. Nothing was run; call again later."
        )
    return True
