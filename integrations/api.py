"""REST for connections (INT-1, INT-3): list the accounts connected for the person and their
workspaces, start connecting one (the answer is the provider's URL to visit; the provider sends
the person back to the ``oauth-callback`` page), and disconnect one."""

from django.urls import path, reverse
from rest_framework import serializers
from rest_framework.response import Response
from rest_framework.views import APIView

from agntchat.core.api import StrictSerializer, validated
from agntchat.core.exceptions import NotFound
from agntchat.core.ids import as_uuid
from integrations import connections
from integrations.models import Connection, Provider
from workspaces.access import IsPerson


class ConnectionNotFound(NotFound):
    code = "connection_not_found"
    default_message = "Connection not found."


def access_connection(user, connection_id) -> Connection:
    found = (
        connections.connections_visible_to(user)
        .select_related("workspace", "user")
        .filter(pk=as_uuid(connection_id))
        .first()
    )
    if found is None:
        raise ConnectionNotFound()
    return found


def connection_out(connection: Connection) -> dict:
    return {
        "id": connection.id,
        "provider": connection.provider,
        "account": connection.account,
        "workspace_id": connection.workspace_id,
        "user_id": connection.user_id,
        "scopes": connection.scopes,
        "status": connection.status,
        "problem": connection.problem or None,
        "expires_at": connection.expires_at,
        "created_at": connection.created_at,
    }


def callback_url(request, provider: str) -> str:
    return request.build_absolute_uri(reverse("oauth-callback", args=[provider]))


class ConnectInput(StrictSerializer):
    provider = serializers.ChoiceField(choices=Provider.choices)
    workspace = serializers.UUIDField(
        required=False, help_text="Connect it for this workspace (admins); else for yourself."
    )


class ConnectionListView(APIView):
    """The connections the person sees: their own and their workspaces'."""

    inputs = {"post": ConnectInput}
    statuses = {"post": [200]}
    permission_classes = [IsPerson]

    def get(self, request):
        rows = connections.connections_visible_to(request.user).order_by("provider", "created_at")
        return Response(
            {
                "results": [connection_out(c) for c in rows],
                "providers": connections.configured_providers(),
            }
        )

    def post(self, request):
        """Start connecting: visit ``authorize_url``; the provider sends you back here."""
        data = validated(ConnectInput, request.data)
        workspace = (
            connections.workspace_of(request.user, data["workspace"])
            if "workspace" in data
            else None
        )
        url = connections.start_authorization(
            request.user, data["provider"], callback_url(request, data["provider"]), workspace
        )
        return Response({"authorize_url": url})


class ConnectionDetailView(APIView):
    permission_classes = [IsPerson]

    def get(self, request, connection_id):
        return Response(connection_out(access_connection(request.user, connection_id)))

    def delete(self, request, connection_id):
        """Revoke the grant at the provider and forget the account."""
        connections.disconnect(request.user, access_connection(request.user, connection_id))
        return Response(status=204)


urlpatterns = [
    path("connections/", ConnectionListView.as_view()),
    path("connections/<uuid:connection_id>/", ConnectionDetailView.as_view()),
]
