from django.urls import path

from agents import views

urlpatterns = [
    path("w/<uuid:workspace_id>/agents/", views.directory, name="agents"),
    path("w/<uuid:workspace_id>/agents/new/", views.new_agent, name="new-agent"),
    path("w/<uuid:workspace_id>/agents/<uuid:agent_id>/", views.agent_detail, name="agent"),
    path("w/<uuid:workspace_id>/tasks/", views.task_list, name="tasks"),
    path("w/<uuid:workspace_id>/tasks/<uuid:task_id>/", views.task_detail, name="task"),
]
