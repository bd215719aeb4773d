"""What agents do with tools: which tools each may use, standing permissions, every call made,
and the permission requests people decide (TOOL-1, TOOL-5, TOOL-6, MSG-6)."""

from django.contrib.postgres.indexes import GinIndex
from django.contrib.postgres.search import SearchVector
from django.db import models
from django.db.models import Q

from agents.models import Agent
from agntchat.core.claims import Claimable
from agntchat.core.models import BaseModel
from conversations.models import Conversation, Delivery, Message, Task
from workspaces.models import User, Workspace


class Risk(models.TextChoices):
    """How much a tool call can do, which sets its default permission (work/permissions.py)."""

    READ = "read"
    WRITE = "write"
    EXTERNAL = "external"
    DESTRUCTIVE = "destructive"


class Decision(models.TextChoices):
    ALLOW = "allow"
    ASK = "ask"
    DENY = "deny"


class ToolGrant(BaseModel):
    """An owner's change to which tools an agent may use: a platform tool taken away
    (``granted`` false) or a tool that is not granted by default given (``granted`` true).
    Without a row, an agent has exactly the platform tools."""

    agent = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="tool_grants")
    tool = models.CharField(max_length=128)
    granted = models.BooleanField()

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["agent", "tool"], name="one_grant_per_agent_tool")
        ]


class ToolPermission(BaseModel):
    """A standing permission: for an agent (its owner's), a workspace (its admins'), or an
    agent inside one workspace ("Always allow"), about one tool or a whole risk level."""

    agent = models.ForeignKey(
        Agent, null=True, blank=True, on_delete=models.CASCADE, related_name="tool_permissions"
    )
    workspace = models.ForeignKey(
        Workspace, null=True, blank=True, on_delete=models.CASCADE, related_name="tool_permissions"
    )
    tool = models.CharField(max_length=128, blank=True)
    risk = models.CharField(max_length=12, choices=Risk.choices, blank=True)
    decision = models.CharField(max_length=8, choices=Decision.choices)
    set_by = models.ForeignKey(
        User, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )

    class Meta:
        constraints = [
            models.CheckConstraint(
                condition=Q(agent__isnull=False) | Q(workspace__isnull=False),
                name="permission_has_a_scope",
            ),
            models.CheckConstraint(
                condition=(Q(tool="") & ~Q(risk="")) | (~Q(tool="") & Q(risk="")),
                name="permission_names_a_tool_or_a_risk",
            ),
            models.UniqueConstraint(
                fields=["agent", "workspace", "tool", "risk"],
                name="one_permission_per_scope",
                nulls_distinct=False,
            ),
        ]


class ToolCall(BaseModel):
    """One call an agent made to a tool, within one work item (a message delivery or a task),
    with what it gave. ``call_id`` is the bridge's id for it, the same when a redelivered turn
    makes the same call again: the call then runs once and its stored outcome is the answer."""

    class Status(models.TextChoices):
        RUNNING = "running"
        WAITING = "waiting"  # for a person's approval
        SUCCEEDED = "succeeded"
        FAILED = "failed"

    agent = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="tool_calls")
    workspace = models.ForeignKey(Workspace, on_delete=models.CASCADE, related_name="+")
    # Where it acts and is shown: the conversation of the message answered, or of the task.
    conversation = models.ForeignKey(
        Conversation, null=True, blank=True, on_delete=models.CASCADE, related_name="tool_calls"
    )
    delivery = models.ForeignKey(
        Delivery, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    message = models.ForeignKey(  # the message the turn answers (a delivery's message)
        Message, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    task = models.ForeignKey(
        Task, null=True, blank=True, on_delete=models.SET_NULL, related_name="tool_calls"
    )
    call_id = models.CharField(max_length=64)
    tool = models.CharField(max_length=128)
    arguments = models.JSONField(default=dict)
    # The same tool with the same arguments, for the repeated-failure guard (TURN-4).
    arguments_hash = models.CharField(max_length=64)
    risk = models.CharField(max_length=12, choices=Risk.choices)
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.RUNNING)
    output = models.TextField(blank=True)
    error_code = models.CharField(max_length=40, blank=True)
    error = models.TextField(blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["agent", "call_id"], name="one_tool_call_per_call_id")
        ]
        indexes = [
            models.Index(fields=["conversation", "created_at"], name="tool_calls_in_conversation"),
            models.Index(fields=["message", "agent"], name="tool_calls_of_a_turn"),
        ]


class PermissionRequest(Claimable, BaseModel):
    """A tool call waiting for a person's approval (TOOL-5). Once decided (or expired) it is the
    third kind of work an agent claims (MSG-6): its connection learns the decision through the
    same claim as messages and tasks, so a bridge offline meanwhile gets it on reconnect."""

    class Status(models.TextChoices):
        PENDING = "pending"
        APPROVED = "approved"
        DENIED = "denied"
        EXPIRED = "expired"

    # Only decided requests are claimable (core.claims reads this).
    claim_ready_sql = "q.decided_at IS NOT NULL"

    call = models.OneToOneField(ToolCall, on_delete=models.CASCADE, related_name="request")
    conversation = models.ForeignKey(
        Conversation, null=True, blank=True, on_delete=models.CASCADE, related_name="+"
    )
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.PENDING)
    expires_at = models.DateTimeField()
    decided_at = models.DateTimeField(null=True, blank=True)
    decided_by = models.ForeignKey(
        User, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    # "Always allow": the decision also wrote a standing permission.
    always = models.BooleanField(default=False)

    class Meta(Claimable.Meta):
        indexes = [
            *Claimable.Meta.indexes,
            # The expiry sweep's rows: pending ones, by when they run out.
            models.Index(
                fields=["expires_at"],
                condition=Q(status="pending"),
                name="permission_request_pending",
            ),
        ]


class MemoryItem(BaseModel):
    """Something an agent remembers (MEM-1), or, in the family layer, something the agents of a
    workspace know together (MEM-2). Learned in a conversation, it is recalled only where
    everyone present could see that conversation (work/memory.py). Forgetting and decay
    archive an item; nothing is silently deleted."""

    class Scope(models.TextChoices):
        AGENT = "agent"  # the agent's own
        FAMILY = "family"  # shared by the agents of the workspace

    agent = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="memories")
    workspace = models.ForeignKey(Workspace, on_delete=models.CASCADE, related_name="memories")
    scope = models.CharField(max_length=6, choices=Scope.choices, default=Scope.AGENT)
    content = models.TextField()
    source_conversation = models.ForeignKey(
        Conversation, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    source_message = models.ForeignKey(
        Message, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_by_user = models.ForeignKey(
        User, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    # 1.0 when learned or used; decays with time and disuse (MEM-3). Pinned items do not decay.
    strength = models.FloatField(default=1.0)
    last_used_at = models.DateTimeField(auto_now_add=True)
    pinned = models.BooleanField(default=False)
    archived_at = models.DateTimeField(null=True, blank=True)
    archived_reason = models.CharField(max_length=20, blank=True)

    class Meta:
        indexes = [
            # Recall: a full-text match over the live items of an agent or a workspace.
            GinIndex(
                SearchVector("content", config="english"),
                name="memory_content_search",
                condition=Q(archived_at__isnull=True),
            ),
            models.Index(
                fields=["agent", "-pinned", "-strength"],
                name="memory_agent_strongest",
                condition=Q(archived_at__isnull=True),
            ),
        ]


class ConversationSummary(BaseModel):
    """What a long conversation was about, kept fresh by a schedule (MEM-3): turns read it
    instead of its whole history, and agent memories it already covers are left out."""

    conversation = models.OneToOneField(
        Conversation, on_delete=models.CASCADE, related_name="memory_summary"
    )
    text = models.TextField(blank=True)  # empty until the first summary is written
    # The newest message it covers, and how many it covers.
    through = models.DateTimeField(null=True, blank=True)
    message_count = models.PositiveIntegerField(default=0)
    # The next summary, asked of an agent of the conversation as a task to its own backend.
    task = models.ForeignKey(
        Task, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    updated_at = models.DateTimeField(auto_now=True)


class Skill(BaseModel):
    """Packaged instructions an agent can load (TOOL-2…4): a ``SKILL.md`` (front matter, then a
    Markdown body) and optional text files. Layers, most specific winning on a name clash:
    the platform's (for every agent), an owner's (for all their agents), an agent's own.
    Published, a skill is listed in the instance's marketplace; an install is a copy that
    remembers where it came from (install counts)."""

    class Layer(models.TextChoices):
        PLATFORM = "platform"
        OWNER = "owner"
        AGENT = "agent"

    layer = models.CharField(max_length=8, choices=Layer.choices)
    # The person whose layer it is (for an agent's layer, the agent's owner); none for platform.
    owner = models.ForeignKey(
        User, null=True, blank=True, on_delete=models.CASCADE, related_name="skills"
    )
    agent = models.ForeignKey(
        Agent, null=True, blank=True, on_delete=models.CASCADE, related_name="skills"
    )
    name = models.CharField(max_length=64)
    description = models.CharField(max_length=1024)
    body = models.TextField()
    # The SKILL.md as given, front matter included (what an export or an install copies).
    source = models.TextField()
    # Tools it depends on (``allowed-tools``): granted when the skill is assigned to an agent.
    allowed_tools = models.JSONField(default=list)
    # Activation rule: active only for an agent holding every one of these tools.
    requires_tools = models.JSONField(default=list)
    # Other files of the package, by relative path: text only.
    files = models.JSONField(default=dict)
    source_url = models.URLField(max_length=2048, blank=True)
    published_at = models.DateTimeField(null=True, blank=True)
    installed_from = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.SET_NULL, related_name="installs"
    )

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["layer", "owner", "agent", "name"],
                name="one_skill_name_per_layer",
                nulls_distinct=False,
            ),
            models.CheckConstraint(
                condition=(
                    Q(layer="platform", owner__isnull=True, agent__isnull=True)
                    | Q(layer="owner", owner__isnull=False, agent__isnull=True)
                    | Q(layer="agent", owner__isnull=False, agent__isnull=False)
                ),
                name="skill_layer_has_its_owner",
            ),
        ]
        indexes = [
            # The marketplace's search over published skills.
            GinIndex(
                SearchVector("name", "description", "body", config="english"),
                name="skill_search",
                condition=Q(published_at__isnull=False),
            ),
        ]


class SkillRating(BaseModel):
    """One person's rating of a published skill, 1 to 5; rating again changes it."""

    skill = models.ForeignKey(Skill, on_delete=models.CASCADE, related_name="ratings")
    user = models.ForeignKey(User, on_delete=models.CASCADE, related_name="+")
    stars = models.PositiveSmallIntegerField()

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["skill", "user"], name="one_rating_per_person"),
            models.CheckConstraint(
                condition=Q(stars__gte=1, stars__lte=5), name="stars_one_to_five"
            ),
        ]


class AgentListing(BaseModel):
    """An agent in the public directory (AGT-7): a snapshot its owner published of its
    configuration, personality and own skill layer, which anyone signed in can clone into an
    agent of their own. Never keys, tokens, credentials or their grants, hosts, base URLs or
    memory: only the fields below. Republishing replaces the snapshot; unpublishing takes the
    listing out of the directory (``published_at`` empty), keeping the row so that a later
    republish keeps its address and clone count. Clones are independent agents."""

    agent = models.OneToOneField(Agent, on_delete=models.CASCADE, related_name="listing")
    name = models.CharField(max_length=80)
    handle = models.SlugField(max_length=40)
    description = models.TextField()
    role = models.CharField(max_length=200, blank=True)
    capabilities = models.JSONField(default=list, blank=True)
    personality = models.TextField(blank=True)
    backend = models.CharField(max_length=20, choices=Agent.Backend.choices)
    model = models.CharField(max_length=100, blank=True)
    turn_time_limit_seconds = models.PositiveIntegerField()
    # The agent's own skill layer as it was: [{"name", "description", "allowed_tools",
    # "requires_tools", "source" (the SKILL.md), "files" {path: text}}], copied on clone.
    skills = models.JSONField(default=list, blank=True)
    published_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        indexes = [
            # The directory's search over published listings (work/directory.py, same vector).
            GinIndex(
                SearchVector("name", "handle", "role", "description", config="english"),
                name="agent_listing_search",
                condition=Q(published_at__isnull=False),
            ),
            models.Index(
                fields=["-published_at"],
                name="agent_listing_newest",
                condition=Q(published_at__isnull=False),
            ),
        ]

    def __str__(self) -> str:
        return self.name


class AgentClone(BaseModel):
    """An agent made from a listing: who cloned it, for the listing's clone count. The clone
    itself is an ordinary agent of its new owner; deleting it deletes this row."""

    listing = models.ForeignKey(AgentListing, on_delete=models.CASCADE, related_name="clones")
    agent = models.OneToOneField(Agent, on_delete=models.CASCADE, related_name="cloned_from")
    cloned_by = models.ForeignKey(User, on_delete=models.CASCADE, related_name="+")
