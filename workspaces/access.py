"""Permission-checked fetches of workspaces. Another tenant's id is simply not found."""

from django.db.models import Exists, OuterRef

from agntchat.core.exceptions import AppError
from agntchat.core.ids import as_uuid
from workspaces.exceptions import (
    CredentialNotFound,
    InvitationNotFound,
    MemberNotFound,
    NotAllowed,
    NotificationNotFound,
    OwnerRule,
    PersonalWorkspaceRule,
    TokenNotFound,
    WorkspaceNotFound,
)
from workspaces.models import (
    ApiToken,
    Credential,
    Invitation,
    Membership,
    Notification,
    Role,
    User,
    Workspace,
)


def workspaces_visible_to(user):
    """Workspaces the person is a member of, personal first then teams by name."""
    return (
        Workspace.objects.filter(memberships__user=user)
        .extra(select={"personal_first": "kind <> 'personal'"})
        .order_by("personal_first", "name", "created_at")
    )


def access_membership(user, workspace_id) -> Membership:
    """The person's membership of WORKSPACE_ID, or not found."""
    if not getattr(user, "is_authenticated", False) or not hasattr(user, "memberships"):
        raise WorkspaceNotFound()
    try:
        return Membership.objects.select_related("workspace").get(
            workspace_id=as_uuid(workspace_id), user=user
        )
    except Membership.DoesNotExist:
        raise WorkspaceNotFound() from None


def access_workspace(user, workspace_id) -> Workspace:
    return access_membership(user, workspace_id).workspace


def access_member(membership: Membership, user_id) -> Membership:
    """Another person's membership of MEMBERSHIP's workspace; one who is not a member there (or
    of another workspace only) is not found."""
    target = (
        Membership.objects.select_related("user", "workspace")
        .filter(workspace_id=membership.workspace_id, user_id=as_uuid(user_id))
        .first()
    )
    if target is None:
        raise MemberNotFound()
    return target


def access_api_token(user, token_id) -> ApiToken:
    """One of the person's own API tokens; anyone else's is not found."""
    token = ApiToken.objects.filter(user=user, pk=as_uuid(token_id)).first()
    if token is None:
        raise TokenNotFound()
    return token


def require_manager(membership: Membership) -> None:
    if not membership.is_manager:
        raise NotAllowed("Only an admin or the owner of this workspace can do that.")


def require_owner(membership: Membership) -> None:
    if not membership.is_owner:
        raise NotAllowed("Only the owner of this workspace can do that.")


# Who may do what to whom in a workspace: each rule once, as the refusal it makes (None: allowed).
# The actions raise it; the pages show a control only where it is None.


def role_change_refusal(membership: Membership, target: Membership) -> AppError | None:
    """Only the owner changes roles, and never the owner's own: the owner is fixed (WS-2)."""
    if not membership.is_owner:
        return NotAllowed("Only the owner of this workspace can do that.")
    if target.is_owner:
        return OwnerRule("The owner's role can never be changed.")
    return None


def removal_refusal(membership: Membership, target: Membership) -> AppError | None:
    """Managers remove members, only the owner removes an admin, nobody removes the owner."""
    if target.is_owner:
        return OwnerRule("The owner can never be removed from their workspace.")
    if not membership.is_manager:
        return NotAllowed("Only an admin or the owner of this workspace can do that.")
    if target.role == Role.ADMIN and not membership.is_owner:
        return NotAllowed("Only the owner can remove an admin.")
    return None


def invitation_refusal(membership: Membership, role: str) -> AppError | None:
    """Managers invite members, only the owner invites an admin; nobody is invited as owner, nor
    to a personal workspace (WS-1)."""
    if membership.workspace.is_personal:
        return PersonalWorkspaceRule("Nobody can be invited to a personal workspace.")
    if not membership.is_manager:
        return NotAllowed("Only an admin or the owner of this workspace can do that.")
    if role == Role.OWNER:
        return OwnerRule("The owner is set at creation; nobody can be invited as owner.")
    if role == Role.ADMIN and not membership.is_owner:
        return NotAllowed("Only the owner can invite someone as an admin.")
    return None


def _managed(membership: Membership, model, row_id, not_found):
    """A row of MODEL in MEMBERSHIP's workspace that only its managers handle (others 403); one
    of another workspace, or none, is NOT_FOUND."""
    require_manager(membership)
    row = model.objects.filter(workspace_id=membership.workspace_id, pk=as_uuid(row_id)).first()
    if row is None:
        raise not_found()
    return row


def access_credential(membership: Membership, credential_id) -> Credential:
    return _managed(membership, Credential, credential_id, CredentialNotFound)


def access_invitation(membership: Membership, invitation_id) -> Invitation:
    return _managed(membership, Invitation, invitation_id, InvitationNotFound)


def notifications_visible_to(user):
    """The person's own notifications, of the workspaces they are still a member of."""
    member = Membership.objects.filter(workspace_id=OuterRef("workspace_id"), user=user)
    return Notification.objects.filter(Exists(member), user=user)


def access_notification(user, notification_id) -> Notification:
    """One of the person's own notifications; anyone else's is not found."""
    notification = notifications_visible_to(user).filter(pk=as_uuid(notification_id)).first()
    if notification is None:
        raise NotificationNotFound()
    return notification


class IsPerson:
    """Endpoints only a person may use (agents authenticate too, but act elsewhere)."""

    def has_permission(self, request, view):
        return isinstance(request.user, User) and request.user.is_authenticated

    def has_object_permission(self, request, view, obj):
        return True
