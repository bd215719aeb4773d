from django import forms
from django.contrib.auth.forms import UserCreationForm

from workspaces.models import User


class SignupForm(UserCreationForm):
    class Meta:
        model = User
        fields = ["username", "display_name", "email"]
        labels = {"display_name": "Your name", "email": "Email"}
        help_texts = {"display_name": "How people and agents see you. Optional."}


class WorkspaceForm(forms.Form):
    name = forms.CharField(
        label="Workspace name",
        max_length=80,
        widget=forms.TextInput(attrs={"placeholder": "e.g. Acme research", "autofocus": True}),
    )
