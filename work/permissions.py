"""Standing permissions: whether a tool call runs, is refused, or waits for a person (TOOL-5).

Rows (``ToolPermission``) name one tool or a whole risk level, for an agent (set by its owner),
a workspace (set by its admins), or an agent inside one workspace (written by "Always allow").
For a call by an agent in a workspace, the most specific row wins, in this order:

1. a workspace's ``deny`` (of the tool or its risk level): a workspace can always say no;
2. agent in this workspace × tool; 3. agent × tool; 4. workspace × tool;
5. agent in this workspace × risk; 6. agent × risk; 7. workspace × risk;
8. the default of the tool's risk level (``DEFAULTS``).
"""

from django.db.models import Q

from agents.models import Agent
from work.models import Decision, Risk, ToolPermission

# Read and write calls act inside the conversation the agent was asked in: allowed. Calls that
# reach outside, or cannot be undone, wait for a person unless a standing permission says so.
DEFAULTS = {
    Risk.READ: Decision.ALLOW,
    Risk.WRITE: Decision.ALLOW,
    Risk.EXTERNAL: Decision.ASK,
    Risk.DESTRUCTIVE: Decision.ASK,
}


def _rank(row: ToolPermission) -> int:
    """Position of ROW in the order above (lower wins); rows that do not apply never reach
    here (the query only reads rows of this agent or workspace, for this tool or risk)."""
    by_tool = bool(row.tool)
    if row.agent_id is None:  # the workspace's
        if row.decision == Decision.DENY:
            return 1
        return 4 if by_tool else 7
    if row.workspace_id is not None:  # the agent's in this workspace
        return 2 if by_tool else 5
    return 3 if by_tool else 6


def permission_for(agent: Agent, workspace_id, tool) -> str:
    """allow, ask or deny: what happens when AGENT calls TOOL in WORKSPACE_ID."""
    rows = ToolPermission.objects.filter(
        Q(agent=agent, workspace__isnull=True)
        | Q(agent=agent, workspace_id=workspace_id)
        | Q(agent__isnull=True, workspace_id=workspace_id),
        Q(tool=tool.name) | Q(risk=tool.risk),
    )
    ranked = sorted(rows, key=_rank)
    return ranked[0].decision if ranked else DEFAULTS[tool.risk]
