"""The work map page (MAP-1): the graph of how a workspace's work connects. It only renders the
frame; static/map.js draws the graph from the REST endpoint (work/map_api.py) and fetches it
again when the workspace's tasks change."""

from django.shortcuts import render

from agents.access import agents_visible_in
from agntchat.ui.shell import shell, workspace_page
from work.map import DEFAULT_WINDOW, WINDOWS

WINDOW_LABELS = {
    "24h": "Last 24 hours",
    "7d": "Last 7 days",
    "30d": "Last 30 days",
    "all": "All time",
}


@workspace_page
def work_map(request, membership):
    context = shell(
        request,
        membership,
        section="map",
        agents=agents_visible_in(membership.workspace_id).order_by("name"),
        windows=[(key, WINDOW_LABELS[key]) for key in WINDOWS],
        default_window=DEFAULT_WINDOW,
    )
    return render(request, "ui/map.html", context)
