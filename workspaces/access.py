"""Permission-checked fetches of workspaces. Another tenant's id is simply not found."""

from agntchat.core.ids import as_uuid
from workspaces.exceptions import (
    CredentialNotFound,
    MemberNotFound,
    NotAllowed,
    TokenNotFound,
    WorkspaceNotFound,
)
from workspaces.models import ApiToken, Credential, Membership, User, Workspace


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
    if membership.role != "owner":
        raise NotAllowed("Only the owner of this workspace can do that.")


def access_credential(membership: Membership, credential_id) -> Credential:
    """A credential of MEMBERSHIP's workspace. Only its managers handle credentials (others 403)."""
    require_manager(membership)
    credential = Credential.objects.filter(
        workspace_id=membership.workspace_id, pk=as_uuid(credential_id)
    ).first()
    if credential is None:
        raise CredentialNotFound()
    return credential


class IsPerson:
    """Endpoints only a person may use (agents authenticate too, but act elsewhere)."""

    def has_permission(self, request, view):
        return isinstance(request.user, User) and request.user.is_authenticated

    def has_object_permission(self, request, view, obj):
        return True
