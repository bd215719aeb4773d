"""Hosts as identities: who may run where, and the narrow tokens a host holds (AGT-3…6, WS-4).

A hosted agent is placed on one host (capacity respected); switching back to local clears the
placement entirely and revokes what the host held for it. The host holds no agent key: its
supervisor token opens only the host socket, and each placed agent's placement token opens
only that agent's sessions, only while it stays placed there. Talking to the host (SSH, the
supervisor's socket) is the work layer's (work/hosting.py); this module decides and records.
"""

from datetime import timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import Count
from django.utils import timezone

from agents.access import hosts_for
from agents.actions import count_session, session_topic
from agents.exceptions import AgentRule, HostNotFound
from agents.models import Agent, AgentSession, Host, HostToken
from agents.signals import agent_evicted
from agntchat.core import crypto, presence
from agntchat.core.events import publish, publish_many
from agntchat.core.exceptions import AppError
from workspaces.audit import personal_workspace_id, record_audit
from workspaces.models import MANAGER_ROLES, Membership, User, Workspace


class HostFull(AppError):
    code = "host_full"
    status = 409
    default_message = "No host has room for another agent."


class HostInUse(AppError):
    code = "host_in_use"
    status = 409
    default_message = "Agents still run on this host: move them elsewhere first."


def host_topic(host_id) -> str:
    """Where a host's supervisor socket hears what to start, stop or restart."""
    return f"host.{host_id}"


def host_token_topic(token_id) -> str:
    """Where the socket a supervisor opened with a host token hears that token end."""
    return f"host_token.{token_id}"


def laptop_topic(person_id) -> str:
    """Where the supervisor on a person's own machine hears about their local agents."""
    return f"person_hosts.{person_id}"


def audit_host(action: str, host: Host, *, by=None, agent: Agent | None = None, **details):
    """An audit row about HOST's keys or tokens, in its workspace (a shared host's: the agent's
    owner's own, or the acting person's; a platform host with neither is staff's, unlogged)."""
    owner = agent.owner if agent is not None else by
    workspace = host.workspace_id or (personal_workspace_id(owner) if owner else None)
    if workspace is not None:
        record_audit(action, actor=by, workspace=workspace, target=host, label=host.name, **details)


def create_host(*, workspace=None, ssh_key: str, by=None, **fields) -> Host:
    """A host to provision; its SSH private key is stored encrypted. A workspace has at most
    HOSTS_PER_WORKSPACE (each is SSH work on the shared job workers), counted under its row's
    lock."""
    with transaction.atomic():
        if workspace is not None:
            Workspace.objects.select_for_update(no_key=True).filter(pk=workspace.pk).first()
            cap = settings.HOSTS_PER_WORKSPACE
            if Host.objects.filter(workspace=workspace).count() >= cap:
                raise AppError(
                    f"This workspace has {cap} hosts, the most allowed (HOSTS_PER_WORKSPACE): "
                    "remove one first.",
                    code="too_many_hosts",
                    status=409,
                )
        host = Host.objects.create(
            workspace=workspace, ssh_key_ciphertext=crypto.encrypt(ssh_key), **fields
        )
        audit_host("host.ssh_key_set", host, by=by)
    return host


# Where and how the server reaches a host: whoever changes them decides where the next
# provisioning writes the placement tokens of every agent on it. And how it runs them: the
# Python the provisioning runs as the SSH user and the bridges as each agent's user, and the
# root it lives under (its venv included), may be a file or a directory an agent on the host
# wrote (a co-admin's: its own directory is its user's).
CONNECTION_FIELDS = ("address", "port", "ssh_user", "root", "python")


def update_host(host: Host, *, ssh_key: str | None = None, by=None, **fields) -> Host:
    """Change HOST's settings; a new SSH key (if given) replaces the stored one, encrypted. A
    change to where or how the server reaches it moves the others' agents off it, and a move to
    another workspace (staff, in the admin) those of owners who do not manage that one (see
    _hand_over)."""
    with transaction.atomic():
        # Locked: a placement committing meanwhile waits, then is moved off with the others.
        locked = Host.objects.select_for_update().get(pk=host.pk)
        moved = any(
            name in fields and fields[name] != getattr(locked, name) for name in CONNECTION_FIELDS
        )
        moved = moved or bool(ssh_key and ssh_key.strip() != ssh_key_of(locked).strip())
        # No longer multi-tenant: every bridge runs as one user, able to read the others' tokens.
        moved = moved or (locked.multi_tenant and fields.get("multi_tenant") is False)
        workspace = fields.get("workspace", locked.workspace)
        rehomed = getattr(workspace, "pk", None) != locked.workspace_id
        for name, value in fields.items():
            setattr(host, name, value)
        if ssh_key:
            host.ssh_key_ciphertext = crypto.encrypt(ssh_key)
            audit_host("host.ssh_key_set", host, by=by)
        host.save()
        if moved:
            _hand_over(host, by, "connection_changed")
        if rehomed:
            # Audited where the host was (LOCKED, read before the change): the new workspace's
            # people are not told whose agents left. Made one of agntchat's shared hosts (no
            # workspace), it keeps no one's.
            managers = Membership.objects.filter(workspace=workspace, role__in=MANAGER_ROLES)
            _hand_over(locked, by, "workspace_changed", keep=managers.values("user_id"))
    return host


def clear_host_key(host: Host, by=None) -> None:
    """Forget the pinned SSH host key: the next connection pins whatever the host shows. The
    one way to accept a rebuilt host, done on purpose by a person; the others' agents are moved
    off it (see _hand_over)."""
    with transaction.atomic():
        Host.objects.select_for_update().filter(pk=host.pk).first()
        host.host_key = ""
        host.save(update_fields=["host_key", "updated_at"])
        audit_host("host.host_key_cleared", host, by=by)
        _hand_over(host, by, "host_key_cleared")


def _hand_over(host: Host, by, reason: str, keep=None) -> None:
    """HOST may now be another machine (its address, port, user or key changed, or its pinned
    key cleared), or another workspace's: the next provisioning writes each placed agent's
    placement token there. So every agent on it whose owner is not BY (or, given KEEP, not
    among those user ids) is made local, as when its owner stops managing the workspace
    (tokens revoked, sessions ended, the owner's laptop told). Run in the change's transaction,
    under HOST's row lock."""
    others = Agent.objects.filter(host=host)
    if keep is not None:
        others = others.exclude(owner_id__in=keep)
    elif by is not None:
        others = others.exclude(owner_id=by.pk)
    for agent in others.select_related("host", "owner"):
        make_agent_local(agent)
        audit_host(
            "host.agent_made_local",
            host,
            by=by,
            agent=agent,
            agent_name=agent.name,
            owner=agent.owner.label,
            reason=reason,
        )


def delete_host(host: Host) -> None:
    """Forget HOST; refused while agents are placed on it (move them first). The host's row is
    locked first, as placement does: a placement committing meanwhile is seen, not a 500."""
    with transaction.atomic():
        Host.objects.select_for_update().filter(pk=host.pk).first()
        if Agent.objects.filter(host=host).exists():
            raise HostInUse()
        host.delete()  # its supervisor told it is gone: host_going


def ssh_key_of(host: Host) -> str:
    return crypto.decrypt(host.ssh_key_ciphertext)


def pin_host_key(host: Host, host_key: str) -> None:
    """Record the host's SSH key at the first connection (trust on first use, then never again
    without a person clearing it)."""
    Host.objects.filter(pk=host.pk, host_key="").update(host_key=host_key)
    host.refresh_from_db(fields=["host_key"])


def record_host_status(host: Host, status: str, problem: str = "") -> None:
    host.status, host.problem = status, problem[:2000]
    fields = ["status", "problem", "updated_at"]
    if status == Host.Status.READY:
        host.provisioned_at = timezone.now()
        fields.append("provisioned_at")
    host.save(update_fields=fields)


def place_agent(agent: Agent, host: Host | None = None) -> Agent:
    """Run AGENT on HOST, or on the allowed host with the most room (local → hosted). Capacity
    is counted under the host's row lock, so two placements never both take the last place."""
    with transaction.atomic():
        candidates = hosts_for(agent)
        if host is not None:
            candidates = candidates.filter(pk=host.pk)
        # Every candidate locked in one statement and one order: two placements never hold one
        # host each while waiting for the other's.
        hosts = list(
            Host.objects.select_for_update().filter(pk__in=candidates.values("pk")).order_by("pk")
        )
        if host is not None and not hosts:
            raise HostNotFound()
        placed = dict(
            Agent.objects.filter(host__in=hosts)
            .exclude(pk=agent.pk)
            .values("host")
            .annotate(n=Count("pk"))
            .values_list("host", "n")
        )
        roomy = [h for h in hosts if placed.get(h.pk, 0) < h.capacity]
        share_used = any(h.workspace_id is None for h in roomy) and _shared_share_used(agent)
        if share_used:
            roomy = [h for h in roomy if h.workspace_id is not None]
        if not roomy and share_used:
            cap = settings.SHARED_HOST_PLACES_PER_PERSON
            raise AppError(
                f"Your agents take {cap} places on agntchat's shared hosts, the most one person "
                "may (SHARED_HOST_PLACES_PER_PERSON): make one local first, or use a host of "
                "a workspace you manage.",
                code="shared_places_used",
                status=409,
            )
        if not roomy:
            raise HostFull("That host is full." if host is not None else HostFull.default_message)
        locked = min(roomy, key=lambda h: (placed.get(h.pk, 0), h.created_at))
        if locked.workspace_id is not None:
            # The owner still manages that workspace, read under their membership's lock: a
            # demotion or removal committing meanwhile waits, then sees this placement and ends it.
            manages = Membership.objects.select_for_update().filter(
                workspace_id=locked.workspace_id, user_id=agent.owner_id, role__in=MANAGER_ROLES
            )
            if not manages.exists():
                raise HostNotFound()
        if agent.host_id not in (None, locked.pk):
            _forget_placement(agent)
        if agent.runtime == Agent.Runtime.LOCAL:
            # The owner's laptop supervisor stops its bridge there.
            publish(
                laptop_topic(agent.owner_id),
                {"type": "host.bridge", "action": "stop", "agent": str(agent.id)},
            )
        agent.runtime, agent.host = Agent.Runtime.HOSTED, locked
        agent.save(update_fields=["runtime", "host", "updated_at"])
    return agent


def _shared_share_used(agent: Agent) -> bool:
    """Whether AGENT's owner has no place left on the shared hosts (one person must not take
    them all), counted under the owner's row lock: their placements elsewhere wait, then count
    this one. NO KEY: rows that refer to the person are not held up."""
    User.objects.select_for_update(no_key=True).filter(pk=agent.owner_id).first()
    taken = Agent.objects.filter(owner_id=agent.owner_id, host__isnull=False)
    taken = taken.filter(host__workspace__isnull=True).exclude(pk=agent.pk)
    return taken.count() >= settings.SHARED_HOST_PLACES_PER_PERSON


def make_agent_local(agent: Agent) -> Agent:
    """Hosted → local: no host assignment at all (AGT-5); the host stops its bridge."""
    with transaction.atomic():
        _forget_placement(agent)
        agent.runtime, agent.host = Agent.Runtime.LOCAL, None
        agent.save(update_fields=["runtime", "host", "updated_at"])
        publish(
            laptop_topic(agent.owner_id),
            {"type": "host.bridge", "action": "reload", "agent": str(agent.id)},
        )
    return agent


def _forget_placement(agent: Agent) -> None:
    """Revoke the placement tokens of AGENT's host, end their sessions, tell the host to stop
    the bridge (after commit)."""
    if agent.host_id is None:
        return
    # Its row locked before the revocation: a placement token being issued meanwhile (under
    # this lock) is committed first, and revoked here with the others.
    Agent.objects.select_for_update().filter(pk=agent.pk).first()
    tokens = HostToken.objects.filter(agent=agent)
    sessions = AgentSession.objects.filter(host_token__in=tokens)
    topics = [session_topic(s) for s in sessions.values_list("id", flat=True)]
    sessions.delete()
    if tokens.filter(revoked_at__isnull=True).update(revoked_at=timezone.now()):
        audit_host("host_token.revoked", agent.host, agent=agent, kind="placement")
    if topics:
        publish_many(topics, {"type": "session.ended", "reason": "revoked"})
    publish(
        host_topic(agent.host_id), {"type": "host.bridge", "action": "stop", "agent": str(agent.id)}
    )


def issue_host_token(host: Host, agent: Agent | None = None) -> str:
    """A new supervisor token (no AGENT) or placement token for HOST; earlier ones of the same
    kind stop working. The secret is returned once and stored only as a hash. AGENT is read
    again, placed on HOST, under its row's lock (AgentRule if not): a caller's row may be stale
    (provisioning reads them all at its start), and a move or delete committing meanwhile
    waits, then revokes this token with the others."""
    secret = crypto.new_secret("aht")
    with transaction.atomic():
        if agent is None:
            _end_supervisor(host)
        else:
            # The host's row first, as placements lock it before the agent's: never each
            # holding one while waiting for the other.
            Host.objects.select_for_update(no_key=True).filter(pk=host.pk).first()
            if not Agent.objects.select_for_update().filter(pk=agent.pk, host=host).exists():
                raise AgentRule("That agent is not placed on this host.")
            HostToken.objects.filter(host=host, agent=agent, revoked_at__isnull=True).update(
                revoked_at=timezone.now()
            )
        token = HostToken.objects.create(
            host=host,
            agent=agent,
            prefix=crypto.lookup_prefix(secret),
            token_hash=crypto.hash_secret(secret),
        )
        audit_host(
            "host_token.issued",
            host,
            agent=agent,
            kind="placement" if agent is not None else "supervisor",
            agent_name=agent.name if agent is not None else None,
            prefix=token.prefix,
        )
    return secret


def _end_supervisor(host: Host, reason: str = "revoked") -> None:
    """Revoke HOST's supervisor token; the socket opened with it is closed after commit (told
    REASON: "host_gone", the supervisor exits)."""
    live = HostToken.objects.filter(host=host, agent=None, revoked_at__isnull=True)
    ended = [host_token_topic(pk) for pk in live.values_list("pk", flat=True)]
    live.update(revoked_at=timezone.now())
    if ended:
        publish_many(ended, {"type": "session.ended", "reason": reason})


# How long a deleted host's supervisor tokens are known as such: a host switched off when it was
# deleted may start its supervisor again much later. Its last few tokens: a provisioning that
# failed half-way may have left the supervisor before the last on the older one.
HOST_GONE_SECONDS = 90 * 24 * 3600
HOST_GONE_TOKENS = 5


def _gone_key(token_hash: str) -> str:
    return f"{settings.REDIS_PREFIX}:hosts:gone:{token_hash}"


def _remember_gone(host: Host) -> None:
    """HOST's last supervisor tokens known, after commit, as those of a deleted host: their
    rows go with it, and a supervisor still holding one is told so, not "unauthorized" (it
    would retry for ever). Its SSH key goes too, so stopping it over SSH is no option."""
    hashes = list(
        HostToken.objects.filter(host=host, agent=None)
        .order_by("-created_at")
        .values_list("token_hash", flat=True)[:HOST_GONE_TOKENS]
    )

    def remember():
        with presence.client().pipeline() as pipe:
            for token_hash in hashes:
                pipe.set(_gone_key(token_hash), 1, ex=HOST_GONE_SECONDS)
            pipe.execute()

    if hashes:
        transaction.on_commit(remember)


def host_gone(secret: str) -> bool:
    """Whether SECRET was a supervisor token of a host since deleted."""
    return bool(presence.client().exists(_gone_key(crypto.hash_secret(secret))))


def _live_token(secret: str) -> HostToken | None:
    token = crypto.find_by_secret(
        lambda token_hash: (
            HostToken.objects.select_related("host", "agent__owner")
            .filter(token_hash=token_hash, revoked_at__isnull=True)
            .first()
        ),
        HostToken.objects,
        "token_hash",
        secret,
    )
    now = timezone.now()
    if token is not None and (
        token.last_used_at is None or now - token.last_used_at > timedelta(minutes=1)
    ):
        HostToken.objects.filter(pk=token.pk).update(last_used_at=now)
    return token


def supervisor_token(secret: str) -> HostToken | None:
    """The live supervisor token SECRET (its host selected), or None (a placement token is not
    one)."""
    token = _live_token(secret) if secret and secret.startswith("aht_") else None
    return token if token is not None and token.agent_id is None else None


def open_hosted_session(secret: str) -> tuple[AgentSession, str] | None:
    """Exchange a placement token for a session of its agent (WS-4), while the agent is still
    placed on that host; None otherwise."""
    token = _live_token(secret)
    if token is None or token.agent is None:
        return None
    agent = token.agent
    if agent.host_id != token.host_id or agent.runtime != Agent.Runtime.HOSTED:
        return None
    if not agent.owner.is_active:
        return None
    count_session(agent.id)
    now = timezone.now()
    session_secret = crypto.new_secret("ags")
    session = AgentSession.objects.create(
        agent=agent,
        host_token=token,
        prefix=crypto.lookup_prefix(session_secret),
        token_hash=crypto.hash_secret(session_secret),
        expires_at=now + timedelta(seconds=settings.AGENT_SESSION_TTL),
    )
    AgentSession.objects.filter(agent=agent, expires_at__lt=now).delete()
    return session, session_secret


def evict_agents(agents) -> None:
    """Take AGENTS off their hosts (each made local, as its owner would; its host told to
    forget it: agents.signals.agent_evicted)."""
    for agent in agents.select_related("host"):
        host_id = agent.host_id
        make_agent_local(agent)
        agent_evicted.send(sender=Agent, agent=agent, host_id=host_id)


def host_going(sender, instance: Host, **kwargs) -> None:
    """pre_delete of a host (staff deleting one in the admin, or its workspace deleted): its
    agents are made local, not left hosted on nothing, and its supervisor's socket is closed
    (its token goes with it, unrevoked: the socket would stay open on nothing)."""
    evict_agents(Agent.objects.filter(host=instance))
    _remember_gone(instance)
    _end_supervisor(instance, "host_gone")


def workspace_closing(sender, workspace, **kwargs) -> None:
    evict_agents(Agent.objects.filter(host__workspace=workspace))


def _evict_from(membership) -> None:
    evict_agents(
        Agent.objects.filter(
            owner_id=membership.user_id, host__workspace_id=membership.workspace_id
        )
    )


def membership_saved(sender, instance, created, **kwargs) -> None:
    """A person who no longer manages a workspace (demoted) runs no agent on its hosts."""
    if not created and not instance.is_manager:
        _evict_from(instance)


def membership_deleted(sender, instance, **kwargs) -> None:
    """Nor one removed from it, or who left."""
    _evict_from(instance)
