"""Pages for signing up, logging in and landing. The full chat UI builds on these."""

from django.contrib import messages
from django.contrib.auth import login
from django.contrib.auth.decorators import login_required
from django.shortcuts import redirect, render

from agntchat.core.exceptions import AppError
from workspaces import actions
from workspaces.access import workspaces_visible_to
from workspaces.forms import SignupForm, WorkspaceForm


def signup(request):
    form = SignupForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        user = form.save()
        login(request, user, backend="django.contrib.auth.backends.ModelBackend")
        return redirect("home")
    return render(request, "registration/signup.html", {"form": form})


@login_required
def home(request):
    form = WorkspaceForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        actions.create_team_workspace(request.user, form.cleaned_data["name"])
        return redirect("home")
    return render(
        request,
        "workspaces/home.html",
        {"workspaces": workspaces_visible_to(request.user), "form": form},
    )


@login_required
def accept_invite(request, token):
    if request.method == "POST":
        try:
            membership = actions.accept_invitation(request.user, token)
        except AppError as exc:
            messages.error(request, exc.message)
            return redirect("home")
        messages.success(request, f"You joined {membership.workspace.name}.")
        return redirect("home")
    return render(request, "workspaces/invite.html", {"token": token})
