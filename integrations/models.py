"""Outside systems a workspace's agents act on (INT-1…3, TOOL-1):

- ``Connection``: a Google or GitHub account someone connected over OAuth, its tokens encrypted;
- ``OAuthFlow``: an authorization started and not yet come back (its state and PKCE verifier);
- ``ToolSource``: an outside MCP server or HTTP API a workspace's admins added as tools;
- ``SourceGrant``: one right of an agent over one function of a source;
- ``TelegramBot``, ``TelegramLink``, ``TelegramSend``: Telegram as an outside channel (API-3,
  ``integrations/telegram.py``, docs/telegram.md).
"""

from django.db import models
from django.db.models import Q

from agents.models import Agent
from agntchat.core.models import BaseModel
from conversations.models import Conversation, Message
from workspaces.models import Credential, User, Workspace


class Provider(models.TextChoices):
    GOOGLE = "google", "Google"
    GITHUB = "github", "GitHub"


class Connection(BaseModel):
    """An account on PROVIDER, owned by the person who connected it (USER), or by a whole
    WORKSPACE when one of its admins connected it there (INT-3): exactly one of the two.

    The tokens are encrypted at rest (``agntchat.core.crypto``). When the provider refuses
    them (revoked, expired for good), STATUS turns to ``reconnect`` and PROBLEM says why: the
    connections page asks the owner to reconnect, and tool calls say so instead of failing."""

    class Status(models.TextChoices):
        ACTIVE = "active"
        RECONNECT = "reconnect"

    provider = models.CharField(max_length=16, choices=Provider.choices)
    user = models.ForeignKey(
        User, null=True, blank=True, on_delete=models.CASCADE, related_name="connections"
    )
    workspace = models.ForeignKey(
        Workspace, null=True, blank=True, on_delete=models.CASCADE, related_name="connections"
    )
    created_by = models.ForeignKey(User, null=True, on_delete=models.SET_NULL, related_name="+")
    # Who the account is at the provider: an email address, a GitHub login.
    account = models.CharField(max_length=200)
    scopes = models.JSONField(default=list)
    access_ciphertext = models.TextField()
    refresh_ciphertext = models.TextField(blank=True)
    expires_at = models.DateTimeField(null=True, blank=True)
    status = models.CharField(max_length=12, choices=Status.choices, default=Status.ACTIVE)
    problem = models.TextField(blank=True)
    refreshed_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            models.CheckConstraint(
                condition=Q(user__isnull=True) ^ Q(workspace__isnull=True),
                name="connection_of_a_person_or_a_workspace",
            ),
            models.UniqueConstraint(
                fields=["provider", "user"],
                condition=Q(workspace__isnull=True),
                name="one_personal_connection_per_provider",
            ),
            models.UniqueConstraint(
                fields=["provider", "workspace"],
                condition=Q(user__isnull=True),
                name="one_workspace_connection_per_provider",
            ),
        ]


class OAuthFlow(BaseModel):
    """An authorization USER started at PROVIDER (for WORKSPACE, or for themselves), until the
    provider sends them back: the STATE it must return (stored as a hash) and the PKCE
    verifier, encrypted. Used once; stale after ``EXPIRES_AT``."""

    provider = models.CharField(max_length=16, choices=Provider.choices)
    user = models.ForeignKey(User, on_delete=models.CASCADE, related_name="+")
    workspace = models.ForeignKey(
        Workspace, null=True, blank=True, on_delete=models.CASCADE, related_name="+"
    )
    state_hash = models.CharField(max_length=64, unique=True)
    verifier_ciphertext = models.TextField()
    expires_at = models.DateTimeField()


class ToolSource(BaseModel):
    """An outside MCP server (Streamable HTTP at URL) or HTTP API (base URL) a workspace's admins
    added; its functions become tools of the agents granted them (``SourceGrant``).

    The auth header's value is one of the workspace's encrypted credentials. An MCP server's
    ``tools/list`` is imported into FUNCTIONS; an HTTP API's one function is a request whose
    METHODS and PATHS (glob patterns) are limited to those listed."""

    class Kind(models.TextChoices):
        MCP = "mcp", "MCP server"
        HTTP = "http", "HTTP API"

    workspace = models.ForeignKey(Workspace, on_delete=models.CASCADE, related_name="tool_sources")
    created_by = models.ForeignKey(User, null=True, on_delete=models.SET_NULL, related_name="+")
    kind = models.CharField(max_length=8, choices=Kind.choices)
    # Lowercase letters, digits and underscores: the prefix of its tools' names.
    name = models.CharField(max_length=32)
    description = models.TextField(blank=True)
    url = models.URLField(max_length=500)
    credential = models.ForeignKey(
        Credential, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    auth_header = models.CharField(max_length=64, default="Authorization", blank=True)
    # A prefix put before the credential's value in the header ("Bearer ").
    auth_scheme = models.CharField(max_length=32, default="Bearer", blank=True)
    methods = models.JSONField(default=list)
    paths = models.JSONField(default=list)
    # [{"name", "description", "input_schema", "risk"}], as last imported.
    functions = models.JSONField(default=list)
    imported_at = models.DateTimeField(null=True, blank=True)
    problem = models.TextField(blank=True)
    timeout_seconds = models.PositiveIntegerField(default=30)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["workspace", "name"], name="unique_tool_source_name")
        ]


class SourceGrant(BaseModel):
    """AGENT may call FUNCTION of SOURCE (GAL: a right per agent × connection × function)."""

    agent = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="source_grants")
    source = models.ForeignKey(ToolSource, on_delete=models.CASCADE, related_name="grants")
    function = models.CharField(max_length=128)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["agent", "source", "function"], name="one_grant_per_source_function"
            )
        ]


class TelegramBot(BaseModel):
    """A workspace's Telegram bot (API-3), set by one of its admins: its token encrypted at rest
    (never shown again), who the bot is at Telegram (checked with ``getMe`` when saved), and how
    its updates arrive. With WEBHOOK_SECRET_HASH set, Telegram posts them to our webhook with the
    secret in ``X-Telegram-Bot-Api-Secret-Token`` (we keep its hash); without, ``telegram_poll``
    asks for them (``getUpdates``). UPDATE_OFFSET is one past the last update handled: an update
    below it is never handled again, however it comes back."""

    workspace = models.OneToOneField(
        Workspace, on_delete=models.CASCADE, related_name="telegram_bot"
    )
    created_by = models.ForeignKey(User, null=True, on_delete=models.SET_NULL, related_name="+")
    token_ciphertext = models.TextField()
    telegram_id = models.BigIntegerField()
    username = models.CharField(max_length=64)
    name = models.CharField(max_length=128, blank=True)
    webhook_secret_hash = models.CharField(max_length=64, blank=True)
    update_offset = models.BigIntegerField(default=0)
    problem = models.TextField(blank=True)


class TelegramLink(BaseModel):
    """A conversation linked to one Telegram chat through its workspace's bot. Made by a person
    who can read the conversation (CREATED_BY), pending until the code it showed them is sent to
    the bot in the chat (stored hashed, used once, stale after CODE_EXPIRES_AT); then bound to
    CHAT_ID. One chat per conversation, one conversation per chat of a bot. Messages from the
    chat are posted on behalf of CREATED_BY, and only while they can still read the
    conversation: the chat can never reach further than the person who linked it."""

    bot = models.ForeignKey(TelegramBot, on_delete=models.CASCADE, related_name="links")
    conversation = models.OneToOneField(
        Conversation, on_delete=models.CASCADE, related_name="telegram_link"
    )
    created_by = models.ForeignKey(User, on_delete=models.CASCADE, related_name="+")
    code_hash = models.CharField(max_length=64, null=True, blank=True, unique=True)
    code_expires_at = models.DateTimeField(null=True, blank=True)
    chat_id = models.BigIntegerField(null=True, blank=True)
    chat_title = models.CharField(max_length=256, blank=True)
    linked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["bot", "chat_id"],
                condition=Q(chat_id__isnull=False),
                name="one_conversation_per_telegram_chat",
            )
        ]


class TelegramSend(BaseModel):
    """One message of a linked conversation to send to its chat (``sendMessage``): made once per
    message and link (the unique pair), sent by a job that takes the row under a lock; SENT_AT
    set in the same transaction as the send. A failed send waits until NEXT_ATTEMPT_AT and is
    tried again, up to ``MAX_ATTEMPTS``; unlinking deletes what was not sent. The message edited or
    deleted here after it was sent: the row is pending again until the chat's copy
    (TELEGRAM_MESSAGE_ID) is edited or deleted the same way."""

    class Status(models.TextChoices):
        PENDING = "pending"
        SENT = "sent"
        FAILED = "failed"  # given up on
        DELETED = "deleted"  # deleted here: deleted in the chat too, or never sent

    link = models.ForeignKey(TelegramLink, on_delete=models.CASCADE, related_name="sends")
    message = models.ForeignKey(Message, on_delete=models.CASCADE, related_name="+")
    status = models.CharField(max_length=8, choices=Status.choices, default=Status.PENDING)
    attempts = models.PositiveIntegerField(default=0)
    next_attempt_at = models.DateTimeField()
    sent_at = models.DateTimeField(null=True, blank=True)
    telegram_message_id = models.BigIntegerField(null=True, blank=True)
    # A text past Telegram's limit goes in parts: the ids of those after the first, in order.
    part_message_ids = models.JSONField(default=list, blank=True)
    problem = models.TextField(blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["link", "message"], name="one_telegram_send_per_message"
            )
        ]
        indexes = [
            models.Index(
                fields=["next_attempt_at"],
                condition=Q(status="pending"),
                name="telegram_sends_due",
            )
        ]
