"""Permission requests: a tool call that waits for a person (TOOL-5), decided or expired
(TOOL-6), then claimed by the agent's connection as the third kind of work (MSG-6).

Who decides: the agent's owner, and the admins and owner of the workspace the call was made in,
provided they may read where it was made. "Always allow" also writes a standing permission for
that agent and tool in that workspace, so the next such call runs at once.
"""

from datetime import timedelta

from django.db import transaction
from django.db.models import Q
from django.urls import reverse
from django.utils import timezone

from agntchat.core.events import wake_agent
from agntchat.core.exceptions import AppError, Conflict, PermissionDenied
from conversations.access import conversations_visible_to
from work import live
from work.models import Decision, PermissionRequest, ToolCall, ToolPermission
from workspaces.audit import record_audit
from workspaces.models import MANAGER_ROLES, Membership, Notification, User
from workspaces.notifications import conversation_link, notify_person, settle_notifications

DEFAULT_EXPIRY_MINUTES = 15


class ApprovalExpired(Conflict):
    code = "approval_expired"
    default_message = (
        "This request expired before anyone decided; the agent was told and the call was not run."
    )


class AlreadyDecided(Conflict):
    code = "approval_decided"


class NotADecider(PermissionDenied):
    code = "not_a_decider"
    default_message = "Only the agent's owner or an admin of this workspace can decide this."


def expiry_minutes(workspace) -> int:
    return workspace.approval_expiry_minutes or DEFAULT_EXPIRY_MINUTES


def request_permission(call: ToolCall) -> PermissionRequest:
    """A request for CALL (stored, waiting), shown live to whoever may read where it was made.
    In the caller's transaction."""
    request = PermissionRequest.objects.create(
        agent_id=call.agent_id,
        workspace_id=call.workspace_id,
        call=call,
        conversation_id=call.conversation_id,
        expires_at=timezone.now() + timedelta(minutes=expiry_minutes(call.workspace)),
    )
    call.request = request
    live.announce_call(call)
    _notify_deciders(request, call)
    return request


# ---- inbox: an approval waits in each decider's inbox until someone decides ----
def _notify_deciders(request: PermissionRequest, call: ToolCall) -> None:
    """Everyone who may decide (may_decide) and may read where the call was made."""
    managers = Membership.objects.filter(
        workspace_id=request.workspace_id, role__in=MANAGER_ROLES
    ).values("user_id")
    deciders = User.objects.filter(Q(pk=call.agent.owner_id) | Q(pk__in=managers))
    if call.conversation_id:
        link = conversation_link(call.workspace_id, call.conversation_id)
    elif call.task_id:
        link = reverse("task", args=[call.workspace_id, call.task_id])
    else:
        link = reverse("agent", args=[call.workspace_id, call.agent_id])
    for user in deciders:
        if call.conversation_id and not (
            conversations_visible_to(user).filter(pk=call.conversation_id).exists()
        ):
            continue
        notify_person(
            user,
            request.workspace_id,
            Notification.Kind.APPROVAL,
            f"{call.agent.name} asks to use {call.tool}: approve or deny",
            link,
            target_id=request.pk,  # not the conversation's: reading it decides nothing
        )


def may_decide(user, request: PermissionRequest) -> bool:
    """The agent's owner, or a manager of the workspace the call was made in."""
    if request.call.agent.owner_id == user.id:
        return True
    return Membership.objects.filter(
        workspace_id=request.workspace_id, user=user, role__in=MANAGER_ROLES
    ).exists()


def decide_permission(user, request: PermissionRequest, approve: bool, always: bool = False):
    """Approve or deny a pending request. The agent's connection claims the decision; an
    approved call then runs, a denied one fails with who denied it."""
    if not may_decide(user, request):
        raise NotADecider()
    if always and not approve:
        raise AppError(
            '"Always" goes with an approval only.', code="invalid", fields={"always": "Approve."}
        )
    now = timezone.now()
    with transaction.atomic():
        request = PermissionRequest.objects.select_for_update().get(pk=request.pk)
        if request.status == PermissionRequest.Status.EXPIRED or (
            request.status == PermissionRequest.Status.PENDING and request.expires_at <= now
        ):
            raise ApprovalExpired()
        if request.status != PermissionRequest.Status.PENDING:
            raise AlreadyDecided(f"This request was already {request.status}.")
        request.status = (
            PermissionRequest.Status.APPROVED if approve else PermissionRequest.Status.DENIED
        )
        request.decided_at, request.decided_by, request.always = now, user, always
        request.save(update_fields=["status", "decided_at", "decided_by", "always", "updated_at"])
        if always:
            ToolPermission.objects.update_or_create(
                agent_id=request.agent_id,
                workspace_id=request.workspace_id,
                tool=request.call.tool,
                risk="",
                defaults={"decision": Decision.ALLOW, "set_by": user},
            )
        record_audit(
            f"approval.{request.status}",
            actor=user,
            workspace=request.workspace_id,
            target=request,
            label=request.call.tool,
            always=always or None,
        )
        request.call.request = request
        live.announce_call(request.call)
        wake_agent(request.agent_id, "permission")
        settle_notifications(request.pk)  # inbox: nothing waits any more
    return request


def expire_permission_requests(now=None) -> int:
    """Pending requests past their time end as expired: the agent claims that like a decision,
    and its call fails with "approval expired"; a late Approve is refused."""
    now = now or timezone.now()
    count = 0
    for request_id in PermissionRequest.objects.filter(
        status=PermissionRequest.Status.PENDING, expires_at__lte=now
    ).values_list("id", flat=True):
        with transaction.atomic():
            request = (
                PermissionRequest.objects.select_for_update(of=("self",))
                .select_related("call__conversation")
                .get(pk=request_id)
            )
            if request.status != PermissionRequest.Status.PENDING:
                continue
            request.status, request.decided_at = PermissionRequest.Status.EXPIRED, now
            request.save(update_fields=["status", "decided_at", "updated_at"])
            request.call.request = request
            live.announce_call(request.call)
            wake_agent(request.agent_id, "permission")
            settle_notifications(request.pk)  # inbox: nothing waits any more
            count += 1
    return count


def decision_payload(request: PermissionRequest) -> dict:
    """What the agent's connection is told of a decided request (its work payload)."""
    return {
        "request_id": request.id,
        "call_id": request.call.call_id,
        "tool": request.call.tool,
        "status": request.status,
        "decided_by": request.decided_by.label if request.decided_by_id else None,
    }
