"""The one tool registry (TOOL-1): every tool an agent can call, what it takes, how risky it is,
and the server-side handler that does it by calling our actions.

A tool is registered once, by name. Which of them an agent may use is ``granted_tools``: the
platform tools unless its owner took some away, plus any given to it (later: through skills
and connections). The model sees exactly that set, in name order, in its directives' stable
block, so the cached prefix stays the same from turn to turn.

Apps above this one add tools that are not fixed at start-up (a workspace's outside MCP servers
and HTTP APIs, integrations/sources.py) as a *source*: ``register_source(source)``, where the
source says which of its tools an agent was granted (``ToolSource`` below). Such a tool belongs
to one workspace (``Tool.workspace_id``) and is only run for work of that workspace.
"""

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol

from agents.models import Agent
from agntchat.core.events import Verbatim
from conversations.models import Conversation, Message, Task
from work.models import Risk, ToolGrant
from workspaces.models import Workspace


@dataclass
class ToolContext:
    """Where a call happens: the agent, the workspace and conversation of the work item it was
    made in, and that item (the message being answered, or the task being run)."""

    agent: Agent
    workspace: Workspace
    conversation: Conversation | None
    message: Message | None = None
    task: Task | None = None
    call_id: str = ""


@dataclass(frozen=True)
class Tool:
    """One tool. HANDLER(context, arguments) returns what the model reads: text, or JSON data
    (sent as JSON text). It raises an AppError (any action's refusal) to fail with that
    error's message; ARGUMENTS were checked against INPUT_SCHEMA before it runs."""

    name: str
    description: str
    input_schema: dict
    risk: str
    handler: Callable[[ToolContext, dict], Any]
    # The kind of outside connection it needs (integrations); "" for none.
    connection: str = ""
    # Granted to every agent unless its owner takes it away.
    platform: bool = True
    # How long the handler may run before the call fails (and changes nothing).
    timeout_seconds: float = 30.0
    title: str = field(default="")
    # A source's tool belongs to this workspace only (None: usable wherever the agent works).
    workspace_id: Any = None

    @property
    def summary(self) -> str:
        """The description's first sentence: the stable block's one line for it."""
        first = self.description.split(". ")[0].strip()
        return first if first.endswith(".") else first + "."


REGISTRY: dict[str, Tool] = {}

# Tools only the platform grants, with what they serve: ``pulse_report`` with a pulse
# (routines.actions.create_routine), ``loop_report`` with a loop (routines.loops.start_loop).
# A skill naming one grants nothing (work.skills), nor does a clone's copy of that skill.
GRANTED_BY_PLATFORM_ONLY = frozenset({"pulse_report", "loop_report"})

# Arguments with no parameters: an empty object and nothing else.
NO_ARGUMENTS = {"type": "object", "properties": {}, "additionalProperties": False}


def register(tool: Tool) -> Tool:
    if tool.name in REGISTRY and REGISTRY[tool.name] is not tool:
        raise ValueError(f"a tool named {tool.name!r} is registered already")
    if tool.risk not in Risk.values:
        raise ValueError(f"{tool.name}: unknown risk {tool.risk!r}")
    REGISTRY[tool.name] = tool
    return tool


def tool(name: str, *, description: str, risk: str, input_schema: dict | None = None, **options):
    """Register the decorated function as the handler of tool NAME."""

    def decorate(handler):
        register(
            Tool(
                name=name,
                description=description,
                input_schema=input_schema or NO_ARGUMENTS,
                risk=risk,
                handler=handler,
                **options,
            )
        )
        return handler

    return decorate


class ToolSource(Protocol):
    """Tools granted to agents one by one from outside the registry (registered by an app above
    this one). Each answers from its own rows, read afresh; a static tool's name wins over a
    source's (sources name theirs so that they never clash: ``<source>__<function>``)."""

    def tools_for(self, agent: Agent) -> list[Tool]:
        """The source's tools AGENT was granted, one per name."""

    def find(self, agent: Agent, name: str, workspace_id=None) -> Tool | None:
        """Tool NAME if AGENT was granted it; the one of WORKSPACE_ID first, if several."""

    def reach(self, agent_ids: Iterable) -> dict:
        """{agent id: names of the source's tools it was granted}, for many agents at once."""


SOURCES: list[ToolSource] = []


def register_source(source: ToolSource) -> ToolSource:
    if source not in SOURCES:
        SOURCES.append(source)
    return source


def granted_tools(agent: Agent, grants: dict[str, bool] | None = None) -> list[Tool]:
    """The tools AGENT may use, in name order. GRANTS (tool → granted), when the caller read
    them already; otherwise they are read here. Sources add theirs (one query each)."""
    if grants is None:
        grants = dict(ToolGrant.objects.filter(agent=agent).values_list("tool", "granted"))
    tools = {name: t for name, t in REGISTRY.items() if grants.get(name, t.platform)}
    for source in SOURCES:
        for t in source.tools_for(agent):
            tools.setdefault(t.name, t)
    return [tools[name] for name in sorted(tools)]


def granted_tool(agent: Agent, name: str, workspace_id=None) -> Tool | None:
    """Tool NAME if AGENT may use it now (read afresh: an owner's change applies at once). A
    source's tool granted in several workspaces: the one of WORKSPACE_ID, if there is one."""
    found = REGISTRY.get(name)
    if found is None:
        for source in SOURCES:
            if (from_source := source.find(agent, name, workspace_id)) is not None:
                return from_source
        return None
    grant = ToolGrant.objects.filter(agent=agent, tool=name).values_list("granted", flat=True)
    granted = next(iter(grant), found.platform)
    return found if granted else None


def tool_reach(agent_ids) -> dict:
    """{agent id: the names of the tools it may use}, for many agents in one query (the owner
    choice of a task that needs tools, TASK-2)."""
    grants: dict = {agent_id: {} for agent_id in agent_ids}
    for agent_id, name, granted in ToolGrant.objects.filter(agent_id__in=agent_ids).values_list(
        "agent_id", "tool", "granted"
    ):
        grants[agent_id][name] = granted
    reach = {
        agent_id: {name for name, t in REGISTRY.items() if given.get(name, t.platform)}
        for agent_id, given in grants.items()
    }
    for source in SOURCES:
        for agent_id, names in source.reach(list(reach)).items():
            reach[agent_id] |= names
    return reach


def agent_tools(agent: Agent) -> list[Tool]:
    """``granted_tools(agent)``, read once per agent object: the agent socket keeps one object
    per connection and drops this when the agent's configuration changes (``forget_tools``)."""
    cached = getattr(agent, "_granted_tools", None)
    if cached is None:
        cached = agent._granted_tools = granted_tools(agent)
    return cached


def forget_tools(agent: Agent) -> None:
    agent.__dict__.pop("_granted_tools", None)


def definitions(tools: list[Tool]) -> list[dict]:
    """The tools as a work payload carries them: name, description and the input schema, which
    goes as it is (its property names are the model's, not our fields)."""
    return [
        {"name": t.name, "description": t.description, "input_schema": Verbatim(t.input_schema)}
        for t in tools
    ]
