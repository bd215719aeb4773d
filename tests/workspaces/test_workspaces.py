"""Workspaces and people: WS-1, WS-2, the REST surface, tenant isolation."""

import pytest
from django.core.management import call_command
from django.db import connection

from tests.concurrency import run_together
from workspaces import actions
from workspaces.exceptions import NotAllowed
from workspaces.models import (
    ApiToken,
    Credential,
    Invitation,
    Membership,
    User,
    Workspace,
    ensure_personal_workspace,
)

pytestmark = pytest.mark.django_db


def snapshot():
    """Everything a refused request must leave unchanged."""
    return (
        list(Workspace.objects.order_by("id").values_list("id", "name", "kind", "owner_id")),
        list(Membership.objects.order_by("id").values_list("id", "role")),
        Invitation.objects.count(),
        Credential.objects.count(),
    )


class TestPersonalWorkspace:
    def test_it_is_created_once_for_create_user(self, alice):
        assert list(Workspace.objects.filter(owner=alice).values_list("kind", flat=True)) == [
            "personal"
        ]
        assert (
            Membership.objects.get(workspace__owner=alice, workspace__kind="personal").role
            == "owner"
        )

    def test_it_is_created_for_createsuperuser(self):
        call_command(
            "createsuperuser",
            username="root1",
            email="r@example.com",
            interactive=False,
            verbosity=0,
        )
        user = User.objects.get(username="root1")
        assert Workspace.objects.filter(owner=user, kind="personal").count() == 1

    def test_it_is_created_for_the_admin_add_form(self, client):
        staff = User.objects.create_superuser("staff", "s@example.com", "pw-staff-123456")
        client.force_login(staff)
        response = client.post(
            "/admin/workspaces/user/add/",
            {
                "username": "newbie",
                "password1": "pw-newbie-77123",
                "password2": "pw-newbie-77123",
                "usable_password": "true",
            },
        )
        assert response.status_code == 302, response.content[:500]
        assert Workspace.objects.filter(owner__username="newbie", kind="personal").count() == 1

    def test_it_is_created_for_browser_signup(self, client):
        response = client.post(
            "/signup/",
            {
                "username": "dora",
                "email": "d@example.com",
                "password1": "pw-dora-881234",
                "password2": "pw-dora-881234",
            },
        )
        assert response.status_code == 302
        assert Workspace.objects.filter(owner__username="dora", kind="personal").count() == 1

    def test_saving_again_does_not_create_a_second_one(self, alice):
        alice.display_name = "Alice"
        alice.save()
        ensure_personal_workspace(alice)
        assert Workspace.objects.filter(owner=alice, kind="personal").count() == 1

    def test_it_cannot_be_deleted(self, alice, api):
        personal = Workspace.objects.get(owner=alice, kind="personal")
        before = snapshot()
        response = api(alice).delete(f"/api/v1/workspaces/{personal.id}/")
        assert response.status_code == 409
        assert response.json()["error"]["code"] == "personal_workspace"
        assert snapshot() == before

    def test_nobody_can_be_invited_to_it(self, alice, api):
        personal = Workspace.objects.get(owner=alice, kind="personal")
        before = snapshot()
        response = api(alice).post(
            f"/api/v1/workspaces/{personal.id}/invitations/", {}, format="json"
        )
        assert response.status_code == 409
        assert snapshot() == before

    def test_its_owner_cannot_leave_it(self, alice, api):
        personal = Workspace.objects.get(owner=alice, kind="personal")
        response = api(alice).post(f"/api/v1/workspaces/{personal.id}/leave/")
        assert response.status_code == 409
        assert Membership.objects.filter(workspace=personal, user=alice).exists()

    def test_the_admin_cannot_delete_it(self, client, alice):
        staff = User.objects.create_superuser("staff", "s@example.com", "pw-staff-123456")
        client.force_login(staff)
        personal = Workspace.objects.get(owner=alice, kind="personal")
        response = client.post(
            f"/admin/workspaces/workspace/{personal.id}/delete/", {"post": "yes"}
        )
        assert response.status_code == 403
        assert Workspace.objects.filter(pk=personal.pk).exists()


class TestTeamWorkspaces:
    def test_it_creates_a_team_with_its_creator_as_owner(self, alice, api):
        response = api(alice).post("/api/v1/workspaces/", {"name": "Research"}, format="json")
        assert response.status_code == 201
        body = response.json()
        assert body["name"] == "Research" and body["kind"] == "team" and body["role"] == "owner"
        assert body["ownerId"] == str(alice.id)
        assert Membership.objects.get(workspace_id=body["id"], user=alice).role == "owner"

    def test_it_lists_personal_first_then_teams(self, alice, team_a, api):
        actions.create_team_workspace(alice, "Alpha")
        names = [w["name"] for w in api(alice).get("/api/v1/workspaces/").json()["results"]]
        assert names == ["Personal", "Alpha", "Team A"]

    def test_admin_and_member_can_rename_or_not(self, alice, bob, team_a, api):
        assert (
            api(bob)
            .patch(f"/api/v1/workspaces/{team_a.id}/", {"name": "X"}, format="json")
            .status_code
            == 403
        )
        actions.change_role(
            team_a.memberships.get(user=alice), team_a.memberships.get(user=bob), "admin"
        )
        response = api(bob).patch(
            f"/api/v1/workspaces/{team_a.id}/", {"name": "Renamed"}, format="json"
        )
        assert response.status_code == 200
        team_a.refresh_from_db()
        assert team_a.name == "Renamed"

    def test_only_the_owner_deletes(self, alice, bob, team_a, api):
        actions.change_role(
            team_a.memberships.get(user=alice), team_a.memberships.get(user=bob), "admin"
        )
        before = snapshot()
        response = api(bob).delete(f"/api/v1/workspaces/{team_a.id}/")
        assert response.status_code == 403
        assert snapshot() == before
        assert api(alice).delete(f"/api/v1/workspaces/{team_a.id}/").status_code == 204
        assert not Workspace.objects.filter(pk=team_a.pk).exists()

    def test_only_the_owner_changes_roles(self, alice, bob, team_a, api):
        dora = User.objects.create_user("dora", "d@example.com", "pw")
        owner = team_a.memberships.get(user=alice)
        _, token = actions.create_invitation(owner)
        actions.accept_invitation(dora, token)
        actions.change_role(owner, team_a.memberships.get(user=bob), "admin")
        before = snapshot()
        # An admin cannot change roles.
        response = api(bob).patch(
            f"/api/v1/workspaces/{team_a.id}/members/{dora.id}/", {"role": "admin"}, format="json"
        )
        assert response.status_code == 403
        assert snapshot() == before
        # The owner can.
        response = api(alice).patch(
            f"/api/v1/workspaces/{team_a.id}/members/{dora.id}/", {"role": "admin"}, format="json"
        )
        assert response.status_code == 200
        assert team_a.memberships.get(user=dora).role == "admin"

    def test_the_owner_can_never_be_changed_or_removed(self, alice, bob, team_a, api):
        before = snapshot()
        client = api(alice)
        assert (
            client.patch(
                f"/api/v1/workspaces/{team_a.id}/members/{alice.id}/",
                {"role": "member"},
                format="json",
            ).status_code
            == 409
        )
        assert (
            client.patch(
                f"/api/v1/workspaces/{team_a.id}/members/{bob.id}/",
                {"role": "owner"},
                format="json",
            ).status_code
            == 400
        )
        assert (
            client.delete(f"/api/v1/workspaces/{team_a.id}/members/{alice.id}/").status_code == 409
        )
        assert client.post(f"/api/v1/workspaces/{team_a.id}/leave/").status_code == 409
        assert snapshot() == before

    def test_admin_and_owner_invite_members_do_not(self, alice, bob, team_a, api):
        assert (
            api(bob)
            .post(f"/api/v1/workspaces/{team_a.id}/invitations/", {}, format="json")
            .status_code
            == 403
        )
        actions.change_role(
            team_a.memberships.get(user=alice), team_a.memberships.get(user=bob), "admin"
        )
        response = api(bob).post(
            f"/api/v1/workspaces/{team_a.id}/invitations/", {"role": "member"}, format="json"
        )
        assert response.status_code == 201
        assert response.json()["token"].startswith("inv_")
        # An admin cannot hand out the admin role; the owner can.
        assert (
            api(bob)
            .post(f"/api/v1/workspaces/{team_a.id}/invitations/", {"role": "admin"}, format="json")
            .status_code
            == 403
        )
        assert (
            api(alice)
            .post(f"/api/v1/workspaces/{team_a.id}/invitations/", {"role": "admin"}, format="json")
            .status_code
            == 201
        )

    def test_an_invitation_is_accepted_once_and_expires(self, alice, charlie, team_a, api):
        response = api(alice).post(
            f"/api/v1/workspaces/{team_a.id}/invitations/", {}, format="json"
        )
        token = response.json()["token"]
        assert token not in str(list(Invitation.objects.values()))  # only the hash is stored
        accepted = api(charlie).post("/api/v1/invitations/accept/", {"token": token}, format="json")
        assert accepted.status_code == 200 and accepted.json()["role"] == "member"
        again = api(charlie).post("/api/v1/invitations/accept/", {"token": token}, format="json")
        assert again.status_code == 400
        _, late = actions.create_invitation(team_a.memberships.get(user=alice))
        Invitation.objects.filter(accepted_at__isnull=True).update(
            expires_at="2000-01-01T00:00:00Z"
        )
        dora = User.objects.create_user("dora", "d@example.com", "pw")
        expired = api(dora).post("/api/v1/invitations/accept/", {"token": late}, format="json")
        assert expired.status_code == 400
        assert "expired" in expired.json()["error"]["message"]
        assert not team_a.memberships.filter(user=dora).exists()

    def test_a_member_leaves_and_an_admin_removes(self, alice, bob, team_a, api):
        assert api(bob).post(f"/api/v1/workspaces/{team_a.id}/leave/").status_code == 204
        assert not team_a.memberships.filter(user=bob).exists()
        _, token = actions.create_invitation(team_a.memberships.get(user=alice))
        actions.accept_invitation(bob, token)
        assert (
            api(alice).delete(f"/api/v1/workspaces/{team_a.id}/members/{bob.id}/").status_code
            == 204
        )
        assert not team_a.memberships.filter(user=bob).exists()

    def test_managers_revoke_a_pending_invitation_link(self, alice, bob, charlie, team_a, api):
        created = api(alice).post(f"/api/v1/workspaces/{team_a.id}/invitations/", {}, format="json")
        invitation_id, token = created.json()["id"], created.json()["token"]
        url = f"/api/v1/workspaces/{team_a.id}/invitations/{invitation_id}/"
        before = snapshot(), Invitation.objects.get(pk=invitation_id).revoked_at
        assert api(bob).delete(url).status_code == 403  # a plain member
        assert api(charlie).delete(url).status_code == 404  # an outsider
        other = f"/api/v1/workspaces/{team_a.id}/invitations/{Membership.objects.first().id}/"
        assert api(alice).delete(other).status_code == 404  # no such invitation here
        assert (snapshot(), Invitation.objects.get(pk=invitation_id).revoked_at) == before
        assert api(alice).delete(url).status_code == 204
        assert api(alice).delete(url).status_code == 204  # twice is once
        listed = api(alice).get(f"/api/v1/workspaces/{team_a.id}/invitations/").json()["results"]
        assert next(i for i in listed if i["id"] == invitation_id)["revokedAt"]
        refused = api(charlie).post("/api/v1/invitations/accept/", {"token": token}, format="json")
        assert refused.status_code == 404
        assert not team_a.memberships.filter(user=charlie).exists()
        audit = team_a.audit_entries.filter(action="invitation.revoked")
        assert list(audit.values_list("actor_user", "target_id")) == [(alice.id, invitation_id)]
        # A used link cannot be withdrawn: the member is removed instead.
        used = Invitation.objects.get(accepted_by=bob, workspace=team_a)
        conflict = api(alice).delete(f"/api/v1/workspaces/{team_a.id}/invitations/{used.id}/")
        assert conflict.status_code == 409 and "remove the member" in conflict.text

    def test_a_link_made_with_a_role_lost_meanwhile_is_refused(self, alice, bob, team_a):
        """The inviter's role is read again, locked, where the link is stored: a request that
        loaded it before a demotion committed makes no link the demotion missed."""
        owner, admin = team_a.memberships.get(user=alice), team_a.memberships.get(user=bob)
        actions.change_role(owner, admin, "admin")
        as_loaded = team_a.memberships.get(user=bob)  # what a request read a moment earlier
        actions.change_role(owner, team_a.memberships.get(user=bob), "member")
        with pytest.raises(NotAllowed):
            actions.create_invitation(as_loaded)
        assert not Invitation.objects.filter(created_by=bob, revoked_at__isnull=True).exists()

    @pytest.mark.parametrize("how", ["removed", "leaves", "demoted"])
    def test_an_admins_links_stop_working_once_they_may_no_longer_invite(
        self, alice, bob, charlie, team_a, api, how
    ):
        owner, admin = team_a.memberships.get(user=alice), team_a.memberships.get(user=bob)
        actions.change_role(owner, admin, "admin")
        _, own_link = actions.create_invitation(admin)  # the way back in, kept for later
        _, for_charlie = actions.create_invitation(admin)
        _, owners_link = actions.create_invitation(owner)
        if how == "removed":
            actions.remove_member(owner, team_a.memberships.get(user=bob))
        elif how == "leaves":
            actions.leave_workspace(team_a.memberships.get(user=bob))
        else:
            actions.change_role(owner, team_a.memberships.get(user=bob), "member")
        refused = api(charlie).post(
            "/api/v1/invitations/accept/", {"token": for_charlie}, format="json"
        )
        assert refused.status_code == 404
        assert not team_a.memberships.filter(user=charlie).exists()
        if how != "demoted":
            back = api(bob).post("/api/v1/invitations/accept/", {"token": own_link}, format="json")
            assert back.status_code == 404
            assert not team_a.memberships.filter(user=bob).exists()
            assert api(bob).get(f"/api/v1/workspaces/{team_a.id}/").status_code == 404
        # The owner's own links are theirs: untouched.
        dora = User.objects.create_user("dora", "d@example.com", "pw")
        assert (
            api(dora)
            .post("/api/v1/invitations/accept/", {"token": owners_link}, format="json")
            .status_code
            == 200
        )
        action = {
            "removed": "member.removed",
            "leaves": "member.left",
            "demoted": "member.role_changed",
        }
        entry = team_a.audit_entries.filter(action=action[how]).latest("created_at")
        assert entry.details["invitations_revoked"] == 2

    def test_credentials_are_encrypted_and_never_returned(self, alice, bob, team_a, api):
        response = api(alice).post(
            f"/api/v1/workspaces/{team_a.id}/credentials/",
            {"name": "openai", "value": "sk-very-secret-123"},
            format="json",
        )
        assert response.status_code == 201
        assert "sk-very-secret-123" not in response.content.decode()
        listing = api(alice).get(f"/api/v1/workspaces/{team_a.id}/credentials/")
        assert "sk-very-secret" not in listing.content.decode()
        with connection.cursor() as cursor:
            cursor.execute("SELECT ciphertext FROM workspaces_credential")
            assert "sk-very-secret" not in cursor.fetchone()[0]
        from agntchat.core.crypto import decrypt

        assert decrypt(Credential.objects.get().ciphertext) == "sk-very-secret-123"
        # A plain member cannot manage credentials.
        assert api(bob).get(f"/api/v1/workspaces/{team_a.id}/credentials/").status_code == 403


class TestOutsider:
    """Charlie is in no way part of team A: every A endpoint answers 404 and changes nothing."""

    def test_every_workspace_endpoint_is_not_found(self, alice, bob, charlie, team_a, team_b, api):
        client = api(charlie)
        before = snapshot()
        w = f"/api/v1/workspaces/{team_a.id}"
        cred = actions.create_credential(team_a.memberships.get(user=alice), "k", "v")
        before = snapshot()
        calls = [
            client.get(f"{w}/"),
            client.patch(f"{w}/", {"name": "pwned"}, format="json"),
            client.delete(f"{w}/"),
            client.post(f"{w}/leave/"),
            client.get(f"{w}/members/"),
            client.patch(f"{w}/members/{bob.id}/", {"role": "admin"}, format="json"),
            client.delete(f"{w}/members/{bob.id}/"),
            client.get(f"{w}/invitations/"),
            client.post(f"{w}/invitations/", {}, format="json"),
            client.get(f"{w}/credentials/"),
            client.post(f"{w}/credentials/", {"name": "x", "value": "y"}, format="json"),
            client.delete(f"{w}/credentials/{cred.id}/"),
        ]
        for response in calls:
            assert response.status_code == 404, (
                response.request["PATH_INFO"],
                response.status_code,
            )
            assert response.json()["error"]["code"] == "workspace_not_found"
        assert snapshot() == before
        assert str(team_a.id) not in client.get("/api/v1/workspaces/").content.decode()


class TestTokens:
    def test_it_issues_a_token_stored_only_as_a_hash(self, alice, client):
        response = client.post(
            "/api/v1/auth/token/",
            {"username": "alice", "password": "pw-alice-123456"},
            content_type="application/json",
        )
        assert response.status_code == 201
        secret = response.json()["token"]
        assert secret.startswith("apt_")
        with connection.cursor() as cursor:
            cursor.execute("SELECT * FROM workspaces_apitoken")
            assert secret not in str(cursor.fetchall())
        me = client.get("/api/v1/me/", HTTP_AUTHORIZATION=f"Bearer {secret}")
        assert me.status_code == 200 and me.json()["username"] == "alice"

    def test_wrong_password_is_401_with_the_error_shape(self, alice, client):
        response = client.post(
            "/api/v1/auth/token/",
            {"username": "alice", "password": "nope"},
            content_type="application/json",
        )
        assert response.status_code == 401
        assert response.json() == {
            "error": {"code": "invalid_credentials", "message": "Wrong username or password."}
        }
        assert ApiToken.objects.count() == 0

    def test_revoked_and_bad_tokens_are_rejected(self, alice, client):
        token, secret = actions.issue_api_token(alice)
        assert client.get("/api/v1/me/", HTTP_AUTHORIZATION=f"Bearer {secret}").status_code == 200
        assert (
            client.delete(
                f"/api/v1/auth/tokens/{token.id}/", HTTP_AUTHORIZATION=f"Bearer {secret}"
            ).status_code
            == 204
        )
        revoked = client.get("/api/v1/me/", HTTP_AUTHORIZATION=f"Bearer {secret}")
        assert revoked.status_code == 401
        assert revoked.json()["error"]["code"] == "authentication_failed"
        for bad in ["Bearer apt_nope", "Bearer ", "Basic abc", "Bearer agk_whatever"]:
            response = client.get("/api/v1/me/", HTTP_AUTHORIZATION=bad)
            assert response.status_code == 401, bad
            assert set(response.json()["error"]) >= {"code", "message"}
        assert client.get("/api/v1/me/").status_code == 401


class TestBadInput:
    @pytest.mark.parametrize(
        "body, field",
        [
            ({}, "name"),
            ({"name": ""}, "name"),
            ({"name": 123456}, "name"),
            ({"name": "x" * 81}, "name"),
            ({"name": "ok", "owner": "someone"}, "owner"),
            ([1, 2], None),
        ],
    )
    def test_it_rejects_bad_workspace_bodies_and_writes_nothing(self, alice, api, body, field):
        before = snapshot()
        response = api(alice).post("/api/v1/workspaces/", body, format="json")
        assert response.status_code == 400
        error = response.json()["error"]
        assert error["code"] == "invalid"
        if field:
            assert field in error["fields"]
        assert snapshot() == before

    def test_it_rejects_malformed_json(self, alice, api):
        response = api(alice).generic(
            "POST", "/api/v1/workspaces/", "{not json", content_type="application/json"
        )
        assert response.status_code == 400
        assert response.json()["error"]["code"] == "parse_error"

    def test_unknown_api_paths_answer_json_404(self, alice, api):
        response = api(alice).get("/api/v1/nothing-here/")
        assert response.status_code == 404
        assert response.json()["error"]["code"] == "not_found"


def test_healthz_reports_db_and_redis(client):
    response = client.get("/healthz")
    assert response.status_code == 200
    assert response.json() == {"status": "ok", "db": "ok", "redis": "ok"}


def test_openapi_schema_is_served_and_documents_bodies_and_auth(client):
    response = client.get("/api/v1/schema/?format=json")
    assert response.status_code == 200
    schema = response.json()
    assert schema["openapi"].startswith("3.")
    post = schema["paths"]["/api/v1/conversations/{conversationId}/messages/"]["post"]
    body = post["requestBody"]["content"]["application/json"]["schema"]["$ref"].rsplit("/", 1)[1]
    assert set(schema["components"]["schemas"][body]["properties"]) == {
        "body",
        "replyTo",
        "ref",
        "attachments",
    }
    assert schema["components"]["securitySchemes"]["bearerAuth"]["scheme"] == "bearer"


def test_healthz_is_503_when_redis_is_down(client, settings):
    from agntchat.core import presence

    settings.REDIS_URL = "redis://127.0.0.1:1/0"  # nothing listens there
    presence.client.cache_clear()
    try:
        response = client.get("/healthz")
    finally:
        presence.client.cache_clear()
    assert response.status_code == 503
    assert response.json()["db"] == "ok" and response.json()["redis"].startswith("error")


@pytest.mark.django_db(transaction=True)
def test_one_person_accepting_two_links_at_once_joins_once(alice, charlie, team_a):
    owner = team_a.memberships.get(user=alice)
    tokens = [actions.create_invitation(owner)[1] for _ in range(6)]

    def accept(token):
        return actions.accept_invitation(charlie, token).role

    # An exception in the list is what a 500 would have been.
    outcomes = run_together(accept, [(t,) for t in tokens], catching=Exception)
    assert outcomes == ["member"] * len(tokens)
    assert team_a.memberships.filter(user=charlie).count() == 1


@pytest.mark.django_db(transaction=True)
def test_sign_ups_racing_for_one_name_get_the_forms_answer_not_a_500(db):
    """Each passes the form's check before any has saved; the database's unique index picks one
    and the others get the page back saying the name is taken."""
    from django.test import Client

    def sign_up():
        return Client(raise_request_exception=False).post(
            "/signup/",
            {
                "username": "racer",
                "password1": "pw-racer-881234",
                "password2": "pw-racer-881234",
            },
        )

    responses = run_together(sign_up, [()] * 6)
    statuses = [response.status_code for response in responses]
    pages = [response.content.decode() for response in responses]
    assert sorted(statuses) == [200] * 5 + [302]
    assert all("already exists" in p for p, s in zip(pages, statuses, strict=True) if s == 200)
    assert User.objects.filter(username="racer").count() == 1
