"""Agents: identity, model configuration, where they appear, keys and session tokens."""

from django.db import models

from agntchat.core.claims import Claimable
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


class Task(Claimable, BaseModel):
    """A unit of work for one agent (TASK-1), claimed like every other kind of work (MSG-6).

    The run streams events and ends with exactly one terminal result (TASK-3); once terminal,
    the status never changes again.
    """

    class Status(models.TextChoices):
        QUEUED = "queued"
        RUNNING = "running"
        COMPLETED = "completed"
        FAILED = "failed"
        CANCELLED = "cancelled"

    class Cancel(models.TextChoices):
        NONE = ""
        REQUESTED = "requested"
        CONFIRMED = "confirmed"
        UNKNOWN = "unknown"

    TERMINAL = (Status.COMPLETED, Status.FAILED, Status.CANCELLED)

    instructions = models.TextField()
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.QUEUED)
    cancel_state = models.CharField(
        max_length=10, choices=Cancel.choices, default=Cancel.NONE, blank=True
    )
    cancel_requested_at = models.DateTimeField(null=True, blank=True)
    created_by_user = models.ForeignKey(
        User, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_by_agent = models.ForeignKey(
        Agent, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    conversation = models.ForeignKey(
        "conversations.Conversation",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="tasks",
    )
    result = models.JSONField(default=dict, blank=True)
    error = models.TextField(blank=True)
    protocol_errors = models.JSONField(default=list, blank=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    event_count = models.PositiveIntegerField(default=0)
    # A task delegated in a direct message works in its own conversation (THR-5).
    work_conversation = models.ForeignKey(
        "conversations.Conversation",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
    )
    # How the owner was chosen when nobody named one (TASK-2): every candidate's parts.
    owner_scores = models.JSONField(default=dict, blank=True)

    class Meta(Claimable.Meta):
        pass

    @property
    def is_terminal(self) -> bool:
        return self.status in self.TERMINAL


class TaskEvent(BaseModel):
    """One progress event of a task run, in order."""

    task = models.ForeignKey(Task, on_delete=models.CASCADE, related_name="events")
    seq = models.PositiveIntegerField()
    data = models.JSONField(default=dict)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["task", "seq"], name="one_event_per_seq")]


class TurnUsage(BaseModel):
    """What one turn cost (RUN-8): tokens, cache, money when known, latency."""

    # Indexed with the time (below): an agent's turns are read newest first, a window at a time.
    agent = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="usage", db_index=False)
    workspace = models.ForeignKey(Workspace, on_delete=models.CASCADE, related_name="+")
    conversation = models.ForeignKey(
        "conversations.Conversation",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
    )
    task = models.ForeignKey(
        Task, null=True, blank=True, on_delete=models.SET_NULL, related_name="usage"
    )
    backend = models.CharField(max_length=20, blank=True)
    model = models.CharField(max_length=100, blank=True)
    input_tokens = models.PositiveIntegerField(default=0)
    output_tokens = models.PositiveIntegerField(default=0)
    cache_read_tokens = models.PositiveIntegerField(default=0)
    cache_write_tokens = models.PositiveIntegerField(default=0)
    cost_usd = models.DecimalField(max_digits=12, decimal_places=6, null=True, blank=True)
    latency_ms = models.PositiveIntegerField(default=0)

    class Meta:
        indexes = [models.Index(fields=["agent", "created_at"], name="usage_history")]
