"""REST for a workspace's own hosts (WS-2, AGT-6): members read them, admins and the owner add,
change, provision, restart and remove them. The SSH key goes in and never comes out."""

import posixpath

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import Count
from django.urls import path
from rest_framework import serializers
from rest_framework.response import Response
from rest_framework.views import APIView

from agents import hosting
from agents.access import access_workspace_host
from agents.models import Host, HostRestart
from agntchat.core.api import StrictSerializer, validated
from agntchat.core.exceptions import AppError
from work import hosting as work_hosting
from work.tools import platform_web
from workspaces.access import IsPerson, access_membership, require_manager

ADDRESS = r"^[A-Za-z0-9][A-Za-z0-9.:-]*$"  # a host name, an IPv4 or an IPv6 address


class HostInput(StrictSerializer):
    name = serializers.CharField(max_length=80)
    address = serializers.RegexField(ADDRESS, max_length=255)
    port = serializers.IntegerField(min_value=1, max_value=65535, required=False, default=22)
    ssh_user = serializers.RegexField(
        r"^[a-z_][a-z0-9_-]*$", max_length=64, required=False, default="root"
    )
    ssh_key = serializers.CharField(max_length=20_000, write_only=True, trim_whitespace=True)
    multi_tenant = serializers.BooleanField(required=False, default=False)
    capacity = serializers.IntegerField(min_value=1, max_value=10_000, required=False, default=10)
    root = serializers.RegexField(
        r"^/[A-Za-z0-9._/-]*$", max_length=255, required=False, default="/opt/agntchat"
    )
    # A command that makes the host's venv ("python3"), or the path of a prepared Python.
    python = serializers.RegexField(
        r"^[A-Za-z0-9._/-]+$", max_length=255, required=False, default="python3"
    )

    def validate_address(self, value):
        try:  # a literal address is refused at once; a name, when it is resolved to connect
            private = platform_web.refused_address(value)
        except ValueError:
            return value
        if private and not settings.HOSTS_ALLOW_PRIVATE:
            raise serializers.ValidationError(work_hosting.private_address_refusal(value))
        return value

    def validate_root(self, value):
        # Under / itself, its layout would be /agents, /host.json, /venv… (and `chmod 755 ''`).
        if posixpath.normpath(value) in ("/", "//"):
            raise serializers.ValidationError("A directory under /, not / itself.")
        return value

    def validate_ssh_key(self, value):
        try:
            work_hosting.load_key(value)
        except work_hosting.HostUnreachable as exc:
            raise serializers.ValidationError(exc.message) from None
        return value


class NoInput(StrictSerializer):
    """An action that takes no body: an empty object (or none) only."""


class HostUpdate(HostInput):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, partial=True, **kwargs)


def host_out(host: Host, placed: int | None = None) -> dict:
    if placed is None:
        placed = host.agents.count()
    return {
        "id": host.id,
        "name": host.name,
        "address": host.address,
        "port": host.port,
        "ssh_user": host.ssh_user,
        "multi_tenant": host.multi_tenant,
        "capacity": host.capacity,
        "placed": placed,
        "root": host.root,
        "python": host.python,
        "status": host.status,
        "problem": host.problem,
        "host_key_fingerprint": work_hosting.fingerprint(host.host_key),
        "provisioned_at": host.provisioned_at,
        "created_at": host.created_at,
    }


def restart_out(restart: HostRestart) -> dict:
    return {
        "id": restart.id,
        "status": restart.status,
        "report": restart.report,
        "requested_by": restart.requested_by_id,
        "created_at": restart.created_at,
        "finished_at": restart.finished_at,
    }


def _named_once(save):
    """SAVE, with a name already used by another host of the workspace told as such."""
    try:
        with transaction.atomic():
            return save()
    except IntegrityError:
        raise AppError(
            "Another host of this workspace has that name.",
            code="name_taken",
            fields={"name": "Already taken."},
        ) from None


def _managed(request, workspace_id, host_id=None):
    membership = access_membership(request.user, workspace_id)
    host = access_workspace_host(membership, host_id) if host_id is not None else None
    require_manager(membership)
    return membership, host


class HostListView(APIView):
    inputs = {"post": HostInput}
    permission_classes = [IsPerson]

    def get(self, request, workspace_id):
        membership = access_membership(request.user, workspace_id)
        hosts = (
            Host.objects.filter(workspace=membership.workspace)
            .annotate(placed_count=Count("agents"))
            .order_by("name")
        )
        return Response({"results": [host_out(h, h.placed_count) for h in hosts]})

    def post(self, request, workspace_id):
        membership, _ = _managed(request, workspace_id)
        data = validated(HostInput, request.data)
        host = _named_once(
            lambda: hosting.create_host(workspace=membership.workspace, by=request.user, **data)
        )
        return Response(host_out(host, 0), status=201)


class HostDetailView(APIView):
    inputs = {"patch": HostUpdate}
    permission_classes = [IsPerson]

    def get(self, request, workspace_id, host_id):
        membership = access_membership(request.user, workspace_id)
        return Response(host_out(access_workspace_host(membership, host_id)))

    def patch(self, request, workspace_id, host_id):
        _, host = _managed(request, workspace_id, host_id)
        data = validated(HostUpdate, request.data)
        host = _named_once(lambda: hosting.update_host(host, by=request.user, **data))
        return Response(host_out(host))

    def delete(self, request, workspace_id, host_id):
        _, host = _managed(request, workspace_id, host_id)
        hosting.delete_host(host)
        return Response(status=204)


class HostProvisionView(APIView):
    inputs = {"post": NoInput}
    statuses = {"post": (202,)}
    permission_classes = [IsPerson]

    def post(self, request, workspace_id, host_id):
        """Install or update the bridge and the supervisor over SSH, on the worker: the host's
        status says how it went."""
        _, host = _managed(request, workspace_id, host_id)
        validated(NoInput, request.data)
        work_hosting.request_provision(host)  # 409 host_busy while one is queued or running
        return Response(host_out(host), status=202)


class HostKeyView(APIView):
    permission_classes = [IsPerson]

    def delete(self, request, workspace_id, host_id):
        """Forget the pinned SSH host key: the way to accept a rebuilt host's new one."""
        _, host = _managed(request, workspace_id, host_id)
        hosting.clear_host_key(host, by=request.user)
        return Response(status=204)


class HostRestartListView(APIView):
    inputs = {"post": NoInput}
    statuses = {"post": (202,)}
    permission_classes = [IsPerson]

    def get(self, request, workspace_id, host_id):
        _, host = _managed(request, workspace_id, host_id)
        restarts = HostRestart.objects.filter(host=host).order_by("-created_at")[:50]
        return Response({"results": [restart_out(r) for r in restarts]})

    def post(self, request, workspace_id, host_id):
        """Restart the host's bridges one at a time, on the worker; the report fills in (409
        host_busy while one is queued or running)."""
        _, host = _managed(request, workspace_id, host_id)
        validated(NoInput, request.data)
        restart = work_hosting.request_restart(host, by=request.user)
        return Response(restart_out(restart), status=202)


urlpatterns = [
    path("workspaces/<uuid:workspace_id>/hosts/", HostListView.as_view()),
    path("workspaces/<uuid:workspace_id>/hosts/<uuid:host_id>/", HostDetailView.as_view()),
    path(
        "workspaces/<uuid:workspace_id>/hosts/<uuid:host_id>/provision/",
        HostProvisionView.as_view(),
    ),
    path("workspaces/<uuid:workspace_id>/hosts/<uuid:host_id>/host-key/", HostKeyView.as_view()),
    path(
        "workspaces/<uuid:workspace_id>/hosts/<uuid:host_id>/restarts/",
        HostRestartListView.as_view(),
    ),
]
