"""Every page of the browser app. Pages sit at the top of the house: they read from every app."""

from django.contrib.auth import views as auth_views
from django.urls import path

from agntchat.ui import (
    account_pages,
    agent_pages,
    connection_pages,
    conversation_pages,
    directory_pages,
    map_pages,
    memory_pages,
    notification_pages,
    routine_pages,
    search_pages,
    skill_pages,
    source_pages,
    views,
    workspace_pages,
)
from workspaces.forms import LoginForm

urlpatterns = [
    path("", workspace_pages.home, name="home"),
    path(
        "login/",
        auth_views.LoginView.as_view(
            authentication_form=LoginForm, redirect_authenticated_user=True
        ),
        name="login",
    ),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("signup/", workspace_pages.signup, name="signup"),
    path("account/verify/<str:token>/", account_pages.verify_email, name="verify-email"),
    path("w/<uuid:workspace_id>/account/", account_pages.account, name="account"),
    path("invite/<str:token>/", workspace_pages.accept_invite, name="accept-invite"),
    path("w/new/", workspace_pages.new_workspace, name="new-workspace"),
    path("w/<uuid:workspace_id>/", workspace_pages.workspace_home, name="workspace"),
    path("w/<uuid:workspace_id>/members/", workspace_pages.members, name="members"),
    path("w/<uuid:workspace_id>/audit/", workspace_pages.audit_log, name="audit-log"),
    path("w/<uuid:workspace_id>/tool-sources/", source_pages.tool_sources, name="tool-sources"),
    path(
        "w/<uuid:workspace_id>/c/<uuid:conversation_id>/",
        conversation_pages.conversation,
        name="conversation",
    ),
    path(
        "w/<uuid:workspace_id>/c/<uuid:conversation_id>/settings/",
        conversation_pages.conversation_settings,
        name="conversation-settings",
    ),
    path(
        "w/<uuid:workspace_id>/c/<uuid:conversation_id>/agents/",
        conversation_pages.add_agent,
        name="conversation-add-agent",
    ),
    path(
        "w/<uuid:workspace_id>/c/<uuid:conversation_id>/agents/remove/",
        conversation_pages.remove_agent,
        name="conversation-remove-agent",
    ),
    path("w/<uuid:workspace_id>/channels/new/", conversation_pages.new_channel, name="new-channel"),
    path("w/<uuid:workspace_id>/direct/", conversation_pages.direct, name="direct"),
    path(
        "w/<uuid:workspace_id>/artifacts/<uuid:artifact_id>/",
        conversation_pages.artifact,
        name="artifact",
    ),
    path("app/messages/", conversation_pages.message_fragments, name="message-fragments"),
    path(
        "app/conversations/<uuid:conversation_id>/read/",
        conversation_pages.mark_read,
        name="mark-read",
    ),
    path("w/<uuid:workspace_id>/agents/", agent_pages.directory, name="agents"),
    path("w/<uuid:workspace_id>/agents/new/", agent_pages.new_agent, name="new-agent"),
    path("w/<uuid:workspace_id>/agents/<uuid:agent_id>/", agent_pages.agent_detail, name="agent"),
    path(
        "w/<uuid:workspace_id>/agents/<uuid:agent_id>/memory/",
        memory_pages.agent_memory,
        name="agent-memory",
    ),
    path(
        "w/<uuid:workspace_id>/agents/<uuid:agent_id>/routines/<uuid:routine_id>/",
        routine_pages.routine_detail,
        name="agent-routine",
    ),
    path(
        "w/<uuid:workspace_id>/agents/<uuid:agent_id>/loops/<uuid:loop_id>/",
        routine_pages.loop_detail,
        name="agent-loop",
    ),
    path(
        "w/<uuid:workspace_id>/agents/<uuid:agent_id>/pulse/",
        routine_pages.pulse_reports,
        name="agent-pulse",
    ),
    path("w/<uuid:workspace_id>/memory/", memory_pages.family_memory, name="family-memory"),
    path("w/<uuid:workspace_id>/skills/", skill_pages.skill_list, name="skills"),
    path("w/<uuid:workspace_id>/skills/marketplace/", skill_pages.marketplace, name="marketplace"),
    path(
        "w/<uuid:workspace_id>/skills/marketplace/<uuid:skill_id>/",
        skill_pages.marketplace_detail,
        name="marketplace-skill",
    ),
    path("w/<uuid:workspace_id>/directory/", directory_pages.agent_directory, name="directory"),
    path(
        "w/<uuid:workspace_id>/directory/<uuid:listing_id>/",
        directory_pages.listing_detail,
        name="directory-listing",
    ),
    path("w/<uuid:workspace_id>/search/", search_pages.search_page, name="search"),
    path("w/<uuid:workspace_id>/tasks/", agent_pages.task_list, name="tasks"),
    path("w/<uuid:workspace_id>/map/", map_pages.work_map, name="work-map"),
    path("w/<uuid:workspace_id>/tasks/<uuid:task_id>/", agent_pages.task_detail, name="task"),
    path("app/w/<uuid:workspace_id>/sidebar/", views.sidebar, name="sidebar"),
    path("w/<uuid:workspace_id>/inbox/", notification_pages.inbox, name="inbox"),
    path(
        "w/<uuid:workspace_id>/inbox/settings/",
        notification_pages.inbox_settings,
        name="inbox-settings",
    ),
    path(
        "w/<uuid:workspace_id>/connections/", connection_pages.connection_list, name="connections"
    ),
    path("oauth/<str:provider>/callback", connection_pages.oauth_callback, name="oauth-callback"),
]
