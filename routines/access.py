"""Permission-checked fetches of routines: an agent's owner sees and changes its routines;
for everyone else they do not exist."""

from agntchat.core.exceptions import NotFound
from agntchat.core.ids import as_uuid
from routines.models import Loop, Reminder, Routine


class RoutineNotFound(NotFound):
    code = "routine_not_found"
    default_message = "Routine not found."


def routines_visible_to(user):
    return Routine.objects.filter(agent__owner=user)


def access_routine(user, routine_id) -> Routine:
    found = (
        routines_visible_to(user)
        .select_related("agent", "workspace", "conversation")
        .filter(pk=as_uuid(routine_id))
        .first()
    )
    if found is None:
        raise RoutineNotFound()
    return found


class ReminderNotFound(NotFound):
    code = "reminder_not_found"
    default_message = "Reminder not found."


def reminders_visible_to(user):
    """The reminders of the person's agents (they are delivered to that person)."""
    return Reminder.objects.filter(agent__owner=user)


def access_reminder(user, reminder_id) -> Reminder:
    found = reminders_visible_to(user).filter(pk=as_uuid(reminder_id)).first()
    if found is None:
        raise ReminderNotFound()
    return found


def access_agents_reminder(agent, workspace, reminder_id) -> Reminder:
    """One of AGENT's own reminders set in WORKSPACE: asked elsewhere, it is not there (its text
    is of that workspace)."""
    found = Reminder.objects.filter(
        agent=agent, workspace=workspace, pk=as_uuid(reminder_id)
    ).first()
    if found is None:
        raise ReminderNotFound()
    return found


class LoopNotFound(NotFound):
    code = "loop_not_found"
    default_message = "Loop not found."


def loops_visible_to(user):
    return Loop.objects.filter(agent__owner=user)


def access_loop(user, loop_id) -> Loop:
    found = loops_visible_to(user).select_related("agent").filter(pk=as_uuid(loop_id)).first()
    if found is None:
        raise LoopNotFound()
    return found
