"""Every state change of conversations and messages. One pipeline for people and agents (MSG-1)."""

import logging
import math
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field

from django.conf import settings
from django.db import IntegrityError, connection, transaction
from django.db.models import Count, F, Q
from django.db.models.functions import Greatest
from django.utils import timezone

from agents.access import agent_appears_in, agents_visible_in
from agents.exceptions import AgentNotFound
from agents.models import Agent
from agntchat.core import throttle
from agntchat.core.compiled import compiled_insert
from agntchat.core.events import publish, publish_live, wake_agent
from agntchat.core.exceptions import Conflict
from agntchat.core.ids import as_uuid
from agntchat.core.logs import TRACE
from agntchat.core.presence import client as redis
from conversations import deliveries, files, live, mentions, relays, tasks, threads, turns
from conversations.access import access_conversation, may_configure, own_uploads
from conversations.channels import channel_name
from conversations.exceptions import (
    ChannelNameTaken,
    ConversationArchived,
    ConversationRule,
    MessageNotEditable,
    NotYourMessage,
)
from conversations.models import (
    Attachment,
    Conversation,
    Delivery,
    Message,
    Participant,
    Task,
    TurnDecision,
)
from conversations.refs import posted_under_ref
from workspaces.access import access_membership
from workspaces.exceptions import NotAllowed
from workspaces.models import Membership
from workspaces.notifications import (
    mark_conversation_notifications_read,
    redact_message_notifications,
    update_message_notifications,
)

log = logging.getLogger(__name__)

MAX_BODY = 20_000
MAX_ATTACHMENTS = 10


def _is_agent(actor) -> bool:
    return isinstance(actor, Agent)


STORED_UNIT = 64 * 1024  # what a write counts at least: a megabyte would refuse small edits


def count_stored_bytes(actor, size: int, what: str) -> None:
    """SIZE bytes more that ACTOR stores (a file, an artifact's version, a skill), counted in
    units of 64 KB against one budget per person (UPLOAD_MB_PER_HOUR / _BURST megabytes): an
    agent's count as its owner's, so a person cannot multiply it with agents. RateLimited past
    it, saying WHAT. Without it anyone who may store could fill the disk (unposted uploads wait
    a day)."""
    if actor is None:
        return
    person = actor.owner_id if _is_agent(actor) else actor.pk
    units = (1024 * 1024) // STORED_UNIT
    limit = throttle.Rate(
        "stored:64k",
        settings.UPLOAD_MB_PER_HOUR * units,
        window=3600,
        burst=settings.UPLOAD_MB_BURST * units,
    )
    throttle.limit(limit, person, what, math.ceil(size / STORED_UNIT))


def is_archived(conversation: Conversation) -> bool:
    """Archived, or a thread hanging off one: a thread is archived with the conversation it
    hangs off (one read per level, and only for threads)."""
    while conversation.archived_at is None:
        if conversation.kind != Conversation.Kind.THREAD or not conversation.parent_message_id:
            return False
        conversation = Conversation.objects.only("archived_at", "kind", "parent_message_id").get(
            messages__id=conversation.parent_message_id
        )
    return True


def count_post(actor) -> None:
    """One post more for ACTOR (a person or an agent; the system's notices are not counted):
    RateLimited once over its rate (settings *_POSTS_PER_MINUTE). One Redis round trip."""
    if actor is None:
        return
    if _is_agent(actor):
        rate = throttle.Rate(
            "posts:agent", settings.AGENT_POSTS_PER_MINUTE, burst=settings.AGENT_POSTS_BURST
        )
    else:
        rate = throttle.Rate(
            "posts:person", settings.PERSON_POSTS_PER_MINUTE, burst=settings.PERSON_POSTS_BURST
        )
    throttle.limit(rate, actor.pk, "messages")


def _participants(creator, workspace, user_ids, agent_ids) -> tuple[list[str], list[str]]:
    """The people and agents of a new conversation: those named and its creator, every one
    belonging to (or appearing in) the workspace. Agents keep the order given: that order is
    the default fallback order (TURN-1)."""
    # Ids as UUIDs' own spelling; anything that is no UUID at all stays as given, unknown below.
    user_ids = {str(as_uuid(u) or u) for u in user_ids}
    agent_order = list(dict.fromkeys(str(as_uuid(a) or a) for a in agent_ids))
    if _is_agent(creator):
        agent_order = list(dict.fromkeys([*agent_order, str(creator.id)]))
    else:
        user_ids.add(str(creator.id))
    members = {
        str(u)
        for u in Membership.objects.filter(
            workspace=workspace, user_id__in=[u for u in user_ids if as_uuid(u)]
        ).values_list("user_id", flat=True)
    }
    agents = {
        str(a)
        for a in agents_visible_in(workspace.id)
        .filter(pk__in=[a for a in agent_order if as_uuid(a)])
        .values_list("id", flat=True)
    }
    if _is_agent(creator):
        agents.add(str(creator.id))  # it takes part in what it opens
    unknown = (user_ids - members) | (set(agent_order) - agents)
    if unknown:
        raise ConversationRule(
            "Some participants are not in this workspace.", fields={"participants": sorted(unknown)}
        )
    return sorted(members), agent_order


def create_conversation(
    creator, workspace, *, kind: str, title: str = "", user_ids=(), agent_ids=()
) -> Conversation:
    """Open a conversation; every participant must belong to (or appear in) the workspace."""
    members, agents = _participants(creator, workspace, user_ids, agent_ids)
    if kind == Conversation.Kind.CHANNEL:
        title = _valid_channel_name(title)
    return _create(creator, workspace, kind, title, members, agents)


def open_direct(
    creator, workspace, *, title: str = "", user_ids=(), agent_ids=()
) -> tuple[Conversation, bool]:
    """The direct conversation of exactly the creator and those named, found or else created
    (True when created): one per set of participants, however it is asked for (REST, the page,
    an agent). A title is given only at creation."""
    members, agents = _participants(creator, workspace, user_ids, agent_ids)
    with transaction.atomic():
        # Two requests opening the same conversation at once: the second waits and finds it.
        key = f"direct:{workspace.id}:{','.join(members)}:{','.join(sorted(agents))}"
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))", [key])
        existing = _direct_of(workspace, members, agents)
        if existing is not None:
            return existing, False
        return _create(creator, workspace, Conversation.Kind.DIRECT, title, members, agents), True


def _direct_of(workspace, members: list[str], agents: list[str]) -> Conversation | None:
    """The oldest direct conversation whose participants are exactly MEMBERS and AGENTS."""
    size = len(members) + len(agents)
    named = Q(participants__user_id__in=members) | Q(participants__agent_id__in=agents)
    return (
        Conversation.objects.filter(workspace=workspace, kind=Conversation.Kind.DIRECT)
        .annotate(size=Count("participants"), named=Count("participants", filter=named))
        .filter(size=size, named=size)
        .order_by("created_at")
        .first()
    )


def _create(creator, workspace, kind: str, title: str, members, agents) -> Conversation:
    with transaction.atomic(), _channel_name_free(title):
        conversation = Conversation.objects.create(
            workspace=workspace,
            kind=kind,
            title=title,
            created_by=None if _is_agent(creator) else creator,
        )
        rows = [Participant(conversation=conversation, user_id=u) for u in members]
        rows += [Participant(conversation=conversation, agent_id=a) for a in agents]
        Participant.objects.bulk_create(rows)
        # A channel is news for every member of the workspace; anything else for its people.
        topics = (
            live.audience_topics(conversation)
            if kind == Conversation.Kind.CHANNEL
            else [f"user.{u}" for u in members]
        )
        publish_live(topics, "conversation.created", conversation_id=conversation.id)
    return conversation


def _valid_channel_name(raw: str) -> str:
    name = channel_name(raw)
    if not name:
        raise ConversationRule(
            "A channel needs a name: letters, digits, hyphens or underscores.",
            fields={"title": "Give the channel a name, for example “general”."},
        )
    return name


@contextmanager
def _channel_name_free(name: str):
    """Turn the database's refusal of a second live channel of that name (the constraint
    channel_name_unique_in_workspace, case-insensitive) into a clear 409: checked by the
    database, two people creating "#general" at once cannot both succeed."""
    try:
        with transaction.atomic():
            yield
    except IntegrityError as exc:
        constraint = getattr(getattr(exc.__cause__, "diag", None), "constraint_name", None)
        if constraint != "channel_name_unique_in_workspace":
            raise
        raise ChannelNameTaken(
            f"There is already a channel named #{name} in this workspace.",
            fields={"title": "Already taken: choose another name."},
        ) from None


def update_channel(
    user, conversation: Conversation, *, title: str | None = None, archived: bool | None = None
) -> Conversation:
    """Rename a channel (its name normalised, unique among the workspace's live channels) and/or
    archive or unarchive it. Its creator or a workspace admin may."""
    if conversation.kind != Conversation.Kind.CHANNEL:
        raise ConversationRule(
            "Only channels are renamed or archived.", fields={"kind": "Not a channel."}
        )
    if not may_configure(access_membership(user, conversation.workspace_id), conversation):
        raise NotAllowed("Only the channel's creator or a workspace admin can change it.")
    with transaction.atomic():
        conversation = Conversation.objects.select_for_update().get(pk=conversation.pk)
        changed = []
        if title is not None:
            conversation.title = _valid_channel_name(title)
            changed.append("title")
        if archived is not None and archived != (conversation.archived_at is not None):
            conversation.archived_at = timezone.now() if archived else None
            changed.append("archived_at")
        if changed:
            with _channel_name_free(conversation.title):
                conversation.save(update_fields=[*changed, "updated_at"])
            live.announce_conversation(conversation, "conversation.updated")
    return conversation


def add_agent_to_conversation(user, conversation: Conversation, agent: Agent) -> Participant:
    """A person brings an agent into a conversation they can read. The agent must appear in the
    conversation's workspace (AGT-1): an agent pinned elsewhere never joins."""
    conversation = access_conversation(user, conversation.id)
    if conversation.archived_at is not None:
        raise ConversationArchived()
    if conversation.kind != Conversation.Kind.CHANNEL:
        # A direct conversation is found again by who is in it (open_direct); side threads,
        # tasks and API sessions have the participants their purpose gives them.
        raise ConversationRule(
            "Agents are added to channels only: start a direct conversation with them instead.",
            fields={"agent": "Not in a conversation of this kind."},
        )
    if not agent_appears_in(agent, conversation.workspace_id):
        raise ConversationRule(
            f"{agent.name} does not appear in this workspace.",
            fields={"agent": "Not in this workspace."},
        )
    with transaction.atomic():
        participant, created = Participant.objects.get_or_create(
            conversation=conversation, agent=agent
        )
        if created:
            live.announce_conversation(conversation, "conversation.updated")
    return participant


def may_remove_agent(membership: Membership, conversation: Conversation, agent) -> bool:
    """Who may take an agent out of a channel: the channel's creator, a workspace admin, or the
    agent's owner (whoever added it may ask them). The action refuses by it and the page shows
    its control by it."""
    return agent.owner_id == membership.user_id or may_configure(membership, conversation)


def remove_agent_from_conversation(user, conversation: Conversation, agent_id) -> Agent:
    """Take an agent out of a channel, and return it (AgentNotFound when it does not take part).
    It stops reading the channel at once; what it was still to answer there is dropped, and a
    turn it held passes to the next agent in the queue (TURN-1). An agent whose owner left the
    workspace can still be removed: it is found among the participants, not the directory."""
    conversation = access_conversation(user, conversation.id)
    if conversation.kind != Conversation.Kind.CHANNEL:
        raise ConversationRule(
            "Agents are removed from channels only.",
            fields={"agent": "Not in a conversation of this kind."},
        )
    agent_id = as_uuid(agent_id)
    participant = agent_id and (
        Participant.objects.select_related("agent")
        .filter(conversation=conversation, agent_id=agent_id)  # (agent_id=None: the people)
        .first()
    )
    if not participant:
        raise AgentNotFound()
    membership = access_membership(user, conversation.workspace_id)
    if not may_remove_agent(membership, conversation, participant.agent):
        raise NotAllowed(
            "Only the channel's creator, a workspace admin or the agent's owner can remove it."
        )
    with transaction.atomic():
        turns.lock(conversation)  # no post decides a turn for it meanwhile
        participant.delete()
        drop_agent_deliveries(participant.agent_id, conversation=conversation)
        live.announce_conversation(conversation, "conversation.updated")
    return participant.agent


def drop_agent_deliveries(agent_id, *, conversation=None, workspace_id=None) -> int:
    """Drop what AGENT_ID was still to answer in CONVERSATION, or anywhere in WORKSPACE_ID,
    where it no longer reads: its unacked deliveries there are acked unanswered (no claim gives
    them out again, no frame acts on them), and a turn one held passes to the next agent of its
    queue (TURN-1). Returns how many were dropped. Called in the transaction that takes the
    agent out."""
    if (conversation is None) == (workspace_id is None):
        raise TypeError("drop_agent_deliveries takes a conversation or a workspace_id")
    where = (
        {"message__conversation": conversation}
        if conversation is not None
        else {"workspace_id": workspace_id}
    )
    with transaction.atomic():
        dropped = list(
            Delivery.objects.filter(agent_id=agent_id, acked_at__isnull=True, **where).values_list(
                "id", "holds_turn"
            )
        )
        Delivery.objects.filter(pk__in=[d for d, _ in dropped]).update(acked_at=timezone.now())
        for delivery_id, holds_turn in dropped:
            if holds_turn:
                turns.hand_on(delivery_id)
    return len(dropped)


def agent_left_workspaces(sender, agent: Agent, workspace_ids, owner_left: bool, **kw) -> None:
    """agents.signals: AGENT no longer appears in WORKSPACE_IDS. What it was to answer there is
    dropped instead of claimed later, and turns it held pass on. Its tasks there go on while its
    owner is a member (given, or set up by a routine, there: PRO-2); once OWNER_LEFT they are
    cancelled, saying why (a task does not wait for an agent that will not come back)."""
    reason = f"Cancelled: the owner of {agent.name} left this workspace."
    for workspace_id in workspace_ids:
        drop_agent_deliveries(agent.id, workspace_id=workspace_id)
        if not owner_left:
            continue
        unfinished = Task.objects.filter(agent=agent, workspace_id=workspace_id).exclude(
            status__in=Task.TERMINAL
        )
        for task_id in unfinished.values_list("id", flat=True):
            tasks.cancel_for_good(task_id, reason)


@dataclass
class PostPlan:
    """What a post will do, decided before anything is written (``_plan_post``)."""

    actor: object  # a person, an agent, or None for a notice
    conversation: Conversation
    fields: dict  # the message's columns
    conversational: bool  # goes through the loop guard and the turn policy
    by_person: bool
    takes_part: bool  # the author is already a participant
    guard: str  # turns.COUNTED, CAPPED or HELD
    planned_threads: list = field(default_factory=list)  # side threads the text opens
    delegation: tuple | None = None  # (agent, instructions): a task the text asks for
    attachments: list = field(default_factory=list)  # the poster's uploads it carries

    @property
    def held(self) -> bool:
        return self.guard == turns.HELD

    @property
    def single_write(self) -> bool:
        """A plain post, a person's or an agent's, writes once, in its last statement
        (settle_post), which locks the conversation row. In a transaction, that lock would be
        held until this thread, competing for the GIL with the process's others, got round to
        sending COMMIT: posts to one busy channel queued on it. Alone, the statement is its own
        transaction and the lock lasts as long as PostgreSQL runs it."""
        return (
            self.conversational
            and (self.takes_part or _is_agent(self.actor))
            and not self.held
            and self.delegation is None
            and not self.planned_threads
            and not self.attachments
            # A reply thread's post also counts itself on its origin (_count_reply).
            and not self.conversation.is_reply_thread
        )


def post_message(
    actor,
    conversation: Conversation,
    body: str,
    *,
    reply_to: Message | None = None,
    kind: str = Message.Kind.TEXT,
    payload: dict | None = None,
    client_ref: str = "",
    wake=None,
    attachments=(),
) -> Message:
    """Store a message and queue it for every agent that must see it, in one transaction;
    announce it after commit (MSG-2). The same path for a person and for an agent.

    A post carrying the CLIENT_REF of an earlier post by the same author is that same message
    (returned, not stored again): a bridge that crashed between posting and acking, or a browser
    retrying, never doubles a reply.

    WAKE, when given, is the exact list of agent ids to queue the message for (a card button
    sends its click to the card's author only); otherwise the conversation decides.

    PAYLOAD is the server's own data, never a client's unvetted: a card arrives sealed and
    rendered by artifacts (``artifacts.actions.post_card``), which builds on this pipeline.

    ATTACHMENTS: ids of files the author uploaded into this conversation (``upload_attachment``)
    and has not posted yet; the message carries them from then on (INT-4).

    In phases: validate → dedupe → plan → persist → announce."""
    # Files alone make a message too: no text needed beside them.
    body = _validate_post(conversation, body, payload or attachments, reply_to, client_ref)
    earlier = posted_under_ref(actor, conversation, client_ref) if client_ref else None
    if earlier is not None:
        if log.isEnabledFor(logging.INFO):
            _log_post("message already posted under this ref", earlier, actor, [])
        return earlier
    if is_archived(conversation):
        raise ConversationArchived()
    count_post(actor)  # a retry of an earlier post (above) is not a new one
    uploads = _own_uploads(actor, conversation, attachments)
    if uploads:
        payload = {**(payload or {}), "attachments": [files.ref_data(a) for a in uploads]}
    plan = _plan_post(actor, conversation, body, kind, payload, reply_to, client_ref, wake)
    plan.attachments = uploads
    # A ref another send of this post may store first: inside a caller's transaction, its clash
    # must not spoil that transaction (a savepoint); alone, the one statement needs none.
    alone = plan.single_write and not (client_ref and connection.in_atomic_block)
    try:
        with nullcontext() if alone else transaction.atomic():
            message, released = _persist_post(plan, wake)
            for earlier in released:
                _open_held_threads(earlier)
            if message.held_at is None:
                # ---- inbox: @mentioned people and DMs to them (workspaces.notifications) ----
                # Before the post is announced: a reader's "read" must find what it brought.
                if plan.conversational:
                    mentions.notify_post(message)
                _announce_post(message, released)
    except IntegrityError as clash:
        # The same ref sent twice at once (a bridge's retry, a browser's resend): the first
        # stored is the post, as when the second comes later.
        constraint = getattr(getattr(clash.__cause__, "diag", None), "constraint_name", None)
        if not client_ref or constraint != "one_message_per_client_ref":
            raise
        return posted_under_ref(actor, conversation, client_ref)
    if log.isEnabledFor(logging.INFO):
        _log_post(
            "message held" if message.held_at else "message posted",
            message,
            actor,
            getattr(message, "queued_for", ()),
        )
    return message


def _log_post(text: str, message: Message, actor, queued_for) -> None:
    """The post's record, traced by the message's id, or (a reply posted while a bridge's work
    item is handled) by the message it answers (core.logs)."""
    log.info(
        text,
        extra={
            "trace": TRACE.get() or str(message.id),
            "message_id": str(message.id),
            "conversation": str(message.conversation_id),
            "author": f"{'agent' if isinstance(actor, Agent) else 'user'}:{getattr(actor, 'pk', '')}",
            "queued_for": [str(agent_id) for agent_id in queued_for],
        },
    )


def _validate_post(conversation, body, payload, reply_to, client_ref) -> str:
    """The post's text, trimmed; ConversationRule names what is wrong with it otherwise."""
    body = (body or "").strip()
    if not body and not payload:
        raise ConversationRule(
            "A message needs a body.", fields={"body": "This field may not be blank."}
        )
    if len(body) > MAX_BODY:
        raise ConversationRule(
            f"A message can be at most {MAX_BODY} characters.", fields={"body": "Too long."}
        )
    if reply_to is not None and reply_to.conversation_id != conversation.id:
        raise ConversationRule(
            "A reply must be in the same conversation.",
            fields={"reply_to": "Not in this conversation."},
        )
    if len(client_ref) > 64:
        raise ConversationRule(
            "A client ref can be at most 64 characters.", fields={"ref": "Too long."}
        )
    return body


def _own_uploads(actor, conversation, attachment_ids) -> list[Attachment]:
    """The uploads a post attaches, in the order given: the author's own, in this conversation,
    not part of a message yet; ConversationRule otherwise."""
    ids = list(dict.fromkeys(str(i) for i in attachment_ids))
    if not ids:
        return []
    if len(ids) > MAX_ATTACHMENTS:
        raise ConversationRule(
            f"A message can carry at most {MAX_ATTACHMENTS} files.",
            fields={"attachments": "Too many."},
        )
    found = {str(a.id): a for a in own_uploads(actor, conversation, ids)} if actor else {}
    unknown = [i for i in ids if i not in found]
    if unknown:
        raise ConversationRule(
            "Only your own uploads to this conversation, not yet posted, can be attached.",
            fields={"attachments": unknown},
        )
    return [found[i] for i in ids]


def _attach(message: Message, uploads: list[Attachment]) -> None:
    """The uploads become the message's. Claimed only if still free: the same files posted twice
    at once are attached once, and the other post fails whole (its transaction rolls back)."""
    if not uploads:
        return
    taken = Attachment.objects.filter(pk__in=[a.pk for a in uploads], message__isnull=True).update(
        message=message
    )
    if taken != len(uploads):
        raise ConversationRule(
            "These files were attached to another message meanwhile.",
            fields={"attachments": "Already posted."},
        )


def upload_attachment(actor, conversation: Conversation, upload) -> Attachment:
    """Store a file a person or an agent uploads into a conversation they may read, to be
    attached to their next post there (INT-4). Its size and type are checked before anything is
    stored: refused, it leaves no row and no bytes behind."""
    if is_archived(conversation):
        raise ConversationArchived()
    name, content_type = files.checked_upload(upload)
    count_stored_bytes(actor, upload.size, "uploads")
    attachment = Attachment(
        workspace_id=conversation.workspace_id,
        conversation=conversation,
        uploaded_by_user=None if _is_agent(actor) else actor,
        uploaded_by_agent=actor if _is_agent(actor) else None,
        name=name,
        content_type=content_type,
        size=upload.size,
        sha256=files.sha256_of(upload),
    )
    # Stored with the type checked here, not the one the client claimed (a bucket serves it).
    upload.content_type = content_type
    attachment.file.save(name, upload, save=False)
    try:
        attachment.save(force_insert=True)
    except BaseException:
        attachment.file.delete(save=False)  # no bytes without their row
        raise
    return attachment


def _plan_post(actor, conversation, body, kind, payload, reply_to, client_ref, wake) -> PostPlan:
    """Decide what the post does: the side threads its text opens, the task it delegates, and
    where it stands with the loop guard (TURN-2). Nothing is written yet."""
    agent_author = actor if _is_agent(actor) else None
    payload = dict(payload or {})
    # Conversational messages go through the loop guard and the turn policy; notices, card
    # clicks and relayed results (explicit WAKE) do not.
    conversational = kind == Message.Kind.TEXT and wake is None
    planned_threads = []
    if agent_author is not None and kind == Message.Kind.TEXT and threads.ANY_DM.search(body):
        try:
            body, planned_threads = threads.plan_threads(agent_author, conversation, body)
        except threads.SideThreadError as exc:
            payload["dm_error"] = exc.message  # the text stays visible; nothing half-created
    by_person = agent_author is None and actor is not None
    if conversational and by_person:
        conversation.agent_streak = 0  # reset (and held posts released) by settle_post
    # An agent's post counts against the loop guard (TURN-2), unless it answers a person.
    guard = (
        turns.count_post(conversation, agent_author, reply_to)
        if conversational and agent_author
        else turns.COUNTED
    )
    return PostPlan(
        actor=actor,
        conversation=conversation,
        fields={
            "author_user": None if agent_author or actor is None else actor,
            "author_agent": agent_author,
            "kind": kind,
            "body": body,
            "payload": payload,
            "reply_to": reply_to,
            "client_ref": client_ref,
        },
        conversational=conversational,
        by_person=by_person,
        takes_part=getattr(conversation, "takes_part", False),
        guard=guard,
        planned_threads=planned_threads,
        delegation=turns.delegation(body, conversation, actor) if conversational else None,
    )


def _persist_post(plan: PostPlan, wake) -> tuple[Message, list[Message]]:
    """Write the post and what follows from it: the author joins an open channel, the message
    (held past the loop guard's cap), its turn decision and deliveries, its side threads, its
    task. Returns the message and the held messages a person's post released."""
    conversation = plan.conversation
    if plan.by_person and not plan.takes_part:
        # Posting in an open channel joins it, as in any team chat.
        Participant.objects.get_or_create(conversation=conversation, user=plan.actor)
    if plan.held:
        # Decided again under the row's lock: a person's post in between (release_held)
        # would otherwise leave this one held.
        turns.lock(conversation)
        plan.guard = turns.count_post(conversation, plan.actor)
        if plan.held:
            turns.check_room_to_hold(conversation)
    message = Message(
        conversation=conversation, held_at=timezone.now() if plan.held else None, **plan.fields
    )
    if plan.held:
        # Past the loop guard's cap: kept, but nobody sees or is woken by it until a person
        # speaks (their message releases it).
        # No conversation.capped here: the post that reached the cap announced it once.
        if plan.planned_threads:  # its side threads wait with it (_open_held_threads)
            message.payload = {
                **message.payload,
                HELD_THREADS: [
                    {"agents": [str(t.id) for t in targets], "text": text}
                    for targets, text in plan.planned_threads
                ],
            }
        compiled_insert(message)
        _attach(message, plan.attachments)
        return message, []
    rows = []  # stored with the message, in the post's last statement (settle_post)
    holds_turn = False  # a turn from the turn queue: its ack hands the turn on
    if plan.conversational and plan.delegation is None:
        decision, wake = turns.start_turns(message, conversation, capped=plan.guard == turns.CAPPED)
        rows += [decision] if decision else []
        holds_turn = True
    # Turn planning read only agents that appear in the workspace: no need to check again.
    queued = deliveries.new_deliveries(
        message, wake or [], holds_turn=holds_turn, visible=plan.conversational
    )
    message.queued_for = [delivery.agent_id for delivery in queued]  # for the post's log record
    released = turns.settle_post(
        conversation, message, rows + queued, by_person=plan.conversational and plan.by_person
    )
    _attach(message, plan.attachments)
    deliveries.wake_agents(queued)
    if conversation.is_reply_thread:
        _count_reply(message)
    # What needs the message stored: threads hang off it.
    if plan.planned_threads:
        threads.open_threads(message, plan.planned_threads)
    else:
        message.has_no_threads()
    if plan.delegation is not None:
        agent, instructions = plan.delegation
        tasks.create_task(
            plan.actor,
            conversation.workspace,
            agent,
            instructions,
            conversation=conversation,
        )
    return message, released


HELD_THREADS = "held_threads"


def _open_held_threads(message: Message) -> None:
    """A held post let through opens the side threads its text asked for (their targets still
    in the workspace), as it would have when posted."""
    held = message.payload.get(HELD_THREADS)
    if not held:
        return
    with transaction.atomic():
        ids = [agent for thread in held for agent in thread["agents"]]
        agents = {str(pk): agent for pk, agent in Agent.objects.in_bulk(ids).items()}
        planned = [
            ([agents[a] for a in thread["agents"] if a in agents], thread["text"])
            for thread in held
        ]
        message.payload = {k: v for k, v in message.payload.items() if k != HELD_THREADS}
        Message.objects.filter(pk=message.pk).update(payload=message.payload)
        threads.open_threads(message, [(targets, text) for targets, text in planned if targets])


def _announce_post(message: Message, released) -> None:
    """Tell browsers, after commit: the held posts a person's post let through, then the post
    (and any outside chat the conversation is linked to, ``conversations.relays``); and a notice when the text's side thread could not be opened."""
    for earlier in released:
        live.announce_message(earlier, "message.created")
    live.announce_message(message, "message.created")
    # Out to a linked outside chat (Telegram), after commit; nothing for an unlinked one.
    relays.relay_posted(message.conversation, [*released, message])
    if message.payload.get("dm_error"):
        post_notice(
            message.conversation,
            f"{message.author_agent.name}'s side thread was not opened: "
            f"{message.payload['dm_error']}",
            payload={"about_message_id": str(message.id)},
        )


def post_notice(conversation: Conversation, body: str, *, payload: dict | None = None) -> Message:
    """A short system notice: visible to people, never queued for agents."""
    return post_message(None, conversation, body, kind=Message.Kind.NOTICE, payload=payload)


def mark_read(user, conversation: Conversation) -> None:
    Participant.objects.filter(conversation=conversation, user=user).update(
        last_read_at=timezone.now()
    )
    # ---- inbox: what the conversation brought is read with it ----
    mark_conversation_notifications_read(user, conversation.pk)


def update_settings(user, conversation: Conversation, changes: dict) -> Conversation:
    """Change conversation settings (the rulebook, RUN-5). The conversation's creator or a
    workspace admin may; other members may not. Its reply threads take the same settings: they
    have none of their own (else the first to reply would set the rules there)."""
    if conversation.is_reply_thread:
        raise ConversationRule(
            "A reply thread follows the settings of the conversation it hangs off: change those."
        )
    if not may_configure(access_membership(user, conversation.workspace_id), conversation):
        raise NotAllowed(
            "Only the conversation's creator or a workspace admin can change its settings."
        )
    if "fallback_order" in changes:
        taking_part = Participant.objects.filter(
            conversation=conversation, agent_id__in=changes["fallback_order"]
        ).values_list("agent_id", flat=True)
        strangers = set(changes["fallback_order"]) - {str(a) for a in taking_part}
        if strangers:
            raise ConversationRule(
                "The fallback order names only agents taking part in this conversation.",
                fields={"fallback_order": f"Not taking part: {', '.join(sorted(strangers))}."},
            )
    with transaction.atomic():
        conversation = Conversation.objects.select_for_update().get(pk=conversation.pk)
        settings = dict(conversation.settings)
        for key, value in changes.items():
            if isinstance(value, dict):
                merged = {**settings.get(key, {}), **value}
                settings[key] = {k: v for k, v in merged.items() if v not in ("", None)}
            else:
                settings[key] = value
        conversation.settings = settings
        conversation.save(update_fields=["settings", "updated_at"])
        Conversation.objects.filter(
            parent_message__conversation=conversation,
            kind=Conversation.Kind.THREAD,
            thread_status="",
        ).update(settings=settings, updated_at=timezone.now())
        live.announce_conversation(conversation, "conversation.updated")
    return conversation


# ---- streaming replies: Stop and Regenerate (issue 28) ------------------------------------------


class TurnNotRunning(Conflict):
    code = "turn_not_running"
    default_message = "That turn is not running any more."


class CannotRegenerate(Conflict):
    code = "cannot_regenerate"


# How long a Stop is remembered: longer than a stopped turn takes to post what it wrote.
STOP_SECONDS = 600


def _stop_key(agent_id, message_id) -> str:
    # Per delivery, named as a reply names it: its agent, and the message it answers.
    return f"{settings.REDIS_PREFIX}:stop:{agent_id}:{message_id}"


def stop_turn(user, conversation: Conversation, work_id) -> None:
    """A person stops an agent's turn on a message of CONVERSATION (work item WORK_ID, a
    delivery): the agent's sockets are told; the one holding it stops the bridge, which posts
    what was written so far, marked stopped, and acks. Only the Stop itself is stored, in
    Redis for STOP_SECONDS: a reply is marked stopped only if one was pressed (turn_stopped)."""
    rate = throttle.Rate("stops", settings.STOPS_PER_MINUTE, burst=settings.STOPS_BURST)
    throttle.limit(rate, user.pk, "stops")
    delivery = (
        Delivery.objects.filter(pk=as_uuid(work_id), message__conversation=conversation)
        .values("agent_id", "message_id", "acked_at")
        .first()
    )
    if delivery is None or delivery["acked_at"] is not None:
        raise TurnNotRunning()
    # Before the publish: the bridge's stopped reply may come back at once.
    redis().set(_stop_key(delivery["agent_id"], delivery["message_id"]), 1, ex=STOP_SECONDS)
    # No transaction to wait for: published now (the agent socket's turn_stop).
    publish(f"agent.{delivery['agent_id']}", {"type": "turn.stop", "id": str(work_id)})


def turn_stopped(agent_id, message_id) -> bool:
    """Whether a person pressed Stop on AGENT_ID's turn on MESSAGE_ID lately (stop_turn): only
    then may its reply be blank, or marked stopped."""
    return message_id is not None and bool(redis().exists(_stop_key(agent_id, message_id)))


def regenerate_reply(user, reply: Message) -> None:
    """A new turn of REPLY's agent on the message REPLY answers: the agent's delivery of that
    message is queued again and claimed as any other. The earlier reply stays, marked
    superseded (and gives up its ref, so the new post is a new message); the new one is marked
    regenerated from it (work.consumers)."""
    if (
        reply.author_agent_id is None
        or reply.kind != Message.Kind.TEXT
        or reply.reply_to_id is None
    ):
        raise CannotRegenerate("Only an agent's reply to a message can be regenerated.")
    if reply.payload.get("superseded"):
        raise CannotRegenerate("A newer answer to that message exists: regenerate that one.")
    conversation = reply.conversation
    if is_archived(conversation):
        raise ConversationArchived()
    # An agent taken out of the conversation (or gone from its workspace) is not handed its
    # messages and history again.
    if (
        not agents_visible_in(conversation.workspace_id)
        .filter(pk=reply.author_agent_id, participations__conversation=conversation)
        .exists()
    ):
        raise CannotRegenerate("That agent no longer takes part in this conversation.")
    # Forgotten before the new turn can start: its reply is marked stopped only after a Stop of
    # its own (turn_stopped).
    redis().delete(_stop_key(reply.author_agent_id, reply.reply_to_id))
    with transaction.atomic():
        delivery = (
            Delivery.objects.select_for_update()
            .filter(agent_id=reply.author_agent_id, message_id=reply.reply_to_id)
            .first()
        )
        if delivery is None or delivery.acked_at is None:
            raise CannotRegenerate("The agent is still answering that message.")
        prompt = Message.objects.select_for_update().get(pk=reply.reply_to_id)
        if prompt.deleted_at is not None:
            raise CannotRegenerate("The message it answered was deleted.")
        # A new turn of the agent, as a post wakes one: it counts as one against the same rate.
        count_post(user)
        # A new turn: its attempts count from none (past WORK_MAX_ATTEMPTS a claim gives an item
        # up as one its bridge fails on, which a turn asked for again is not).
        Delivery.objects.filter(pk=delivery.pk).update(
            acked_at=None, claimed_by=None, claimed_at=None, lease_expires_at=None,
            answered_at=None, holds_turn=False, attempts=0, updated_at=timezone.now(),
        )  # fmt: skip
        regenerated = prompt.payload.setdefault("regenerated", {})
        regenerated[str(reply.author_agent_id)] = str(reply.id)
        prompt.save(update_fields=["payload", "updated_at"])
        reply.payload = {**reply.payload, "superseded": True}
        reply.client_ref = ""
        reply.save(update_fields=["payload", "client_ref", "updated_at"])
        live.announce_message(reply, "message.updated")
        wake_agent(reply.author_agent_id, "message")


# ---- edits, deletions, reactions and reply threads (issue 28) -------------------------------

# The emoji people react with: a small fixed set, as the composer's picker offers.
REACTIONS = ("👍", "❤️", "😄", "🎉", "👀", "✅")
# How much of an edited text the agents that already answered it are shown in the notice.
EDIT_NOTICE_QUOTE = 2000


def _own_text_message(user, message: Message) -> Message:
    """MESSAGE locked for a change by USER: people change only their own text messages, still
    there, in a conversation that takes posts. Call inside a transaction."""
    if _is_agent(user) or user is None:
        raise NotYourMessage("Agents' messages cannot be changed by people, nor by agents here.")
    message = Message.objects.select_for_update().select_related("conversation").get(pk=message.pk)
    if message.author_user_id != user.id or (message.payload or {}).get("external_author"):
        raise NotYourMessage()
    if message.kind != Message.Kind.TEXT:
        raise MessageNotEditable("Only text messages can be changed.")
    if message.deleted_at is not None:
        raise MessageNotEditable("This message was deleted.")
    if is_archived(message.conversation):
        raise ConversationArchived()
    return message


def edit_message(user, message: Message, body: str) -> Message:
    """A person changes the text of their own message: shown "(edited)" to everyone, live. The
    agents' next turns read the new text (their history is read fresh each turn), and each agent
    that answered the old text, or is answering it, is told of the change by a notice queued for it alone,
    through the normal pipeline (``post_message`` with WAKE), so it may correct itself."""
    body = (body or "").strip()
    with transaction.atomic():
        message = _own_text_message(user, message)
        if not body and not (message.payload or {}).get("attachments"):
            raise ConversationRule(
                "A message needs a body.", fields={"body": "This field may not be blank."}
            )
        if len(body) > MAX_BODY:
            raise ConversationRule(
                f"A message can be at most {MAX_BODY} characters.", fields={"body": "Too long."}
            )
        if body == message.body:
            return message  # nothing changed: no "(edited)", nobody told
        # An edit is announced to everyone and may wake agents, as a post does: it counts as
        # one against the same rate (a Redis round trip under the row's lock; refused, the
        # transaction writes nothing).
        count_post(user)
        old_body, message.body = message.body, body
        message.edited_at = timezone.now()
        message.save(update_fields=["body", "edited_at", "updated_at"])
        live.announce_message(message, "message.updated")
        relays.relay_changed(message.conversation, message)
        # Inboxes and digests quote the text as it is now, as a deletion redacts them (probe F5).
        update_message_notifications(
            message.pk, old_body, body, f"{user.label} edited this message."
        )
        # Those that answered or are answering the old text (a turn under way read it), still
        # taking part: one taken out since is not handed the conversation again.
        answered = list(
            message.deliveries.filter(
                Q(acked_at__isnull=False)
                | Q(answered_at__isnull=False)
                | Q(claimed_by__isnull=False)
            )
            .filter(agent__participations__conversation=message.conversation)
            .order_by("agent_id")
            .values_list("agent_id", flat=True)
        )
        # Only the latest text matters to the agents: earlier notices of edits to it lose theirs,
        # so no version of the text outlives the next edit.
        _clear_edit_notices(message, f"{user.label} edited their message.")
        if answered:
            quote = body if len(body) <= EDIT_NOTICE_QUOTE else body[:EDIT_NOTICE_QUOTE] + "…"
            post_message(
                None,
                message.conversation,
                f"{user.label} edited their message: {quote}",
                kind=Message.Kind.NOTICE,
                payload={"edit_of": str(message.id)},
                reply_to=message,
                wake=answered,
            )
    return message


def delete_message(user, message: Message) -> Message:
    """A person deletes their own message: its row stays as a "message deleted" placeholder (a
    reply thread under it stays too), its text is cleared and its files are no longer shown or
    served (``attachments_visible_to``)."""
    with transaction.atomic():
        message = _own_text_message(user, message)
        message.body = ""
        message.deleted_at = timezone.now()
        message.reactions = {}
        message.payload = {k: v for k, v in (message.payload or {}).items() if k != "attachments"}
        message.save(update_fields=["body", "deleted_at", "reactions", "payload", "updated_at"])
        live.announce_message(message, "message.updated")
        relays.relay_changed(message.conversation, message)
        # The text must not live on in the notices of its edits, nor in inboxes (probe F7).
        _clear_edit_notices(message, f"{user.label} edited their message.")
        redact_message_notifications(message.pk, f"{user.label} deleted this message.")
        if message.conversation.is_reply_thread:
            _count_reply(message, -1)
    _drop_work_on(message)
    return message


def _drop_work_on(message: Message) -> None:
    """MESSAGE was deleted: the agents that had yet to take it up do not answer it (they would
    be handed a blank "deleted" message): their deliveries are acked unanswered and its turn
    queue ends, so none is handed on. A turn a bridge holds goes on (a Stop ends it). After the
    deletion's transaction, in the order locks are taken as a turn is handed on (the
    conversation's first) and as an ack ends one (the delivery's, then its turn's)."""
    with transaction.atomic():
        turns.lock(message.conversation)
        now = timezone.now()
        Delivery.objects.filter(message=message, acked_at__isnull=True).filter(
            Q(claimed_by__isnull=True) | Q(lease_expires_at__lt=now)
        ).update(acked_at=now, updated_at=now)
        TurnDecision.objects.filter(message=message, finished_at__isnull=True).update(
            finished_at=now, updated_at=now
        )


def _clear_edit_notices(message: Message, body: str) -> None:
    """The notices of edits to MESSAGE (locked by the caller) that still quote a text get BODY
    instead, live: at most one, as each edit clears the one before."""
    notices = list(
        Message.objects.filter(
            reply_to=message, kind=Message.Kind.NOTICE, payload__edit_of=str(message.id)
        ).exclude(body=body)
    )
    # An agent that has not taken one up yet is not woken for it: without its text, a turn on
    # it is spent on nothing (the next edit's notice, if any, has the text). Notices hold no turn.
    if notices:
        now = timezone.now()
        Delivery.objects.filter(message__in=notices, acked_at__isnull=True).filter(
            Q(claimed_by__isnull=True) | Q(lease_expires_at__lt=now)
        ).update(acked_at=now, updated_at=now)
    for notice in notices:
        notice.body = body
        notice.conversation = message.conversation
        notice.save(update_fields=["body", "updated_at"])
        notice.has_no_threads()
        live.announce_message(notice, "message.updated")


def react_message(user, message: Message, emoji: str, *, on: bool = True) -> Message:
    """A person's EMOJI on a message, on or off (ON): each person counts once per emoji.
    Written under the message row's lock, so people reacting at once are all counted."""
    if _is_agent(user) or user is None:
        raise NotYourMessage("Only people react to messages.")
    if emoji not in REACTIONS:
        raise ConversationRule(
            "Not one of the reactions offered.", fields={"emoji": f"One of {' '.join(REACTIONS)}."}
        )
    # Each reaction is a live event to everyone who reads the conversation: limited per person.
    rate = throttle.Rate("reactions", settings.REACTIONS_PER_MINUTE, burst=settings.REACTIONS_BURST)
    throttle.limit(rate, user.pk, "reactions")
    with transaction.atomic():
        message = (
            Message.objects.select_for_update().select_related("conversation").get(pk=message.pk)
        )
        if message.deleted_at is not None:
            raise MessageNotEditable("This message was deleted.")
        if is_archived(message.conversation):
            raise ConversationArchived()
        people = [p for p in message.reactions.get(emoji, []) if p["id"] != str(user.id)]
        if on:
            people.append({"id": str(user.id), "name": user.label})
        before = message.reactions.get(emoji, [])
        if len(people) == len(before):
            return message  # already so: nothing to write or announce
        reactions = {e: p for e, p in message.reactions.items() if e != emoji}
        if people:
            reactions[emoji] = people
        # Kept in the offered order, whatever order they were first used in.
        message.reactions = {e: reactions[e] for e in REACTIONS if e in reactions}
        message.save(update_fields=["reactions", "updated_at"])
        live.announce_message(message, "message.updated")
    return message


def reply_in_thread(
    user, message: Message, body: str, *, client_ref: str = "", attachments=()
) -> Message:
    """A person's reply under MESSAGE, in its reply thread (opened by the first reply): a thread
    conversation hanging off the message like a side thread, readable by whoever reads the
    message's conversation. Agents named in a reply join the thread and answer there through
    the normal pipeline; unnamed, none answers (turns.decide)."""
    if _is_agent(user) or user is None:
        raise NotYourMessage("Only people reply in threads here.")
    origin = message.conversation
    if origin.kind == Conversation.Kind.THREAD:
        raise MessageNotEditable("A reply in a thread cannot have a thread of its own.")
    if message.held_at is not None or message.kind != Message.Kind.TEXT:
        raise MessageNotEditable("Only a text message can be replied to in a thread.")
    if origin.archived_at is not None:
        raise ConversationArchived()
    with transaction.atomic():
        # The message row's lock: two first replies at once open one thread, not two.
        locked = Message.objects.select_for_update().only("deleted_at").get(pk=message.pk)
        thread = Conversation.objects.filter(
            parent_message=message, kind=Conversation.Kind.THREAD, thread_status=""
        ).first()
        # A resend of a reply already made (its files are that reply's now) is that reply.
        earlier = posted_under_ref(user, thread, client_ref) if thread and client_ref else None
        if earlier is not None:
            return earlier
        if thread is None:
            # A deleted message keeps the thread it had, and gets none under its placeholder.
            if locked.deleted_at is not None:
                raise MessageNotEditable("This message was deleted.")
            thread = Conversation.objects.create(
                workspace_id=origin.workspace_id,
                kind=Conversation.Kind.THREAD,
                title=threads.fitted_title(f"Thread in {origin.title or 'conversation'}"),
                parent_message=message,
                created_by=user,
                settings=origin.settings,  # kept the same by update_settings
            )
        named = turns.mentioned(body or "", agents_in(origin))
        for agent in named:
            Participant.objects.get_or_create(conversation=thread, agent=agent)
        thread.takes_part = Participant.objects.filter(conversation=thread, user=user).exists()
        # Files are uploaded to the message's conversation (before a first reply there is no
        # thread to upload to): the reply's move into the thread, read by the same people.
        uploads = _own_uploads(user, origin, attachments)
        Attachment.objects.filter(pk__in=[a.pk for a in uploads]).update(conversation=thread)
        reply = post_message(user, thread, body, client_ref=client_ref, attachments=attachments)
    return reply


def agents_in(conversation: Conversation) -> list:
    """The agents taking part in CONVERSATION (and appearing in its workspace)."""
    return list(
        agents_visible_in(conversation.workspace_id).filter(
            participations__conversation=conversation
        )
    )


def _count_reply(message: Message, by: int = 1) -> None:
    """One more reply (BY: -1, one fewer) in the reply thread MESSAGE (a thread's post, or one
    deleted) is in: its origin counts it and shows the new count, live. Inside the post's (the
    deletion's) transaction."""
    thread = message.conversation
    Message.objects.filter(pk=thread.parent_message_id).update(
        reply_count=Greatest(F("reply_count") + by, 0), updated_at=timezone.now()
    )
    origin = Message.objects.select_related("conversation", "author_user", "author_agent").get(
        pk=thread.parent_message_id
    )
    live.announce_message(origin, "message.updated")
