"""What every workspace page shows around its content: the switcher and the sidebar.

Read-only: pages change state through the REST API or the actions, never here.
"""

from datetime import UTC, datetime
from functools import wraps

from django.contrib.auth.decorators import login_required
from django.contrib.postgres.expressions import ArraySubquery
from django.db.models import (
    BooleanField,
    DateTimeField,
    Exists,
    ExpressionWrapper,
    F,
    Func,
    IntegerField,
    OuterRef,
    Q,
    Subquery,
    Value,
)
from django.db.models.functions import Coalesce
from django.http import Http404

from agents.access import agents_visible_in, is_agent_owner
from agents.models import Agent
from agntchat.core import presence
from agntchat.core.exceptions import NotFound
from conversations.models import Conversation, Message, Participant, Task
from conversations.tasks import tasks_visible_to
from integrations.models import Connection
from workspaces.access import access_membership, workspaces_visible_to
from workspaces.models import Membership
from workspaces.notifications import unread_count

LAST_WORKSPACE = "ui.last_workspace"
EPOCH = datetime(2000, 1, 1, tzinfo=UTC)


def workspace_page(view):
    """Log in first; turn WORKSPACE_ID into the person's membership, or 404 (another tenant's
    page is simply not found). Any NotFound the view raises is a 404 page too."""

    @login_required
    @wraps(view)
    def wrapper(request, workspace_id, *args, **kwargs):
        try:
            membership = access_membership(request.user, workspace_id)
            return view(request, membership, *args, **kwargs)
        except NotFound:
            raise Http404 from None

    return wrapper


def not_found_is_404(view):
    """For endpoints outside a workspace URL: a NotFound from an access helper is a 404."""

    @login_required
    @wraps(view)
    def wrapper(request, *args, **kwargs):
        try:
            return view(request, *args, **kwargs)
        except NotFound:
            raise Http404 from None

    return wrapper


def agent_presence(agents) -> dict:
    """{agent id: online} for several agents; Redis down means "unknown", shown as offline."""
    ids = [a.id for a in agents]
    try:
        return presence.online(ids)
    except Exception:  # noqa: BLE001 - presence is decoration; the page must still render
        return dict.fromkeys(ids, False)


def conversation_label(conversation, viewer) -> str:
    """How a conversation is named in lists: #title, the other people in a DM, or its title."""
    if conversation.kind == Conversation.Kind.CHANNEL:
        return conversation.title or "untitled"
    if conversation.kind == Conversation.Kind.DIRECT and not conversation.title:
        names = [
            p.agent.name if p.agent_id else p.user.label
            for p in conversation.participants.all()
            if p.user_id != viewer.id
        ]
        return ", ".join(sorted(names)) or "Just you"
    return conversation.title or conversation.get_kind_display()


# Unread counts look at a conversation's newest messages only, this many, and say "99+" when
# all of them are unread: counting costs a row per message looked at, and a channel left unread
# for a month must not make every page load read all of it.
UNREAD_CAP = 100


def unread_label(count: int) -> str:
    """What the sidebar badge says: "" for none."""
    return "" if not count else f"{UNREAD_CAP - 1}+" if count >= UNREAD_CAP else str(count)


def _with_unread(conversations, user):
    """Annotate each conversation with `joined` and `unread`: how many of its newest UNREAD_CAP
    messages are others' since I last read it (counted only where I take part, like channels
    one has joined). The newest are a walk of the history index that stops at the cap whatever
    the planner guesses; "the unread ones, up to the cap" let it read every unread message."""
    mine = Participant.objects.filter(conversation=OuterRef("pk"), user=user)
    read_at = Subquery(mine.values("last_read_at")[:1], output_field=DateTimeField())
    is_unread = (
        Q(created_at__gt=Coalesce(OuterRef("read_at"), Value(EPOCH)))
        & Q(held_at__isnull=True)
        & ~Q(author_user=user)
    )
    newest = (
        Message.objects.filter(conversation=OuterRef("pk"))
        .order_by("-created_at", "-id")
        .annotate(is_unread=ExpressionWrapper(is_unread, output_field=BooleanField()))
        .values("is_unread")[:UNREAD_CAP]
    )
    unread_positions = Func(ArraySubquery(newest), Value(True), function="array_positions")
    return conversations.annotate(
        joined=Exists(mine),
        read_at=read_at,
        unread=Func(unread_positions, function="cardinality", output_field=IntegerField()),
    )


def listed_in_sidebar(user, workspace):
    """The live channels of WORKSPACE, and the conversations there USER takes part in (direct
    messages, side threads, task conversations, API sessions); archived channels are left out. A workspace collects others' side threads and
    direct messages by the thousand, and the sidebar is drawn on every page: the ids come from
    two index reads (channels by workspace and kind, participations by person), and the
    conversations by key. (A subset of what USER may read: the membership is checked.)"""
    channels = Conversation.objects.filter(workspace=workspace, kind=Conversation.Kind.CHANNEL)
    # Each of the person's conversations checked for the workspace by key (a scalar subquery):
    # as a join, a generic plan may choose to read the whole workspace and hash it.
    workspace_of = Conversation.objects.filter(pk=OuterRef("conversation_id")).values("workspace")
    mine = Participant.objects.filter(user=user).alias(workspace=Subquery(workspace_of[:1]))
    mine = mine.filter(workspace=workspace.id)
    ids = ArraySubquery(channels.values("pk").union(mine.values("conversation_id"), all=True))
    # id = ANY(ARRAY(…)): looked up by key, where IN (…) would leave PostgreSQL free to test
    # every conversation of the workspace against the list (and a generic plan cannot tell
    # that channels are few).
    listed = Func(
        F("pk"), ids, template="%(expressions)s)", arg_joiner=" = ANY(", output_field=BooleanField()
    )
    # People's reply threads (issue 28) open from their message, not from the sidebar.
    reply_thread = Q(kind=Conversation.Kind.THREAD, thread_status="")
    return Conversation.objects.filter(listed, archived_at__isnull=True).exclude(reply_thread)


def sidebar(user, membership: Membership, current=None) -> dict:
    workspace = membership.workspace
    listed = _with_unread(
        listed_in_sidebar(user, workspace).prefetch_related(
            "participants__user", "participants__agent"
        ),
        user,
    )
    rows = {kind: [] for kind in Conversation.Kind.values}
    for conversation in listed.order_by("title", "created_at"):
        rows[conversation.kind].append(
            {
                "id": conversation.id,
                "kind": conversation.kind,
                "label": conversation_label(conversation, user),
                "unread": unread_label(conversation.unread if conversation.joined else 0),
                "joined": conversation.joined,
                "current": current is not None and conversation.id == current.id,
                "status": conversation.thread_status,
            }
        )
    for kind in ("direct", "thread", "task", "api"):
        rows[kind].sort(key=lambda r: r["label"].lower())
    agents = list(agents_visible_in(workspace.id).select_related("owner").order_by("name"))
    online = agent_presence(agents)
    return {
        "channels": rows["channel"],
        "directs": rows["direct"],
        "threads": rows["thread"],
        "task_conversations": rows["task"],
        # Sessions of the OpenAI-compatible front (fronts/openai.py), one per token, agent, key.
        "api_sessions": rows["api"],
        "unread_cap": UNREAD_CAP,  # for the browser, which counts on from the live events
        "inbox_unread": unread_count(user),  # the Inbox badge (workspaces.notifications)
        "agents": [
            {"agent": a, "online": online[a.id], "mine": is_agent_owner(user, a)} for a in agents
        ],
        "active_tasks": tasks_visible_to(user)
        .filter(workspace=workspace, status__in=[Task.Status.QUEUED, Task.Status.RUNNING])
        .count(),
        # A revoked or expired grant is never silent: the person sees what to reconnect.
        "reconnect": Connection.objects.filter(
            Q(user=user, workspace__isnull=True) | Q(workspace=workspace),
            status=Connection.Status.RECONNECT,
        ).count(),
    }


def shell(request, membership: Membership, *, current=None, section="", **extra) -> dict:
    """The context of every workspace page: who, where, the switcher and the sidebar."""
    if request.session.get(LAST_WORKSPACE) != str(membership.workspace_id):
        request.session[LAST_WORKSPACE] = str(membership.workspace_id)
    return {
        "membership": membership,
        "workspace": membership.workspace,
        "is_manager": membership.is_manager,
        "is_owner": membership.is_owner,
        "workspaces": list(workspaces_visible_to(request.user)),
        "side": sidebar(request.user, membership, current),
        "section": section,
        **extra,
    }


def mention_targets(workspace) -> list[dict]:
    """Who the composer can @mention here: people of the workspace and the agents in it."""
    people = [
        {"kind": "person", "handle": m.user.username, "name": m.user.label}
        for m in workspace.memberships.select_related("user").order_by("user__username")
    ]
    agents = [
        {"kind": "agent", "id": str(a.id), "handle": a.handle, "name": a.name, "role": a.role}
        for a in agents_visible_in(workspace.id).order_by("name")
    ]
    return agents + people


def is_scripted(agent: Agent | None) -> bool:
    return agent is not None and agent.backend == Agent.Backend.SCRIPTED
