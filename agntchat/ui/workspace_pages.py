"""Pages: sign up, landing, workspaces (home, new, members and invitations), invitations."""

from django.apps import apps
from django.contrib import messages
from django.contrib.auth import login
from django.contrib.auth.decorators import login_required
from django.db import IntegrityError, transaction
from django.db.models import Count, F
from django.http import Http404
from django.shortcuts import redirect, render
from django.utils import timezone
from django.utils.http import url_has_allowed_host_and_scheme
from rest_framework.exceptions import ValidationError

from agents.models import Host, HostRestart
from agntchat.core.api import validated
from agntchat.core.exceptions import AppError, RateLimited
from agntchat.ui.shell import LAST_WORKSPACE, shell, workspace_page
from conversations.access import conversations_visible_to
from conversations.models import Conversation
from integrations import telegram
from work.access import workspace_permissions
from work.hosting import fingerprint
from work.models import Decision, Risk
from work.permissions import DEFAULTS
from workspaces import accounts, actions
from workspaces.access import (
    invitation_refusal,
    removal_refusal,
    role_change_refusal,
    workspaces_visible_to,
)
from workspaces.api import AuditQuery, audit_page
from workspaces.forms import SignupForm, WorkspaceForm
from workspaces.login import client_address, remember_address
from workspaces.models import AuditEntry, Invitation, Role


def _next_url(request, default="home"):
    """Where to go after signing up: a safe ?next= (an invitation link, say) or DEFAULT."""
    target = request.POST.get("next") or request.GET.get("next") or ""
    if url_has_allowed_host_and_scheme(target, {request.get_host()}, request.is_secure()):
        return target
    return default


def signup(request):
    form = SignupForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        try:
            accounts.count_signup(client_address(request))
            with transaction.atomic():
                user = form.save()
        except RateLimited as exc:
            form.add_error(None, exc.message)
        except IntegrityError:  # the name was taken a moment ago, by a sign-up beside this one
            form.add_error("username", "A user with that username already exists.")
        else:
            login(request, user, backend="django.contrib.auth.backends.ModelBackend")
            # Where they signed up is theirs: others' failures never lock them out of it.
            remember_address(user.username, client_address(request))
            if user.email:
                try:
                    accounts.request_verification(user)
                    messages.info(
                        request,
                        f"We sent a link to {user.email}: open it to receive emails there.",
                    )
                except RateLimited as exc:  # that address was sent links a lot lately
                    messages.error(
                        request,
                        f"No link was sent to {user.email}. {exc.message} "
                        "Ask for one from your account page then.",
                    )
            return redirect(_next_url(request))
    return render(
        request, "registration/signup.html", {"form": form, "next": _next_url(request, "")}
    )


@login_required
def home(request):
    """The last workspace used in this session. A first visit opens where the conversations
    are: the person's most recently active channel or DM (a team's #general rather than an
    empty personal workspace); with none anywhere, the personal workspace (it always exists)."""
    workspaces = list(workspaces_visible_to(request.user))
    last = request.session.get(LAST_WORKSPACE)
    chosen = next((w for w in workspaces if str(w.id) == last), None)
    if chosen is not None:
        return redirect("workspace", workspace_id=chosen.id)
    latest = (
        conversations_visible_to(request.user)
        .filter(
            kind__in=[Conversation.Kind.CHANNEL, Conversation.Kind.DIRECT], archived_at__isnull=True
        )
        .order_by(F("last_message_at").desc(nulls_last=True), "-created_at")
        .values_list("workspace_id", "id")
        .first()
    )
    if latest is not None:
        return redirect("conversation", workspace_id=latest[0], conversation_id=latest[1])
    return redirect("workspace", workspace_id=workspaces[0].id)


@login_required
def new_workspace(request):
    form = WorkspaceForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        try:
            workspace = actions.create_team_workspace(request.user, form.cleaned_data["name"])
        except AppError as refused:
            form.add_error(None, refused.message)
        else:
            messages.success(request, f"{workspace.name} is ready. Start with a channel.")
            return redirect("workspace", workspace_id=workspace.id)
    return render(
        request,
        "workspaces/new.html",
        {"form": form, "workspaces": list(workspaces_visible_to(request.user))},
    )


@workspace_page
def workspace_home(request, membership):
    """Open the workspace's first channel, or explain how to start."""
    first = (
        Conversation.objects.filter(
            workspace=membership.workspace, kind="channel", archived_at__isnull=True
        )
        .order_by(F("last_message_at").desc(nulls_last=True), "created_at")
        .first()
    )
    if first is not None:
        return redirect(
            "conversation", workspace_id=membership.workspace_id, conversation_id=first.id
        )
    return render(request, "workspaces/empty.html", shell(request, membership))


@workspace_page
def members(request, membership):
    """Members and roles; invitations for admins; rename, leave and delete where allowed."""
    workspace = membership.workspace
    members = list(workspace.memberships.select_related("user").order_by("created_at"))
    for member in members:  # the controls shown are exactly what the actions allow
        member.can_change_role = role_change_refusal(membership, member) is None
        member.can_remove = (
            member.user_id != membership.user_id and removal_refusal(membership, member) is None
        )
    context = shell(
        request,
        membership,
        section="members",
        members=members,
        can_invite_admin=invitation_refusal(membership, Role.ADMIN) is None,
        invitations=(
            Invitation.objects.filter(workspace=workspace).order_by("-created_at")[:50]
            if membership.is_manager
            else []
        ),
        roles=[Role.MEMBER, Role.ADMIN],
        now=timezone.now(),
        **(_tool_settings(membership) if membership.is_manager else {}),
        **(_hosts(membership) if membership.is_manager else {}),
        telegram_bot=telegram.bot_of(workspace.id) if membership.is_manager else None,
        audit_entries=(
            _labelled(AuditEntry.objects.filter(workspace=workspace).order_by("-created_at")[:20])
            if membership.is_manager
            else []
        ),
    )
    return render(request, "workspaces/members.html", context)


@workspace_page
def audit_log(request, membership):
    """The whole audit log, newest first, a page at a time (``before``: the last entry seen) and
    by action: for whom the REST log is (the owner and admins); anyone else finds no page."""
    if not membership.is_manager:
        raise Http404
    query, problem = request.GET.dict(), ""
    try:
        query = validated(AuditQuery, {k: v for k, v in query.items() if k in ("action", "before")})
        entries, has_more = audit_page(membership, query)
    except (AppError, ValidationError):
        # A mistyped or stale link (a malformed id, an entry not in this log): the newest entries,
        # saying why, rather than a 404 that reads as "no such workspace". An entry of another
        # workspace gets the same answer as a malformed one: nothing about it shows.
        problem = "This link's filter is not valid (mistyped or out of date): the newest entries are shown instead."
        query = validated(AuditQuery, {})
        entries, has_more = audit_page(membership, query)
    actions_here = (
        AuditEntry.objects.filter(workspace=membership.workspace)
        .order_by("action")
        .values_list("action", flat=True)
        .distinct()
    )
    context = shell(
        request,
        membership,
        section="members",
        entries=_labelled(entries),
        older=entries[-1].id if has_more else None,
        action=query.get("action", ""),
        actions=[(name, _action_label(name)) for name in actions_here],
        first_page=not query.get("before"),
        problem=problem,
    )
    return render(request, "workspaces/audit.html", context)


def _action_label(action: str) -> str:
    """``approval.approved`` → "Approval approved", ``agent_key.created`` → "Agent key created"."""
    return action.replace(".", " ").replace("_", " ").capitalize()


def _labelled(entries) -> list:
    """ENTRIES with what people read: ``what`` for the action, ``target_kind`` for the model
    name of the target (``permissionrequest`` → "permission request", its verbose name)."""
    kinds = {model.__name__.lower(): model._meta.verbose_name for model in apps.get_models()}
    entries = list(entries)
    for entry in entries:
        entry.what = _action_label(entry.action)
        entry.target_kind = kinds.get(entry.target_type, entry.target_type)
    return entries


def _hosts(membership) -> dict:
    """The workspace's own hosts, with how full each is and its last rolling restart."""
    hosts = list(
        Host.objects.filter(workspace=membership.workspace)
        .annotate(placed=Count("agents"))
        .order_by("name")
    )
    last = {}
    for restart in HostRestart.objects.filter(host__in=hosts).order_by("host_id", "-created_at"):
        last.setdefault(restart.host_id, restart)
    for host in hosts:
        host.fingerprint = fingerprint(host.host_key)
        host.last_restart = last.get(host.pk)
    return {"hosts": hosts}


def _tool_settings(membership) -> dict:
    """The workspace's standing tool permissions: one per risk level (or its default), and
    those set for single tools."""
    rows = list(workspace_permissions(membership).order_by("tool", "risk"))
    by_risk = {p.risk: p for p in rows if p.risk}
    return {
        "risk_permissions": [
            {"risk": risk, "default": DEFAULTS[risk], "set": by_risk.get(risk)}
            for risk in Risk.values
        ],
        "tool_permissions": [p for p in rows if p.tool],
        "decisions": Decision.choices,
    }


def accept_invite(request, token):
    """An invite link says who invites whom where; a visitor signs in or up and comes back here
    to accept (the link is the secret: whoever holds it may read this much)."""
    try:
        invitation = actions.invitation_for(token)
    except AppError as exc:
        return render(request, "workspaces/invite.html", {"error": exc.message}, status=exc.status)
    if not request.user.is_authenticated:
        return render(
            request, "workspaces/invite.html", {"invitation": invitation, "next": request.path}
        )
    if request.method == "POST":
        try:
            membership = actions.accept_invitation(request.user, token)
        except AppError as exc:
            messages.error(request, exc.message)
            return redirect("home")
        messages.success(request, f"You joined {membership.workspace.name}.")
        return redirect("workspace", workspace_id=membership.workspace_id)
    return render(request, "workspaces/invite.html", {"invitation": invitation, "token": token})
