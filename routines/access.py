"""Permission-checked fetches of routines: an agent's owner sees and changes its routines;
for everyone else they do not exist."""

from agntchat.core.exceptions import NotFound
from agntchat.core.ids import as_uuid
from routines.models import Routine


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
