"""Permission-checked fetches of what agents did with tools. Another tenant's id is "not found"."""

from django.db.models import Q

from agents.exceptions import AgentNotFound
from agents.models import Agent
from agntchat.core.exceptions import NotFound
from agntchat.core.ids import as_uuid
from conversations.access import conversations_visible_to
from conversations.tasks import tasks_visible_to
from work.models import AgentListing, MemoryItem, PermissionRequest, Skill, ToolCall, ToolPermission
from work.tools.registry import REGISTRY, Tool
from workspaces.models import MANAGER_ROLES, Membership


class ToolNotFound(NotFound):
    code = "tool_not_found"
    default_message = "Tool not found."


class ToolCallNotFound(NotFound):
    code = "tool_call_not_found"
    default_message = "Tool call not found."


class RequestNotFound(NotFound):
    code = "permission_request_not_found"
    default_message = "Permission request not found."


class PermissionNotFound(NotFound):
    code = "permission_not_found"
    default_message = "Permission not found."


class MemoryNotFound(NotFound):
    code = "memory_not_found"
    default_message = "Memory not found."


class SkillNotFound(NotFound):
    code = "skill_not_found"
    default_message = "Skill not found."


def skills_visible_to(user):
    """The platform's skills, the person's own (their layer and their agents'), and every
    skill published in the instance's marketplace."""
    return Skill.objects.filter(
        Q(layer=Skill.Layer.PLATFORM) | Q(owner=user) | Q(published_at__isnull=False)
    )


def skills_usable_by(user):
    """The platform's skills and the person's own layers (theirs and their agents')."""
    return Skill.objects.filter(Q(layer=Skill.Layer.PLATFORM) | Q(owner=user))


def access_skill(user, skill_id, *, published: bool = False) -> Skill:
    """A skill USER may read (PUBLISHED: one listed in the marketplace)."""
    found = skills_visible_to(user)
    if published:
        found = found.filter(published_at__isnull=False)
    skill = found.select_related("agent", "owner").filter(pk=as_uuid(skill_id)).first()
    if skill is None:
        raise SkillNotFound()
    return skill


def access_own_memory(agent, memory_id) -> MemoryItem:
    """One of AGENT's live items (its own, or a family item it shared)."""
    try:
        return MemoryItem.objects.get(pk=as_uuid(memory_id), agent=agent, archived_at__isnull=True)
    except MemoryItem.DoesNotExist:
        raise MemoryNotFound() from None


def memories_visible_to(user):
    """Memory items USER sees: everything their own agents remember, and the family layer of
    their workspaces where learned somewhere they may read (or nowhere in particular)."""
    member_of = Membership.objects.filter(user=user).values("workspace_id")
    family = Q(scope=MemoryItem.Scope.FAMILY, workspace__in=member_of) & (
        Q(source_conversation__isnull=True)
        | Q(source_conversation__in=conversations_visible_to(user))
    )
    return MemoryItem.objects.filter(Q(agent__owner=user) | family)


def memories_editable_by(user):
    """Their own agents' items in workspaces they still belong to, and the family layer of
    workspaces they administer. An owner removed from a workspace still reads what their agent
    remembers there, but no longer writes into it (a family item reaches every agent there)."""
    memberships = Membership.objects.filter(user=user)
    member_of = memberships.values("workspace_id")
    admin_of = memberships.filter(role__in=MANAGER_ROLES).values("workspace_id")
    return memories_visible_to(user).filter(
        Q(agent__owner=user, workspace__in=member_of)
        | Q(scope=MemoryItem.Scope.FAMILY, workspace__in=admin_of)
    )


def access_memory(user, memory_id, edit: bool = False) -> MemoryItem:
    found = memories_editable_by(user) if edit else memories_visible_to(user)
    try:
        return found.select_related("agent", "source_conversation").get(pk=as_uuid(memory_id))
    except MemoryItem.DoesNotExist:
        raise MemoryNotFound() from None


def access_tool(name: str) -> Tool:
    """A registered tool by name (the registry is the same for everyone)."""
    found = REGISTRY.get(name)
    if found is None:
        raise ToolNotFound()
    return found


def _where_visible(user) -> Q:
    """Made where USER may read: a conversation of theirs, or a task they may see."""
    return Q(conversation__in=conversations_visible_to(user)) | Q(
        conversation__isnull=True, task__in=tasks_visible_to(user)
    )


def tool_calls_visible_to(user):
    return ToolCall.objects.filter(_where_visible(user))


def access_tool_call(user, call_id) -> ToolCall:
    call = tool_calls_visible_to(user).filter(pk=as_uuid(call_id)).first()
    if call is None:
        raise ToolCallNotFound()
    return call


def access_permission_request(user, request_id) -> PermissionRequest:
    request = (
        PermissionRequest.objects.filter(
            call__in=tool_calls_visible_to(user), pk=as_uuid(request_id)
        )
        .select_related("call__agent", "call__workspace", "call__conversation", "decided_by")
        .first()
    )
    if request is None:
        raise RequestNotFound()
    return request


def workspace_permissions(membership):
    """The standing permissions of MEMBERSHIP's workspace (not those of an agent in it)."""
    return ToolPermission.objects.filter(workspace_id=membership.workspace_id, agent__isnull=True)


def access_workspace_permission(membership, permission_id) -> ToolPermission:
    """A standing permission of MEMBERSHIP's workspace (not one of an agent's)."""
    permission = workspace_permissions(membership).filter(pk=as_uuid(permission_id)).first()
    if permission is None:
        raise PermissionNotFound()
    return permission


class ListingNotFound(NotFound):
    code = "listing_not_found"
    default_message = "Listing not found."


def published_listings():
    """Listings in the agent directory (anyone signed in reads them): published, by a person
    still active (an account made inactive takes its listings out with it)."""
    return AgentListing.objects.filter(
        published_at__isnull=False, agent__owner__is_active=True
    ).select_related("agent__owner")


def access_listing(user, listing_id) -> AgentListing:
    """A listing in the agent directory, or not found."""
    listing = published_listings().filter(pk=as_uuid(listing_id)).first()
    if listing is None:
        raise ListingNotFound()
    return listing


def access_publishable_agent(user, agent_id) -> Agent:
    """One of USER's own agents, to publish or unpublish. Anyone else's agent is not found, even
    one USER sees in a shared workspace: its listing is its owner's business only."""
    agent = Agent.objects.filter(owner=user, pk=as_uuid(agent_id)).first()
    if agent is None:
        raise AgentNotFound()
    return agent


def own_listing(agent, *, required: bool = True) -> AgentListing | None:
    """AGENT's listing, published or not (its owner already accessed AGENT), or not found
    (None when not REQUIRED)."""
    listing = AgentListing.objects.filter(agent=agent).first()
    if listing is None and required:
        raise ListingNotFound("This agent has never been published.")
    return listing
