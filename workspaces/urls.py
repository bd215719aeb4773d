from django.contrib.auth import views as auth_views
from django.urls import path

from workspaces import views
from workspaces.forms import LoginForm

urlpatterns = [
    path("", views.home, name="home"),
    path(
        "login/",
        auth_views.LoginView.as_view(
            authentication_form=LoginForm, redirect_authenticated_user=True
        ),
        name="login",
    ),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("signup/", views.signup, name="signup"),
    path("invite/<str:token>/", views.accept_invite, name="accept-invite"),
    path("w/new/", views.new_workspace, name="new-workspace"),
    path("w/<uuid:workspace_id>/", views.workspace_home, name="workspace"),
    path("w/<uuid:workspace_id>/members/", views.members, name="members"),
]
