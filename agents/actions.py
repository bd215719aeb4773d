"""Every state change of agents: creation, configuration, pins, keys and sessions."""

from datetime import timedelta

from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils import timezone
from django.utils.text import slugify

from agents.exceptions import AgentRule
from agents.models import Agent, AgentKey, AgentPin, AgentSession
from agntchat.core import crypto
from workspaces.models import Membership


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
    pinned_workspace_ids=None,
) -> Agent:
    handle = handle or slugify(name)[:40] or "agent"
    if Agent.objects.filter(owner=owner, handle=handle).exists():
        raise AgentRule(
            "You already have an agent with this handle.", fields={"handle": "Already taken."}
        )
    with transaction.atomic():
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
            )
        except IntegrityError:
            raise AgentRule(
                "You already have an agent with this handle.", fields={"handle": "Already taken."}
            ) from None
        if pinned_workspace_ids is not None:
            set_agent_pins(agent, pinned_workspace_ids)
    return agent


def update_agent(agent: Agent, **changes) -> Agent:
    fields = []
    for name in ("name", "role", "capabilities", "backend", "model", "base_url"):
        if name in changes:
            setattr(agent, name, changes[name])
            fields.append(name)
    if fields:
        agent.save(update_fields=[*fields, "updated_at"])
    return agent


def set_agent_pins(agent: Agent, workspace_ids) -> Agent:
    """Pin the agent to chosen workspaces of its owner; None (or empty) shows it everywhere."""
    with transaction.atomic():
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
                raise AgentRule(
                    "An agent can only be pinned to workspaces its owner belongs to.",
                    fields={"pinnedWorkspaces": "Unknown workspace."},
                )
            AgentPin.objects.bulk_create([AgentPin(agent=agent, workspace_id=w) for w in allowed])
            agent.visibility = Agent.Visibility.PINNED
        agent.save(update_fields=["visibility", "updated_at"])
    return agent


def create_agent_key(agent: Agent, name: str = "") -> tuple[AgentKey, str]:
    """A new long-lived key; the secret is returned once and stored only as a hash."""
    secret = crypto.new_secret("agk")
    key = AgentKey.objects.create(
        agent=agent,
        name=name,
        prefix=crypto.lookup_prefix(secret),
        key_hash=crypto.hash_secret(secret),
    )
    return key, secret


def revoke_agent_key(key: AgentKey) -> None:
    """Revoking a key also ends every session that was opened with it."""
    with transaction.atomic():
        if key.revoked_at is None:
            key.revoked_at = timezone.now()
            key.save(update_fields=["revoked_at", "updated_at"])
        AgentSession.objects.filter(key=key).delete()


def open_agent_session(key_secret: str) -> tuple[AgentSession, str] | None:
    """Exchange a live agent key for a short-lived session token (WS-3); None if the key is bad."""
    key = (
        AgentKey.objects.select_related("agent__owner")
        .filter(key_hash=crypto.hash_secret(key_secret))
        .first()
    )
    if key is None or key.revoked_at is not None or not key.agent.owner.is_active:
        return None
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
