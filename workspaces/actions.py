"""Every state change of workspaces, memberships, invitations, tokens and credentials."""

from datetime import timedelta
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from django.conf import settings
from django.db import IntegrityError, transaction
from django.dispatch import Signal
from django.utils import timezone

from agntchat.core import crypto
from agntchat.core.events import publish, publish_live
from agntchat.core.exceptions import AppError
from agntchat.core.limits import LimitReached, count_held
from agntchat.core.text import counted
from workspaces.access import (
    invitation_refusal,
    removal_refusal,
    require_manager,
    require_owner,
    role_change_refusal,
)
from workspaces.audit import record_audit
from workspaces.exceptions import (
    CredentialNameTaken,
    InvitationInvalid,
    InvitationNotFound,
    MemberNotFound,
    OwnerRule,
    PersonalWorkspaceRule,
    WorkspaceNotFound,
)
from workspaces.login import api_token_topic
from workspaces.models import ApiToken, Credential, Invitation, Membership, Role, User, Workspace


def _announce(workspace: Workspace, what: str) -> None:
    publish_live([f"workspace.{workspace.id}"], what, workspace_id=workspace.id)


def create_team_workspace(user: User, name: str) -> Workspace:
    with transaction.atomic():
        cap = settings.TEAM_WORKSPACES_PER_PERSON
        owned = cap and count_held(
            f"team-workspaces:{user.pk}",
            Workspace.objects.filter(owner=user, kind=Workspace.Kind.TEAM),
        )
        if cap and owned >= cap:
            raise LimitReached(
                f"You own {counted(owned, 'team workspace')}, the most one person may: delete "
                "one you no longer use first."
            )
        workspace = Workspace.objects.create(name=name, kind=Workspace.Kind.TEAM, owner=user)
        Membership.objects.create(workspace=workspace, user=user, role=Role.OWNER)
    return workspace


def rename_workspace(membership: Membership, name: str) -> Workspace:
    require_manager(membership)
    workspace = membership.workspace
    workspace.name = name
    workspace.save(update_fields=["name", "updated_at"])
    _announce(workspace, "workspace.renamed")
    return workspace


def update_workspace(membership: Membership, **changes) -> Workspace:
    """What a workspace's admins change on it: its name, how long approvals wait."""
    require_manager(membership)
    workspace = membership.workspace
    if "approval_expiry_minutes" in changes:
        workspace.approval_expiry_minutes = changes["approval_expiry_minutes"]
        workspace.save(update_fields=["approval_expiry_minutes", "updated_at"])
    if "name" in changes:
        workspace = rename_workspace(membership, changes["name"])
    return workspace


# Sent (in the deleting transaction) before a workspace is deleted: WORKSPACE.
workspace_closing = Signal()


def delete_workspace(membership: Membership) -> None:
    workspace = membership.workspace
    if workspace.is_personal:
        raise PersonalWorkspaceRule("A personal workspace can never be deleted.")
    require_owner(membership)
    _announce(workspace, "workspace.deleted")
    for attempt in range(3):
        try:
            return _delete_workspace(membership, workspace)
        except IntegrityError:
            # A row the deletion had not seen was added meanwhile (someone joining at that
            # moment): its foreign key failed the deletion. A new pass sees it and deletes it.
            if attempt == 2:
                raise


def _delete_workspace(membership: Membership, workspace: Workspace) -> None:
    with transaction.atomic():
        # What lives above this app and must end first (agents placed on the workspace's hosts).
        workspace_closing.send(sender=Workspace, workspace=workspace)
        # The workspace's own log goes with it: the owner's personal one keeps the deletion.
        record_audit(
            "workspace.deleted",
            actor=membership.user,
            target=workspace,
            label=workspace.name,
            members=workspace.memberships.count(),
        )
        _, deleted = Workspace.objects.filter(pk=workspace.pk).delete()
        if not deleted.get(Workspace._meta.label):  # a request beside this one deleted it first
            raise WorkspaceNotFound()


def create_invitation(
    membership: Membership, role: str = Role.MEMBER, email: str = ""
) -> tuple[Invitation, str]:
    """Return the invitation and its secret token (shown once: only the hash is kept)."""
    workspace = membership.workspace
    token = crypto.new_secret("inv")
    with transaction.atomic():
        # The inviter's role as it is now, held until the link is stored: a demotion or removal
        # committing meanwhile would otherwise miss this link when it revokes theirs.
        current = _locked(membership, not_found=WorkspaceNotFound)
        if refusal := invitation_refusal(current, role):
            raise refusal
        _check_pending_room(workspace)
        invitation = Invitation.objects.create(
            workspace=workspace,
            created_by=membership.user,
            role=role,
            email=email,
            token_hash=crypto.hash_secret(token),
            expires_at=timezone.now() + timedelta(days=settings.INVITATION_TTL_DAYS),
        )
        record_audit(
            "invitation.created",
            actor=membership.user,
            workspace=workspace,
            target=invitation,
            label=email or "a link",
            role=role,
        )
    return invitation, token


def pending_invitations(workspace: Workspace):
    """WORKSPACE's links still waiting: neither used, revoked nor expired."""
    return Invitation.objects.filter(
        workspace=workspace,
        accepted_at__isnull=True,
        revoked_at__isnull=True,
        expires_at__gt=timezone.now(),
    )


def _check_pending_room(workspace: Workspace) -> None:
    """LimitReached past PENDING_INVITATIONS_PER_WORKSPACE (counted under a lock: core.limits,
    so two admins at once cannot both add the last one)."""
    cap = settings.PENDING_INVITATIONS_PER_WORKSPACE
    if not cap:
        return
    waiting = count_held(f"invitations:{workspace.pk}", pending_invitations(workspace))
    if waiting >= cap:
        raise LimitReached(
            f"{workspace.name} has {counted(waiting, 'invitation link')} waiting, the most it "
            "keeps: revoke some first."
        )


def invitation_for(token: str, *, for_update: bool = False) -> Invitation:
    """The invitation a link's TOKEN stands for, with its workspace and inviter, to show before
    it is accepted (FOR_UPDATE: locked, to accept it); InvitationInvalid says why it cannot be
    used."""
    invitations = Invitation.objects.select_related("workspace", "created_by")
    if for_update:
        invitations = invitations.select_for_update(of=("self",))
    invitation = crypto.find_by_secret(
        lambda token_hash: invitations.filter(token_hash=token_hash).first(),
        Invitation.objects,
        "token_hash",
        token or "",
    )
    # A link lets people in on its maker's word: an account closed (a hijacked one, say) lets
    # nobody in any more.
    if invitation is None or invitation.revoked_at or not invitation.created_by.is_active:
        raise InvitationInvalid("This invitation link is not valid.", status=404)
    if invitation.accepted_at:
        raise InvitationInvalid("This invitation has already been used.")
    if invitation.expires_at <= timezone.now():
        raise InvitationInvalid("This invitation has expired; ask for a new link.")
    return invitation


def accept_invitation(user: User, token: str) -> Membership:
    with transaction.atomic():
        invitation = invitation_for(token, for_update=True)
        # get_or_create: two links of one workspace accepted at once by one person make one
        # membership (the second waits for the first's row, then finds it).
        membership, _ = Membership.objects.get_or_create(
            workspace=invitation.workspace, user=user, defaults={"role": invitation.role}
        )
        invitation.accepted_by = user
        invitation.accepted_at = timezone.now()
        invitation.save(update_fields=["accepted_by", "accepted_at", "updated_at"])
        record_audit(
            "invitation.accepted",
            actor=user,
            workspace=invitation.workspace,
            target=invitation,
            label=user.label,
            role=membership.role,
        )
        _announce(invitation.workspace, "member.joined")
    return membership


def change_role(membership: Membership, target: Membership, role: str) -> Membership:
    """Only the owner changes roles, and never their own: the owner is fixed."""
    with transaction.atomic():
        target = _locked(target)
        if refusal := role_change_refusal(membership, target):
            raise refusal
        if role not in (Role.ADMIN, Role.MEMBER):
            raise OwnerRule("A member can only be made admin or member; the owner is fixed.")
        old = target.role
        target.role = role
        target.save(update_fields=["role", "updated_at"])
        # Links an admin made stop working when they may no longer invite.
        revoked = _revoke_invitations_of(target) if not target.is_manager else 0
        record_audit(
            "member.role_changed",
            actor=membership.user,
            workspace=membership.workspace_id,
            target=target,
            label=target.user.label,
            old=old,
            new=role,
            invitations_revoked=revoked or None,
        )
    _announce(membership.workspace, "member.role_changed")
    return target


def remove_member(membership: Membership, target: Membership) -> None:
    if target.user_id == membership.user_id and not target.is_owner:
        return leave_workspace(membership)
    _end_membership(membership, target, "member.removed", removal_refusal)


def leave_workspace(membership: Membership) -> None:
    if membership.workspace.is_personal:
        raise PersonalWorkspaceRule("You cannot leave your personal workspace.")
    if membership.is_owner:
        raise OwnerRule("The owner cannot leave; delete the workspace instead.")
    _end_membership(membership, membership, "member.left")


def _end_membership(membership: Membership, target: Membership, action: str, refusal=None) -> None:
    """TARGET leaves (or MEMBERSHIP removes them, unless REFUSAL(membership, target) refuses):
    audited as ACTION, announced the same, and the links they made stop working."""
    with transaction.atomic():
        # Decided on the role held now; one who left or was removed meanwhile is not found.
        target = _locked(target)
        if refusal and (error := refusal(membership, target)):
            raise error
        record_audit(
            action,
            actor=membership.user,
            workspace=target.workspace_id,
            target=target,
            label=target.user.label,
            role=target.role,
            invitations_revoked=_revoke_invitations_of(target) or None,
        )
        target.delete()
    _announce(target.workspace, action)


def _locked(member: Membership, not_found=MemberNotFound) -> Membership:
    """MEMBER's row as it is now (with its person and workspace), locked until the transaction
    ends: a role is decided on as it is, not as a request loaded it a moment ago, and a member
    gone meanwhile is NOT_FOUND (saving or deleting the row loaded would 500 or audit twice)."""
    current = (
        Membership.objects.select_for_update(of=("self",))
        .select_related("user", "workspace")
        .filter(pk=member.pk)
        .first()
    )
    if current is None:
        raise not_found()
    return current


def revoke_invitation(membership: Membership, invitation: Invitation) -> Invitation:
    """Withdraw a pending invitation link (a manager's; access_invitation checks who asks). A
    used link cannot be withdrawn: remove the member instead. Revoking twice is revoking once."""
    with transaction.atomic():
        # The link as it is now, locked: one used since the request loaded it was not stopped,
        # and saying (and auditing) it was would tell the admin so.
        invitation = Invitation.objects.select_for_update().filter(pk=invitation.pk).first()
        if invitation is None:
            raise InvitationNotFound()
        if invitation.accepted_at:
            raise InvitationInvalid(
                "This invitation has already been used; remove the member instead.", status=409
            )
        if invitation.revoked_at is None:
            invitation.revoked_at = timezone.now()
            invitation.save(update_fields=["revoked_at", "updated_at"])
            record_audit(
                "invitation.revoked",
                actor=membership.user,
                workspace=membership.workspace_id,
                target=invitation,
                label=invitation.email or "a link",
                role=invitation.role,
            )
    return invitation


def _revoke_invitations_of(member: Membership) -> int:
    """Withdraw the pending links MEMBER made in their workspace: someone who leaves, is
    removed or loses the right to invite can no longer let anyone in, themselves included."""
    now = timezone.now()
    return Invitation.objects.filter(
        workspace_id=member.workspace_id,
        created_by_id=member.user_id,
        accepted_at__isnull=True,
        revoked_at__isnull=True,
    ).update(revoked_at=now, updated_at=now)


def issue_api_token(user: User, name: str = "") -> tuple[ApiToken, str]:
    secret = crypto.new_secret("apt")
    with transaction.atomic():
        token = ApiToken.objects.create(
            user=user,
            name=name,
            prefix=crypto.lookup_prefix(secret),
            token_hash=crypto.hash_secret(secret),
        )
        record_audit("api_token.issued", actor=user, target=token, label=name or token.prefix)
    return token, secret


def live_api_tokens(user: User):
    return ApiToken.objects.filter(user=user, revoked_at__isnull=True)


def revoke_api_token(token: ApiToken) -> None:
    with transaction.atomic():
        now = timezone.now()
        # Only while it is live: two requests revoking it at once revoke (and audit) it once.
        live = ApiToken.objects.filter(pk=token.pk, revoked_at__isnull=True)
        if not live.update(revoked_at=now, updated_at=now):
            return
        token.revoked_at = now
        record_audit(
            "api_token.revoked",
            actor=token.user,
            target=token,
            label=token.name or token.prefix,
        )
        publish(api_token_topic(token.pk), {"type": "session.ended", "reason": "revoked"})


def create_credential(
    membership: Membership, name: str, value: str, kind: str = "api_key"
) -> Credential:
    require_manager(membership)
    try:
        with transaction.atomic():
            credential = Credential.objects.create(
                workspace=membership.workspace,
                name=name,
                kind=kind,
                ciphertext=crypto.encrypt(value),
                created_by=membership.user,
            )
            record_audit(
                "credential.created",
                actor=membership.user,
                workspace=membership.workspace_id,
                target=credential,
                label=name,
                kind=kind,
            )
    except IntegrityError:  # the name is taken (by a request beside this one, perhaps)
        raise CredentialNameTaken(fields={"name": CredentialNameTaken.default_message}) from None
    return credential


def delete_credential(membership: Membership, credential: Credential) -> None:
    require_manager(membership)
    with transaction.atomic():
        record_audit(
            "credential.deleted",
            actor=membership.user,
            workspace=membership.workspace_id,
            target=credential,
            label=credential.name,
        )
        credential.delete()


def update_profile(user, *, display_name: str | None = None, zone_name: str | None = None):
    """A person's own name as shown, and the time zone their times are read in (ZONE_NAME). A
    change is audited: a name is what others recognise a person by."""
    before = {"display_name": user.display_name, "timezone": user.timezone}
    if zone_name is not None:
        try:
            ZoneInfo(zone_name)
        except (ZoneInfoNotFoundError, ValueError):
            raise AppError(
                f"{zone_name!r} is not a time zone; use an IANA name such as Europe/Lisbon.",
                code="invalid",
                fields={"timezone": "Unknown time zone."},
            ) from None
        user.timezone = zone_name
    if display_name is not None:
        user.display_name = display_name.strip()
    with transaction.atomic():
        user.save(update_fields=["display_name", "timezone", "updated_at"])
        changed = [name for name, old in before.items() if getattr(user, name) != old]
        if changed:
            record_audit(
                "profile.changed", actor=user, target=user, label=user.label, fields=changed
            )
    return user
