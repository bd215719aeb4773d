"""Permission requests: a tool call that waits for a person (TOOL-5), decided or expired
(TOOL-6), then claimed by the agent's connection as the third kind of work (MSG-6).

Who decides: the agent's owner, and the admins and owner of the workspace the call was made in,
provided they may read where it was made. "Always allow" also writes a standing permission for
that agent and tool in that workspace, so the next such call runs at once.
"""

from collections.abc import Callable
from datetime import timedelta

from django.db import transaction
from django.db.models import Q
from django.urls import reverse
from django.utils import timezone

from agntchat.core.events import wake_agent
from agntchat.core.exceptions import AppError, Conflict, PermissionDenied
from conversations.access import conversations_visible_to
from work import live
from work.access import tool_calls_visible_to
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


# Whose own outside account (a mailbox, a repository) a call would act on, or None: filled in by
# integrations, which knows accounts (integrations/connections.py). Such a call is that person's
# to decide, and theirs alone: not the agent's owner's, not an admin's.
def _no_account_owner(call: ToolCall) -> User | None:
    return None


_account_owner: Callable[[ToolCall], User | None] = _no_account_owner


def set_account_owner(find: Callable[[ToolCall], User | None]) -> None:
    global _account_owner
    _account_owner = find


# ---- inbox: an approval waits in each decider's inbox until someone decides ----
def _deciders(call: ToolCall):
    account_owner = _account_owner(call)
    if account_owner is not None:
        return User.objects.filter(pk=account_owner.pk)
    managers = Membership.objects.filter(
        workspace_id=call.workspace_id, role__in=MANAGER_ROLES
    ).values("user_id")
    return User.objects.filter(Q(pk=call.agent.owner_id) | Q(pk__in=managers))


def _sees(user, call: ToolCall) -> bool:
    """Whether USER may read where CALL was made (where its approval prompt shows)."""
    if not call.conversation_id:
        return True
    return conversations_visible_to(user).filter(pk=call.conversation_id).exists()


def anyone_may_decide(call: ToolCall) -> bool:
    """Whether someone who may decide CALL can read where it was made: if nobody can, a request
    would only wait for its expiry (a person's direct conversation with someone else's agent)."""
    return any(_sees(user, call) for user in _deciders(call))


def _notify_deciders(request: PermissionRequest, call: ToolCall) -> None:
    """Everyone who may decide (may_decide) and may read where the call was made."""
    deciders = _deciders(call)
    if call.conversation_id:  # at the message answered, where the approval prompt shows
        link = conversation_link(call.workspace_id, call.conversation_id, call.message_id)
    elif call.task_id:
        link = reverse("task", args=[call.workspace_id, call.task_id])
    else:
        link = reverse("agent", args=[call.workspace_id, call.agent_id])
    for user in deciders:
        if not _sees(user, call):
            continue
        notify_person(
            user,
            request.workspace_id,
            Notification.Kind.APPROVAL,
            f"{call.agent.name} asks to use {call.tool}: approve or deny",
            link,
            target_id=request.pk,  # not the conversation's: reading it decides nothing
        )


def _settled_text(request: PermissionRequest, reason: str | None = None) -> str:
    """What a decided or expired request's inbox items say instead of asking (REASON: why it
    ended, when nobody decided it)."""
    asked = f"{request.call.agent.name} asked to use {request.call.tool}"
    if request.status == PermissionRequest.Status.EXPIRED:
        return f"{asked}: {reason or 'expired before anyone decided'}"
    by = f" by {request.decided_by.label}" if request.decided_by_id else ""
    always = ", always allowed from now on" if request.always else ""
    text = f"{asked}: {request.status}{by}{always}"
    return f"{text}, but not run: {reason}" if reason else text  # approved, then out of reach


def decidable(user, request_ids) -> set:
    """Of REQUEST_IDS, those still waiting that USER may decide: their inbox items offer
    Approve and Deny (decide_permission checks again)."""
    waiting = PermissionRequest.objects.filter(
        pk__in=request_ids,
        call__in=tool_calls_visible_to(user),
        status=PermissionRequest.Status.PENDING,
        expires_at__gt=timezone.now(),
    ).select_related("call__agent")
    return {request.pk for request in waiting if may_decide(user, request)}


def may_decide(user, request: PermissionRequest) -> bool:
    """The person whose own account the call acts on; else the agent's owner, or a manager of
    the workspace the call was made in."""
    return _deciders(request.call).filter(pk=user.pk).exists()


def decide_permission(user, request: PermissionRequest, approve: bool, always: bool = False):
    """Approve or deny a pending request. The agent's connection claims the decision; an
    approved call then runs, a denied one fails with who denied it."""
    if not may_decide(user, request):
        raise NotADecider()
    if always and not approve:
        raise AppError(
            '"Always" goes with an approval only.', code="invalid", fields={"always": "Approve."}
        )
    if always and _account_owner(request.call) is not None:
        # A standing allow is the agent's, in the workspace: it would cover every member's own
        # account, not only this person's.
        raise AppError(
            '"Always" is for the workspace\'s accounts: a call on your own account is approved '
            "each time.",
            code="invalid",
            fields={"always": "Not for a personal account."},
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
        settle_notifications(request.pk, _settled_text(request))  # inbox: nothing waits any more
    return request


def expire_permission_requests(now=None) -> int:
    """Pending requests past their time end as expired: the agent claims that like a decision,
    and its call fails with "approval expired"; a late Approve is refused."""
    now = now or timezone.now()
    return _end_pending(Q(expires_at__lte=now), now)


def withdraw_stopped_requests(kind: str, item_id) -> int:
    """A person stopped the turn of a message's work item ITEM_ID (conversations.actions.
    stop_turn), or cancelled a task: what it still waited to be approved for ends as expired,
    and its inbox items say why, instead of offering an Approve that nothing would run after."""
    if kind == "task":
        which, reason = Q(call__task_id=item_id), "its task was cancelled"
    else:
        which, reason = Q(call__delivery_id=item_id), "its turn was stopped"
    now = timezone.now()
    # An approved call not resent yet ends too: its bridge drops the work, never to resend it.
    _end_approved(which, now, reason, "work_stopped")
    return _end_pending(which, now, reason)


def agent_left_workspaces(
    sender, agent, workspace_ids, owner_left: bool, deleted: bool = False, **kwargs
) -> None:
    """agents.signals.agent_left_workspaces, in the changing transaction (its pins changed, its
    owner left, or it is being DELETED): what it waited to have approved there can no longer run
    (a message's call is out of reach; a task's, once its owner left; all of it, once deleted),
    so it ends and its inbox items say why, instead of asking until the sweep. A call approved
    but not resent yet ends too: its work is dropped, so its bridge never resends it."""
    if deleted:  # wherever it waits: a task's too, and where the agent no longer appears
        which, reason = Q(agent=agent), "its agent was deleted"
    else:
        which = Q(agent=agent, workspace_id__in=workspace_ids)
        if not owner_left:  # a task is worked where it was asked while its owner belongs (PRO-2)
            which &= Q(call__task__isnull=True)
        reason = "its agent's owner left this workspace" if owner_left else (
            "its agent no longer works in this workspace"
        )  # fmt: skip
    now = timezone.now()
    _end_pending(which, now, reason)
    _end_approved(which, now, reason)


def _end_approved(which: Q, now, reason: str, code: str = "work_out_of_reach") -> int:
    """The calls of the approved requests WHICH selects that wait to be resent end as failed
    (CODE), each under its row lock; their inbox items say why they were not run. One being run
    now (run_prepared holds its row) is skipped: it ends by itself."""
    approved = PermissionRequest.objects.filter(which, status=PermissionRequest.Status.APPROVED)
    count = 0
    for call_id in ToolCall.objects.filter(
        request__in=approved, status=ToolCall.Status.WAITING
    ).values_list("id", flat=True):
        with transaction.atomic():
            call = (
                ToolCall.objects.select_for_update(of=("self",), skip_locked=True)
                .select_related("request__decided_by", "agent")
                .filter(pk=call_id, status=ToolCall.Status.WAITING)
                .first()
            )
            if call is None:
                continue
            call.status, call.error_code = ToolCall.Status.FAILED, code
            call.error = f"Approved, but not run: {reason}."
            call.finished_at = now
            call.save(update_fields=["status", "error_code", "error", "finished_at", "updated_at"])
            live.announce_call(call)
            settle_notifications(call.request.pk, _settled_text(call.request, reason))
            count += 1
    return count


def _end_pending(which: Q, now, reason: str | None = None) -> int:
    """End the pending requests WHICH selects as expired, each under its row lock (a decision
    racing this one wins or loses whole); REASON: what their inbox items say ended them."""
    count = 0
    for request_id in PermissionRequest.objects.filter(
        which, status=PermissionRequest.Status.PENDING
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
            # The inbox: nothing waits any more.
            settle_notifications(request.pk, _settled_text(request, reason))
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
