"""A person's own account: their name and time zone, their email address (and proving it is
theirs) and their password."""

from django import forms
from django.contrib import messages
from django.contrib.auth import update_session_auth_hash
from django.contrib.auth.decorators import login_required
from django.contrib.auth.forms import PasswordChangeForm
from django.db import transaction
from django.shortcuts import redirect, render

from agntchat.core.api import ZONE_NAMES
from agntchat.core.exceptions import AppError
from agntchat.ui.shell import shell, workspace_page
from workspaces import accounts
from workspaces.actions import live_api_tokens, revoke_api_token, update_profile
from workspaces.audit import record_audit
from workspaces.login import end_live_sockets


class ProfileForm(forms.Form):
    """What the REST API's MeChange takes (display_name up to 80 characters, blank allowed; an
    IANA time zone), validated the same way. A plain form, not a ModelForm: a refused form must
    leave request.user (and so the sidebar's name) as it was."""

    display_name = forms.CharField(
        label="Display name",
        max_length=80,
        required=False,
        help_text="How others see you. Left empty, your username is shown.",
    )
    timezone = forms.ChoiceField(
        label="Time zone",
        choices=[(zone, zone) for zone in ZONE_NAMES],
        error_messages={"invalid_choice": "Unknown time zone."},
        help_text="Routine times are shown and entered in this zone.",
    )


def save_profile(request, form) -> bool:
    """Save a valid FORM to request.user (and only them). An AppError from the action becomes
    the form's errors (False)."""
    user = request.user
    try:
        update_profile(
            user,
            display_name=form.cleaned_data["display_name"],
            zone_name=form.cleaned_data["timezone"],
        )
    except AppError as exc:
        for name, message in exc.fields.items():
            form.add_error(name if name in form.fields else None, message)
        if not form.errors:
            form.add_error(None, exc.message)
        user.refresh_from_db(fields=["display_name", "timezone"])
        return False
    return True


@workspace_page
def account(request, membership):
    user = request.user
    profile_form = ProfileForm(
        initial={"display_name": user.display_name, "timezone": user.timezone}
    )
    password_form = PasswordChangeForm(request.user)
    if request.method == "POST" and request.POST.get("action") == "profile":
        profile_form = ProfileForm(request.POST)
        if profile_form.is_valid() and save_profile(request, profile_form):
            messages.success(request, "Your profile is saved.")
            return redirect("account", workspace_id=membership.workspace_id)
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
            said = "Your password is changed; your other sessions are signed out"
            if request.POST.get("revoke_tokens"):
                # Whoever had the old password could have minted a token with it, which would
                # outlive the change (a laptop's agntchat-host holds one: a new one is needed).
                for token in live_api_tokens(user):
                    revoke_api_token(token)
                said += ", and your API tokens revoked"
            messages.success(request, said + ".")
            return redirect("account", workspace_id=membership.workspace_id)
    if not password_form.is_bound:
        # Django's form puts the cursor in "Old password", which is no longer at the page's top.
        password_form.fields["old_password"].widget.attrs.pop("autofocus", None)
    context = shell(
        request,
        membership,
        section="account",
        profile_form=profile_form,
        password_form=password_form,
        live_tokens=live_api_tokens(user).count(),
    )
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
