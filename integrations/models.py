"""Outside systems a workspace's agents act on (INT-1…3, TOOL-1):

- ``Connection``: a Google or GitHub account someone connected over OAuth, its tokens encrypted;
- ``OAuthFlow``: an authorization started and not yet come back (its state and PKCE verifier);
- ``ToolSource``: an outside MCP server or HTTP API a workspace's admins added as tools;
- ``SourceGrant``: one right of an agent over one function of a source.
"""

from django.db import models
from django.db.models import Q

from agents.models import Agent
from agntchat.core.models import BaseModel
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
