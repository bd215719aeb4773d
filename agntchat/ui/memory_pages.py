"""Pages of what agents remember: one agent's memory for its owner, and a workspace's family
layer (what its agents know together) for its members. They only read: the page script teaches,
edits, pins and forgets through the REST API (work/memory_api.py), whose checks decide."""

from django.http import Http404
from django.shortcuts import render

from agents.access import access_agent, agent_appears_in, agents_visible_in, is_agent_owner
from agntchat.ui.shell import conversation_label, shell, workspace_page
from conversations.access import conversations_visible_to
from work import memory
from work.access import memories_editable_by, memories_visible_to
from work.models import MemoryItem

MAX_LISTED = 200


def _rows(user, items) -> list[dict]:
    """Each item with where it was learned (a link only where USER may read that conversation)
    and whether USER may change it."""
    items = list(
        items.select_related("agent", "created_by_user", "source_conversation").prefetch_related(
            "source_conversation__participants__user", "source_conversation__participants__agent"
        )[:MAX_LISTED]
    )
    ids = [i.id for i in items]
    editable = set(memories_editable_by(user).filter(pk__in=ids).values_list("pk", flat=True))
    sources = {i.source_conversation_id for i in items if i.source_conversation_id}
    readable = set(
        conversations_visible_to(user).filter(pk__in=sources).values_list("pk", flat=True)
    )
    rows = []
    for item in items:
        conversation = item.source_conversation
        seen = conversation is not None and conversation.id in readable
        rows.append(
            {
                "item": item,
                "editable": item.id in editable,
                "source": conversation if seen else None,
                "source_label": conversation_label(conversation, user) if seen else "",
                "source_hidden": item.source_conversation_id is not None and not seen,
                "strength_percent": round(item.strength * 100),
            }
        )
    return rows


def _query(request) -> tuple[str, bool]:
    return request.GET.get("q", "")[:500], request.GET.get("archived") == "1"


@workspace_page
def agent_memory(request, membership, agent_id):
    """What one agent remembers in this workspace: its owner's page (404 for anyone else)."""
    agent = access_agent(request.user, agent_id)
    if not is_agent_owner(request.user, agent):
        raise Http404
    q, archived = _query(request)
    items = memories_visible_to(request.user).filter(
        agent=agent, workspace=membership.workspace, archived_at__isnull=not archived
    )
    context = shell(
        request,
        membership,
        section="agents",
        agent=agent,
        q=q,
        archived=archived,
        rows=_rows(request.user, memory.listed(items, q)),
        can_teach=agent_appears_in(agent, membership.workspace_id),
        max_content=memory.MAX_CONTENT,
    )
    return render(request, "memory/agent.html", context)


@workspace_page
def family_memory(request, membership):
    """The workspace's family layer: what its agents know together, for every member (changes
    for the workspace's admins and the owner of the agent that shared an item)."""
    q, archived = _query(request)
    items = memories_visible_to(request.user).filter(
        workspace=membership.workspace,
        scope=MemoryItem.Scope.FAMILY,
        archived_at__isnull=not archived,
    )
    context = shell(
        request,
        membership,
        section="memory",
        q=q,
        archived=archived,
        rows=_rows(request.user, memory.listed(items, q)),
        # A member teaches the family layer through one of their own agents that appears here.
        teachers=list(
            agents_visible_in(membership.workspace_id).filter(owner=request.user).order_by("name")
        ),
        max_content=memory.MAX_CONTENT,
    )
    return render(request, "memory/family.html", context)
