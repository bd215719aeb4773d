"""The workspace's outside tool sources (issue 24), for its admins: MCP servers and HTTP APIs,
their functions and which agents may call them. Every change goes through the REST API
(integrations/sources_api.py); this page only shows them."""

from django.http import Http404
from django.shortcuts import render

from agents.access import agents_visible_in
from agntchat.ui.shell import shell, workspace_page
from integrations import sources
from integrations.models import SourceGrant, ToolSource


@workspace_page
def tool_sources(request, membership):
    if not membership.is_manager:
        raise Http404  # admins' settings: others are not shown that they exist
    rows = list(sources.sources_of(membership).order_by("name"))
    granted: dict = {}
    for grant in SourceGrant.objects.filter(source__in=rows).select_related("agent"):
        granted.setdefault((grant.source_id, grant.function), []).append(grant.agent)
    for source in rows:
        source.rows = [
            {**f, "agents": sorted(granted.get((source.id, f["name"]), []), key=lambda a: a.name)}
            for f in source.functions
        ]
    context = shell(
        request,
        membership,
        section="tool-sources",
        sources=rows,
        kinds=ToolSource.Kind.choices,
        methods=sources.METHODS,
        agents=list(agents_visible_in(membership.workspace_id).order_by("name")),
        credentials=list(sources.workspace_credentials(membership)),
    )
    return render(request, "integrations/tool_sources.html", context)
