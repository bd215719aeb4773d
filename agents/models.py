"""Agents as identities: model configuration, where they appear, keys and session tokens."""

from django.db import models

from agntchat.core.models import BaseModel
from workspaces.models import Credential, User, Workspace

# How long one turn (a backend call for one work item) may run before the bridge stops it.
DEFAULT_TURN_TIME_LIMIT = 10 * 60


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
    personality = models.TextField(blank=True)
    # Past it the bridge kills the turn (a hung CLI or model call) and reports it failed (RUN-2).
    turn_time_limit_seconds = models.PositiveIntegerField(default=DEFAULT_TURN_TIME_LIMIT)

    class Runtime(models.TextChoices):
        LOCAL = "local", "On my machine"
        HOSTED = "hosted", "On agntchat's hosts"

    # Where it runs is independent of where it appears (AGT-3, AGT-4). Host placement itself
    # arrives with hosting; switching back to local will clear it (AGT-5).
    runtime = models.CharField(max_length=10, choices=Runtime.choices, default=Runtime.LOCAL)
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


class CredentialGrant(BaseModel):
    """A workspace manager's leave for one agent to use one of the workspace's credentials.

    A credential is handed to an agent with its work only through a grant, and only while the
    agent's owner manages the workspace too: whoever runs the agent can read what it is given.
    """

    credential = models.ForeignKey(Credential, on_delete=models.CASCADE, related_name="grants")
    agent = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="credential_grants")
    granted_by = models.ForeignKey(
        User, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["credential", "agent"], name="one_grant_per_agent")
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


class PersonalityRevision(BaseModel):
    """Every version of an agent's personality document, with who wrote it (RUN-6)."""

    agent = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="personality_revisions")
    text = models.TextField()
    author_user = models.ForeignKey(
        User, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    author_agent = models.ForeignKey(
        Agent, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    forced = models.BooleanField(default=False)
