from django import forms
from django.contrib.admin.forms import AdminAuthenticationForm
from django.contrib.auth.forms import AuthenticationForm, UserCreationForm
from django.core.exceptions import ValidationError

from workspaces.exceptions import LoginThrottled
from workspaces.login import authenticate_person
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


class ThrottledLogin:
    """AuthenticationForm.clean with the password checked by login.authenticate_person."""

    def clean(self):
        username = self.cleaned_data.get("username")
        password = self.cleaned_data.get("password")
        if username is not None and password:
            try:
                self.user_cache = authenticate_person(self.request, username, password)
            except LoginThrottled as exc:
                raise ValidationError(exc.message, code="throttled") from None
            if self.user_cache is None:
                raise self.get_invalid_login_error()
            self.confirm_login_allowed(self.user_cache)
        return self.cleaned_data


class LoginForm(ThrottledLogin, AuthenticationForm):
    pass


class AdminLoginForm(ThrottledLogin, AdminAuthenticationForm):
    pass
