"""Agents as things an outside client names: the name each agent visible to a person goes by
(an MCP tool name, a model name), and the workspace its task runs in when the client names one
or none. Sync, for one database hop from a front."""

import hashlib
import re
from collections import Counter
from dataclasses import dataclass

from agents.access import agents_visible_to, workspaces_of_agent
from agents.models import Agent
from agntchat.core.ids import as_uuid
from workspaces.models import Workspace

# MCP tool names: 1-128 characters of [A-Za-z0-9_.-]. Handles are slugs and fit already.
NAME_LENGTH = 128
PLAIN = re.compile(r"[A-Za-z0-9_.-]+")
UNSAFE = re.compile(r"[^A-Za-z0-9_.-]")
HASH_CHARS = 12  # of the username's sha256, in hex: 48 bits, too many to craft a match for


@dataclass(frozen=True)
class Named:
    name: str
    agent: Agent
    qualified: bool  # another visible agent has the same handle


def qualified_name(agent: Agent) -> str:
    """``handle.owner``. A plain username (only [A-Za-z0-9_.-]) that fits is kept as it is, so
    names already in clients' configuration stay valid. Any other one is spelt with ``_`` for
    each character outside that set, cut to fit, and ends in ``-`` and a hash of the whole
    username: ``mcp+dan`` and ``mcp_dan`` (or two long usernames sharing their start) never
    get one name from their spelling alone."""
    username = agent.owner.username
    name = f"{agent.handle}.{username}"
    if PLAIN.fullmatch(username) and len(name) <= NAME_LENGTH:
        return name
    digest = hashlib.sha256(username.encode()).hexdigest()[:HASH_CHARS]
    room = NAME_LENGTH - len(agent.handle) - len(digest) - 2
    return f"{agent.handle}.{UNSAFE.sub('_', username)[:room]}-{digest}"


def id_name(agent: Agent) -> str:
    """``handle.<agent id>``: the name of an agent whose qualified name another visible agent
    also has (a username made to look like another, since any name is some plain username)."""
    return f"{agent.handle}.{agent.id}"


def _names(person) -> list[Named]:
    """Every agent PERSON can see under the name it goes by (``named_agents``), a name that is
    still shared included."""
    agents = list(
        agents_visible_to(person).select_related("owner").order_by("handle", "owner__username")
    )
    handles = Counter(agent.handle for agent in agents)
    named = [
        Named(qualified_name(agent), agent, True)
        if handles[agent.handle] > 1
        else Named(agent.handle, agent, False)
        for agent in agents
    ]
    taken = Counter(n.name for n in named)
    return [Named(id_name(n.agent), n.agent, True) if taken[n.name] > 1 else n for n in named]


def named_agents(person) -> list[Named]:
    """Every agent PERSON can see, each under its handle; where two share one, both are qualified
    with their owner's username (``nova.alice``, ``nova.bob``). Handles never hold a dot, so a
    qualified name never equals a plain one. Where two qualified names are still one, both
    agents go by their ``id_name``. No name is listed twice: one that a username spelt as
    another agent's id makes clash once more is left out (``agent_named`` still takes ids)."""
    named = _names(person)
    taken = Counter(n.name for n in named)
    return [n for n in named if taken[n.name] == 1]


class Ambiguous(Exception):
    """A name that more than one visible agent goes by; the message names the choices."""


def agent_named(person, name: str) -> Named | None:
    """The visible agent NAME means to PERSON: the name ``named_agents`` gives it, its qualified
    name or its ``id_name`` (always accepted); None when no visible agent goes by it. A name
    more than one visible agent goes by (a shared handle, a qualified name made to clash) raises
    Ambiguous: it is never resolved to one of them."""
    named = _names(person)
    found = [n for n in named if name in (n.name, qualified_name(n.agent), id_name(n.agent))] or [
        n for n in named if n.agent.handle == name
    ]
    if len(found) > 1:
        raise Ambiguous(
            f"More than one agent you can see is called {name!r}: name one of "
            + ", ".join(f"`{n.name}` (of {n.agent.owner.username})" for n in found)
            + "."
        )
    return found[0] if found else None


class NoWorkspace(Exception):
    """No single workspace fits; the message says which ones the client can name."""


def shared_workspaces(person, agent: Agent) -> list[Workspace]:
    """PERSON's workspaces where AGENT appears, by name."""
    return list(
        workspaces_of_agent(agent).filter(memberships__user=person).distinct().order_by("name")
    )


def home_workspace(person, agent: Agent) -> Workspace | None:
    """Where PERSON talks with AGENT when nothing names a workspace (an API session): as
    ``workspace_for`` chooses with none named, else the oldest of them; None when they share
    none."""
    try:
        return workspace_for(person, agent, None)
    except NoWorkspace:
        return min(shared_workspaces(person, agent), key=lambda w: w.created_at, default=None)


def workspace_for(person, agent: Agent, wanted: str | None) -> Workspace:
    """Where PERSON's task for AGENT runs: WANTED (a workspace id or name) among PERSON's
    workspaces where AGENT appears; with none named, the only such workspace, else PERSON's
    personal one if AGENT appears there. Otherwise NoWorkspace, naming the choices."""
    choices = shared_workspaces(person, agent)
    listed = ", ".join(f"{w.name!r} ({w.id})" for w in choices) or "none"
    if wanted:
        wanted = wanted.strip()
        wanted_id = as_uuid(wanted)
        found = [w for w in choices if w.id == wanted_id] or [
            w for w in choices if w.name.casefold() == wanted.casefold()
        ]
        if len(found) == 1:
            return found[0]
        if found:
            raise NoWorkspace(
                f"Several workspaces are called {wanted!r}; name one by id: {listed}."
            )
        raise NoWorkspace(
            f"@{agent.handle} does not work in a workspace {wanted!r} of yours. "
            f"Workspaces where it does: {listed}."
        )
    if len(choices) == 1:
        return choices[0]
    personal = [w for w in choices if w.is_personal and w.owner_id == person.id]
    if personal:
        return personal[0]
    if not choices:
        raise NoWorkspace(f"@{agent.handle} works in none of your workspaces.")
    raise NoWorkspace(
        f"@{agent.handle} works in several of your workspaces; say which in 'workspace' "
        f"(id or name): {listed}."
    )
