"""Every page of the browser app, gathered here; each app keeps its own pages' routes."""

from django.urls import include, path

from agntchat.ui import views

urlpatterns = [
    path("", include("conversations.urls")),
    path("", include("agents.urls")),
    path("app/w/<uuid:workspace_id>/sidebar/", views.sidebar, name="sidebar"),
]
