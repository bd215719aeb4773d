"""Staff manage hosts in the Django admin (AGT-6): added with a key that is stored encrypted and
never shown, provisioned and restarted through the jobs, restart reports read-only, a host with
agents on it not deleted."""

import pytest
from django.utils import timezone
from django_q.models import OrmQ

from agents import hosting
from agents.actions import create_agent
from agents.models import Host, HostRestart
from tests.work.sshd import keygen
from workspaces.models import User

pytestmark = pytest.mark.django_db


@pytest.fixture
def staff_client(client):
    staff = User.objects.create_superuser("staff", "s@example.com", "pw-staff-123456")
    client.force_login(staff)
    return client


@pytest.fixture
def ssh_key(tmp_path):
    keygen(tmp_path / "k")
    return (tmp_path / "k").read_text()


def queued_jobs() -> list[str]:
    return [q.func() for q in OrmQ.objects.all()]


def form(**fields):
    data = {
        "name": "edge-1",
        "workspace": "",
        "address": "10.0.0.5",
        "port": "22",
        "ssh_user": "root",
        "multi_tenant": "on",
        "capacity": "4",
        "root": "/opt/agntchat",
        "python": "python3",
        "ssh_key": "",
    }
    data.update(fields)
    return data


def test_staff_add_a_host_whose_key_is_stored_encrypted_and_never_shown(staff_client, ssh_key):
    refused = staff_client.post("/admin/agents/host/add/", form(ssh_key="not a key"))
    assert refused.status_code == 200 and not Host.objects.exists()
    assert "OpenSSH private key expected" in refused.content.decode()

    added = staff_client.post("/admin/agents/host/add/", form(ssh_key=ssh_key))
    assert added.status_code == 302, added.content.decode()[:2000]
    host = Host.objects.get()
    assert host.multi_tenant and host.capacity == 4
    assert ssh_key.split("\n")[1] not in host.ssh_key_ciphertext
    assert hosting.ssh_key_of(host) == ssh_key.strip()

    page = staff_client.get(f"/admin/agents/host/{host.pk}/change/").content.decode()
    assert ssh_key.split("\n")[1] not in page and "not pinned yet" in page
    # Saving without a key keeps the stored one.
    staff_client.post(f"/admin/agents/host/{host.pk}/change/", form(capacity="6"))
    host.refresh_from_db()
    assert host.capacity == 6 and hosting.ssh_key_of(host) == ssh_key.strip()


def test_staff_provision_restart_and_read_the_report(
    staff_client, alice, ssh_key, django_capture_on_commit_callbacks
):
    host = hosting.create_host(name="edge-1", address="10.0.0.5", ssh_key=ssh_key)
    hosting.pin_host_key(
        host, "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl"
    )
    changelist = "/admin/agents/host/"
    with django_capture_on_commit_callbacks(execute=True):
        staff_client.post(changelist, {"action": "provision", "_selected_action": [host.pk]})
        staff_client.post(changelist, {"action": "rolling_restart", "_selected_action": [host.pk]})
    restart = HostRestart.objects.get(host=host)
    assert queued_jobs() == ["work.jobs.provision_host", "work.jobs.restart_host"]

    # The report as the job leaves it, shown read-only.
    HostRestart.objects.filter(pk=restart.pk).update(
        status="failed",
        finished_at=timezone.now(),
        report=[{"name": "Vega", "outcome": "timed out", "seconds": 120.0}],
    )
    page = staff_client.get(f"/admin/agents/hostrestart/{restart.pk}/change/")
    assert page.status_code == 200 and "Vega: timed out (120.0 s)" in page.content.decode()
    assert (
        staff_client.post(
            f"/admin/agents/hostrestart/{restart.pk}/delete/", {"post": "yes"}
        ).status_code
        == 403
    )

    staff_client.post(changelist, {"action": "clear_host_key", "_selected_action": [host.pk]})
    host.refresh_from_db()
    assert host.host_key == ""


def test_a_host_with_agents_on_it_is_not_deleted(staff_client, alice, ssh_key):
    host = hosting.create_host(name="edge-1", address="10.0.0.5", ssh_key=ssh_key)
    hosting.place_agent(create_agent(alice, name="Vega"), host)
    response = staff_client.post(f"/admin/agents/host/{host.pk}/delete/", {"post": "yes"})
    assert response.status_code == 403 and Host.objects.filter(pk=host.pk).exists()
    with pytest.raises(hosting.HostInUse):
        hosting.delete_host(host)
