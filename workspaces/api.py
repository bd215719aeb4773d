"""REST for people, workspaces, members, invitations, tokens and credentials."""

from django.db.models import Q
from django.urls import path
from rest_framework import serializers, status
from rest_framework.permissions import AllowAny
from rest_framework.response import Response
from rest_framework.views import APIView

from agntchat.core.api import StrictSerializer, error_body, validated, zone_field
from agntchat.core.exceptions import NotFound
from workspaces import actions
from workspaces.access import (
    IsPerson,
    access_api_token,
    access_credential,
    access_invitation,
    access_member,
    access_membership,
    require_manager,
    workspaces_visible_to,
)
from workspaces.login import authenticate_person, count_token_issued
from workspaces.models import (
    ApiToken,
    AuditEntry,
    Credential,
    Invitation,
    Membership,
    Role,
    Workspace,
)


class PersonSerializer(serializers.Serializer):
    """What members of a workspace read of each other: no email address (anyone a link lets in
    reads the list; the pages show no one's address either)."""

    id = serializers.UUIDField()
    username = serializers.CharField()
    display_name = serializers.CharField()
    timezone = serializers.CharField()


class UserSerializer(PersonSerializer):
    """A person's own record (/me/)."""

    email = serializers.EmailField()


class MeChange(StrictSerializer):
    min_fields = 1
    display_name = serializers.CharField(max_length=80, required=False, allow_blank=True)
    timezone = zone_field(required=False)


class WorkspaceSerializer(serializers.ModelSerializer):
    owner_id = serializers.UUIDField(read_only=True)
    role = serializers.SerializerMethodField()

    class Meta:
        model = Workspace
        fields = ["id", "name", "kind", "owner_id", "role", "approval_expiry_minutes", "created_at"]

    def get_role(self, workspace):
        roles = self.context.get("roles", {})
        return roles.get(workspace.id)


class MemberSerializer(serializers.ModelSerializer):
    user = PersonSerializer()

    class Meta:
        model = Membership
        fields = ["id", "user", "role", "created_at"]


class NameInput(StrictSerializer):
    min_fields = 1
    name = serializers.CharField(max_length=80, trim_whitespace=True)


class WorkspaceUpdate(StrictSerializer):
    min_fields = 1
    name = serializers.CharField(max_length=80, trim_whitespace=True, required=False)
    # How long an agent's tool call waits for approval (TOOL-6): a minute to a day.
    approval_expiry_minutes = serializers.IntegerField(
        min_value=1, max_value=24 * 60, required=False
    )


class TokenInput(StrictSerializer):
    username = serializers.CharField(max_length=150)
    password = serializers.CharField(max_length=256, trim_whitespace=False)
    name = serializers.CharField(max_length=80, required=False, allow_blank=True)


class InvitationInput(StrictSerializer):
    role = serializers.ChoiceField(choices=[Role.MEMBER, Role.ADMIN], default=Role.MEMBER)
    email = serializers.EmailField(max_length=254, required=False, allow_blank=True, default="")


class AcceptInput(StrictSerializer):
    token = serializers.CharField(max_length=100)


class RoleInput(StrictSerializer):
    min_fields = 1
    role = serializers.ChoiceField(choices=[Role.MEMBER, Role.ADMIN])


class CredentialInput(StrictSerializer):
    name = serializers.CharField(max_length=80)
    kind = serializers.CharField(max_length=40, required=False, default="api_key")
    value = serializers.CharField(max_length=10_000, trim_whitespace=False)


def _workspace_out(request, workspace, role):
    return WorkspaceSerializer(workspace, context={"roles": {workspace.id: role}}).data


class TokenView(APIView):
    """POST: exchange a username and password for a personal API token (shown once)."""

    inputs = {"post": TokenInput}
    permission_classes = [AllowAny]
    authentication_classes = []

    def post(self, request):
        data = validated(TokenInput, request.data)
        user = authenticate_person(request, data["username"], data["password"])
        if user is None:
            return Response(
                error_body("invalid_credentials", "Wrong username or password."), status=401
            )
        count_token_issued(request, user)
        token, secret = actions.issue_api_token(user, data.get("name", ""))
        return Response({"id": token.id, "token": secret, "prefix": token.prefix}, status=201)


class TokenListView(APIView):
    permission_classes = [IsPerson]

    def get(self, request):
        tokens = ApiToken.objects.filter(user=request.user).order_by("-created_at")
        return Response(
            {
                "results": [
                    {
                        "id": t.id,
                        "name": t.name,
                        "prefix": t.prefix,
                        "created_at": t.created_at,
                        "last_used_at": t.last_used_at,
                        "revoked_at": t.revoked_at,
                    }
                    for t in tokens
                ]
            }
        )


class TokenDetailView(APIView):
    permission_classes = [IsPerson]

    def delete(self, request, token_id):
        actions.revoke_api_token(access_api_token(request.user, token_id))
        return Response(status=204)


class MeView(APIView):
    is_collection = False  # one record at a path that reads like a list
    inputs = {"patch": MeChange}
    permission_classes = [IsPerson]

    def get(self, request):
        return Response(UserSerializer(request.user).data)

    def patch(self, request):
        data = validated(MeChange, request.data)
        if "timezone" in data:
            data["zone_name"] = data.pop("timezone")
        return Response(UserSerializer(actions.update_profile(request.user, **data)).data)


class WorkspaceListView(APIView):
    inputs = {"post": NameInput}
    permission_classes = [IsPerson]

    def get(self, request):
        workspaces = list(workspaces_visible_to(request.user))
        roles = dict(
            Membership.objects.filter(user=request.user).values_list("workspace_id", "role")
        )
        return Response(
            {"results": WorkspaceSerializer(workspaces, many=True, context={"roles": roles}).data}
        )

    def post(self, request):
        data = validated(NameInput, request.data)
        workspace = actions.create_team_workspace(request.user, data["name"])
        return Response(_workspace_out(request, workspace, Role.OWNER), status=201)


class WorkspaceDetailView(APIView):
    inputs = {"patch": WorkspaceUpdate}
    permission_classes = [IsPerson]

    def get(self, request, workspace_id):
        membership = access_membership(request.user, workspace_id)
        return Response(_workspace_out(request, membership.workspace, membership.role))

    def patch(self, request, workspace_id):
        membership = access_membership(request.user, workspace_id)
        data = validated(WorkspaceUpdate, request.data)
        workspace = actions.update_workspace(membership, **data)
        return Response(_workspace_out(request, workspace, membership.role))

    def delete(self, request, workspace_id):
        actions.delete_workspace(access_membership(request.user, workspace_id))
        return Response(status=204)


class LeaveView(APIView):
    statuses = {"post": (204,)}
    permission_classes = [IsPerson]

    def post(self, request, workspace_id):
        actions.leave_workspace(access_membership(request.user, workspace_id))
        return Response(status=204)


class MemberListView(APIView):
    permission_classes = [IsPerson]

    def get(self, request, workspace_id):
        membership = access_membership(request.user, workspace_id)
        members = membership.workspace.memberships.select_related("user").order_by("created_at")
        return Response({"results": MemberSerializer(members, many=True).data})


class MemberDetailView(APIView):
    inputs = {"patch": RoleInput}
    permission_classes = [IsPerson]

    def patch(self, request, workspace_id, user_id):
        membership = access_membership(request.user, workspace_id)
        data = validated(RoleInput, request.data)
        target = actions.change_role(membership, access_member(membership, user_id), data["role"])
        return Response(MemberSerializer(target).data)

    def delete(self, request, workspace_id, user_id):
        membership = access_membership(request.user, workspace_id)
        actions.remove_member(membership, access_member(membership, user_id))
        return Response(status=204)


class InvitationListView(APIView):
    inputs = {"post": InvitationInput}
    permission_classes = [IsPerson]

    def get(self, request, workspace_id):
        membership = access_membership(request.user, workspace_id)
        require_manager(membership)
        # The newest 500 (the links still waiting are fewer: PENDING_INVITATIONS_PER_WORKSPACE):
        # the whole history would grow without end.
        invitations = Invitation.objects.filter(workspace=membership.workspace).order_by(
            "-created_at"
        )[:500]
        return Response({"results": [_invitation_out(i) for i in invitations]})

    def post(self, request, workspace_id):
        membership = access_membership(request.user, workspace_id)
        data = validated(InvitationInput, request.data)
        invitation, token = actions.create_invitation(
            membership, data["role"], data.get("email", "")
        )
        out = _invitation_out(invitation)
        out["token"] = token
        out["url"] = request.build_absolute_uri(f"/invite/{token}/")
        return Response(out, status=201)


class InvitationDetailView(APIView):
    """DELETE: withdraw a pending invitation link (admins and the owner)."""

    permission_classes = [IsPerson]

    def delete(self, request, workspace_id, invitation_id):
        membership = access_membership(request.user, workspace_id)
        actions.revoke_invitation(membership, access_invitation(membership, invitation_id))
        return Response(status=204)


def _invitation_out(invitation):
    return {
        "id": invitation.id,
        "role": invitation.role,
        "email": invitation.email,
        "expires_at": invitation.expires_at,
        "accepted_at": invitation.accepted_at,
        "revoked_at": invitation.revoked_at,
        "created_at": invitation.created_at,
    }


class AcceptInvitationView(APIView):
    statuses = {"post": (200,)}
    inputs = {"post": AcceptInput}
    permission_classes = [IsPerson]

    def post(self, request):
        data = validated(AcceptInput, request.data)
        membership = actions.accept_invitation(request.user, data["token"])
        return Response(_workspace_out(request, membership.workspace, membership.role), status=200)


class CredentialListView(APIView):
    inputs = {"post": CredentialInput}
    permission_classes = [IsPerson]

    def get(self, request, workspace_id):
        membership = access_membership(request.user, workspace_id)
        require_manager(membership)
        creds = Credential.objects.filter(workspace=membership.workspace).order_by("name")
        return Response({"results": [_credential_out(c) for c in creds]})

    def post(self, request, workspace_id):
        membership = access_membership(request.user, workspace_id)
        data = validated(CredentialInput, request.data)
        credential = actions.create_credential(
            membership, data["name"], data["value"], data["kind"]
        )
        return Response(_credential_out(credential), status=status.HTTP_201_CREATED)


class CredentialDetailView(APIView):
    permission_classes = [IsPerson]

    def delete(self, request, workspace_id, credential_id):
        membership = access_membership(request.user, workspace_id)
        actions.delete_credential(membership, access_credential(membership, credential_id))
        return Response(status=204)


def _credential_out(credential):
    # The secret never leaves the server through this API.
    return {
        "id": credential.id,
        "name": credential.name,
        "kind": credential.kind,
        "created_at": credential.created_at,
    }


class AuditQuery(serializers.Serializer):
    """Query parameters: text by nature, so not a StrictSerializer."""

    action = serializers.CharField(max_length=64, required=False)
    before = serializers.UUIDField(required=False)  # an entry's id: the page older than it
    limit = serializers.IntegerField(min_value=1, max_value=200, required=False, default=50)


def _audit_out(entry: AuditEntry) -> dict:
    return {
        "id": entry.id,
        "created_at": entry.created_at,
        "action": entry.action,
        "actor": {
            "user_id": entry.actor_user_id,
            "agent_id": entry.actor_agent_id,
            "label": entry.actor_label,
        },
        "target": {"type": entry.target_type, "id": entry.target_id, "label": entry.target_label},
        "details": entry.details,
        "address": entry.address,
    }


def audit_page(membership, query) -> tuple[list[AuditEntry], bool]:
    """A page of the workspace's audit log, newest first; for its owner and admins only."""
    require_manager(membership)
    entries = AuditEntry.objects.filter(workspace_id=membership.workspace_id)
    if query.get("action"):
        entries = entries.filter(action=query["action"])
    if query.get("before"):
        anchor = entries.filter(id=query["before"]).values("created_at", "id").first()
        if anchor is None:
            raise NotFound("No such audit entry.", code="audit_entry_not_found")
        entries = entries.filter(
            Q(created_at__lt=anchor["created_at"])
            | Q(created_at=anchor["created_at"], id__lt=anchor["id"])
        )
    limit = query["limit"]
    page = list(entries.order_by("-created_at", "-id")[: limit + 1])
    return page[:limit], len(page) > limit


class AuditListView(APIView):
    """GET: the workspace's audit log, newest first (``before``: an entry's id, for the page
    after it; ``action``: only that action). Owners and admins only."""

    queries = {"get": AuditQuery}

    def get(self, request, workspace_id):
        membership = access_membership(request.user, workspace_id)
        query = validated(AuditQuery, request.query_params.dict())
        page, has_more = audit_page(membership, query)
        return Response({"results": [_audit_out(e) for e in page], "has_more": has_more})


urlpatterns = [
    path("auth/token/", TokenView.as_view()),
    path("auth/tokens/", TokenListView.as_view()),
    path("auth/tokens/<uuid:token_id>/", TokenDetailView.as_view()),
    path("me/", MeView.as_view()),
    path("workspaces/", WorkspaceListView.as_view()),
    path("workspaces/<uuid:workspace_id>/", WorkspaceDetailView.as_view()),
    path("workspaces/<uuid:workspace_id>/leave/", LeaveView.as_view()),
    path("workspaces/<uuid:workspace_id>/members/", MemberListView.as_view()),
    path("workspaces/<uuid:workspace_id>/members/<uuid:user_id>/", MemberDetailView.as_view()),
    path("workspaces/<uuid:workspace_id>/invitations/", InvitationListView.as_view()),
    path(
        "workspaces/<uuid:workspace_id>/invitations/<uuid:invitation_id>/",
        InvitationDetailView.as_view(),
    ),
    path("workspaces/<uuid:workspace_id>/credentials/", CredentialListView.as_view()),
    path("workspaces/<uuid:workspace_id>/audit/", AuditListView.as_view()),
    path(
        "workspaces/<uuid:workspace_id>/credentials/<uuid:credential_id>/",
        CredentialDetailView.as_view(),
    ),
    path("invitations/accept/", AcceptInvitationView.as_view()),
]
