from agntchat.core.exceptions import AppError, NotFound, PermissionDenied, wait_words


class WorkspaceNotFound(NotFound):
    code = "workspace_not_found"
    default_message = "Workspace not found."


class CredentialNotFound(NotFound):
    code = "credential_not_found"
    default_message = "Credential not found."


class MemberNotFound(NotFound):
    code = "member_not_found"
    default_message = "Member not found."


class TokenNotFound(NotFound):
    code = "token_not_found"
    default_message = "Token not found."


class InvitationNotFound(NotFound):
    code = "invitation_not_found"
    default_message = "Invitation not found."


class NotificationNotFound(NotFound):
    code = "notification_not_found"
    default_message = "Notification not found."


class PersonalWorkspaceRule(AppError):
    """The personal workspace is never deleted, transferred, left or shared (WS-1)."""

    code = "personal_workspace"
    status = 409


class OwnerRule(AppError):
    """The owner is fixed at creation (WS-2)."""

    code = "owner_fixed"
    status = 409


class NotAllowed(PermissionDenied):
    code = "not_allowed"


class InvitationInvalid(AppError):
    code = "invitation_invalid"


class LoginThrottled(AppError):
    """Too many failed sign-ins for a username or from a client address: locked for a while."""

    code = "login_throttled"
    status = 429

    def __init__(self, retry_after: int):
        super().__init__(
            f"Too many failed sign-in attempts. Try again in {wait_words(retry_after)}."
        )
        self.retry_after = retry_after


class CredentialNameTaken(AppError):
    code = "credential_name_taken"
    status = 409
    default_message = "A credential with this name exists."
