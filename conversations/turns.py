"""Who speaks next (TURN-1), the loop guard (TURN-2) and the done signal (TURN-3).

The turn policy is a separate, ordered process:
1. agents @mentioned in the message, in the order they are mentioned;
2. a plain single-domain question: the best-matching specialist, then the generalists;
3. a multi-domain request: the generalists first, then the matching specialists;
4. otherwise (people only) the conversation's fallback order, so someone always answers.

Domains are the agents' declared capabilities; a message's domains are the capabilities whose
words appear in it. The classification is deterministic and stored with its explanation. Turns
are a sequential queue: only the agent holding the turn gets a delivery; acking that delivery
(after answering, or without answering: a pass) hands the turn on.
"""

import functools
import re

from django.db import connection, transaction
from django.db.models import F
from django.utils import timezone

from agents.access import agents_visible_in
from agents.models import Agent
from agntchat.core.compiled import compiled_insert, compiled_objects
from agntchat.core.events import publish_live
from agntchat.core.exceptions import AppError
from conversations import caps, deliveries, live
from conversations.models import Conversation, Delivery, Message, Participant, TurnDecision

GENERALIST_WORDS = {"general", "generalist"}
WORD = re.compile(r"[a-z0-9][a-z0-9+#.-]*")
# Not after a letter, digit or @ (an address: bob@example.com), nor a slash (a link:
# https://example.social/@rex names nobody here).
MENTION = re.compile(r"(?<![\w@/])@([A-Za-z0-9][\w.-]*)")


STEM = 5  # letters two words share to match: "research" ~ "researching"


def words(text: str) -> list[str]:
    return WORD.findall(text.lower())


class MessageWords(frozenset):
    """A message's distinct words, indexed by stem: matching a capability looks its words up
    instead of comparing each with every word of a long message (seconds per post)."""

    @functools.cached_property
    def by_stem(self) -> dict[str, list[str]]:
        index = {}
        for word in self:
            if len(word) >= STEM:
                index.setdefault(word[:STEM], []).append(word)
        return index


def message_words(text: str) -> MessageWords:
    return MessageWords(words(text))


def capability_hits(capability: str, said: MessageWords) -> list[str]:
    """Message words that match a capability: the same word, or sharing a stem of 5+ letters
    ("research" ~ "researching", "finance" ~ "financial"). Deterministic, no model involved."""
    hits = set()
    for part in words(capability):
        if part in said:
            hits.add(part)
        if len(part) >= STEM:
            hits.update(said.by_stem.get(part[:STEM], ()))
    return sorted(hits)


def is_generalist(agent) -> bool:
    return bool(GENERALIST_WORDS & set(words(agent.role))) or any(
        c.lower() in GENERALIST_WORDS for c in agent.capabilities
    )


def mentioned(text: str, agents) -> list:
    """Agents named by @handle or @Name, in the order they first appear. A handle names its
    agents before any name does: an agent called "nova" never takes @nova from the agent whose
    handle it is. Handles are unique per owner only, so one may name several agents."""
    by_handle, by_name = {}, {}
    for agent in agents:
        by_handle.setdefault(agent.handle.lower(), []).append(agent)
        by_name.setdefault(agent.name.lower(), []).append(agent)
    found = []
    for token in MENTION.findall(text):
        key = token.lower().rstrip(".-")
        for agent in by_handle.get(key) or by_name.get(key, ()):
            if agent not in found:
                found.append(agent)
    return found


def participants_in_order(conversation: Conversation) -> tuple[list, set]:
    """Agents taking part (and appearing in the workspace), in the order they joined, and the
    ids of those that said they are done (one query for both, its SQL compiled once: this runs
    for every message)."""
    agents = compiled_objects(
        ("participants_in_order",),
        lambda conversation_id, workspace_id: (
            Agent.objects.filter(
                pk__in=agents_visible_in(workspace_id).values("pk"),
                participations__conversation_id=conversation_id,
            )
            .annotate(
                done_at=F("participations__done_at"),
                joined_at=F("participations__created_at"),
                participation_id=F("participations__id"),
            )
            .order_by("joined_at", "participation_id")
        ),
        conversation_id=conversation.id,
        workspace_id=conversation.workspace_id,
    )
    return agents, {agent.id for agent in agents if agent.done_at is not None}


def fallback_order(conversation: Conversation, agents: list) -> list:
    """The conversation's configured order first, then everyone else in joining order."""
    configured = [str(a) for a in conversation.settings.get("fallback_order", [])]
    rank = {agent_id: i for i, agent_id in enumerate(configured)}
    return sorted(agents, key=lambda a: (rank.get(str(a.id), len(rank)), agents.index(a)))


def decide(message: Message, agents: list, done: set) -> dict:
    conversation = message.conversation
    from_person = message.author_agent_id is None
    # An agent's message does not wake agents already waiting for their turn in an open queue.
    waiting = set() if from_person else waiting_agents(conversation)
    everyone = [a for a in agents if a.id != message.author_agent_id and str(a.id) not in waiting]
    named = mentioned(message.body, everyone)
    if named:
        return {
            "rule": "mention",
            "queue": [(a, "mentioned by name") for a in named],
            "explanation": {},
        }
    if conversation.is_reply_thread:
        # People's reply threads: an agent answers there only when named (issue 28).
        return {"rule": "none", "queue": [], "explanation": {}}
    awake = [a for a in everyone if a.id not in done]
    said = message_words(message.body)
    hits = {a.id: {c: capability_hits(c, said) for c in a.capabilities} for a in awake}
    hits = {agent_id: {c: w for c, w in caps.items() if w} for agent_id, caps in hits.items()}
    specialists = [a for a in awake if hits[a.id] and not is_generalist(a)]
    generalists = [a for a in awake if is_generalist(a)]
    domains = sorted({c.lower() for a in specialists for c in hits[a.id]})
    explanation = {"domains": domains, "matches": {a.name: hits[a.id] for a in awake if hits[a.id]}}

    def strength(agent):  # more matched capabilities, then more matched words, then joining order
        return (
            -len(hits[agent.id]),
            -sum(len(w) for w in hits[agent.id].values()),
            awake.index(agent),
        )

    specialists.sort(key=strength)
    # One domain: a single specialist covers everything the message touches. Several: no one does.
    covering = [s for s in specialists if {c.lower() for c in hits[s.id]} >= set(domains)]
    if domains and covering:
        queue = [(covering[0], f"best specialist for {', '.join(domains)}")]
        queue += [(g, "generalist after the specialist") for g in generalists]
        return {"rule": "specialist", "queue": queue, "explanation": explanation}
    if domains:
        queue = [(g, f"generalist first for {len(domains)} domains") for g in generalists]
        queue += [(s, "specialist for " + ", ".join(sorted(hits[s.id]))) for s in specialists]
        return {"rule": "generalist", "queue": queue, "explanation": explanation}
    if from_person and awake:
        first = fallback_order(conversation, awake)[0]
        return {
            "rule": "fallback",
            "queue": [(first, "fallback order: nobody matched")],
            "explanation": explanation,
        }
    return {"rule": "none", "queue": [], "explanation": explanation}


@functools.cache
def _tables() -> dict:
    """Quoted table names for the SQL written here (every post formats some)."""
    return {
        name: connection.ops.quote_name(model._meta.db_table)
        for name, model in (
            ("conversations", Conversation),
            ("deliveries", Delivery),
            ("participants", Participant),
            ("messages", Message),
            ("turns", TurnDecision),
        )
    }


# An agent's post counted against the loop guard, if it is under the cap: the check and the
# increment in one statement cannot race, and the row is locked only while it runs.
COUNT_AGENT_POST = """
UPDATE {conversations} SET agent_streak = agent_streak + 1
 WHERE id = %s AND agent_streak < %s
RETURNING agent_streak
"""
# An agent's answer to a person's message, which the streak does not count (TURN-2): the answer
# replies to a person's message that was delivered to this agent, whose delivery it has not
# acked yet, and which it has not answered before. Marking the delivery answered in the same
# statement makes that one answer per delivery, however many posts race: an agent cannot dodge
# the guard by replying to old messages, and the posts the streak skips are never more than the
# person's messages the agent was given. Returns the streak as it is (the answer's row locks
# only the delivery).
ANSWER_PERSON = """
WITH answered AS (
    UPDATE {deliveries} d SET answered_at = %s
      FROM {messages} m
     WHERE d.agent_id = %s AND d.message_id = %s AND d.acked_at IS NULL
       AND d.answered_at IS NULL AND m.id = d.message_id AND m.author_user_id IS NOT NULL
    RETURNING d.id
)
SELECT agent_streak FROM {conversations} WHERE id = %s AND EXISTS (SELECT FROM answered)
"""
HELD, CAPPED, COUNTED = "held", "capped", "counted"


def count_post(conversation: Conversation, agent=None, reply_to: Message | None = None) -> str:
    """Count AGENT's post against the loop guard, before it is stored (TURN-2): COUNTED;
    CAPPED, counted and reaching the cap (stored and shown, but it wakes nobody); or HELD, past
    the cap (stored, shown and delivered to nobody until a person speaks). A held post is
    stored under the conversation's lock and counted again (post_message): a person's post may
    have reset the streak in between.

    An answer to a person's message (REPLY_TO; see ANSWER_PERSON for which answers are) is not
    counted and never held: COUNTED, or CAPPED if agents reached the cap since that person
    spoke (shown, but it wakes nobody)."""
    cap = caps.cap_for(conversation)
    with connection.cursor() as cursor:
        if agent is not None and reply_to is not None and reply_to.author_user_id is not None:
            cursor.execute(
                ANSWER_PERSON.format(**_tables()),
                [timezone.now(), agent.pk, reply_to.pk, conversation.pk],
            )
            answered = cursor.fetchone()
            if answered is not None:
                conversation.agent_streak = answered[0]
                return CAPPED if answered[0] >= cap else COUNTED
        cursor.execute(COUNT_AGENT_POST.format(**_tables()), [conversation.pk, cap])
        counted = cursor.fetchone()
    if counted is None:
        return HELD
    conversation.agent_streak = counted[0]
    return CAPPED if counted[0] >= cap else COUNTED


def lock(conversation: Conversation) -> None:
    """Lock the conversation's row until the end of the current transaction."""
    Conversation.objects.select_for_update().filter(pk=conversation.pk).exists()


def check_room_to_hold(conversation: Conversation) -> None:
    """Refuse an agent's post the loop guard would hold once MAX_HELD are held already. Call
    under the conversation's lock (``lock``), which every held post takes: none races it."""
    held = Message.objects.filter(conversation=conversation, held_at__isnull=False)[:MAX_HELD]
    if held.count() >= MAX_HELD:
        raise AppError(
            f"{MAX_HELD} agent messages are already waiting here for a person to speak: "
            "wait for a person before posting again.",
            code="loop_guard_held",
            status=409,
        )


# The end of a post's last statement, after the inserts of its rows (settle_post; written as a
# THEN of core.compiled.compiled_insert): stamp the conversation's time. A person's post also
# resets the agent streak, wakes the agents that said they were done, and returns the streak as
# it was (locked, so no post races it) and whether posts are held.
SETTLE_BY_PERSON = """
, woken AS (
    UPDATE {participants} SET done_at = NULL
     WHERE conversation_id = %s AND done_at IS NOT NULL
)
UPDATE {conversations} c SET last_message_at = %s, agent_streak = 0
  FROM (SELECT agent_streak FROM {conversations} WHERE id = %s FOR UPDATE) before
 WHERE c.id = %s
RETURNING before.agent_streak,
          EXISTS (SELECT FROM {messages} WHERE conversation_id = %s AND held_at IS NOT NULL)
"""
SETTLE_BY_AGENT = "UPDATE {conversations} SET last_message_at = %s WHERE id = %s RETURNING 0, false"
# The posts the loop guard held, let through, oldest first and at most MAX_HELD: they are
# announced in the person's own request (more, left from before the bound, wait for the next
# person's post). Its own statement, after the streak's reset has committed or under its lock:
# an agent's post held meanwhile, under that lock, is seen here. The outer held_at test makes a
# row released by a concurrent post count once.
RELEASE_HELD = """
UPDATE {messages} SET held_at = NULL
 WHERE held_at IS NOT NULL AND id IN (
       SELECT id FROM {messages} WHERE conversation_id = %s AND held_at IS NOT NULL
        ORDER BY created_at, id LIMIT %s)
RETURNING *
"""
# Posts the loop guard holds in one conversation at most. Each waits for a person, whose post
# lets them through in its own request: unbounded, an agent could store thousands and make that
# post slow and flood every browser with them (probe F6). Past it, an agent's post is refused.
MAX_HELD = 20


def settle_post(conversation: Conversation, message: Message, rows, *, by_person: bool) -> list:
    """Store MESSAGE with its ROWS (its turn decision, its deliveries) and, in the same
    statement, stamp the conversation's ``last_message_at``. A person's message (BY_PERSON) also
    resets the agent streak, wakes the agents that said they were done (TURN-3), and releases
    the posts the loop guard held (returned, oldest first).

    The statement locks the conversation row: it is last in a post's transaction (only what
    needs the message stored, side threads and a delegated task, comes after it), and a plain
    post runs it on its own, without a transaction (post_message)."""

    def settle():  # called once the message's created_at is set
        if by_person:
            pk = conversation.pk
            return SETTLE_BY_PERSON.format(**_tables()), [pk, message.created_at, pk, pk, pk]
        return SETTLE_BY_AGENT.format(**_tables()), [message.created_at, conversation.pk]

    ((streak_before, held),) = compiled_insert(message, *rows, then=settle)
    # Held posts exist while the streak is up; and after a crash between this statement and
    # the release, until the next person's post.
    return release_held(conversation) if streak_before or held else []


def release_held(conversation: Conversation) -> list[Message]:
    """Let through the posts the loop guard held (TURN-2), oldest first, at most MAX_HELD."""
    sql = RELEASE_HELD.format(**_tables())
    released = sorted(
        Message.objects.raw(sql, [conversation.pk, MAX_HELD]), key=lambda m: (m.created_at, m.id)
    )
    for message in released:
        message.conversation = conversation
    return released


def start_turns(
    message: Message, conversation: Conversation, *, capped: bool = False
) -> tuple[TurnDecision | None, list]:
    """The turn decision for MESSAGE (to be stored with it: settle_post) and who gets the turn
    now. CAPPED: the message reached the loop guard's cap (count_post), and wakes nobody."""
    if capped:
        announce_capped(conversation)
        return None, []
    agents, done = participants_in_order(conversation)
    if message.author_agent_id is None:
        done = set()  # a person speaking wakes every agent that said it was done (settle_post)
    decided = decide(message, agents, done)
    if not decided["queue"]:
        return None, []
    # A mention or delegation is something new for the agent: it is no longer "done".
    woken_done = [a.id for a, _ in decided["queue"] if a.id in done]
    if woken_done:
        Participant.objects.filter(conversation=conversation, agent_id__in=woken_done).update(
            done_at=None
        )
    decision = TurnDecision(
        conversation=conversation,
        message=message,
        rule=decided["rule"],
        queue=[
            {"agent_id": str(a.id), "name": a.name, "reason": reason}
            for a, reason in decided["queue"]
        ],
        explanation=decided["explanation"],
    )
    return decision, [decided["queue"][0][0].id]


# What an ack of deliveries (core.claims.ack_many's THEN) also does: most turn queues hold one
# agent, or the acking agent was the last, and then the queue is simply finished, in the ack's
# own statement (so both are written, or neither). Each acked row says whether its turn must
# still be handed on (``hand_on``) to an agent further down the queue.
FINISH_LAST_TURN = """
, finished AS (
    UPDATE {turns} t SET finished_at = %(now)s, updated_at = %(now)s
      FROM acked
     WHERE acked.holds_turn AND t.message_id = acked.message_id AND t.finished_at IS NULL
       AND t.position = jsonb_array_length(t.queue) - 1
    RETURNING t.message_id
)
SELECT acked.*, acked.holds_turn AND finished.message_id IS NULL AS hand_on
  FROM acked LEFT JOIN finished ON finished.message_id = acked.message_id
"""


def finish_last_turn() -> str:
    """FINISH_LAST_TURN, ready for ``claims.ack_many(..., then=…)``."""
    return FINISH_LAST_TURN.format(**_tables())


def hand_on(delivery_id) -> None:
    """The agent holding a turn acked its delivery, and others wait after it in the queue: give
    the turn to the next one (the ack itself finished a queue at its end)."""
    with transaction.atomic():
        delivery = Delivery.objects.select_related("message").get(pk=delivery_id)
        # The conversation's lock first, as an agent's removal takes it: who is still here is
        # read after a removal under way commits, never before it and given the turn after.
        conversation = Conversation.objects.select_for_update().get(
            pk=delivery.message.conversation_id
        )
        decision = (
            TurnDecision.objects.select_for_update()
            .filter(message_id=delivery.message_id, finished_at__isnull=True)
            .first()
        )
        if decision is None or decision.queue[decision.position]["agent_id"] != str(
            delivery.agent_id
        ):
            return
        still_here = {
            str(a)
            for a in Participant.objects.filter(
                conversation=conversation,
                agent__in=agents_visible_in(conversation.workspace_id),
                done_at__isnull=True,
            ).values_list("agent_id", flat=True)
        }
        position = decision.position + 1
        while (
            position < len(decision.queue)
            and decision.queue[position]["agent_id"] not in still_here
        ):
            # Said it is done, was taken out of the conversation, or no longer appears in its
            # workspace (it would get no delivery, and the turn would stop with it): skip it.
            position += 1
        if position >= len(decision.queue) or caps.is_capped(conversation):
            decision.finished_at = timezone.now()
            decision.save(update_fields=["finished_at", "updated_at"])
            return
        decision.position = position
        decision.save(update_fields=["position", "updated_at"])
        delivery.message.conversation = conversation
        # Held until its ack, which hands on again (or finds the queue at its end).
        deliveries.queue_for_agents(
            delivery.message, [decision.queue[position]["agent_id"]], holds_turn=True
        )


# Agents after the current position of the conversation's open turn queues (every agent post
# asks; an agent that is away leaves its queues open, so they are read in SQL, not as models).
WAITING_AGENTS = """
SELECT DISTINCT waiting.entry->>'agent_id'
  FROM {turns} d, jsonb_array_elements(d.queue) WITH ORDINALITY AS waiting(entry, place)
 WHERE d.conversation_id = %s AND d.finished_at IS NULL AND waiting.place > d.position + 1
"""


def waiting_agents(conversation: Conversation) -> set[str]:
    """Agents still waiting for their turn in an open queue: not to be woken twice."""
    with connection.cursor() as cursor:
        cursor.execute(WAITING_AGENTS.format(**_tables()), [conversation.pk])
        return {agent_id for (agent_id,) in cursor.fetchall()}


def mark_done(agent, conversation: Conversation) -> None:
    """The agent signals it is done here (TURN-3)."""
    Participant.objects.filter(conversation=conversation, agent=agent).update(
        done_at=timezone.now()
    )


def announce_capped(conversation: Conversation) -> None:
    publish_live(
        live.audience_topics(conversation),
        "conversation.capped",
        conversation_id=conversation.id,
        streak=conversation.agent_streak,
        cap=caps.cap_for(conversation),
    )


DELEGATION = re.compile(
    r"^\s*(?:/task\b\s*(?:@(?P<command_target>[\w.-]+)\s*)?(?P<command_text>.*)"
    r"|@(?P<target>[\w.-]+)[,:]?\s+please\b.*)$",
    re.S | re.I,
)


def delegation(body: str, conversation: Conversation, actor):
    """``/task [@agent] …`` or ``@agent please …`` hands work over as a real task (TASK-1):
    (agent or None for scoring, instructions), or None when the message is not a delegation."""
    match = DELEGATION.match(body or "")
    if match is None:
        return None
    visible = [
        a
        for a in agents_visible_in(conversation.workspace_id)
        if a.id != getattr(actor, "id", None)
    ]
    if match.group("target") is not None:
        named = _delegate_to(match.group("target"), conversation, visible)
        return (named, body.strip()) if named else None
    instructions = match.group("command_text").strip()
    if not instructions:
        raise AppError(
            "/task needs instructions, e.g. /task @nova summarise this thread.",
            code="invalid",
            fields={"body": "Missing task instructions."},
        )
    if match.group("command_target") is None:
        return None, instructions  # the owner is chosen by score
    named = _delegate_to(match.group("command_target"), conversation, visible)
    if named is None:
        raise AppError(
            f"No agent called @{match.group('command_target')} appears in this workspace.",
            code="agent_not_found",
            status=400,
            fields={"body": "Unknown agent."},
        )
    return named, instructions


def _delegate_to(target: str, conversation: Conversation, visible: list):
    """The one agent @TARGET hands work to, or None when none goes by it. Of several sharing
    the handle (or name), those taking part in the conversation; a task is never given to
    whichever of them the database lists first."""
    named = mentioned("@" + target, visible)
    if len(named) > 1:
        here = set(
            Participant.objects.filter(
                conversation=conversation, agent__in=[a.id for a in named]
            ).values_list("agent_id", flat=True)
        )
        named = [a for a in named if a.id in here] or named
    if len(named) > 1:
        raise AppError(
            f"Several agents called @{target} appear in this workspace: add the one you mean "
            "to this conversation, then hand it the task.",
            code="agent_ambiguous",
            status=400,
            fields={"body": "Ambiguous agent."},
        )
    return named[0] if named else None
