"""What agents remember (MEM-1…3): their own memory items, the family layer a workspace's
agents share, the workspace's knowledge (its artifacts), and conversation summaries.

One rule guards every read: an item learned in a conversation is recalled only where everyone
present could see that conversation (``recallable_in``), and only in its own workspace.
"""

import logging
import re
import time
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from datetime import timedelta

from django.conf import settings
from django.db import connection, transaction
from django.db.models import Exists, OuterRef, Q, Subquery, Value
from django.utils import timezone

from agents.models import Agent
from agntchat.core import presence, search
from agntchat.core.compiled import compiled_objects, compiled_rows
from agntchat.core.exceptions import AppError
from agntchat.core.limits import count_held
from artifacts.models import Artifact
from conversations.models import Conversation, Message, Participant, Task
from conversations.tasks import create_task
from work.models import ConversationSummary, MemoryItem
from workspaces.models import Membership, Workspace

log = logging.getLogger(__name__)


MAX_CONTENT = 2000
OWN_PER_TURN = 12  # the agent's own items loaded with every turn
FAMILY_PER_TURN = 5
KNOWLEDGE_PER_TURN = 3
# Decay (MEM-3): strength halves every HALF_LIFE of disuse; below FLOOR an item is archived.
HALF_LIFE = timedelta(days=30)
FLOOR = 0.1
FAMILY_CAP = 500  # live family items per workspace, after consolidation
# Live pinned family items per workspace: pinned ones never decay nor fall to the cap above,
# and every agent of the workspace may be given them.
FAMILY_PINNED_CAP = 100
# Live items an agent holds (its own and those it shared): past it the agent, or its owner,
# forgets one first. Decay keeps a living agent well below it; a runaway loop stops here.
AGENT_CAP = 5000
SUMMARY_AFTER = 60  # messages beyond the last summary before a conversation is summarised again
SUMMARY_WAIT = timedelta(hours=1)  # for a summary asked of an agent, before writing one here
SUMMARY_CHARS = 4000
TRANSCRIPT_CHARS = 16_000  # of messages in a summary task (its instructions' limit is 20,000)
# --- who may see what -----------------------------------------------------------------------


def audience(conversation: Conversation | None, workspace_id):
    """The people who can see where a turn happens: for a channel (or work outside any
    conversation) the workspace's members; otherwise the conversation's people."""
    if conversation is None or conversation.kind == Conversation.Kind.CHANNEL:
        return Membership.objects.filter(workspace_id=workspace_id).values("user_id")
    return Participant.objects.filter(conversation=conversation, user__isnull=False).values(
        "user_id"
    )


def recallable_in(
    rows, conversation: Conversation | None, workspace_id, source="source_conversation"
):
    """ROWS (memory items; artifacts with SOURCE="conversation") that may be shown where a
    turn happens: of this workspace, and from no conversation, this one, a channel, or a
    conversation that every person who can see this one takes part in."""
    in_source = Participant.objects.filter(
        conversation_id=OuterRef(OuterRef(f"{source}_id")), user__isnull=False
    ).values("user_id")
    outsider = audience(conversation, workspace_id).exclude(user_id__in=Subquery(in_source))
    here = Q(**{f"{source}_id": conversation.id}) if conversation is not None else Q(pk__in=[])
    # Artifacts are of a workspace through their conversation; memory items directly.
    workspace = "conversation__workspace_id" if source == "conversation" else "workspace_id"
    return rows.filter(**{workspace: workspace_id}).filter(
        Q(**{f"{source}__isnull": True})
        | here
        | Q(**{f"{source}__kind": Conversation.Kind.CHANNEL})
        | ~Exists(outsider)
    )


# --- records ----------------------------------------------------------------------------------


def remember(
    agent: Agent,
    workspace_id,
    content: str,
    *,
    conversation: Conversation | None = None,
    message: Message | None = None,
    family: bool = False,
    pinned: bool = False,
    user=None,
) -> MemoryItem:
    content = (content or "").strip()
    if not content or len(content) > MAX_CONTENT:
        raise AppError(
            f"A memory is 1 to {MAX_CONTENT} characters.",
            code="invalid",
            fields={"content": "Empty or too long."},
        )
    with transaction.atomic():
        _check_agent_room(agent)
        if family and pinned:
            _check_pinned_room(workspace_id)
        return MemoryItem.objects.create(
            agent=agent,
            workspace_id=workspace_id,
            scope=MemoryItem.Scope.FAMILY if family else MemoryItem.Scope.AGENT,
            content=content,
            source_conversation=conversation,
            source_message=message,
            pinned=pinned,
            created_by_user=user,
        )


def _check_room(key: str, items, cap: int, refusal: AppError) -> None:
    """Refuse one more of ITEMS past CAP (counted under a lock of KEY: core.limits)."""
    if count_held(key, items) >= cap:
        raise refusal


def _check_agent_room(agent: Agent) -> None:
    _check_room(
        f"memory:{agent.pk}",
        MemoryItem.objects.filter(agent=agent, archived_at__isnull=True),
        AGENT_CAP,
        AppError(
            f"{agent.name} holds {AGENT_CAP:,} memories, the most it keeps: forget one first.",
            code="memory_limit",
            status=409,
        ),
    )


def _check_pinned_room(workspace_id) -> None:
    """Pinned family items never decay nor fall to FAMILY_CAP, so they have a cap of their own."""
    _check_room(
        f"family-pinned:{workspace_id}",
        MemoryItem.objects.filter(
            workspace_id=workspace_id,
            scope=MemoryItem.Scope.FAMILY,
            pinned=True,
            archived_at__isnull=True,
        ),
        FAMILY_PINNED_CAP,
        AppError(
            f"This workspace has {FAMILY_PINNED_CAP} pinned shared memories, the most it keeps: "
            "unpin or forget one first, or share this one unpinned.",
            code="pinned_limit",
            status=409,
        ),
    )


def live_items(agent: Agent, conversation, workspace_id, family: bool):
    """The items AGENT may recall here: its own, and with FAMILY the workspace's shared ones."""
    mine = Q(agent=agent, scope=MemoryItem.Scope.AGENT)
    scope = mine | Q(scope=MemoryItem.Scope.FAMILY) if family else mine
    items = MemoryItem.objects.filter(scope, archived_at__isnull=True)
    return recallable_in(items, conversation, workspace_id)


def recall(agent: Agent, query: str, conversation, workspace_id, limit: int = 10, family=True):
    """Items matching QUERY (any of its words, ranked; stronger and pinned first on a tie).
    Recalling an item is using it: its strength is restored."""
    found = list(
        search.matching(
            live_items(agent, conversation, workspace_id, family),
            search.vector("content"),
            search.any_word_query(query),
        ).order_by("-rank", "-pinned", "-strength", "-created_at")[:limit]
    )
    used([item.id for item in found])
    return found


def listed(items, q: str = ""):
    """ITEMS as people list them: matching any of Q's significant words, best match first (all
    of them without Q); pinned and stronger first (and in one order, for paging)."""
    order = ["-pinned", "-strength", "-created_at", "-id"]
    if q.strip():
        items = search.matching(items, search.vector("content"), search.any_word_query(q))
        order.insert(0, "-rank")
    return items.order_by(*order)


def used(ids) -> None:
    if ids:
        MemoryItem.objects.filter(pk__in=ids).update(strength=1.0, last_used_at=timezone.now())


def forget(item: MemoryItem, reason: str = "forgotten") -> MemoryItem:
    """Archive ITEM: no longer recalled, still listed for its owner (never silently deleted)."""
    if item.archived_at is None:
        item.archived_at = timezone.now()
        item.archived_reason = reason
        item.save(update_fields=["archived_at", "archived_reason"])
    return item


def update_item(item: MemoryItem, *, content: str | None = None, pinned: bool | None = None):
    if content is not None:
        content = content.strip()
        if not content or len(content) > MAX_CONTENT:
            raise AppError(
                f"A memory is 1 to {MAX_CONTENT} characters.",
                code="invalid",
                fields={"content": "Empty or too long."},
            )
        item.content = content
    with transaction.atomic():
        if pinned is not None:
            newly_pinned = pinned and not item.pinned and item.archived_at is None
            if newly_pinned and item.scope == MemoryItem.Scope.FAMILY:
                _check_pinned_room(item.workspace_id)
            item.pinned = pinned
        item.save(update_fields=["content", "pinned"])
    return item


# --- what a turn is given (MEM-1, MEM-2) -------------------------------------------------------

# Background sources run beside the turn's own reads, each on its own connection, under the
# time budget; a source that misses it is skipped (and the directives say so).
_background = ThreadPoolExecutor(settings.MEMORY_THREADS, thread_name_prefix="memory")


def _in_background(job, *args):
    def run():
        try:
            with transaction.atomic():
                with connection.cursor() as cursor:
                    # A query still running past the budget is stopped by PostgreSQL too.
                    cursor.execute(
                        "SELECT set_config('statement_timeout', %s, true)",
                        [str(int(settings.MEMORY_BUDGET_MS) + 50)],
                    )
                return job(*args)
        finally:
            connection.close()  # this thread's own connection; an idle one would linger

    return _background.submit(run)


def _place(conversation_id, kind):
    """A stand-in for the conversation a turn happens in, for a compiled read: what
    ``recallable_in`` reads of it is its id and whether it is a channel."""
    return Conversation(id=conversation_id, kind=kind) if kind else None


def _shape(conversation) -> str | None:
    """What of a turn's place changes the form of its reads' SQL."""
    if conversation is None:
        return None
    return "channel" if conversation.kind == Conversation.Kind.CHANNEL else "direct"


def _place_values(conversation) -> dict:
    return {"conversation_id": conversation.id} if conversation is not None else {}


def family_notes(agent: Agent, conversation, workspace_id, text: str) -> list[str]:
    words = search.any_word_text(text)
    if words is None:
        return []
    kind = _shape(conversation)

    def build(workspace_id, words, conversation_id=None):
        family = recallable_in(
            MemoryItem.objects.filter(scope=MemoryItem.Scope.FAMILY, archived_at__isnull=True),
            _place(conversation_id, kind),
            workspace_id,
        )
        return (
            search.matching(family, search.vector("content"), search.raw_query(words))
            .select_related("agent")
            .order_by("-rank", "-strength")[:FAMILY_PER_TURN]
        )

    rows = compiled_objects(
        ("turn_family", kind), build, workspace_id=workspace_id, words=words,
        **_place_values(conversation),
    )  # fmt: skip
    return [f"- ({item.agent.name}) {item.content}" for item in rows]


def knowledge(agent: Agent, conversation, workspace_id, text: str) -> list[str]:
    """The workspace's artifacts that bear on TEXT, where everyone here may read them."""
    words = search.any_word_text(text)
    if words is None:
        return []
    kind = _shape(conversation)

    def build(workspace_id, words, conversation_id=None):
        current = Artifact.objects.filter(pk=OuterRef("pk")).values("versions__content")
        readable = recallable_in(
            Artifact.objects.all(), _place(conversation_id, kind), workspace_id,
            source="conversation",
        ).annotate(
            current_content=Subquery(
                current.filter(versions__number=OuterRef("current_version"))[:1]
            )
        )  # fmt: skip
        return search.matching(
            readable, search.vector(title="A", current_content="B"), search.raw_query(words)
        ).order_by("-rank", "-created_at")[:KNOWLEDGE_PER_TURN]

    rows = compiled_objects(
        ("turn_knowledge", kind), build, workspace_id=workspace_id, words=words,
        **_place_values(conversation),
    )  # fmt: skip
    out = []
    for artifact in rows:
        excerpt = " ".join((artifact.current_content or "").split())[:300]
        out.append(f"- “{artifact.title}” (artifact {artifact.id}): {excerpt}")
    return out


def _turn_facts(conversation, workspace_id) -> tuple[str, bool, bool]:
    """In one read: the conversation's summary ("" if none), and whether the workspace has
    anything for the background sources to look through (family items; artifacts)."""
    kind = _shape(conversation)

    def build(workspace_id, conversation_id=None):
        summary = ConversationSummary.objects.filter(conversation_id=conversation_id)
        family = MemoryItem.objects.filter(
            workspace_id=workspace_id, scope=MemoryItem.Scope.FAMILY, archived_at__isnull=True
        )
        return (
            Workspace.objects.filter(pk=workspace_id)
            .annotate(
                summary=Subquery(summary.values("text")[:1]) if kind else Value(""),
                has_family=Exists(family),
                has_knowledge=Exists(
                    Artifact.objects.filter(conversation__workspace_id=workspace_id)
                ),
            )
            .values_list("summary", "has_family", "has_knowledge")
        )

    rows = compiled_rows(
        ("turn_facts", kind), build, workspace_id=workspace_id, **_place_values(conversation)
    )
    summary, has_family, has_knowledge = rows[0] if rows else ("", False, False)
    return summary or "", has_family, has_knowledge


def _own_items(agent: Agent, conversation, workspace_id) -> list[MemoryItem]:
    kind = _shape(conversation)

    def build(agent_id, workspace_id, conversation_id=None):
        return live_items(
            Agent(id=agent_id), _place(conversation_id, kind), workspace_id, family=False
        ).order_by("-pinned", "-strength", "-last_used_at")[:OWN_PER_TURN]

    return compiled_objects(
        ("turn_own_memory", kind), build, agent_id=agent.id, workspace_id=workspace_id,
        **_place_values(conversation),
    )  # fmt: skip


# The background sources, by name (tests swap one for a slow one).
BACKGROUND = {"family": family_notes, "knowledge": knowledge}


def covered(content: str, summary_words: set[str]) -> bool:
    """Whether a summary already says this: nearly all its significant words are in it."""
    mine = search.content_words(content)
    return bool(mine) and len(mine & summary_words) / len(mine) >= 0.8


def turn_context(
    agent: Agent, conversation, workspace_id, text: str, batch: dict | None = None
) -> tuple[str, dict]:
    """The memory section of a turn's volatile block, and a record of what was loaded and
    what missed the time budget. Stable block untouched (RUN-4). BATCH: a dict shared by the
    turns of one claim, so that what depends only on the conversation is read once for them."""
    started = time.monotonic()
    budget = settings.MEMORY_BUDGET_MS / 1000
    key = (conversation.id if conversation is not None else None, workspace_id)
    if batch is not None and key in batch:
        summary, has_family, has_knowledge, own = batch[key]
    else:
        summary, has_family, has_knowledge = _turn_facts(conversation, workspace_id)
        own = _own_items(agent, conversation, workspace_id)
        if batch is not None:
            batch[key] = summary, has_family, has_knowledge, own
    # A source with nothing to look through, or a text with no word to look for, is not asked.
    wanted = {"family": has_family, "knowledge": has_knowledge}
    searchable = search.any_word_text(text) is not None
    pending = {
        name: _in_background(job, agent, conversation, workspace_id, text)
        for name, job in BACKGROUND.items()
        if searchable and wanted.get(name, True)
    }
    if summary:
        said = search.content_words(summary)
        own = [item for item in own if not covered(item.content, said)]
    found, skipped = {}, []
    for name, future in pending.items():
        try:
            found[name] = future.result(timeout=max(0.0, budget - (time.monotonic() - started)))
        except FutureTimeout:
            future.cancel()
            skipped.append(name)
        except Exception:  # a source that fails is skipped too, and logged
            log.exception("memory source %s failed", name)
            skipped.append(name)
    parts = []
    if summary:
        parts.append("# Earlier in this conversation (summary)\n" + summary)
    if own:
        parts.append("# What you remember\n" + "\n".join(f"- {i.content}" for i in own))
    if found.get("family"):
        parts.append("# What your workspace's agents know\n" + "\n".join(found["family"]))
    if found.get("knowledge"):
        parts.append("# From the workspace's documents\n" + "\n".join(found["knowledge"]))
    record = {"memories": [str(i.id) for i in own], "skipped": skipped}
    return "\n\n".join(parts), record


# --- upkeep (MEM-3), as schedules ---------------------------------------------------------------


def decay(now=None) -> int:
    """Lower every unpinned live item's strength by its disuse; archive those below the floor.
    Returns how many were archived."""
    now = now or timezone.now()
    archived = 0
    items = MemoryItem.objects.filter(archived_at__isnull=True, pinned=False)
    for item in items.only("id", "last_used_at", "strength").iterator():
        idle = max((now - item.last_used_at) / HALF_LIFE, 0)
        strength = 0.5**idle
        if strength < FLOOR:
            MemoryItem.objects.filter(pk=item.pk).update(
                strength=strength, archived_at=now, archived_reason="decayed"
            )
            archived += 1
        elif abs(strength - item.strength) > 1e-6:
            MemoryItem.objects.filter(pk=item.pk).update(strength=strength)
    return archived


def consolidate_family(now=None) -> int:
    """Per workspace: near-duplicate family items merge into the strongest (the others are
    archived as merged), and beyond FAMILY_CAP the weakest are archived. Returns how many."""
    now = now or timezone.now()
    archived = 0
    workspaces = (
        MemoryItem.objects.filter(scope=MemoryItem.Scope.FAMILY, archived_at__isnull=True)
        .values_list("workspace_id", flat=True)
        .distinct()
    )
    for workspace_id in list(workspaces):
        items = list(
            MemoryItem.objects.filter(
                workspace_id=workspace_id, scope=MemoryItem.Scope.FAMILY, archived_at__isnull=True
            ).order_by("-pinned", "-strength", "-last_used_at", "created_at")
        )
        kept: list[tuple[MemoryItem, set]] = []
        merged = []
        for item in items:
            said = search.content_words(item.content)
            if any(_similar(said, other) for _, other in kept):
                merged.append(item.pk)
            else:
                kept.append((item, said))
        over = [item.pk for item, _ in kept[FAMILY_CAP:] if not item.pinned]
        for ids, reason in ((merged, "merged"), (over, "over cap")):
            if ids:
                archived += MemoryItem.objects.filter(pk__in=ids).update(
                    archived_at=now, archived_reason=reason
                )
    return archived


def _similar(a: set, b: set) -> bool:
    return bool(a and b) and len(a & b) / len(a | b) >= 0.8


def summarise_conversations(now=None) -> int:
    """Conversations with SUMMARY_AFTER messages beyond their summary get a fresh one (MEM-3):
    written by one of its agents through its own backend, as a task, when one is online (the
    next run takes the task's result); else, or when that task failed or took longer than
    SUMMARY_WAIT, an extractive one (the most telling sentences, with who said them). Returns
    how many summaries were written."""
    now = now or timezone.now()
    done = 0
    last = ConversationSummary.objects.filter(conversation_id=OuterRef("pk"))
    texts = Message.objects.filter(kind=Message.Kind.TEXT, held_at__isnull=True)
    due = Conversation.objects.annotate(through=Subquery(last.values("through")[:1]))
    for conversation in due.iterator():
        newer = texts.filter(conversation=conversation)
        if conversation.through is not None:
            newer = newer.filter(created_at__gt=conversation.through)
        if newer.count() < SUMMARY_AFTER:
            continue
        summary = ConversationSummary.objects.filter(conversation=conversation).first()
        task = summary.task if summary is not None else None
        if task is not None and not task.is_terminal and now - task.created_at < SUMMARY_WAIT:
            continue  # its agent is still writing it
        rows = texts.filter(conversation=conversation).select_related("author_user", "author_agent")
        if task is not None and task.status == Task.Status.COMPLETED and task.result.get("text"):
            covered_rows = list(rows.filter(created_at__lte=task.created_at).order_by("created_at"))
            text = task.result["text"].strip()[:SUMMARY_CHARS]
        else:
            covered_rows = list(rows.order_by("created_at"))
            writer = None if task is not None else _online_agent(conversation)
            if writer is not None:
                _ask_for_summary(writer, conversation, summary, covered_rows)
                continue
            text = extractive_summary(covered_rows)
        ConversationSummary.objects.update_or_create(
            conversation=conversation,
            defaults={
                "text": text,
                "through": covered_rows[-1].created_at,
                "message_count": len(covered_rows),
                "task": None,
            },
        )
        done += 1
    return done


def _online_agent(conversation: Conversation) -> Agent | None:
    """An agent taking part in CONVERSATION with a live connection (the first by name), of an
    owner who may read the conversation: its summary task holds the transcript, and a task
    nobody gave is its agent's owner's to see (tasks_visible_to)."""
    agents = list(
        Agent.objects.filter(
            participations__conversation=conversation,
            owner_id__in=audience(conversation, conversation.workspace_id),
        ).order_by("name", "id")
    )
    live = presence.online([a.id for a in agents]) if agents else {}
    return next((a for a in agents if live[a.id]), None)


def _ask_for_summary(agent: Agent, conversation: Conversation, summary, rows) -> None:
    """A task for AGENT's backend: summarise ROWS (the newest that fit), building on SUMMARY."""
    lines, size = [], 0
    for m in reversed(rows):
        line = f"{_author(m)}: {' '.join(m.body.split())[:1000]}"
        size += len(line) + 1
        if size > TRANSCRIPT_CHARS:
            break
        lines.append(line)
    earlier = summary.text if summary is not None and summary.text else "(none)"
    instructions = (
        f"Summarise the conversation “{conversation.title or conversation.kind}” for the turns "
        "of its agents that come later: who decided what, what is open, facts worth keeping. "
        "At most 12 short bullet points; reply with the summary only.\n\n"
        f"Summary so far:\n{earlier[:SUMMARY_CHARS]}\n\nMessages since (oldest first):\n"
        + "\n".join(reversed(lines))
    )
    # Given by nobody and outside the conversation: only AGENT's owner sees it (tasks_visible_to),
    # and its result is not posted in the conversation.
    task = create_task(None, conversation.workspace, agent, instructions)
    ConversationSummary.objects.update_or_create(conversation=conversation, defaults={"task": task})


def _author(message: Message) -> str:
    return message.author.label if message.author else "someone"


def extractive_summary(messages, sentences: int = 12) -> str:
    """The sentences that carry the conversation's most frequent words, in their order."""
    counts: dict[str, int] = {}
    for m in messages:
        for w in search.content_words(m.body):
            counts[w] = counts.get(w, 0) + 1
    scored = []
    for index, m in enumerate(messages):
        author = _author(m)
        for sentence in re.split(r"(?<=[.!?])\s+", m.body.strip()):
            said = search.content_words(sentence)
            if len(said) >= 3:
                score = sum(counts[w] for w in said) / len(said) ** 0.5
                scored.append((score, index, f"{author}: {sentence[:300]}"))
    best = sorted(sorted(scored, reverse=True)[:sentences], key=lambda s: s[1])
    return "\n".join(f"- {text}" for _, _, text in best)
