from django.urls import path

from conversations import views

urlpatterns = [
    path(
        "w/<uuid:workspace_id>/c/<uuid:conversation_id>/", views.conversation, name="conversation"
    ),
    path(
        "w/<uuid:workspace_id>/c/<uuid:conversation_id>/settings/",
        views.conversation_settings,
        name="conversation-settings",
    ),
    path(
        "w/<uuid:workspace_id>/c/<uuid:conversation_id>/agents/",
        views.add_agent,
        name="conversation-add-agent",
    ),
    path("w/<uuid:workspace_id>/channels/new/", views.new_channel, name="new-channel"),
    path("w/<uuid:workspace_id>/direct/", views.direct, name="direct"),
    path("w/<uuid:workspace_id>/artifacts/<uuid:artifact_id>/", views.artifact, name="artifact"),
    path("app/messages/", views.message_fragments, name="message-fragments"),
    path("app/conversations/<uuid:conversation_id>/read/", views.mark_read, name="mark-read"),
]
