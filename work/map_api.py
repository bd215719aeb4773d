"""REST for the work map (MAP-1): a workspace's tasks, agents, conversations, side threads and
artifacts as nodes and edges, as its member may see them (work/map.py)."""

from django.urls import path
from rest_framework import serializers
from rest_framework.response import Response
from rest_framework.views import APIView

from agntchat.core.api import validated
from work.map import DEFAULT_WINDOW, WINDOWS, work_map
from workspaces.access import IsPerson, access_workspace


class MapQuery(serializers.Serializer):
    """Query parameters: text by nature, so not a StrictSerializer."""

    agent = serializers.UUIDField(required=False, help_text="Only this agent's work.")
    since = serializers.ChoiceField(
        choices=list(WINDOWS),
        required=False,
        default=DEFAULT_WINDOW,
        help_text="The time window: what was created or active in the last 24 h, 7 or 30 days, or all.",
    )


class WorkMapView(APIView):
    queries = {"get": MapQuery}
    permission_classes = [IsPerson]
    is_collection = False  # one record: {"nodes", "edges", "truncated"}

    def get(self, request, workspace_id):
        workspace = access_workspace(request.user, workspace_id)
        query = validated(MapQuery, request.query_params.dict())
        return Response(
            work_map(request.user, workspace, agent_id=query.get("agent"), window=query["since"])
        )


urlpatterns = [path("workspaces/<uuid:workspace_id>/map/", WorkMapView.as_view())]
