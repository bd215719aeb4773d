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


def test_a_page_from_an_unknown_entry_is_not_found(client, alice, team_a, charlie, team_b):
    theirs = AuditEntry.objects.filter(workspace=team_b).first()
    with transaction.atomic():
        theirs = theirs or record_audit("test.theirs", actor=charlie, workspace=team_b)
    assert page(client, alice, team_a, f"?before={theirs.id}").status_code == 404
    assert page(client, alice, team_a, "?before=not-an-id").status_code == 404
