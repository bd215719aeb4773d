"""Conversations, participants, messages, and the agents' two queues: deliveries of messages and
tasks (work asked in a conversation, or outside any), with what each turn cost."""

from django.contrib.postgres.indexes import GinIndex
from django.contrib.postgres.search import SearchVectorField
from django.db import models
from django.db.models import Q
from django.db.models.functions import Lower

from agents.models import Agent
from agntchat.core.claims import Claimable
from agntchat.core.models import BaseModel
from workspaces.models import User, Workspace


class Conversation(BaseModel):
    class Kind(models.TextChoices):
        CHANNEL = "channel"  # open to every member of the workspace
        DIRECT = "direct"  # participants only
        THREAD = "thread"  # a side thread, participants only
        TASK = "task"  # a task's own conversation, participants only
        # A session of the OpenAI-compatible front (fronts/openai.py): a person and one agent,
        # participants only, read and written in the UI like a direct conversation.
        API = "api", "API session"

    # Indexed with the kind (below): the sidebar reads a workspace's channels, not all of it.
    workspace = models.ForeignKey(
        Workspace, on_delete=models.CASCADE, related_name="conversations", db_index=False
    )
    kind = models.CharField(max_length=10, choices=Kind.choices)
    title = models.CharField(max_length=200, blank=True)
    created_by = models.ForeignKey(
        User, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    settings = models.JSONField(default=dict, blank=True)
    last_message_at = models.DateTimeField(null=True, blank=True)
    # Loop guard (TURN-2): consecutive agent messages since a person last spoke, less the
    # agents' answers to people's messages.
    agent_streak = models.PositiveIntegerField(default=0)

    # Side threads (THR-1…4): a thread hangs off the message that opened it.
    class ThreadStatus(models.TextChoices):
        IN_PROGRESS = "in_progress"
        RESOLVED = "resolved"
        ABANDONED = "abandoned"

    parent_message = models.ForeignKey(
        "Message", null=True, blank=True, on_delete=models.CASCADE, related_name="threads"
    )
    thread_status = models.CharField(max_length=12, choices=ThreadStatus.choices, blank=True)
    summary = models.TextField(blank=True)
    resolved_at = models.DateTimeField(null=True, blank=True)

    # An archived channel keeps its history, readable as before, but leaves the sidebar, takes
    # no new messages and frees its name.
    archived_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        indexes = [models.Index(fields=["workspace", "kind"], name="conversation_kind")]
        constraints = [
            # Names are stored normalised (conversations/channels.py); lower() keeps rows written
            # any other way case-insensitive too.
            models.UniqueConstraint(
                Lower("title"),
                "workspace",
                condition=Q(kind="channel", archived_at__isnull=True),
                name="channel_name_unique_in_workspace",
            )
        ]

    def __str__(self) -> str:
        return self.title or f"{self.kind} {self.id}"

    @property
    def is_reply_thread(self) -> bool:
        """People's "Reply in thread" under a message: a thread without a side thread's status
        (those open with one: conversations/threads.py)."""
        return self.kind == self.Kind.THREAD and not self.thread_status


class Participant(BaseModel):
    """A person or an agent taking part in a conversation (exactly one of the two)."""

    conversation = models.ForeignKey(
        Conversation, on_delete=models.CASCADE, related_name="participants"
    )
    user = models.ForeignKey(
        User, null=True, blank=True, on_delete=models.CASCADE, related_name="participations"
    )
    agent = models.ForeignKey(
        Agent, null=True, blank=True, on_delete=models.CASCADE, related_name="participations"
    )
    last_read_at = models.DateTimeField(null=True, blank=True)
    # An agent that said it is done is not woken here until something new happens (TURN-3).
    done_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            models.CheckConstraint(
                condition=Q(user__isnull=True) ^ Q(agent__isnull=True),
                name="participant_is_person_xor_agent",
            ),
            models.UniqueConstraint(
                fields=["conversation", "user"],
                condition=Q(user__isnull=False),
                name="person_once_per_conversation",
            ),
            models.UniqueConstraint(
                fields=["conversation", "agent"],
                condition=Q(agent__isnull=False),
                name="agent_once_per_conversation",
            ),
        ]


class Message(BaseModel):
    class Kind(models.TextChoices):
        TEXT = "text"
        NOTICE = "notice"  # a short system notice ("Nova could not answer: …")
        ACTION = "action"  # a person used a card button; goes to the card's author

    # Neither gets a lone index: every read of messages is within one conversation, served by
    # message_history (conversation, created_at, id). A lone created_at index tempts the planner
    # into walking every conversation's messages newest first, filtering out the others' (a
    # history window read past a busier conversation), and each index costs every post.
    created_at = models.DateTimeField(auto_now_add=True)
    conversation = models.ForeignKey(
        Conversation, on_delete=models.CASCADE, related_name="messages", db_index=False
    )
    author_user = models.ForeignKey(
        User, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    author_agent = models.ForeignKey(
        Agent, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    kind = models.CharField(max_length=10, choices=Kind.choices, default=Kind.TEXT)
    body = models.TextField(blank=True)
    payload = models.JSONField(default=dict, blank=True)
    reply_to = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    # Held by the loop guard (TURN-2): stored, but shown to and delivered to nobody until a
    # person speaks in the conversation.
    held_at = models.DateTimeField(null=True, blank=True)
    # The sender's own id for this post: a retried post with the same ref is the same message.
    client_ref = models.CharField(max_length=64, blank=True)
    # A person changed or removed their own message (actions.edit_message): a deleted one keeps
    # its row, as a placeholder, with its text and files no longer shown.
    edited_at = models.DateTimeField(null=True, blank=True)
    deleted_at = models.DateTimeField(null=True, blank=True)
    # Replies in its reply thread ("N replies"), counted as they are posted: no query to show it.
    reply_count = models.PositiveIntegerField(default=0)
    # People's emoji, {emoji: [{"id", "name"}, …]} in the order they reacted: written under the
    # row's lock (actions.react_message), read with the message at no extra query.
    reactions = models.JSONField(default=dict, blank=True)
    # The body's full-text vector, stored: search ranks every match, and computing each match's
    # vector at query time grows with how common the word is. A trigger (core.search's
    # vector_trigger) writes it with the body, whoever writes: no write path can leave it stale.
    search_vector = SearchVectorField(null=True, editable=False)

    class Meta:
        indexes = [
            models.Index(fields=["conversation", "created_at", "id"], name="message_history"),
            # What the loop guard holds back, released by the next person's post (rare rows:
            # without it, every person's post after an agent's read the whole conversation).
            models.Index(
                fields=["conversation", "created_at"],
                condition=Q(held_at__isnull=False),
                name="message_held",
            ),
            # Full-text search (work/search.py).
            GinIndex(fields=["search_vector"], name="message_search_vector"),
        ]
        constraints = [
            models.UniqueConstraint(
                fields=["conversation", "author_user", "author_agent", "client_ref"],
                condition=~Q(client_ref=""),
                name="one_message_per_client_ref",
                nulls_distinct=False,
            )
        ]

    @property
    def author(self):
        return self.author_user or self.author_agent

    def has_no_threads(self, empty=None) -> None:
        """Known to have no side threads (just stored without any, or a person's: only an
        agent's message opens them): tell ``threads.all()`` through the prefetch cache Django
        reads, so showing the message costs no query. EMPTY: a ``no_threads()`` result to
        share, when many messages are marked at once (each costs a queryset otherwise)."""
        self._prefetched_objects_cache = {"threads": no_threads() if empty is None else empty}


def no_threads():
    """An empty, already evaluated set of threads, as prefetch_related leaves one: read only."""
    threads = Conversation.objects.none()
    threads._result_cache, threads._prefetch_done = [], True
    return threads


class Delivery(Claimable, BaseModel):
    """One row per agent that must see a message: the agent's message queue (MSG-2)."""

    message = models.ForeignKey(Message, on_delete=models.CASCADE, related_name="deliveries")
    # This delivery is the agent's turn in a turn queue: its ack hands the turn on (TURN-1).
    # Known from the ack itself, so acks of other deliveries need no second query.
    holds_turn = models.BooleanField(default=False)
    # The agent posted its answer to this (person's) message: the one answer the loop guard
    # does not count (TURN-2, turns.ANSWER_PERSON).
    answered_at = models.DateTimeField(null=True, blank=True)

    class Meta(Claimable.Meta):
        constraints = [
            models.UniqueConstraint(fields=["agent", "message"], name="one_delivery_per_agent")
        ]


class TurnDecision(BaseModel):
    """Who answers a message, in what order, and why (TURN-1). A sequential queue: only the
    agent at ``position`` holds the turn; acking its delivery hands the turn on."""

    # Neither gets a lone index: the audit reads a conversation's turns newest first
    # (turn_history); a lone created_at index walks every conversation's turns to find them.
    created_at = models.DateTimeField(auto_now_add=True)
    conversation = models.ForeignKey(
        Conversation, on_delete=models.CASCADE, related_name="turns", db_index=False
    )
    message = models.OneToOneField(Message, on_delete=models.CASCADE, related_name="turn")
    rule = models.CharField(max_length=20)  # mention | specialist | generalist | fallback | none
    queue = models.JSONField(default=list)  # [{"agent_id", "reason"}], in order
    position = models.PositiveIntegerField(default=0)
    explanation = models.JSONField(default=dict)  # words and capabilities that matched
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        indexes = [
            models.Index(fields=["conversation", "created_at"], name="turn_history"),
            # The open turn queues of a conversation, read on every post (agents still waiting
            # are not woken twice): few rows, however many turns the conversation has had.
            models.Index(
                fields=["conversation"], condition=Q(finished_at__isnull=True), name="turn_open"
            ),
        ]


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
        Conversation, null=True, blank=True, on_delete=models.SET_NULL, related_name="tasks"
    )
    result = models.JSONField(default=dict, blank=True)
    error = models.TextField(blank=True)
    protocol_errors = models.JSONField(default=list, blank=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    event_count = models.PositiveIntegerField(default=0)
    # A task delegated in a direct message works in its own conversation (THR-5).
    work_conversation = models.ForeignKey(
        Conversation, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    # How the owner was chosen when nobody named one (TASK-2): every candidate's parts.
    owner_scores = models.JSONField(default=dict, blank=True)
    # The tools the work needs, by name: agents that have them score higher as its owner (TASK-2).
    tools = models.JSONField(default=list, blank=True)
    # The task whose run gave this one (an agent's task_create while it works on a task): a
    # chain stops at tasks.MAX_DEPTH, and a private task's sub-tasks are private too.
    parent = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    depth = models.PositiveSmallIntegerField(default=0)
    # Asked outside any conversation, seen by its agent's owner only: nobody gave it (a pulse, a
    # loop, a summary: work from the owner's private settings) or a private task did.
    private = models.BooleanField(default=False)
    # The instructions' full-text vector, stored as a message's is (Message.search_vector).
    search_vector = SearchVectorField(null=True, editable=False)

    class Meta(Claimable.Meta):
        indexes = [
            *Claimable.Meta.indexes,
            GinIndex(fields=["search_vector"], name="task_search_vector"),
        ]

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
        Conversation, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
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


def attachment_path(attachment, filename: str) -> str:
    """Where the bytes go: under the workspace and the attachment's own id, so two files of the
    same name never meet and a workspace's files can be found (or removed) together."""
    return f"attachments/{attachment.workspace_id}/{attachment.id}/{filename}"


class Attachment(BaseModel):
    """A file uploaded into a conversation (INT-4): unattached until its uploader posts the
    message it belongs to, then part of that message for good."""

    workspace = models.ForeignKey(Workspace, on_delete=models.CASCADE, related_name="+")
    conversation = models.ForeignKey(
        Conversation, on_delete=models.CASCADE, related_name="attachments"
    )
    message = models.ForeignKey(
        Message, null=True, blank=True, on_delete=models.CASCADE, related_name="attachments"
    )
    uploaded_by_user = models.ForeignKey(
        User, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    uploaded_by_agent = models.ForeignKey(
        Agent, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    file = models.FileField(upload_to=attachment_path, max_length=500)
    name = models.CharField(max_length=200)
    content_type = models.CharField(max_length=100)
    size = models.PositiveBigIntegerField()
    sha256 = models.CharField(max_length=64)

    def __str__(self) -> str:
        return self.name
