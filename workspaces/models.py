"""People, workspaces, memberships, invitations, personal API tokens, workspace credentials."""

from django.contrib.auth.models import AbstractUser, UserManager
from django.db import models, transaction
from django.db.models import Q
from django.db.models.functions import Lower

from agntchat.core.models import BaseModel


class User(BaseModel, AbstractUser):
    """A person. Creating one, by any path, also creates their personal workspace (WS-1)."""

    # AbstractUser has date_joined; created_at/updated_at come from BaseModel.
    display_name = models.CharField(max_length=80, blank=True)
    # An IANA name: the times a person gives (a reminder's) are read in it.
    timezone = models.CharField(max_length=64, default="UTC")
    # The inbox by email (workspaces.notifications.send_digests): how often at most, and when last.
    digest = models.CharField(
        max_length=10,
        choices=[("off", "Off"), ("hourly", "Hourly"), ("daily", "Daily")],
        default="daily",
    )
    digest_sent_at = models.DateTimeField(null=True, blank=True)
    # The address the person showed they read (they opened a link sent there): mail goes to
    # ``email`` only while it is this one, so no one can aim the product's mail at a stranger.
    verified_email = models.EmailField(blank=True)

    objects = UserManager()

    class Meta(AbstractUser.Meta):
        # "Alice" and "alice" are one name: sign-up refuses the second with a clear message
        # (forms.SignupForm); this holds for every other way of creating a person too.
        constraints = [
            models.UniqueConstraint(Lower("username"), name="username_unique_ignoring_case")
        ]

    @property
    def email_verified(self) -> bool:
        return bool(self.email) and self.email == self.verified_email

    def save(self, *args, **kwargs):
        # Overriding save (not a signal) covers signup, createsuperuser, the admin and the API
        # alike: every way of creating a person goes through here.
        creating = self._state.adding
        with transaction.atomic():
            super().save(*args, **kwargs)
            if creating:
                ensure_personal_workspace(self)

    @property
    def label(self) -> str:
        return self.display_name or self.username


class Workspace(BaseModel):
    class Kind(models.TextChoices):
        PERSONAL = "personal"
        TEAM = "team"

    name = models.CharField(max_length=80)
    kind = models.CharField(max_length=10, choices=Kind.choices)
    # Set once at creation; no action changes it (WS-2).
    owner = models.ForeignKey(User, on_delete=models.PROTECT, related_name="owned_workspaces")
    # How long an agent's tool call waits for a person's approval before it expires (TOOL-6).
    approval_expiry_minutes = models.PositiveIntegerField(default=15)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["owner"],
                condition=Q(kind="personal"),
                name="one_personal_workspace_per_person",
            )
        ]

    def __str__(self) -> str:
        return self.name

    @property
    def is_personal(self) -> bool:
        return self.kind == self.Kind.PERSONAL


class Role(models.TextChoices):
    OWNER = "owner"
    ADMIN = "admin"
    MEMBER = "member"


# Who manages a workspace: invites, credentials, hosts.
MANAGER_ROLES = (Role.OWNER, Role.ADMIN)


class Membership(BaseModel):
    workspace = models.ForeignKey(Workspace, on_delete=models.CASCADE, related_name="memberships")
    user = models.ForeignKey(User, on_delete=models.CASCADE, related_name="memberships")
    role = models.CharField(max_length=10, choices=Role.choices, default=Role.MEMBER)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["workspace", "user"], name="one_membership_per_person"),
            models.UniqueConstraint(
                fields=["workspace"], condition=Q(role="owner"), name="one_owner_per_workspace"
            ),
        ]

    @property
    def is_manager(self) -> bool:
        """Admin and owner do the same day to day: invite, credentials, hosts."""
        return self.role in MANAGER_ROLES

    @property
    def is_owner(self) -> bool:
        return self.role == Role.OWNER


class Invitation(BaseModel):
    """An invite link. The token is shown once; only its hash is stored."""

    workspace = models.ForeignKey(Workspace, on_delete=models.CASCADE, related_name="invitations")
    created_by = models.ForeignKey(User, on_delete=models.CASCADE, related_name="+")
    role = models.CharField(max_length=10, choices=Role.choices, default=Role.MEMBER)
    email = models.EmailField(blank=True)
    token_hash = models.CharField(max_length=64, unique=True)
    expires_at = models.DateTimeField()
    accepted_by = models.ForeignKey(
        User, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    accepted_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)


class ApiToken(BaseModel):
    """A personal API token (``apt_…``) for REST and MCP clients; stored only as a hash."""

    user = models.ForeignKey(User, on_delete=models.CASCADE, related_name="api_tokens")
    name = models.CharField(max_length=80, blank=True)
    prefix = models.CharField(max_length=12, db_index=True)
    token_hash = models.CharField(max_length=64, unique=True)
    last_used_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)


class Credential(BaseModel):
    """A secret a workspace gives its agents (an API key, say); encrypted at rest."""

    workspace = models.ForeignKey(Workspace, on_delete=models.CASCADE, related_name="credentials")
    name = models.CharField(max_length=80)
    kind = models.CharField(max_length=40, default="api_key")
    ciphertext = models.TextField()
    created_by = models.ForeignKey(User, on_delete=models.SET_NULL, null=True, related_name="+")

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["workspace", "name"], name="unique_credential_name")
        ]


class Notification(BaseModel):
    """What needs a person (their inbox): a mention, a DM, an approval to decide, a reminder.
    Its targets are ids, not keys: the rows live in apps above this one."""

    class Kind(models.TextChoices):
        MENTION = "mention"
        DIRECT = "direct"
        APPROVAL = "approval"
        REMINDER = "reminder"

    user = models.ForeignKey(User, on_delete=models.CASCADE, related_name="notifications")
    workspace = models.ForeignKey(Workspace, on_delete=models.CASCADE, related_name="+")
    kind = models.CharField(max_length=10, choices=Kind.choices)
    text = models.CharField(max_length=300)
    link = models.CharField(max_length=300)  # a path on this site: where clicking it goes
    conversation_id = models.UUIDField(null=True, blank=True)
    message_id = models.UUIDField(null=True, blank=True)
    target_id = models.UUIDField(null=True, blank=True)  # the approval request or the reminder
    read_at = models.DateTimeField(null=True, blank=True)
    emailed_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        indexes = [
            models.Index(fields=["user", "-created_at"], name="notification_inbox"),
            models.Index(
                fields=["user"], condition=Q(read_at__isnull=True), name="notification_unread"
            ),
            # A message edited or deleted, an approval decided: its notifications are found by
            # these, not by reading every person's inbox.
            models.Index(
                fields=["message_id"],
                condition=Q(message_id__isnull=False),
                name="notification_by_message",
            ),
            models.Index(
                fields=["target_id"],
                condition=Q(target_id__isnull=False),
                name="notification_by_target",
            ),
        ]


def ensure_personal_workspace(user: User) -> Workspace:
    """Create the person's one personal workspace if it does not exist yet (idempotent). Here,
    beside User.save, which calls it for every new person."""
    with transaction.atomic():
        workspace = Workspace.objects.filter(owner=user, kind=Workspace.Kind.PERSONAL).first()
        if workspace is None:
            workspace = Workspace.objects.create(
                name="Personal", kind=Workspace.Kind.PERSONAL, owner=user
            )
            Membership.objects.create(workspace=workspace, user=user, role=Role.OWNER)
        return workspace


class AuditEntry(BaseModel):
    """One security-relevant action (keys, tokens, roles, members, invitations, credentials,
    connections, approvals, publishing, hosts): who did what to which target, in which workspace,
    from which client address. Written by the actions themselves (workspaces.audit.record_audit),
    in their own transaction; read by the workspace's owner and admins. A person's own tokens
    and agent keys are recorded in their personal workspace."""

    workspace = models.ForeignKey(Workspace, on_delete=models.CASCADE, related_name="audit_entries")
    action = models.CharField(max_length=64)
    actor_user = models.ForeignKey(
        User, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    # An agent acting (its row lives above this app): its id and name as they were.
    actor_agent_id = models.UUIDField(null=True, blank=True)
    actor_label = models.CharField(max_length=160, blank=True)
    target_type = models.CharField(max_length=40, blank=True)
    target_id = models.CharField(max_length=64, blank=True)
    target_label = models.CharField(max_length=200, blank=True)
    details = models.JSONField(default=dict, blank=True)
    address = models.GenericIPAddressField(null=True, blank=True)

    class Meta:
        indexes = [
            models.Index(fields=["workspace", "-created_at"], name="audit_by_workspace"),
            # The audit page's filter by action, and its list of the actions there are.
            models.Index(fields=["workspace", "action", "-created_at"], name="audit_by_action"),
        ]
