"""Every state change of conversations and messages. One pipeline for people and agents (MSG-1)."""

from contextlib import contextmanager, nullcontext

from django.db import IntegrityError, connection, transaction
from django.db.models import Count, Q
from django.utils import timezone

from agents.access import agent_appears_in, agents_visible_in
from agents.models import Agent
from agntchat.core.compiled import compiled_first, compiled_insert
from agntchat.core.events import publish_many
from conversations import deliveries, live, tasks, threads, turns
from conversations.access import access_conversation, may_configure
from conversations.channels import channel_name
from conversations.exceptions import ChannelNameTaken, ConversationArchived, ConversationRule
from conversations.models import Conversation, Message, Participant
from workspaces.access import access_membership
from workspaces.exceptions import NotAllowed
from workspaces.models import Membership

MAX_BODY = 20_000


def _is_agent(actor) -> bool:
    return isinstance(actor, Agent)


def _participants(creator, workspace, user_ids, agent_ids) -> tuple[list[str], list[str]]:
    """The people and agents of a new conversation: those named and its creator, every one
    belonging to (or appearing in) the workspace. Agents keep the order given: that order is
    the default fallback order (TURN-1)."""
    user_ids = {str(u) for u in user_ids}
    agent_order = list(dict.fromkeys(str(a) for a in agent_ids))
    if _is_agent(creator):
        agent_order = list(dict.fromkeys([*agent_order, str(creator.id)]))
    else:
        user_ids.add(str(creator.id))
    members = {
        str(u)
        for u in Membership.objects.filter(workspace=workspace, user_id__in=user_ids).values_list(
            "user_id", flat=True
        )
    }
    agents = {
        str(a)
        for a in agents_visible_in(workspace.id)
        .filter(pk__in=agent_order)
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
        publish_many(
            topics,
            {
                "type": "live.event",
                "event": {"type": "conversation.created", "conversation_id": conversation.id},
            },
        )
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
) -> Message:
    """Store a message and queue it for every agent that must see it, in one transaction;
    announce it after commit (MSG-2). The same path for a person and for an agent.

    A post carrying the CLIENT_REF of an earlier post by the same author is that same message
    (returned, not stored again): a bridge that crashed between posting and acking, or a browser
    retrying, never doubles a reply.

    WAKE, when given, is the exact list of agent ids to queue the message for (a card button
    sends its click to the card's author only); otherwise the conversation decides.

    PAYLOAD is the server's own data, never a client's unvetted: a card arrives sealed and
    rendered by artifacts (``artifacts.actions.post_card``), which builds on this pipeline."""
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
            fields={"replyTo": "Not in this conversation."},
        )
    agent_author = actor if _is_agent(actor) else None
    if len(client_ref) > 64:
        raise ConversationRule(
            "A client ref can be at most 64 characters.", fields={"ref": "Too long."}
        )
    if client_ref:
        author = {
            "author_agent_id": agent_author.id if agent_author else None,
            "author_user_id": None if agent_author or actor is None else actor.id,
        }
        known = {name: value for name, value in author.items() if value is not None}
        earlier = compiled_first(  # every bridge reply carries a ref: compiled once
            ("post_by_ref", *known),
            lambda conversation_id, ref, **ids: Message.objects.filter(
                conversation_id=conversation_id, client_ref=ref, **{k: ids.get(k) for k in author}
            ),
            conversation_id=conversation.id,
            ref=client_ref,
            **known,
        )
        if earlier is not None:
            return earlier
    if conversation.archived_at is not None:
        raise ConversationArchived()
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
    delegation = turns.delegation(body, conversation, actor) if conversational else None
    by_person = agent_author is None and actor is not None
    takes_part = getattr(conversation, "takes_part", False)
    if conversational and by_person:
        conversation.agent_streak = 0  # reset (and held posts released) by settle_post
    # An agent's post counts against the loop guard (TURN-2), unless it answers a person.
    guard = (
        turns.count_post(conversation, agent_author, reply_to)
        if conversational and agent_author
        else turns.COUNTED
    )
    held = guard == turns.HELD
    # A plain post, a person's or an agent's, writes once, in its last statement (settle_post),
    # which locks the conversation row. In a transaction, that lock would be held until this
    # thread, competing for the GIL with the process's others, got round to sending COMMIT:
    # posts to one busy channel queued on it, and a second web process added nothing. Alone,
    # the statement is its own transaction and the lock lasts as long as PostgreSQL runs it.
    single_write = (
        conversational
        and (takes_part or agent_author is not None)
        and not held
        and delegation is None
        and not planned_threads
    )
    with nullcontext() if single_write else transaction.atomic():
        if by_person and not takes_part:
            # Posting in an open channel joins it, as in any team chat.
            Participant.objects.get_or_create(conversation=conversation, user=actor)
        if held:
            # Decided again under the row's lock: a person's post in between (release_held)
            # would otherwise leave this one held.
            turns.lock(conversation)
            guard = turns.count_post(conversation, agent_author)
            held = guard == turns.HELD
        message = Message(
            held_at=timezone.now() if held else None,
            conversation=conversation,
            author_user=None if agent_author or actor is None else actor,
            author_agent=agent_author,
            kind=kind,
            body=body,
            payload=payload,
            reply_to=reply_to,
            client_ref=client_ref,
        )
        if held:
            # Past the loop guard's cap: kept, but nobody sees or is woken by it until a
            # person speaks (their message releases it).
            compiled_insert(message)
            turns.announce_capped(conversation)
            return message
        rows = []  # stored with the message, in the post's last statement (settle_post)
        holds_turn = False  # a turn from the turn queue: its ack hands the turn on
        if conversational and delegation is None:
            decision, wake = turns.start_turns(message, conversation, capped=guard == turns.CAPPED)
            rows += [decision] if decision else []
            holds_turn = True
        # Turn planning read only agents that appear in the workspace: no need to check again.
        queued = deliveries.new_deliveries(
            message, wake or [], holds_turn=holds_turn, visible=conversational
        )
        settled = turns.settle_post(
            conversation, message, rows + queued, by_person=conversational and by_person
        )
        deliveries.wake_agents(queued)
        # What needs the message stored: threads hang off it.
        if planned_threads:
            threads.open_threads(message, planned_threads)
        else:
            message.has_no_threads()
        if delegation is not None:
            agent, instructions = delegation
            tasks.create_task(
                actor, conversation.workspace, agent, instructions, conversation=conversation
            )
        for released in settled:
            live.announce_message(released, "message.created")
        live.announce_message(message, "message.created")
        if payload.get("dm_error"):
            post_notice(
                conversation,
                f"{agent_author.name}'s side thread was not opened: {payload['dm_error']}",
                payload={"about_message_id": str(message.id)},
            )
    return message


def post_notice(conversation: Conversation, body: str, *, payload: dict | None = None) -> Message:
    """A short system notice: visible to people, never queued for agents."""
    return post_message(None, conversation, body, kind=Message.Kind.NOTICE, payload=payload)


def mark_read(user, conversation: Conversation) -> None:
    Participant.objects.filter(conversation=conversation, user=user).update(
        last_read_at=timezone.now()
    )


def update_settings(user, conversation: Conversation, changes: dict) -> Conversation:
    """Change conversation settings (the rulebook, RUN-5). The conversation's creator or a
    workspace admin may; other members may not."""
    if not may_configure(access_membership(user, conversation.workspace_id), conversation):
        raise NotAllowed(
            "Only the conversation's creator or a workspace admin can change its settings."
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
        live.announce_conversation(conversation, "conversation.updated")
    return conversation
