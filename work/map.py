"""The work map (MAP-1): how the work of a workspace connects, as nodes and edges.

Nodes are agents, tasks, conversations, side threads and artifacts; edges say who works on or
handed off a task, where it was asked and where it works, which task waits on which (a task asked
inside another task's own conversation is work that one handed off), where a side thread hangs
and what produced an artifact. Everything comes through the access helpers: a person sees on the
map only what they may read elsewhere, and an edge only between two nodes they see.
"""

from datetime import timedelta

from django.db.models import Exists, F, OuterRef, Prefetch, Q, Subquery
from django.db.models.functions import Substr
from django.urls import reverse
from django.utils import timezone

from agents.access import agents_visible_in
from agents.exceptions import AgentNotFound
from agents.models import Agent
from agntchat.core.text import clipped
from artifacts.access import artifacts_visible_to
from conversations.access import conversations_visible_to
from conversations.models import Conversation, Message, Participant
from conversations.tasks import tasks_visible_to

# The time windows the map offers; "all" has no cutoff.
WINDOWS = {
    "24h": timedelta(hours=24),
    "7d": timedelta(days=7),
    "30d": timedelta(days=30),
    "all": None,
}
DEFAULT_WINDOW = "7d"
# The newest this many of each kind: a graph much larger than this is unreadable anyway.
MAX_PER_KIND = 300


def _label(text: str, limit: int = 48) -> str:
    return clipped(" ".join((text or "").split()), limit)


class _Graph:
    def __init__(self):
        self.nodes: dict[str, dict] = {}
        self.edges: dict[str, dict] = {}

    def node(self, key: str, **data) -> None:
        self.nodes.setdefault(key, {"id": key, **data})

    def edge(self, source: str, target: str, kind: str) -> None:
        key = f"{kind}:{source}>{target}"
        self.edges.setdefault(key, {"id": key, "source": source, "target": target, "kind": kind})

    def result(self, *, truncated: bool) -> dict:
        # Only edges whose two ends are on the map (the other end may be hidden or filtered).
        edges = [
            e
            for e in self.edges.values()
            if e["source"] in self.nodes and e["target"] in self.nodes
        ]
        return {"nodes": list(self.nodes.values()), "edges": edges, "truncated": truncated}


def work_map(user, workspace, *, agent_id=None, window: str = DEFAULT_WINDOW, now=None) -> dict:
    """The map of WORKSPACE as USER may see it: ``{"nodes", "edges", "truncated"}``.

    AGENT_ID narrows it to one agent's work (tasks it works on or handed off, conversations and
    threads it takes part in, artifacts it made or that are in those); an agent that does not
    appear in the workspace is not found. WINDOW (a key of WINDOWS) keeps what was created or
    active since then."""
    agent = None
    if agent_id is not None:
        agent = agents_visible_in(workspace.id).filter(pk=agent_id).first()
        if agent is None:
            raise AgentNotFound()
    cutoff = WINDOWS[window]
    since = None if cutoff is None else (now or timezone.now()) - cutoff
    conversations = conversations_visible_to(user).filter(workspace_id=workspace.id)

    tasks, more_tasks = _newest(_tasks(user, workspace, agent, since), "-created_at")
    artifacts, more_artifacts = _newest(_artifacts(user, workspace, agent, since), "-created_at")
    active, more_active = _newest(
        _active_conversations(conversations, agent, since).values_list("pk", flat=True),
        F("last_message_at").desc(nulls_last=True),
        "-created_at",
    )
    # The active conversations, and every one a task or artifact on the map points to, where the
    # person may read it.
    wanted = set(active) | {a.conversation_id for a in artifacts}
    for task in tasks:
        wanted |= {task.conversation_id, task.work_conversation_id}
    # A thread's first words tell it from its siblings (they share titles like "Thread in
    # general"); read in the same query, from the thread itself, which the person may read.
    first_words = Message.objects.filter(
        conversation=OuterRef("pk"),
        kind=Message.Kind.TEXT,
        held_at__isnull=True,
        deleted_at__isnull=True,
    ).order_by("created_at", "id")
    shown = (
        conversations.filter(pk__in=wanted - {None})
        .annotate(first_words=Subquery(first_words.values(words=Substr("body", 1, 80))[:1]))
        .select_related("parent_message")
        .prefetch_related(Prefetch("participants", queryset=_drawn_participants()))
    )

    ws = workspace.id
    graph = _Graph()
    for conversation in shown:
        _add_conversation(graph, ws, conversation)
    for task in tasks:
        _add_task(graph, ws, task)
    # A task asked in another task's own conversation is work that task handed off: it waits on it.
    by_work_conversation = {t.work_conversation_id: t for t in tasks if t.work_conversation_id}
    for task in tasks:
        parent = by_work_conversation.get(task.conversation_id)
        if parent is not None and parent.id != task.id:
            graph.edge(f"task:{parent.id}", f"task:{task.id}", "waits_on")
    for artifact in artifacts:
        _add_artifact(graph, ws, artifact, by_work_conversation)
    if agent is not None:
        _add_agent(graph, ws, agent)
    return graph.result(truncated=more_tasks or more_artifacts or more_active)


def _drawn_participants():
    """The participants the map uses: agents (drawn, with an edge) and the people of what is not
    a channel (its name when it has no title). A channel's people are left out: everyone who
    ever posted in it, once per channel."""
    return Participant.objects.filter(
        Q(agent__isnull=False) | ~Q(conversation__kind=Conversation.Kind.CHANNEL)
    ).select_related("user", "agent")


def _newest(queryset, *order) -> tuple[list, bool]:
    """The first MAX_PER_KIND rows in ORDER, and whether there were more."""
    rows = list(queryset.order_by(*order)[: MAX_PER_KIND + 1])
    return rows[:MAX_PER_KIND], len(rows) > MAX_PER_KIND


def _tasks(user, workspace, agent, since):
    tasks = tasks_visible_to(user).filter(workspace_id=workspace.id)
    if since is not None:
        tasks = tasks.filter(Q(created_at__gte=since) | Q(finished_at__gte=since))
    if agent is not None:
        tasks = tasks.filter(Q(agent=agent) | Q(created_by_agent=agent))
    return tasks.select_related("agent", "created_by_agent", "created_by_user")


def _artifacts(user, workspace, agent, since):
    artifacts = artifacts_visible_to(user).filter(conversation__workspace_id=workspace.id)
    if since is not None:
        artifacts = artifacts.filter(updated_at__gte=since)
    if agent is not None:
        in_its_conversation = Participant.objects.filter(
            conversation_id=OuterRef("conversation_id"), agent=agent
        )
        artifacts = artifacts.filter(Q(created_by_agent=agent) | Exists(in_its_conversation))
    return artifacts.select_related("created_by_agent", "created_by_user")


def _active_conversations(conversations, agent, since):
    """Conversations created or written in since SINCE (those AGENT takes part in); a task's own
    conversation comes with its task."""
    active = conversations.exclude(kind=Conversation.Kind.TASK)
    if since is not None:
        active = active.filter(Q(last_message_at__gte=since) | Q(created_at__gte=since))
    if agent is not None:
        taking_part = Participant.objects.filter(conversation_id=OuterRef("pk"), agent=agent)
        active = active.filter(Exists(taking_part))
    return active


def _add_agent(graph: _Graph, ws, agent: Agent) -> None:
    graph.node(
        f"agent:{agent.id}",
        kind="agent",
        label=agent.name,
        detail=f"@{agent.handle}" + (f" · {agent.role}" if agent.role else ""),
        url=reverse("agent", args=[ws, agent.id]),
        created_at=agent.created_at,
    )


def _conversation_label(conversation: Conversation) -> str:
    if conversation.kind == Conversation.Kind.CHANNEL:
        return "#" + conversation.title
    if conversation.title:
        return _label(conversation.title)
    names = [p.agent.name if p.agent_id else p.user.label for p in conversation.participants.all()]
    return _label(", ".join(sorted(names)) or conversation.kind)


def _add_conversation(graph: _Graph, ws, conversation: Conversation) -> None:
    thread = conversation.kind == Conversation.Kind.THREAD
    key = f"conversation:{conversation.id}"
    label = _conversation_label(conversation)
    # A thread is named by its first words, its title (who, or where) going to the details (its
    # status shows there already).
    first_words = _label(conversation.first_words or "", 40)
    graph.node(
        key,
        kind="thread" if thread else "conversation",
        label=f"“{first_words}”" if thread and first_words else label,
        detail=label if thread else f"{Conversation.Kind(conversation.kind).label} conversation",
        status=conversation.thread_status or None,
        url=reverse("conversation", args=[ws, conversation.id]),
        created_at=conversation.created_at,
    )
    if thread and conversation.parent_message_id:
        graph.edge(key, f"conversation:{conversation.parent_message.conversation_id}", "thread_of")
    for participant in conversation.participants.all():
        if participant.agent_id:
            _add_agent(graph, ws, participant.agent)
            graph.edge(f"agent:{participant.agent_id}", key, "takes_part")


def _creator(thing) -> str:
    if thing.created_by_agent_id:
        return thing.created_by_agent.name
    if thing.created_by_user_id:
        return thing.created_by_user.label
    return ""


def _add_task(graph: _Graph, ws, task) -> None:
    key = f"task:{task.id}"
    graph.node(
        key,
        kind="task",
        label=_label(task.instructions),
        detail=task.instructions[:500],
        status=task.status,
        by=_creator(task),
        agent_id=task.agent_id,
        url=reverse("task", args=[ws, task.id]),
        created_at=task.created_at,
    )
    _add_agent(graph, ws, task.agent)
    graph.edge(f"agent:{task.agent_id}", key, "works_on")
    if task.created_by_agent_id and task.created_by_agent_id != task.agent_id:
        _add_agent(graph, ws, task.created_by_agent)
        graph.edge(f"agent:{task.created_by_agent_id}", key, "handed_off")
    if task.conversation_id:
        graph.edge(key, f"conversation:{task.conversation_id}", "asked_in")
    if task.work_conversation_id:
        graph.edge(key, f"conversation:{task.work_conversation_id}", "works_in")


def _add_artifact(graph: _Graph, ws, artifact, by_work_conversation: dict) -> None:
    key = f"artifact:{artifact.id}"
    graph.node(
        key,
        kind="artifact",
        label=_label(artifact.title),
        detail=f"{artifact.kind} · version {artifact.current_version}",
        by=_creator(artifact),
        url=reverse("artifact", args=[ws, artifact.id]),
        created_at=artifact.created_at,
    )
    graph.edge(f"conversation:{artifact.conversation_id}", key, "contains")
    if artifact.created_by_agent_id:
        _add_agent(graph, ws, artifact.created_by_agent)
        graph.edge(f"agent:{artifact.created_by_agent_id}", key, "made")
    task = by_work_conversation.get(artifact.conversation_id)
    if task is not None:
        graph.edge(f"task:{task.id}", key, "produced")
