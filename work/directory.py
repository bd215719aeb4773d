"""The public agent directory (AGT-7): an owner publishes a listing of an agent (a snapshot of
its configuration, personality and own skill layer), anyone signed in browses and searches the
directory and clones a listing into an agent of their own.

What a listing holds is chosen field by field (``snapshot``): never keys, session or host
tokens, credentials or their grants, the host it runs on, its base URL (an OpenAI-compatible
endpoint's address may be private or carry a secret), its memory, tool grants or permissions.

An agent pinned to a team workspace is not published (AGT-7: a listing anyone can clone would
leak that workspace's agent), and a published agent is not pinned to one: both are refused with
a 409 that says what to do instead (unpin, or unpublish first), so nothing changes silently.
Both sides lock the agent's row, so a publish and a pin at the same moment cannot both pass.
Pins change through ``set_pins`` here, the one entry point above ``agents.actions.set_agent_pins``.
"""

import re

from django.db import transaction
from django.db.models import Count, JSONField, OuterRef, Subquery
from django.db.models.expressions import RawSQL
from django.db.models.functions import Coalesce
from django.utils import timezone

from agents import actions as agent_actions
from agents.exceptions import HandleTaken
from agents.models import Agent, AgentPin
from agntchat.core import search
from agntchat.core.exceptions import AppError, Conflict, NotFound
from work import skills
from work.access import published_listings
from work.models import AgentClone, AgentListing, Skill
from workspaces.audit import record_audit
from workspaces.models import Workspace

DESCRIPTION_MAX = 2000
SORTS = ("newest", "clones")
# What one listing's skills may come to: every read of the directory loads them, and a skill
# alone may be 256 KB, so an agent with hundreds of them would weigh on every visitor's page.
MAX_LISTING_SKILLS = 32
MAX_LISTING_SKILL_BYTES = 1024 * 1024


class PinnedToTeam(Conflict):
    code = "agent_pinned_to_team"
    default_message = (
        "This agent is pinned to a team workspace, so it cannot be published: anyone could "
        "clone that workspace's agent. Unpin it from team workspaces first."
    )


class AgentPublished(Conflict):
    code = "agent_published"
    default_message = (
        "This agent is published in the agent directory, so it cannot be pinned to a team "
        "workspace. Unpublish it first."
    )


class ListingTooLarge(Conflict):
    code = "listing_too_large"


class NotPublished(NotFound):
    code = "agent_not_published"
    default_message = "This agent is not published in the directory."


def _lock(agent: Agent) -> None:
    """Hold AGENT's row until the transaction ends (a publish and a pin wait for each other);
    the caller's object stays the one changed, as callers read it afterwards."""
    Agent.objects.select_for_update().filter(pk=agent.pk).values_list("pk").first()


def pinned_to_team(agent: Agent) -> bool:
    return AgentPin.objects.filter(agent=agent, workspace__kind=Workspace.Kind.TEAM).exists()


def is_published(agent: Agent) -> bool:
    return AgentListing.objects.filter(agent=agent, published_at__isnull=False).exists()


def snapshot(agent: Agent) -> dict:
    """The fields of a listing, read from AGENT now: the only place that decides what leaves."""
    own_skills = Skill.objects.filter(layer=Skill.Layer.AGENT, agent=agent).order_by("name")
    return {
        "name": agent.name,
        "handle": agent.handle,
        "role": agent.role,
        "capabilities": list(agent.capabilities),
        "personality": agent.personality,
        "backend": agent.backend,
        "model": agent.model,
        "turn_time_limit_seconds": agent.turn_time_limit_seconds,
        "skills": [
            {
                "name": s.name,
                "description": s.description,
                "allowed_tools": s.allowed_tools,
                "requires_tools": s.requires_tools,
                "source": s.source,
                "files": s.files,
            }
            for s in own_skills
        ],
    }


def publish_agent(user, agent: Agent, *, description: str) -> tuple[AgentListing, bool]:
    """Publish AGENT (its owner's call: the caller fetched it as its owner) or republish it: the
    listing becomes a fresh snapshot. The bool says whether the listing is new."""
    description = (description or "").strip()
    if not description:
        raise AppError(
            "A listing needs a description.", code="invalid", fields={"description": "Required."}
        )
    with transaction.atomic():
        _lock(agent)
        if pinned_to_team(agent):
            raise PinnedToTeam()
        fields = snapshot(agent)
        _check_size(fields["skills"])
        listing, created = AgentListing.objects.update_or_create(
            agent=agent,
            defaults={
                **fields,
                "description": description[:DESCRIPTION_MAX],
                "published_at": timezone.now(),
            },
        )
        record_audit(
            "agent.published" if created else "agent.republished",
            actor=user,
            target=agent,
            label=agent.name,
        )
    return listing, created


def _check_size(own_skills: list[dict]) -> None:
    """ListingTooLarge past MAX_LISTING_SKILLS skills or MAX_LISTING_SKILL_BYTES of them."""
    size = sum(
        len(s["source"].encode()) + sum(len(text.encode()) for text in (s["files"] or {}).values())
        for s in own_skills
    )
    if len(own_skills) > MAX_LISTING_SKILLS or size > MAX_LISTING_SKILL_BYTES:
        raise ListingTooLarge(
            f"A listing holds at most {MAX_LISTING_SKILLS} skills and "
            f"{MAX_LISTING_SKILL_BYTES // 1024} KB of them; this agent has {len(own_skills)} "
            f"skills of {size // 1024} KB. Remove some of its own skills first."
        )


def unpublish_agent(agent: Agent) -> AgentListing:
    """Out of the directory; clones already made stay as they are."""
    with transaction.atomic():
        listing = AgentListing.objects.select_for_update().filter(agent=agent).first()
        if listing is None or listing.published_at is None:
            raise NotPublished()
        listing.published_at = None
        listing.save(update_fields=["published_at", "updated_at"])
        record_audit("agent.unpublished", actor=agent.owner, target=agent, label=agent.name)
    return listing


def set_pins(agent: Agent, workspace_ids) -> Agent:
    """Pin AGENT (the owner's call) to WORKSPACE_IDS, refusing a team workspace while it is
    published (AGT-7). Every entry point that changes pins goes through here."""
    with transaction.atomic():
        _lock(agent)
        if workspace_ids and is_published(agent):
            team = Workspace.objects.filter(pk__in=workspace_ids, kind=Workspace.Kind.TEAM)
            if team.exists():
                raise AgentPublished(fields={"pinned_workspaces": "Unpublish the agent first."})
        return agent_actions.set_agent_pins(agent, workspace_ids)


# -- the directory --------------------------------------------------------------------------


def with_clone_count(listings):
    """LISTINGS annotated with ``clone_count``: people other than the author who cloned it."""
    clones = (
        AgentClone.objects.filter(listing=OuterRef("pk"))
        .exclude(cloned_by=OuterRef("agent__owner"))
        .values("listing")
        .annotate(n=Count("cloned_by", distinct=True))
        .values("n")
    )
    return listings.annotate(clone_count=Coalesce(Subquery(clones), 0))


# Each skill of a listing as the directory shows it (name, description, tools, its files' names),
# read in PostgreSQL: a list of listings then carries no SKILL.md or file contents to Python.
SKILL_OUTLINES = RawSQL(
    """SELECT coalesce(jsonb_agg(jsonb_build_object(
        'name', s->'name', 'description', s->'description',
        'allowed_tools', s->'allowed_tools', 'requires_tools', s->'requires_tools',
        'files', (SELECT coalesce(jsonb_agg(f ORDER BY f), '[]'::jsonb)
                  FROM jsonb_object_keys(coalesce(s->'files', '{}'::jsonb)) AS f)
    ) ORDER BY i), '[]'::jsonb)
    FROM jsonb_array_elements(work_agentlisting.skills) WITH ORDINALITY AS t(s, i)""",
    (),
    output_field=JSONField(),
)


def with_skill_outlines(listings):
    """LISTINGS with ``skill_outlines`` instead of their skills' contents (SKILL_OUTLINES)."""
    return listings.defer("skills").annotate(skill_outlines=SKILL_OUTLINES)


def directory(q: str = "", sort: str = "newest"):
    """Published listings with their clone count: the best match for Q first (its significant
    words against name, handle, role and description), then newest or most cloned."""
    found = with_clone_count(published_listings())
    order = ["-published_at", "id"]
    if sort == "clones":
        order = ["-clone_count", *order]
    if q.strip():
        document = search.vector("name", "handle", "role", "description")
        found = search.matching(found, document, search.any_word_query(q))
        order.insert(0, "-rank")
    return found.order_by(*order)


def free_handle(owner, wanted: str) -> str:
    """WANTED, or WANTED-2, WANTED-3 … : the first handle none of OWNER's agents has."""
    taken = set(
        Agent.objects.filter(owner=owner, handle__startswith=wanted[:30]).values_list(
            "handle", flat=True
        )
    )
    if wanted not in taken:
        return wanted
    n = 2
    while True:
        suffix = f"-{n}"
        candidate = re.sub(r"-+$", "", wanted[: 40 - len(suffix)]) + suffix
        if candidate not in taken:
            return candidate
        n += 1


def clone_listing(user, listing: AgentListing, *, name: str = "", handle: str = "") -> Agent:
    """A new agent of USER's made from a published LISTING: its configuration, personality and
    copies of its skills (assigning each grants the tools it uses, as installing one does). Not
    pinned anywhere, local, no keys. A HANDLE given and taken is a 409; none given, the listing's
    with a numbered suffix when USER has it already."""
    with transaction.atomic():
        agent = _clone_agent(user, listing, name, handle)
        if listing.personality:
            agent_actions.set_personality(agent, listing.personality, author=user)
            agent.refresh_from_db(fields=["personality"])
        for copied in listing.skills:
            package = skills.parse_skill_md(copied["source"], files=copied.get("files") or {})
            skills.create_skill(user, package, agent=agent)
        AgentClone.objects.create(listing=listing, agent=agent, cloned_by=user)
    return agent


# How many free handles a clone tries when others of its person's take them at the same moment.
HANDLE_ATTEMPTS = 20


def _clone_agent(user, listing: AgentListing, name: str, handle: str) -> Agent:
    """The clone's agent, with HANDLE or else the listing's first free one (``free_handle``)."""

    def create(chosen: str) -> Agent:
        return agent_actions.create_agent(
            user,
            name=name or listing.name,
            handle=chosen,
            role=listing.role,
            capabilities=listing.capabilities,
            backend=listing.backend,
            model=listing.model,
            turn_time_limit_seconds=listing.turn_time_limit_seconds,
        )

    if handle:
        return create(handle)
    for _ in range(HANDLE_ATTEMPTS - 1):
        try:
            return create(free_handle(user, listing.handle))
        except HandleTaken:
            # Another clone of this person's took it since free_handle read (create_agent's
            # insert failed on the unique index, in its own savepoint): the next number.
            continue
    return create(free_handle(user, listing.handle))


def listing_standing(listing: AgentListing) -> AgentListing:
    """LISTING read again with its clone count."""
    return (
        with_clone_count(AgentListing.objects.filter(pk=listing.pk))
        .select_related("agent__owner")
        .get()
    )
