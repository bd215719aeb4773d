"""Permission-checked fetches of agents, and where each agent appears (AGT-1)."""

from django.db.models import Exists, OuterRef, Q
from django.utils import timezone

from agents.exceptions import AgentNotFound, HostNotFound, KeyNotFound, NotAgentOwner
from agents.models import Agent, AgentKey, AgentPin, AgentSession, CredentialGrant, Host
from agntchat.core import crypto
from agntchat.core.compiled import compiled_rows
from agntchat.core.ids import as_uuid
from workspaces.models import MANAGER_ROLES, Credential, Membership, Workspace


def agents_visible_in(workspace_id):
    """Agents that appear in a workspace: owner is a member, and not pinned away from it."""
    owner_is_member = Membership.objects.filter(
        workspace_id=workspace_id, user_id=OuterRef("owner_id")
    )
    pinned_here = AgentPin.objects.filter(workspace_id=workspace_id, agent_id=OuterRef("pk"))
    return Agent.objects.filter(Exists(owner_is_member)).filter(
        Q(visibility=Agent.Visibility.ALL) | Exists(pinned_here)
    )


def workspaces_of_agent(agent: Agent):
    """The workspaces an agent appears in. Its visibility is read by the query, not taken from
    AGENT: an open socket holds its agent for minutes, and a change of its pins counts at once."""
    shown_everywhere = Agent.objects.filter(pk=agent.pk, visibility=Agent.Visibility.ALL)
    pinned_here = AgentPin.objects.filter(agent_id=agent.pk, workspace_id=OuterRef("pk"))
    return Workspace.objects.filter(memberships__user_id=agent.owner_id).filter(
        Exists(shown_everywhere) | Exists(pinned_here)
    )


def agent_appears_in(agent: Agent, workspace_id) -> bool:
    return agents_visible_in(workspace_id).filter(pk=agent.pk).exists()


def owner_belongs_to(agent: Agent, workspace_id) -> bool:
    """AGENT's owner is a member of WORKSPACE_ID: where a task given or set up there (a
    routine's, PRO-2) may run, whatever the agent's pins say since."""
    return Membership.objects.filter(workspace_id=workspace_id, user_id=agent.owner_id).exists()


def _owner_managing(agent: Agent, workspace_id):
    return Membership.objects.filter(
        workspace_id=workspace_id, user_id=agent.owner_id, role__in=MANAGER_ROLES
    )


def owner_manages(agent: Agent, workspace_id) -> bool:
    """AGENT's owner is an admin or the owner of WORKSPACE_ID: one who may read its credentials."""
    return _owner_managing(agent, workspace_id).exists()


def credentials_granted_to(agent: Agent, workspace_id):
    """Credentials of WORKSPACE_ID that AGENT may be handed: granted to it by a manager, and its
    owner is a manager there now (a member's agent never gets an admin-only secret, even after
    its owner was demoted)."""
    return Credential.objects.filter(workspace_id=workspace_id, grants__agent=agent).filter(
        Exists(_owner_managing(agent, workspace_id))
    )


def agents_visible_to(user):
    """Agents the person owns, plus those appearing in any workspace they belong to."""
    workspace_ids = Membership.objects.filter(user=user).values("workspace_id")
    owner_shares = Membership.objects.filter(
        workspace_id__in=workspace_ids, user_id=OuterRef("owner_id")
    )
    pinned_shared = AgentPin.objects.filter(workspace_id__in=workspace_ids, agent_id=OuterRef("pk"))
    return Agent.objects.filter(
        Q(owner=user)
        | (Exists(owner_shares) & (Q(visibility=Agent.Visibility.ALL) | Exists(pinned_shared)))
    )


def access_agent(user, agent_id) -> Agent:
    """An agent the person can see, or not found."""
    try:
        return agents_visible_to(user).get(pk=as_uuid(agent_id))
    except Agent.DoesNotExist:
        raise AgentNotFound() from None


def is_agent_owner(user, agent: Agent) -> bool:
    """Only its owner configures an agent: keys, personality, pins, usage."""
    return agent.owner_id == user.id


def access_own_agent(user, agent_id) -> Agent:
    """An agent the person owns; seeing it without owning it is a 403, not seeing it a 404."""
    agent = access_agent(user, agent_id)
    if not is_agent_owner(user, agent):
        raise NotAgentOwner()
    return agent


def hosts_for(agent: Agent):
    """The hosts AGENT may be placed on: agntchat's shared hosts, and the own hosts of the
    workspaces its owner manages. A member only reads a workspace's hosts: running an agent
    on one is running code on the workspace's machine, which its admins decide."""
    managed = Membership.objects.filter(user_id=agent.owner_id, role__in=MANAGER_ROLES)
    return Host.objects.filter(
        Q(workspace__isnull=True) | Q(workspace__in=managed.values("workspace"))
    )


def access_placement_host(agent: Agent, host_id) -> Host:
    """A host AGENT may be placed on, or not found (another workspace's host included)."""
    try:
        return hosts_for(agent).get(pk=as_uuid(host_id))
    except Host.DoesNotExist:
        raise HostNotFound() from None


def access_workspace_host(membership, host_id) -> Host:
    """One of MEMBERSHIP's workspace's own hosts, or not found (shared and others' hosts too)."""
    try:
        return Host.objects.get(workspace_id=membership.workspace_id, pk=as_uuid(host_id))
    except Host.DoesNotExist:
        raise HostNotFound() from None


def access_agent_key(agent: Agent, key_id) -> AgentKey:
    """A key of an agent the caller already accessed as its owner; another agent's is not found."""
    key = AgentKey.objects.filter(agent=agent, pk=as_uuid(key_id)).first()
    if key is None:
        raise KeyNotFound()
    return key


def access_credential_grant(credential: Credential, agent_id) -> CredentialGrant:
    """The grant of a credential (already accessed by a manager) to AGENT_ID, or not found."""
    grant = credential.grants.filter(agent_id=as_uuid(agent_id)).first()
    if grant is None:
        raise AgentNotFound("This agent has no grant for that credential.")
    return grant


def session_for_token(secret: str):
    """The live session a ``ags_`` token stands for (its agent loaded), or None."""
    session = crypto.find_by_secret(
        lambda token_hash: (
            AgentSession.objects.select_related("agent", "agent__owner", "key")
            .filter(token_hash=token_hash, expires_at__gt=timezone.now())
            .first()
        ),
        AgentSession.objects,
        "token_hash",
        secret,
    )
    if session is None or not session.agent.owner.is_active:
        return None
    # Opened with a key: while the key stands. With a placement token: its sessions are
    # deleted when the agent leaves the host.
    if session.key is not None and session.key.revoked_at is not None:
        return None
    return session


def agent_for_session_token(secret: str):
    session = session_for_token(secret)
    return session.agent if session is not None else None


def session_is_live(session_id) -> bool:
    """Whether a session still opens doors: not expired, its key not revoked, its owner active.
    Asked on every agent heartbeat, so its SQL is compiled once (core.compiled)."""
    return bool(
        compiled_rows(
            ("session_is_live",),
            lambda session_id, now: AgentSession.objects.filter(
                Q(key__isnull=True) | Q(key__revoked_at__isnull=True),
                pk=session_id,
                expires_at__gt=now,
                agent__owner__is_active=True,
            ).values_list("pk")[:1],
            session_id=session_id,
            now=timezone.now(),
        )
    )
