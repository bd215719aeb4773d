"""Agents as things an outside client names: the name each agent visible to a person goes by
(an MCP tool name, a model name), and the workspace its task runs in when the client names one
or none. Sync, for one database hop from a front."""

import re
from dataclasses import dataclass

from agents.access import agents_visible_to, workspaces_of_agent
from agents.models import Agent
from agntchat.core.ids import as_uuid
from workspaces.models import Workspace

# MCP tool names: 1-128 characters of [A-Za-z0-9_.-]. Handles are slugs and fit already.
NAME_LENGTH = 128
UNSAFE = re.compile(r"[^A-Za-z0-9_.-]")


@dataclass(frozen=True)
class Named:
    name: str
    agent: Agent
    qualified: bool  # another visible agent has the same handle


def qualified_name(agent: Agent) -> str:
    return f"{agent.handle}.{UNSAFE.sub('_', agent.owner.username)}"[:NAME_LENGTH]


def named_agents(person) -> list[Named]:
    """Every agent PERSON can see, each under its handle; where two share one, both are qualified
    with their owner's username (``nova.alice``, ``nova.bob``). Handles never hold a dot, so a
    qualified name never equals a plain one."""
    agents = list(
        agents_visible_to(person).select_related("owner").order_by("handle", "owner__username")
    )
    count: dict[str, int] = {}
    for agent in agents:
        count[agent.handle] = count.get(agent.handle, 0) + 1
    return [
        Named(qualified_name(agent), agent, True)
        if count[agent.handle] > 1
        else Named(agent.handle, agent, False)
        for agent in agents
    ]


class Ambiguous(Exception):
    """A bare handle that more than one visible agent has; the message names the choices."""


def agent_named(person, name: str) -> Named | None:
    """The visible agent NAME means to PERSON: the name ``named_agents`` gives it, or its
    qualified name (always accepted); None when no visible agent goes by it. A handle two visible
    agents share raises Ambiguous."""
    named = named_agents(person)
    found = next((n for n in named if name in (n.name, qualified_name(n.agent))), None)
    if found is None and (sharing := [n.name for n in named if n.agent.handle == name]):
        raise Ambiguous(
            f"More than one agent you can see is called {name!r}: name one of "
            + ", ".join(f"`{choice}`" for choice in sharing)
            + "."
        )
    return found


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
