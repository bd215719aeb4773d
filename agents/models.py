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

    # Where it runs is independent of where it appears (AGT-3, AGT-4). A hosted agent is placed
    # on one host; switching back to local clears the placement entirely (AGT-5).
    runtime = models.CharField(max_length=10, choices=Runtime.choices, default=Runtime.LOCAL)
    host = models.ForeignKey(
        "Host", null=True, blank=True, on_delete=models.SET_NULL, related_name="agents"
    )
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
    """A short-lived session token (``ags_…``): what an agent uses for everything else. Opened
    with an agent key, or on a host with the agent's placement token (WS-4)."""

    agent = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="sessions")
    key = models.ForeignKey(
        AgentKey, null=True, blank=True, on_delete=models.CASCADE, related_name="sessions"
    )
    host_token = models.ForeignKey(
        "HostToken", null=True, blank=True, on_delete=models.CASCADE, related_name="sessions"
    )
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


class Host(BaseModel):
    """A machine agents' bridges run on, provisioned and managed over SSH (AGT-3, AGT-6).

    Without a workspace it is one of agntchat's shared hosts, managed by staff in the admin;
    with one, that workspace's own host, managed by its admins (WS-2)."""

    class Status(models.TextChoices):
        NEW = "new", "Not provisioned yet"
        READY = "ready", "Ready"
        UNREACHABLE = "unreachable", "Unreachable"

    name = models.CharField(max_length=80)
    workspace = models.ForeignKey(
        Workspace, null=True, blank=True, on_delete=models.CASCADE, related_name="hosts"
    )
    address = models.CharField(max_length=255)
    port = models.PositiveIntegerField(default=22)
    ssh_user = models.CharField(max_length=64, default="root")
    # The SSH private key (OpenSSH PEM), encrypted at rest like every stored credential.
    ssh_key_ciphertext = models.TextField()
    # "ssh-ed25519 AAAA…": pinned at the first connection, never replaced without a person.
    host_key = models.TextField(blank=True)
    # Each agent gets its own system user (agents of different companies side by side).
    multi_tenant = models.BooleanField(default=False)
    capacity = models.PositiveIntegerField(default=10)
    # Where the bridge and the host supervisor live on the host, and the Python that runs them.
    root = models.CharField(max_length=255, default="/opt/agntchat")
    python = models.CharField(max_length=255, default="python3")
    status = models.CharField(max_length=12, choices=Status.choices, default=Status.NEW)
    problem = models.TextField(blank=True)
    provisioned_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["workspace", "name"], name="unique_host_name")
        ]

    def __str__(self) -> str:
        return self.name


class HostToken(BaseModel):
    """A token issued to a host (``aht_…``), narrower than an agent key (WS-4).

    The host's supervisor token (no agent) opens only the host socket, where wake-ups arrive.
    A placement token (one agent) is valid only for exchanging into that agent's session while
    the agent stays placed on this host: on a multi-tenant host each agent's system user reads
    only its own, and no host token acts as an agent anywhere."""

    host = models.ForeignKey(Host, on_delete=models.CASCADE, related_name="tokens")
    agent = models.ForeignKey(
        Agent, null=True, blank=True, on_delete=models.CASCADE, related_name="host_tokens"
    )
    prefix = models.CharField(max_length=12, db_index=True)
    token_hash = models.CharField(max_length=64, unique=True)
    revoked_at = models.DateTimeField(null=True, blank=True)
    last_used_at = models.DateTimeField(null=True, blank=True)


class HostRestart(BaseModel):
    """One rolling restart of a host's bridges and what became of each (AGT-6)."""

    class Status(models.TextChoices):
        RUNNING = "running", "Running"
        DONE = "done", "Done"
        FAILED = "failed", "Failed"

    host = models.ForeignKey(Host, on_delete=models.CASCADE, related_name="restarts")
    requested_by = models.ForeignKey(
        User, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.RUNNING)
    # [{"agent": id, "name": …, "outcome": "restarted"|"timed out"|"host unreachable"|"not reached", "seconds": …}]
    report = models.JSONField(default=list, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
