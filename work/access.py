"""Permission-checked fetches of what agents did with tools. Another tenant's id is "not found"."""

from django.db.models import Q

from agntchat.core.exceptions import NotFound
from agntchat.core.ids import as_uuid
from conversations.access import conversations_visible_to
from conversations.tasks import tasks_visible_to
from work.models import PermissionRequest, ToolCall, ToolPermission
from work.tools.registry import REGISTRY, Tool


class ToolNotFound(NotFound):
    code = "tool_not_found"
    default_message = "Tool not found."


class ToolCallNotFound(NotFound):
    code = "tool_call_not_found"
    default_message = "Tool call not found."


class RequestNotFound(NotFound):
    code = "permission_request_not_found"
    default_message = "Permission request not found."


class PermissionNotFound(NotFound):
    code = "permission_not_found"
    default_message = "Permission not found."


def access_tool(name: str) -> Tool:
    """A registered tool by name (the registry is the same for everyone)."""
    found = REGISTRY.get(name)
    if found is None:
        raise ToolNotFound()
    return found


def _where_visible(user) -> Q:
    """Made where USER may read: a conversation of theirs, or a task they may see."""
    return Q(conversation__in=conversations_visible_to(user)) | Q(
        conversation__isnull=True, task__in=tasks_visible_to(user)
    )


def tool_calls_visible_to(user):
    return ToolCall.objects.filter(_where_visible(user))


def access_tool_call(user, call_id) -> ToolCall:
    call = tool_calls_visible_to(user).filter(pk=as_uuid(call_id)).first()
    if call is None:
        raise ToolCallNotFound()
    return call


def access_permission_request(user, request_id) -> PermissionRequest:
    request = (
        PermissionRequest.objects.filter(
            call__in=tool_calls_visible_to(user), pk=as_uuid(request_id)
        )
        .select_related("call__agent", "call__workspace", "call__conversation", "decided_by")
        .first()
    )
    if request is None:
        raise RequestNotFound()
    return request


def workspace_permissions(membership):
    """The standing permissions of MEMBERSHIP's workspace (not those of an agent in it)."""
    return ToolPermission.objects.filter(workspace_id=membership.workspace_id, agent__isnull=True)


def access_workspace_permission(membership, permission_id) -> ToolPermission:
    """A standing permission of MEMBERSHIP's workspace (not one of an agent's)."""
    permission = workspace_permissions(membership).filter(pk=as_uuid(permission_id)).first()
    if permission is None:
        raise PermissionNotFound()
    return permission
