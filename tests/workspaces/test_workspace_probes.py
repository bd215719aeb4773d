"""Probes of memberships, invitations and credentials: what a stale page, a request racing
another or an account closed since must not get through."""

import pytest
from django.db import IntegrityError, transaction

from tests.concurrency import run_together
from workspaces import actions
from workspaces.exceptions import (
    CredentialNameTaken,
    InvitationInvalid,
    MemberNotFound,
    NotAllowed,
    WorkspaceNotFound,
)
from workspaces.models import (
    ApiToken,
    AuditEntry,
    Credential,
    Invitation,
    Membership,
    User,
    Workspace,
)

pytestmark = pytest.mark.django_db


def test_a_link_stops_working_when_its_maker_is_made_inactive(alice, bob, charlie, team_a):
    """A hijacked admin's account is closed by staff: the links made with it let nobody in."""
    owner = team_a.memberships.get(user=alice)
    _, token = actions.create_invitation(owner)
    alice.is_active = False
    alice.save(update_fields=["is_active"])
    with pytest.raises(InvitationInvalid):
        actions.accept_invitation(charlie, token)
    assert not team_a.memberships.filter(user=charlie).exists()
    # Made active again, the person's links work again (they were never revoked).
    alice.is_active = True
    alice.save(update_fields=["is_active"])
    assert actions.accept_invitation(charlie, token).role == "member"


def test_a_role_change_for_someone_who_left_meanwhile_is_not_found_not_a_500(alice, bob, team_a):
    owner = team_a.memberships.get(user=alice)
    page = team_a.memberships.get(user=bob)  # as the owner's request loaded it
    actions.leave_workspace(team_a.memberships.get(user=bob))
    with pytest.raises(MemberNotFound):
        actions.change_role(owner, page, "admin")
    assert not team_a.memberships.filter(user=bob).exists()


def test_a_removal_is_decided_on_the_role_held_now(alice, bob, charlie, team_a):
    """An admin's request loaded Charlie as a member; the owner made him admin meanwhile. Only
    the owner removes an admin, so the removal is refused."""
    owner = team_a.memberships.get(user=alice)
    actions.change_role(owner, team_a.memberships.get(user=bob), "admin")
    _, token = actions.create_invitation(owner)
    stale = actions.accept_invitation(charlie, token)
    actions.change_role(owner, team_a.memberships.get(user=charlie), "admin")
    with pytest.raises(NotAllowed):
        actions.remove_member(team_a.memberships.get(user=bob), stale)
    assert team_a.memberships.get(user=charlie).role == "admin"


def test_removing_someone_already_gone_is_not_found_and_audited_once(alice, bob, team_a):
    """Two admins' requests loaded Bob before either removed him."""
    owner = team_a.memberships.get(user=alice)
    first, second = team_a.memberships.get(user=bob), team_a.memberships.get(user=bob)
    actions.remove_member(owner, first)
    with pytest.raises(MemberNotFound):
        actions.remove_member(owner, second)
    assert AuditEntry.objects.filter(workspace=team_a, action="member.removed").count() == 1
    assert not Membership.objects.filter(workspace=team_a, user=bob).exists()


def test_a_credential_name_taken_meanwhile_is_a_409_not_a_500(alice, team_a):
    """The API's check runs before the insert; a request beside it can take the name between."""
    owner = team_a.memberships.get(user=alice)
    actions.create_credential(owner, "OPENAI", "sk-one")
    with pytest.raises(CredentialNameTaken):
        actions.create_credential(owner, "OPENAI", "sk-two")
    assert Credential.objects.filter(workspace=team_a).count() == 1
    assert AuditEntry.objects.filter(workspace=team_a, action="credential.created").count() == 1


def test_a_long_email_address_is_invited_and_audited_not_a_500(alice, team_a, api):
    """An address may be 254 characters; the log keeps the first 200 of it."""
    email = "a" * 64 + "@" + ".".join(["b" * 60, "c" * 60, "d" * 59]) + ".example"
    assert len(email) == 254
    client = api(alice)
    response = client.post(
        f"/api/v1/workspaces/{team_a.id}/invitations/", {"email": email}, format="json"
    )
    assert response.status_code == 201
    entry = AuditEntry.objects.get(target_id=response.json()["id"])
    assert entry.target_label == email[:200]
    longer = "a" * 64 + "@" + ".".join(["b" * 60, "c" * 60, "d" * 60]) + ".example"
    response = client.post(
        f"/api/v1/workspaces/{team_a.id}/invitations/", {"email": longer}, format="json"
    )
    assert response.status_code == 400


@pytest.mark.django_db(transaction=True)
def test_a_workspace_deleted_as_someone_joins_it_is_deleted_not_a_500(alice, bob):
    """The join commits a membership the deletion had not seen: its foreign key failed the
    deletion (an IntegrityError, a 500 for the owner, the workspace left in place)."""
    for n in range(6):
        workspace = actions.create_team_workspace(alice, f"Doomed {n}")
        owner = workspace.memberships.get(user=alice)
        _, token = actions.create_invitation(owner)

        def act(what, token=token, owner=owner):
            if what == "join":
                return actions.accept_invitation(bob, token)
            return actions.delete_workspace(
                Membership.objects.select_related("workspace").get(pk=owner.pk)
            )

        outcomes = run_together(act, [("join",), ("delete",)], catching=Exception)
        # The join may come first (then the deletion takes it too) or find the link gone.
        assert outcomes[1] is None, outcomes
        assert not Workspace.objects.filter(pk=workspace.pk).exists()
        assert (
            AuditEntry.objects.filter(action="workspace.deleted", target_id=workspace.pk).count()
            == 1
        )


@pytest.mark.django_db(transaction=True)
def test_a_workspace_deleted_twice_at_once_is_deleted_and_recorded_once(alice, bob, team_a):
    owner = team_a.memberships.get(user=alice)

    def delete():
        return actions.delete_workspace(
            Membership.objects.select_related("workspace").get(pk=owner.pk)
        )

    outcomes = run_together(delete, [()] * 2, prepare=lambda: (), catching=WorkspaceNotFound)
    assert sorted(type(o).__name__ for o in outcomes) == ["NoneType", "WorkspaceNotFound"]
    assert AuditEntry.objects.filter(action="workspace.deleted").count() == 1


def test_revoking_a_link_used_meanwhile_says_it_was_used(alice, charlie, team_a):
    """The admin's request loaded the link before Charlie used it: saying "revoked" (and
    auditing it) would tell the admin they stopped someone who is already in."""
    owner = team_a.memberships.get(user=alice)
    invitation, token = actions.create_invitation(owner)
    loaded = Invitation.objects.get(pk=invitation.pk)
    actions.accept_invitation(charlie, token)
    with pytest.raises(InvitationInvalid) as refused:
        actions.revoke_invitation(owner, loaded)
    assert refused.value.status == 409
    invitation.refresh_from_db()
    assert invitation.revoked_at is None and invitation.accepted_by == charlie
    assert not AuditEntry.objects.filter(action="invitation.revoked").exists()


def test_a_token_revoked_twice_at_once_is_revoked_and_audited_once(alice):
    token, _ = actions.issue_api_token(alice, "laptop")
    first, second = ApiToken.objects.get(pk=token.pk), ApiToken.objects.get(pk=token.pk)
    actions.revoke_api_token(first)
    actions.revoke_api_token(second)
    assert AuditEntry.objects.filter(action="api_token.revoked").count() == 1
    assert ApiToken.objects.get(pk=token.pk).revoked_at == first.revoked_at


def test_members_see_each_others_names_not_email_addresses(alice, bob, team_a, api):
    """Anyone a link lets in reads the member list: the pages show no one's address, nor does
    the API (a person reads their own at /me/)."""
    response = api(bob).get(f"/api/v1/workspaces/{team_a.id}/members/")
    assert response.status_code == 200
    people = {m["user"]["username"]: m["user"] for m in response.json()["results"]}
    assert people["alice"]["id"] == str(alice.id) and "email" not in people["alice"]
    assert alice.email not in response.content.decode()
    assert api(bob).get("/api/v1/me/").json()["email"] == bob.email


@pytest.mark.django_db(transaction=True)
def test_names_differing_only_in_case_signed_up_at_once_make_one_account(db):
    """The form refuses "Racer" when "racer" exists, but each sign-up checked before any saved
    (and the unique index tells the case apart): four look-alike accounts were made."""
    from django.test import Client

    def sign_up(name):
        return Client(raise_request_exception=False).post(
            "/signup/",
            {"username": name, "password1": "pw-racer-881234", "password2": "pw-racer-881234"},
        )

    responses = run_together(sign_up, [("racer",), ("Racer",), ("RACER",), ("rAcer",)])
    assert sorted(r.status_code for r in responses) == [200, 200, 200, 302]
    assert all(b"already exists" in r.content for r in responses if r.status_code == 200)
    assert User.objects.filter(username__iexact="racer").count() == 1


def test_no_path_makes_two_names_differing_only_in_case(alice):
    """Not the sign-up form only: the admin, createsuperuser or a script are held to it too."""
    with pytest.raises(IntegrityError), transaction.atomic():
        User.objects.create_user("ALICE", "other@example.com", "pw-other-123456")
    assert User.objects.filter(username__iexact="alice").count() == 1


def test_a_workspace_keeps_a_bounded_number_of_links_waiting(alice, team_a, api, settings):
    settings.PENDING_INVITATIONS_PER_WORKSPACE = 2
    path = f"/api/v1/workspaces/{team_a.id}/invitations/"
    made = [api(alice).post(path, {}, format="json") for _ in range(2)]
    assert [m.status_code for m in made] == [201, 201]
    refused = api(alice).post(path, {}, format="json")
    assert refused.status_code == 409 and refused.json()["error"]["code"] == "limit_reached"
    assert "revoke some first" in refused.json()["error"]["message"]
    assert actions.pending_invitations(team_a).count() == 2
    # A link revoked (or used, or expired) frees its place.
    revoked = api(alice).delete(f"{path}{made[0].json()['id']}/")
    assert revoked.status_code in (200, 204), revoked.content
    assert api(alice).post(path, {}, format="json").status_code == 201


@pytest.mark.django_db(transaction=True)
def test_a_person_owns_a_bounded_number_of_team_workspaces(alice, client, settings):
    settings.TEAM_WORKSPACES_PER_PERSON = 3
    owned = Workspace.objects.filter(owner=alice, kind="team").count()  # team A, team B…
    results = run_together(
        lambda n: actions.create_team_workspace(alice, f"Team {n}"),
        [(n,) for n in range(5)],
        catching=(actions.LimitReached,),
    )
    made = [r for r in results if isinstance(r, Workspace)]
    assert len(made) == max(0, 3 - owned)
    assert Workspace.objects.filter(owner=alice, kind="team").count() == max(owned, 3)
    # The page says so on the form, it does not fail.
    client.force_login(alice)
    page = client.post("/w/new/", {"name": "One more"})
    assert page.status_code == 200 and b"the most one person may" in page.content
