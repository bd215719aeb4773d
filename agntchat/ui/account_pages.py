"""A person's own account: their email address (and proving it is theirs) and their password."""

from django.contrib import messages
from django.contrib.auth import update_session_auth_hash
from django.contrib.auth.decorators import login_required
from django.contrib.auth.forms import PasswordChangeForm
from django.db import transaction
from django.shortcuts import redirect, render

from agntchat.core.exceptions import AppError
from agntchat.ui.shell import shell, workspace_page
from workspaces import accounts
from workspaces.audit import record_audit
from workspaces.login import end_live_sockets


@workspace_page
def account(request, membership):
    password_form = PasswordChangeForm(request.user)
    if request.method == "POST" and request.POST.get("action") == "verify":
        try:
            accounts.request_verification(request.user)
            messages.success(request, f"A link is on its way to {request.user.email}.")
        except AppError as exc:
            messages.error(request, exc.message)
        return redirect("account", workspace_id=membership.workspace_id)
    if request.method == "POST" and request.POST.get("action") == "password":
        password_form = PasswordChangeForm(request.user, request.POST)
        if password_form.is_valid():
            with transaction.atomic():
                user = password_form.save()
                record_audit("password.changed", actor=user, target=user, label=user.label)
            # This session stays signed in; every other one of the person's ends (Django checks
            # each session against the password; their live sockets close at their next check).
            update_session_auth_hash(request, user)
            # Every live socket of theirs closes now (a stolen session's included); this page
            # reloads, and its browser opens a new one with the new session.
            end_live_sockets(user)
            messages.success(
                request, "Your password is changed; your other sessions are signed out."
            )
            return redirect("account", workspace_id=membership.workspace_id)
    context = shell(request, membership, section="account", password_form=password_form)
    return render(request, "ui/account.html", context)


@login_required
def verify_email(request, token):
    """The link from the verification email, opened while signed in as its person."""
    try:
        accounts.verify_email(request.user, token)
        messages.success(request, f"{request.user.email} is confirmed: emails will go there.")
    except AppError as exc:
        messages.error(request, exc.message)
    return redirect("home")
