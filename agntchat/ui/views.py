"""Shell fragments the page script refreshes live (the sidebar)."""

from django.shortcuts import render

from agntchat.ui.shell import shell, workspace_page
from conversations.access import access_conversation


@workspace_page
def sidebar(request, membership):
    """The sidebar of a workspace (``?current=`` marks the open conversation, ``?section=`` the
    page's entry in the workspace's menu)."""
    current = None
    if request.GET.get("current"):
        current = access_conversation(request.user, request.GET["current"])
    section = request.GET.get("section", "")[:20]
    return render(
        request, "ui/_sidebar.html", shell(request, membership, current=current, section=section)
    )
