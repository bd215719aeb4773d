"""Shell fragments the page script refreshes live (the sidebar)."""

from django.shortcuts import render

from agntchat.ui.shell import shell, workspace_page
from conversations.access import access_conversation


@workspace_page
def sidebar(request, membership):
    """The sidebar of a workspace (``?current=`` marks the open conversation)."""
    current = None
    if request.GET.get("current"):
        current = access_conversation(request.user, request.GET["current"])
    return render(request, "ui/_sidebar.html", shell(request, membership, current=current))
