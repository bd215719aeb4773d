"""The audit log's page (issue 27): the workspace's whole log, newest first, fifty entries a
page, by action; for the owner and admins (the REST log's readers), a 404 for anyone else."""

import pytest
from django.db import transaction

from tests.conftest import make_person
from workspaces import actions
from workspaces.audit import record_audit
from workspaces.models import AuditEntry, Role

pytestmark = pytest.mark.django_db


def page(client, person, workspace, query=""):
    client.force_login(person)
    return client.get(f"/w/{workspace.id}/audit/{query}")


def entries_on(response) -> list[str]:
    text = response.content.decode()
    return [part.split('"')[0] for part in text.split('data-audit-entry="')[1:]]


def test_the_owner_reads_the_log_by_page_newest_first(client, alice, team_a):
    AuditEntry.objects.all().delete()
    with transaction.atomic():
        for n in range(60):
            record_audit(f"test.step_{n:02d}", actor=alice, workspace=team_a, label=f"step {n}")
    first = page(client, alice, team_a)
    assert first.status_code == 200
    shown = entries_on(first)
    assert shown == [f"test.step_{n:02d}" for n in range(59, 9, -1)]  # 50, newest first
    older = first.content.decode().split('href="?before=')[1].split('"')[0]
    second = page(client, alice, team_a, f"?before={older}")
    assert entries_on(second) == [f"test.step_{n:02d}" for n in range(9, -1, -1)]
    assert b"data-audit-older" not in second.content and b"data-audit-newest" in second.content


def test_by_action_with_who_what_and_on_what(client, alice, bob, team_a):
    owner = team_a.memberships.get(user=alice)
    actions.change_role(owner, team_a.memberships.get(user=bob), Role.ADMIN)
    actions.create_credential(owner, "model", "sk-secret")
    response = page(client, alice, team_a, "?action=member.role_changed")
    assert entries_on(response) == ["member.role_changed"]
    row = response.content.decode().split('data-audit-entry="member.role_changed"')[1]
    row = row.split("</tr>")[0]
    assert alice.label in row and bob.label in row and "<time" in row
    assert b"sk-secret" not in page(client, alice, team_a).content


def test_admins_read_it_members_and_outsiders_find_no_page(client, alice, bob, team_a, charlie):
    owner = team_a.memberships.get(user=alice)
    dora = make_person("dora")
    _, token = actions.create_invitation(owner, Role.ADMIN)
    actions.accept_invitation(dora, token)
    assert page(client, dora, team_a).status_code == 200
    assert page(client, bob, team_a).status_code == 404
    assert page(client, charlie, team_a).status_code == 404
    # The members page links to it for those who may read it only.
    client.force_login(alice)
    assert b"data-audit-all" in client.get(f"/w/{team_a.id}/members/").content
    client.force_login(bob)
    assert b"data-audit-all" not in client.get(f"/w/{team_a.id}/members/").content


def test_a_bad_filter_shows_the_newest_entries_and_says_why(client, alice, team_a, charlie, team_b):
    """A mistyped or stale link is not "no such page": the log, newest first, with a plain word
    on the filter. Another workspace's entry reads the same as a malformed id."""
    theirs = AuditEntry.objects.filter(workspace=team_b).first()
    with transaction.atomic():
        theirs = theirs or record_audit("test.theirs", actor=charlie, workspace=team_b)
        record_audit("test.ours", actor=alice, workspace=team_a)
    for query in ("?before=notadate", f"?before={theirs.id}", "?action=" + "x" * 65):
        response = page(client, alice, team_a, query)
        assert response.status_code == 200, query
        text = response.content.decode()
        assert "data-audit-problem" in text and "filter is not valid" in text, query
        assert "test.ours" in entries_on(response) and "test.theirs" not in text, query
        assert "data-audit-newest" not in text, query  # it is the first page
    assert "data-audit-problem" not in page(client, alice, team_a).content.decode()


def test_actions_and_targets_read_as_words(client, alice, bob, team_a):
    owner = team_a.memberships.get(user=alice)
    actions.change_role(owner, team_a.memberships.get(user=bob), Role.ADMIN)
    text = page(client, alice, team_a).content.decode()
    row = text.split('data-audit-entry="member.role_changed"')[1].split("</tr>")[0]
    assert "Member role changed" in row and "<code>member.role_changed" not in row
    assert ">Member role changed</option>" in text  # the filter's choices too
    members = client.get(f"/w/{team_a.id}/members/").content.decode()
    assert "Member role changed" in members and "GET /api/v1/" not in members
    # A target's kind is its model's name in words ("permissionrequest": "permission request").
    with transaction.atomic():
        first = AuditEntry.objects.filter(workspace=team_a).first()
        record_audit("test.pointed", actor=alice, workspace=team_a, target=first, label="that")
    row = page(client, alice, team_a, "?action=test.pointed").content.decode()
    row = row.split('data-audit-entry="test.pointed"')[1].split("</tr>")[0]
    assert "audit entry" in row and "auditentry" not in row
