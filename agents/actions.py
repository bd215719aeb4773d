"""Every state change of agents: creation, configuration, pins, keys and sessions."""

from datetime import timedelta

from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils import timezone
from django.utils.text import slugify

from agents.access import agent_appears_in, owner_manages, workspaces_of_agent
from agents.exceptions import AgentNotFound, AgentRule, CredentialNotForAgent, HandleTaken
from agents.models import (
    DEFAULT_TURN_TIME_LIMIT,
    Agent,
    AgentKey,
    AgentPin,
    AgentSession,
    CredentialGrant,
    PersonalityRevision,
)
from agents.signals import agent_left_workspaces
from agntchat.core import crypto, throttle
from agntchat.core.events import publish, publish_many
from agntchat.core.limits import LimitReached, count_held
from agntchat.core.text import counted
from workspaces.access import require_manager
from workspaces.audit import record_audit
from workspaces.exceptions import WorkspaceNotFound
from workspaces.models import Credential, Membership


def create_agent(
    owner,
    *,
    name: str,
    handle: str = "",
    role: str = "",
    capabilities=(),
    backend=Agent.Backend.CLAUDE_CLI,
    model: str = "",
    base_url: str = "",
    turn_time_limit_seconds: int = DEFAULT_TURN_TIME_LIMIT,
    pinned_workspace_ids=None,
) -> Agent:
    # Cut to the field's 40, a name's handle may end at a hyphen, which no @mention matches.
    handle = handle or slugify(name)[:40].rstrip("-") or "agent"
    if Agent.objects.filter(owner=owner, handle=handle).exists():
        raise HandleTaken(fields={"handle": "Already taken."})
    with transaction.atomic():
        cap = settings.AGENTS_PER_PERSON
        if cap and count_held(f"agents:{owner.pk}", Agent.objects.filter(owner=owner)) >= cap:
            raise LimitReached(
                f"You have {counted(cap, 'agent')}, the most one person may: delete one you no "
                "longer use first."
            )
        try:
            agent = Agent.objects.create(
                owner=owner,
                name=name,
                handle=handle,
                role=role,
                capabilities=list(capabilities),
                backend=backend,
                model=model,
                base_url=base_url,
                turn_time_limit_seconds=turn_time_limit_seconds,
            )
        except IntegrityError:
            raise HandleTaken(fields={"handle": "Already taken."}) from None
        if pinned_workspace_ids is not None:
            set_agent_pins(agent, pinned_workspace_ids)
    return agent


def update_agent(agent: Agent, **changes) -> Agent:
    fields = []
    for name in (
        "name",
        "role",
        "capabilities",
        "backend",
        "model",
        "base_url",
        "turn_time_limit_seconds",
    ):
        if name in changes:
            setattr(agent, name, changes[name])
            fields.append(name)
    if fields:
        agent.save(update_fields=[*fields, "updated_at"])
        announce_agent_changed(agent)
    return agent


def announce_agent_changed(agent: Agent) -> None:
    """The agent's open sockets read its configuration again (after commit), so the next turn's
    directives and tools follow what its owner just changed."""
    publish(f"agent.{agent.id}", {"type": "agent.changed"})


def set_agent_pins(agent: Agent, workspace_ids) -> Agent:
    """Pin the agent to chosen workspaces of its owner; None (or empty) shows it everywhere.
    Where it no longer appears, the apps above drop the work it had queued (signals)."""
    with transaction.atomic():
        # The agent's row, held until commit: two pin changes at once would read one "before".
        Agent.objects.select_for_update().filter(pk=agent.pk).exists()
        before = set(workspaces_of_agent(agent).values_list("id", flat=True))
        AgentPin.objects.filter(agent=agent).delete()
        if not workspace_ids:
            agent.visibility = Agent.Visibility.ALL
        else:
            allowed = set(
                Membership.objects.filter(
                    user_id=agent.owner_id, workspace_id__in=workspace_ids
                ).values_list("workspace_id", flat=True)
            )
            missing = {str(w) for w in workspace_ids} - {str(w) for w in allowed}
            if missing:
                # Someone else's workspace reads as no workspace at all.
                raise WorkspaceNotFound(fields={"pinned_workspaces": "Unknown workspace."})
            AgentPin.objects.bulk_create([AgentPin(agent=agent, workspace_id=w) for w in allowed])
            agent.visibility = Agent.Visibility.PINNED
        agent.save(update_fields=["visibility", "updated_at"])
        left = before - set(workspaces_of_agent(agent).values_list("id", flat=True))
        if left:
            agent_left_workspaces.send(
                sender=Agent, agent=agent, workspace_ids=left, owner_left=False
            )
    return agent


def delete_agent(agent: Agent) -> None:
    """Delete AGENT for good (its owner's act: callers check; a hosted one is made local first,
    so its host forgets it). What it said stays, shown as a deleted author's: its messages and
    artifacts. What was its own goes with it: keys and sessions (its open sockets close), its
    queue, tasks, memory, routines, tool grants, skills, directory listing and usage figures.
    Conversations go on without it; a turn it held passes to the next agent."""
    with transaction.atomic():
        Agent.objects.select_for_update().filter(pk=agent.pk).exists()
        workspace_ids = set(workspaces_of_agent(agent).values_list("id", flat=True))
        if workspace_ids:
            # Its queued work dropped and its turns handed on, as when it leaves a workspace.
            agent_left_workspaces.send(
                sender=Agent,
                agent=agent,
                workspace_ids=workspace_ids,
                owner_left=False,
                deleted=True,
            )
        sessions = AgentSession.objects.filter(agent=agent).values_list("id", flat=True)
        topics = [session_topic(session_id) for session_id in sessions]
        record_audit("agent.deleted", actor=agent.owner, target=agent, label=agent.name)
        agent.delete()
        if topics:
            publish_many(topics, {"type": "session.ended", "reason": "deleted"})


def create_agent_key(agent: Agent, name: str = "") -> tuple[AgentKey, str]:
    """A new long-lived key; the secret is returned once and stored only as a hash."""
    secret = crypto.new_secret("agk")
    with transaction.atomic():
        key = AgentKey.objects.create(
            agent=agent,
            name=name,
            prefix=crypto.lookup_prefix(secret),
            key_hash=crypto.hash_secret(secret),
        )
        record_audit(
            "agent_key.created",
            actor=agent.owner,
            target=key,
            label=f"{agent.name}: {name or key.prefix}",
            agent=str(agent.id),
        )
    return key, secret


def session_topic(session_id) -> str:
    """Where the open sockets of one agent session hear that it ended."""
    return f"agent_session.{session_id}"


def revoke_agent_key(key: AgentKey) -> None:
    """Revoking a key also ends every session that was opened with it, and closes their open
    sockets on every server node."""
    with transaction.atomic():
        if key.revoked_at is None:
            key.revoked_at = timezone.now()
            key.save(update_fields=["revoked_at", "updated_at"])
            record_audit(
                "agent_key.revoked",
                actor=key.agent.owner,
                target=key,
                label=f"{key.agent.name}: {key.name or key.prefix}",
                agent=str(key.agent_id),
            )
        sessions = AgentSession.objects.filter(key=key)
        topics = [session_topic(session_id) for session_id in sessions.values_list("id", flat=True)]
        sessions.delete()
        if topics:
            publish_many(topics, {"type": "session.ended", "reason": "revoked"})


def count_session(agent_id) -> None:
    """One session more for the agent: RateLimited over AGENT_SESSIONS_PER_MINUTE (a bridge
    renews every few minutes; a loop opening sessions is refused before it writes rows)."""
    rate = throttle.Rate(
        "sessions:agent", settings.AGENT_SESSIONS_PER_MINUTE, burst=settings.AGENT_SESSIONS_BURST
    )
    throttle.limit(rate, agent_id, "session requests")


def open_agent_session(key_secret: str) -> tuple[AgentSession, str] | None:
    """Exchange a live agent key for a short-lived session token (WS-3); None if the key is bad."""
    key = crypto.find_by_secret(
        lambda key_hash: (
            AgentKey.objects.select_related("agent__owner").filter(key_hash=key_hash).first()
        ),
        AgentKey.objects,
        "key_hash",
        key_secret,
    )
    if key is None or key.revoked_at is not None or not key.agent.owner.is_active:
        return None
    count_session(key.agent_id)
    now = timezone.now()
    secret = crypto.new_secret("ags")
    session = AgentSession.objects.create(
        agent=key.agent,
        key=key,
        prefix=crypto.lookup_prefix(secret),
        token_hash=crypto.hash_secret(secret),
        expires_at=now + timedelta(seconds=settings.AGENT_SESSION_TTL),
    )
    AgentKey.objects.filter(pk=key.pk).update(last_used_at=now)
    AgentSession.objects.filter(agent=key.agent, expires_at__lt=now).delete()
    return session, secret


PERSONALITY_MAX = 20_000
# A document this long or longer is "of meaningful size": halving it in one write is suspicious.
PERSONALITY_GUARD_MIN = 200


class PersonalityShrink(AgentRule):
    """The document as it stands makes this write look like a mistake: a conflict, not bad input."""

    code = "personality_shrink"
    status = 409


def set_personality(agent: Agent, text: str, *, author, force: bool = False) -> PersonalityRevision:
    """Rewrite the personality document, keeping every revision (RUN-6). A write that cuts a
    meaningful document by more than half is refused unless the owner forces it."""
    text = text or ""
    if len(text) > PERSONALITY_MAX:
        raise AgentRule(
            f"A personality can be at most {PERSONALITY_MAX} characters.",
            fields={"text": "Too long."},
        )
    is_owner = not isinstance(author, Agent) and author.id == agent.owner_id
    with transaction.atomic():
        agent = Agent.objects.select_for_update().get(pk=agent.pk)
        old = agent.personality
        if (
            len(old) >= PERSONALITY_GUARD_MIN
            and len(text) < len(old) / 2
            and not (force and is_owner)
        ):
            raise PersonalityShrink(
                f"This would shrink the personality from {len(old)} to {len(text)} characters; "
                "that looks like a mistake. The owner can force it."
            )
        agent.personality = text
        agent.save(update_fields=["personality", "updated_at"])
        announce_agent_changed(agent)
        return PersonalityRevision.objects.create(
            agent=agent,
            text=text,
            forced=bool(force and is_owner),
            author_user=None if isinstance(author, Agent) else author,
            author_agent=author if isinstance(author, Agent) else None,
        )


def grant_credential(
    membership: Membership, credential: Credential, agent: Agent
) -> tuple[CredentialGrant, bool]:
    """Let AGENT use CREDENTIAL (of MEMBERSHIP's workspace), on a manager's word. The agent must
    appear in the workspace and its owner manage it: the secret ends up on the owner's machine.
    Granting twice is the same grant; the bool says whether this call created it."""
    require_manager(membership)
    workspace_id = membership.workspace_id
    if credential.workspace_id != workspace_id or not agent_appears_in(agent, workspace_id):
        raise AgentNotFound()
    if not owner_manages(agent, workspace_id):
        raise CredentialNotForAgent(fields={"agent": CredentialNotForAgent.default_message})
    with transaction.atomic():
        grant, created = CredentialGrant.objects.get_or_create(
            credential=credential, agent=agent, defaults={"granted_by": membership.user}
        )
        if created:
            record_audit(
                "credential.granted",
                actor=membership.user,
                workspace=workspace_id,
                target=grant,
                label=f"{credential.name} → {agent.name}",
            )
    return grant, created


def revoke_credential_grant(membership: Membership, grant: CredentialGrant) -> None:
    require_manager(membership)
    with transaction.atomic():
        record_audit(
            "credential.grant_revoked",
            actor=membership.user,
            workspace=membership.workspace_id,
            target=grant,
            label=f"{grant.credential.name} → {grant.agent.name}",
        )
        grant.delete()
