"""Side threads (THR-1…4): an agent pulls others aside with ``<dm target="Name">…</dm>``.

The tag is the whole mechanism: no keyword or length detection. The tag is stripped from the
visible message; a thread conversation for the author and the target(s) is opened with the tagged
text as its first message (tags for the same targets joined into one), and hangs off the origin
message as a card. Side threads do not nest. Resolving posts the summary into the card; silence
never resolves; an idle thread becomes abandoned. The card changes, the message list does not.
"""

import re
from datetime import timedelta

from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from agents.access import agents_visible_in
from agents.models import Agent
from agntchat.core.exceptions import AppError, Conflict, PermissionDenied
from agntchat.core.text import clipped
from conversations import actions, live
from conversations.access import conversations_visible_to
from conversations.models import Conversation, Message, Participant

DM_TAG = re.compile(r'<dm\s+target\s*=\s*"([^"<>]*)"\s*>(.*?)</dm\s*>', re.S | re.I)
ANY_DM = re.compile(r"</?dm\b", re.I)
IDLE_MINUTES = 120
# Each thread wakes its targets: a post opens a few, however many tags it holds.
MAX_SIDE_THREADS_PER_POST = 3
# Agents one thread pulls aside (each is woken by it): a group, not the whole workspace.
MAX_THREAD_TARGETS = 8
DEFAULT_WORDING = (
    'To talk privately with another agent, wrap that part of your reply in <dm target="Name">…</dm>. '
    "It opens a side thread; people see a compact card instead of the text."
)


class SideThreadError(AppError):
    code = "side_thread_invalid"


def extract(body: str) -> tuple[str, list[tuple[list[str], str]]]:
    """Split BODY into the visible text and [(target names, text)]; raise on a malformed tag."""
    tags = []
    for target, text in DM_TAG.findall(body):
        names = [name.strip() for name in target.split(",") if name.strip()]
        if not names or not text.strip():
            raise SideThreadError('A <dm> tag needs target="Name" and some text inside it.')
        if len(names) > MAX_THREAD_TARGETS:
            raise SideThreadError(
                f"A side thread takes at most {MAX_THREAD_TARGETS} agents: "
                f"this <dm> tag names {len(names)}."
            )
        tags.append((names, text.strip()))
    visible = DM_TAG.sub("", body)
    if ANY_DM.search(visible):
        raise SideThreadError(
            'A <dm> tag is malformed or not closed: use <dm target="Name">…</dm>.'
        )
    return re.sub(r"\n{3,}", "\n\n", visible).strip(), tags


def reachable_agents(author, workspace_id) -> dict:
    """The agents AUTHOR may pull aside in this workspace, by lower-case handle and name: a
    handle names its agents before any name does (an agent called "nova" never takes the tag
    meant for the agent whose handle it is). Handles are unique per owner only: [agents]."""
    by_handle, by_name = {}, {}
    for agent in agents_visible_in(workspace_id).exclude(pk=author.pk):
        by_handle.setdefault(agent.handle.lower(), []).append(agent)
        by_name.setdefault(agent.name.lower(), []).append(agent)
    return {**by_name, **by_handle}


def resolve_targets(reachable: dict, names: list[str], here=frozenset()) -> list:
    """The agents NAMES stand for (by handle or name; of several sharing one, those whose ids
    are in HERE, taking part in the conversation); unknown or ambiguous names raise."""
    found = []
    for name in names:
        matches = reachable.get(name.lower().lstrip("@"), [])
        if not matches:
            raise SideThreadError(f"No agent called “{name}” can be reached in this workspace.")
        if len(matches) > 1:
            matches = [a for a in matches if a.id in here] or matches
        if len(matches) > 1:
            # Never whichever the database lists first: the text is private to the thread.
            raise SideThreadError(
                f"Several agents called “{name}” can be reached in this workspace: "
                "ask a person which one to talk to."
            )
        if matches[0] not in found:
            found.append(matches[0])
    return found


def plan_threads(author, conversation: Conversation, body: str):
    """Check every tag before anything is written: (visible body, [(targets, text)]), one entry
    per side thread, or raise. Tags for the same agents are joined into one message, so a post
    wakes each target once per thread and opens at most MAX_SIDE_THREADS_PER_POST threads."""
    if conversation.kind == Conversation.Kind.THREAD:
        # A side thread of a side thread would start its own loop guard at zero: two agents
        # answering each other with a new tag would never be stopped. People's reply
        # threads do not nest either.
        raise SideThreadError(
            "Side threads do not nest: in a thread, name the agent with @handle instead of a <dm> tag."
        )
    visible, tags = extract(body)
    reachable = reachable_agents(author, conversation.workspace_id)
    here = set(conversation.participants.values_list("agent_id", flat=True))
    joined = {}  # target ids -> (targets, texts), in the order first tagged
    for names, text in tags:
        targets = resolve_targets(reachable, names, here)
        joined.setdefault(frozenset(t.id for t in targets), (targets, []))[1].append(text)
        if len(joined) > MAX_SIDE_THREADS_PER_POST:
            raise SideThreadError(
                f"A message may open at most {MAX_SIDE_THREADS_PER_POST} side threads "
                "(one per set of targets; tags for the same agents are joined)."
            )
    return visible, [(targets, "\n\n".join(texts)) for targets, texts in joined.values()]


def fitted_title(title: str) -> str:
    """TITLE cut to what a conversation's title holds, an ellipsis marking the cut."""
    return clipped(title, Conversation._meta.get_field("title").max_length)


def open_threads(origin: Message, planned) -> list[Conversation]:
    """Open one thread per target set and post its text there, waking the targets (inside the
    origin message's transaction). The origin is new, so no thread hangs off it yet."""
    author = origin.author_agent
    opened = []
    for targets, text in planned:
        # Names of up to 80 characters: two or three fill a title.
        title = fitted_title(f"{author.name} ↔ {', '.join(t.name for t in targets)}")
        thread = Conversation.objects.create(
            workspace_id=origin.conversation.workspace_id,
            kind=Conversation.Kind.THREAD,
            title=title,
            parent_message=origin,
            thread_status=Conversation.ThreadStatus.IN_PROGRESS,
        )
        wanted = {author.id, *(t.id for t in targets)}
        Participant.objects.bulk_create(
            [Participant(conversation=thread, agent_id=a) for a in sorted(wanted, key=str)]
        )
        actions.post_message(author, thread, text, wake=[t.id for t in targets])
        opened.append(thread)
    return opened


def resolve_thread(actor, thread: Conversation, summary: str) -> Conversation:
    """Any participant (or the owner of an agent in it) brings the result back: the summary goes
    into the origin's card."""
    summary = (summary or "").strip()
    if not summary:
        raise AppError(
            "A resolution needs a summary.",
            code="invalid",
            fields={"summary": "This field may not be blank."},
        )
    # A people's reply thread has no status to change.
    if thread.kind != Conversation.Kind.THREAD or thread.is_reply_thread:
        raise Conflict("Only a side thread can be resolved.", code="not_a_thread")
    if not conversations_visible_to(actor).filter(pk=thread.pk).exists():
        raise PermissionDenied("Only a participant of the thread can resolve it.")
    # Reading the channel it hangs off is not enough: its participants resolve, and a person
    # speaks for the agents they own (the card opens for them too).
    if isinstance(actor, Agent):
        taking_part = Q(agent=actor)
    else:
        taking_part = Q(user=actor) | Q(agent__owner=actor)
    if not thread.participants.filter(taking_part).exists():
        raise PermissionDenied("Only a participant of the thread can resolve it.")
    with transaction.atomic():
        thread = Conversation.objects.select_for_update().get(pk=thread.pk)
        if thread.thread_status != Conversation.ThreadStatus.IN_PROGRESS:
            raise AppError(
                f"This thread is already {thread.thread_status}.", code="thread_closed", status=409
            )
        thread.thread_status = Conversation.ThreadStatus.RESOLVED
        thread.summary = summary[:4000]
        thread.resolved_at = timezone.now()
        thread.save(update_fields=["thread_status", "summary", "resolved_at", "updated_at"])
        live.announce_message(thread.parent_message, "message.updated")
        live.announce_conversation(thread, "conversation.updated")
    return thread


def abandon_idle_threads(now=None) -> int:
    """Threads idle past their origin conversation's limit become abandoned (no new message)."""
    now = now or timezone.now()
    count = 0
    for thread in Conversation.objects.filter(
        kind=Conversation.Kind.THREAD, thread_status=Conversation.ThreadStatus.IN_PROGRESS
    ).select_related("parent_message__conversation"):
        origin = thread.parent_message.conversation
        idle = timedelta(
            minutes=int(origin.settings.get("side_threads", {}).get("idle_minutes", IDLE_MINUTES))
        )
        if (thread.last_message_at or thread.created_at) > now - idle:
            continue
        with transaction.atomic():
            updated = Conversation.objects.filter(
                pk=thread.pk, thread_status=Conversation.ThreadStatus.IN_PROGRESS
            ).update(thread_status=Conversation.ThreadStatus.ABANDONED, updated_at=now)
            if updated:
                live.announce_message(thread.parent_message, "message.updated")
                count += 1
    return count


def wording(conversation: Conversation) -> str | None:
    """What agents are told about side threads here, or None when they are not told (THR-3)."""
    setting = conversation.settings.get("side_threads", {})
    if setting.get("enabled", True) is False:
        return None
    return setting.get("wording") or DEFAULT_WORDING
