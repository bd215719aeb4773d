"""State changes of the work agents do: which tools an agent may use, and standing permissions.
Permission requests' decisions are in work/approvals.py."""

from django.db import transaction

from agents.access import is_agent_owner
from agents.actions import announce_agent_changed
from agents.exceptions import NotAgentOwner
from agents.models import Agent
from work.models import ToolGrant, ToolPermission
from work.tools.registry import Tool
from workspaces.access import require_manager
from workspaces.models import Membership


def set_tool_grant(user, agent: Agent, tool: Tool, granted: bool) -> None:
    """The agent's owner gives or takes away one tool. A platform tool given back, or another
    tool taken away, leaves no row: the default again. The agent's sockets follow at once."""
    if not is_agent_owner(user, agent):
        raise NotAgentOwner()
    with transaction.atomic():
        if granted == tool.platform:
            ToolGrant.objects.filter(agent=agent, tool=tool.name).delete()
        else:
            ToolGrant.objects.update_or_create(
                agent=agent, tool=tool.name, defaults={"granted": granted}
            )
        announce_agent_changed(agent)


def set_agent_permission(user, agent: Agent, tool: Tool, decision: str | None) -> None:
    """The owner's standing permission for one of the agent's tools, everywhere it works
    (None: back to the default of the tool's risk level)."""
    if not is_agent_owner(user, agent):
        raise NotAgentOwner()
    _set(dict(agent=agent, workspace=None, tool=tool.name, risk=""), decision, user)


def set_workspace_permission(
    membership: Membership, *, tool: str = "", risk: str = "", decision: str | None
) -> ToolPermission | None:
    """A workspace's standing permission for a tool or a whole risk level, for every agent
    working there: admins and the owner only. A workspace's ``deny`` always wins."""
    require_manager(membership)
    scope = dict(agent=None, workspace=membership.workspace, tool=tool, risk=risk)
    return _set(scope, decision, membership.user)


def _set(scope: dict, decision: str | None, user) -> ToolPermission | None:
    with transaction.atomic():
        if decision is None:
            ToolPermission.objects.filter(**scope).delete()
            return None
        permission, _ = ToolPermission.objects.update_or_create(
            **scope, defaults={"decision": decision, "set_by": user}
        )
        return permission
