"""The inbox: what needs the person, newest first, from every workspace of theirs; and its
settings. They only read: the page script (static/inbox.js) marks read through the REST API
(workspaces/notifications_api.py)."""

from django.shortcuts import render

from agntchat.ui.shell import shell, workspace_page
from work.approvals import decidable
from workspaces.access import notifications_visible_to

MAX_LISTED = 100
KIND_ICONS = {"mention": "@", "direct": "✉", "approval": "⚑", "reminder": "⏰"}


@workspace_page
def inbox(request, membership):
    listed = notifications_visible_to(request.user).select_related("workspace")
    shown = list(listed.order_by("-created_at", "-id")[:MAX_LISTED])
    # An approval still waiting, when the person may decide it: Approve and Deny on its item.
    waiting = decidable(request.user, [n.target_id for n in shown if n.kind == "approval"])
    rows = [
        {"n": n, "icon": KIND_ICONS.get(n.kind, "•"), "decide": n.target_id in waiting}
        for n in shown
    ]
    context = shell(request, membership, section="inbox", rows=rows)
    return render(request, "ui/inbox.html", context)


@workspace_page
def inbox_settings(request, membership):
    context = shell(request, membership, section="inbox", digest=request.user.digest)
    return render(request, "ui/inbox_settings.html", context)
