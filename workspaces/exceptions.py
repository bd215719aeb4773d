from agntchat.core.exceptions import AppError, NotFound, PermissionDenied


class WorkspaceNotFound(NotFound):
    code = "workspace_not_found"
    default_message = "Workspace not found."


class CredentialNotFound(NotFound):
    code = "credential_not_found"
    default_message = "Credential not found."


class PersonalWorkspaceRule(AppError):
    """The personal workspace is never deleted, transferred, left or shared (WS-1)."""

    code = "personal_workspace"


class OwnerRule(AppError):
    """The owner is fixed at creation (WS-2)."""

    code = "owner_fixed"


class NotAllowed(PermissionDenied):
    code = "not_allowed"


class InvitationInvalid(AppError):
    code = "invitation_invalid"
