"""Side threads (THR-1…4): an agent pulls others aside with ``<dm target="Name">…</dm>``.

The tag is the whole mechanism: no keyword or length detection. The tag is stripped from the
visible message; a thread conversation for the author and the target(s) is opened (or reused for
the same participants and origin message) with the tagged text as its first message, and hangs
off the origin message as a card. Resolving posts the summary into the card; silence never
resolves; an idle thread becomes abandoned. The card changes, the message list does not.
"""

import re
from datetime import timedelta

from django.db import transaction
from django.utils import timezone

from agents.access import agents_visible_in
from agntchat.core.exceptions import AppError, Conflict, PermissionDenied
from conversations import actions, live
from conversations.access import conversations_visible_to
from conversations.models import Conversation, Message, Participant

DM_TAG = re.compile(r'<dm\s+target\s*=\s*"([^"<>]*)"\s*>(.*?)</dm\s*>', re.S | re.I)
ANY_DM = re.compile(r"</?dm\b", re.I)
IDLE_MINUTES = 120
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
        tags.append((names, text.strip()))
    visible = DM_TAG.sub("", body)
    if ANY_DM.search(visible):
        raise SideThreadError(
            'A <dm> tag is malformed or not closed: use <dm target="Name">…</dm>.'
        )
    return re.sub(r"\n{3,}", "\n\n", visible).strip(), tags


def resolve_targets(author, workspace_id, names: list[str]) -> list:
    """Agents the author may reach in this workspace, by name or handle; unknown names raise."""
    visible = list(agents_visible_in(workspace_id).exclude(pk=author.pk))
    found = []
    for name in names:
        key = name.lower().lstrip("@")
        match = next((a for a in visible if key in (a.name.lower(), a.handle.lower())), None)
        if match is None:
            raise SideThreadError(f"No agent called “{name}” can be reached in this workspace.")
        if match not in found:
            found.append(match)
    return found


def plan_threads(author, conversation: Conversation, body: str):
    """Check every tag before anything is written: (visible body, [(targets, text)]), or raise."""
    visible, tags = extract(body)
    return visible, [
        (resolve_targets(author, conversation.workspace_id, names), text) for names, text in tags
    ]


def open_threads(origin: Message, planned) -> list[Conversation]:
    """Open or reuse one thread per target set and post the tagged text there (inside the
    origin message's transaction)."""
    author = origin.author_agent
    threads = []
    for targets, text in planned:
        wanted = {author.id, *(t.id for t in targets)}
        thread = None
        for candidate in Conversation.objects.filter(
            parent_message=origin, kind=Conversation.Kind.THREAD
        ):
            if set(candidate.participants.values_list("agent_id", flat=True)) == wanted:
                thread = candidate
        if thread is None:
            names = ", ".join(t.name for t in targets)
            thread = Conversation.objects.create(
                workspace_id=origin.conversation.workspace_id,
                kind=Conversation.Kind.THREAD,
                title=f"{author.name} ↔ {names}",
                parent_message=origin,
                thread_status=Conversation.ThreadStatus.IN_PROGRESS,
            )
            Participant.objects.bulk_create(
                [Participant(conversation=thread, agent_id=a) for a in sorted(wanted, key=str)]
            )
        actions.post_message(author, thread, text, wake=[t.id for t in targets])
        threads.append(thread)
    return threads


def resolve_thread(actor, thread: Conversation, summary: str) -> Conversation:
    """Any participant brings the result back: the summary goes into the origin's card."""
    summary = (summary or "").strip()
    if not summary:
        raise AppError(
            "A resolution needs a summary.",
            code="invalid",
            fields={"summary": "This field may not be blank."},
        )
    if thread.kind != Conversation.Kind.THREAD:
        raise Conflict("Only a side thread can be resolved.", code="not_a_thread")
    # Agents resolve threads they take part in; people, threads they can read (those hanging
    # off a conversation they are in).
    if not conversations_visible_to(actor).filter(pk=thread.pk).exists():
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
