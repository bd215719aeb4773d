from django import forms
from django.contrib.auth.forms import UserCreationForm

from workspaces.models import User


class SignupForm(UserCreationForm):
    class Meta:
        model = User
        fields = ["username", "email"]


class WorkspaceForm(forms.Form):
    name = forms.CharField(max_length=80)
