"""Connections (INT-1, INT-3): the accounts the person connected for themselves and those of the
workspace, and where the provider sends a person back after they allowed access. Connecting and
disconnecting go through the REST API (integrations/api.py)."""

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.shortcuts import redirect, render
from django.views.decorators.http import require_GET

from agntchat.core import crypto
from agntchat.core.exceptions import AppError
from agntchat.ui.shell import shell, workspace_page
from integrations import connections
from integrations.api import callback_url
from integrations.models import Connection, OAuthFlow, Provider
from workspaces.models import ensure_personal_workspace

WHAT_EACH_DOES = {
    Provider.GOOGLE: "Gmail, Calendar, Drive, Docs and Sheets",
    Provider.GITHUB: "repositories: files, branches, commits and pull requests",
}


def _rows(found: dict, providers: list[str]) -> list[dict]:
    return [
        {
            "provider": p,
            "label": Provider(p).label,
            "does": WHAT_EACH_DOES[p],
            "connection": found.get(p),
            "configured": p in providers,
        }
        for p in Provider.values
    ]


@workspace_page
def connection_list(request, membership):
    """Mine (used when I ask an agent, wherever no workspace account is set), and this
    workspace's (used for everyone's requests here)."""
    workspace = membership.workspace
    providers = connections.configured_providers()
    mine = Connection.objects.filter(user=request.user, workspace__isnull=True)
    shared = Connection.objects.filter(workspace=workspace)
    context = shell(
        request,
        membership,
        section="connections",
        mine=_rows({c.provider: c for c in mine}, providers),
        shared=_rows({c.provider: c for c in shared}, providers),
        any_configured=bool(providers),
    )
    return render(request, "integrations/connections.html", context)


@require_GET
@login_required
def oauth_callback(request, provider):
    """The provider sends the person back here with the authorization code (or an error)."""
    state = request.GET.get("state", "")[:200]
    # Where the person started (read before the flow is used up), to send them back there.
    started_in = (
        OAuthFlow.objects.filter(user=request.user, state_hash=crypto.hash_secret(state or "-"))
        .values_list("workspace_id", flat=True)
        .first()
    )
    try:
        connection = connections.finish_authorization(
            request.user,
            provider,
            callback_url(request, provider),
            state=state,
            code=request.GET.get("code", "")[:2000],
            error=request.GET.get("error", "")[:200],
        )
    except (AppError, ValueError) as exc:
        messages.error(request, getattr(exc, "message", str(exc)))
        connection = None
    else:
        messages.success(request, f"Connected {Provider(provider).label} as {connection.account}.")
    workspace_id = (
        connection.workspace_id
        if connection is not None and connection.workspace_id
        else started_in or ensure_personal_workspace(request.user).id
    )
    return redirect("connections", workspace_id)
