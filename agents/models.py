"""Agents: identity, model configuration, where they appear, keys and session tokens."""

from django.db import models

from agntchat.core.models import BaseModel
from workspaces.models import User, Workspace


class Agent(BaseModel):
    """One identity and one work queue, wherever the agent appears (AGT-2)."""

    class Backend(models.TextChoices):
        CLAUDE_CLI = "claude_cli", "Claude Code CLI"
        CODEX_CLI = "codex_cli", "Codex CLI"
        ANTHROPIC_API = "anthropic_api", "Anthropic API"
        OPENAI_API = "openai_api", "OpenAI API"
        SCRIPTED = "scripted", "Scripted (demo)"

    class Visibility(models.TextChoices):
        ALL = "all", "Every workspace of the owner"
        PINNED = "pinned", "Only pinned workspaces"

    owner = models.ForeignKey(User, on_delete=models.CASCADE, related_name="agents")
    name = models.CharField(max_length=80)
    handle = models.SlugField(max_length=40)
    role = models.CharField(max_length=200, blank=True)
    capabilities = models.JSONField(default=list, blank=True)
    backend = models.CharField(max_length=20, choices=Backend.choices, default=Backend.CLAUDE_CLI)
    model = models.CharField(max_length=100, blank=True)
    base_url = models.URLField(blank=True)
    visibility = models.CharField(max_length=10, choices=Visibility.choices, default=Visibility.ALL)
    pinned_workspaces = models.ManyToManyField(
        Workspace, through="AgentPin", related_name="pinned_agents", blank=True
    )

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["owner", "handle"], name="unique_agent_handle_per_owner"
            )
        ]

    def __str__(self) -> str:
        return self.name

    # An authenticated agent stands where DRF and Channels expect a user.
    is_authenticated = True
    is_anonymous = False
    is_active = True

    @property
    def label(self) -> str:
        return self.name


class AgentPin(BaseModel):
    agent = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="pins")
    workspace = models.ForeignKey(Workspace, on_delete=models.CASCADE, related_name="agent_pins")

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["agent", "workspace"], name="one_pin_per_workspace")
        ]


class AgentKey(BaseModel):
    """A long-lived key (``agk_…``) valid only for exchanging into a session token."""

    agent = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="keys")
    name = models.CharField(max_length=80, blank=True)
    prefix = models.CharField(max_length=12, db_index=True)
    key_hash = models.CharField(max_length=64, unique=True)
    last_used_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)


class AgentSession(BaseModel):
    """A short-lived session token (``ags_…``): what an agent uses for everything else."""

    agent = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="sessions")
    key = models.ForeignKey(AgentKey, on_delete=models.CASCADE, related_name="sessions")
    prefix = models.CharField(max_length=12)
    token_hash = models.CharField(max_length=64, unique=True)
    expires_at = models.DateTimeField()

    class Meta:
        indexes = [models.Index(fields=["expires_at"], name="agent_session_expiry")]
