"""A workspace's own hosts over REST (WS-2, AGT-6): admins add, change, provision, restart and
remove them; members read; the SSH key never comes out; bad input changes nothing; another
workspace's people find nothing."""

import pytest
from django_q.models import OrmQ

from agents import hosting
from agents.actions import create_agent
from agents.models import Host, HostRestart
from tests.work.sshd import keygen

pytestmark = pytest.mark.django_db


@pytest.fixture
def ssh_key(tmp_path):
    keygen(tmp_path / "k")
    return (tmp_path / "k").read_text()


def body(ssh_key, **fields):
    return {"name": "edge-1", "address": "edge-1.example.com", "sshKey": ssh_key, **fields}


def test_an_admin_adds_and_changes_a_host_and_the_key_never_comes_out(
    alice, bob, team_a, api, ssh_key
):
    url = f"/api/v1/workspaces/{team_a.id}/hosts/"
    created = api(alice).post(url, body(ssh_key, capacity=3, multiTenant=True), format="json")
    assert created.status_code == 201, created.json()
    out = created.json()
    assert (out["capacity"], out["multiTenant"], out["placed"], out["status"]) == (
        3,
        True,
        0,
        "new",
    )
    assert "sshKey" not in out and ssh_key.split("\n")[1] not in created.content.decode()
    host = Host.objects.get(pk=out["id"])
    assert host.workspace_id == team_a.id and hosting.ssh_key_of(host) == ssh_key.strip()

    listed = api(bob).get(url).json()["results"]  # members read
    assert [h["name"] for h in listed] == ["edge-1"]
    assert ssh_key.split("\n")[1] not in str(listed)

    changed = api(alice).patch(f"{url}{host.id}/", {"capacity": 5}, format="json")
    assert changed.status_code == 200 and changed.json()["capacity"] == 5
    again = api(alice).post(url, body(ssh_key), format="json")
    assert again.status_code == 400 and again.json()["error"]["code"] == "name_taken"


@pytest.mark.parametrize(
    "bad",
    [
        {"sshKey": "not a key"},
        {"address": "10.0.0.5; rm -rf /"},
        {"port": 70000},
        {"capacity": 0},
        {"root": "relative/path"},
        {"sshUser": "Root Admin"},
        {"python": "python3 && reboot"},
        {"unknown": 1},
    ],
)
def test_bad_input_is_refused_and_changes_nothing(alice, team_a, api, ssh_key, bad):
    url = f"/api/v1/workspaces/{team_a.id}/hosts/"
    response = api(alice).post(url, body(ssh_key, **bad), format="json")
    assert response.status_code == 400
    assert not Host.objects.exists()


def test_only_admins_change_hosts(alice, bob, team_a, api, ssh_key):
    url = f"/api/v1/workspaces/{team_a.id}/hosts/"
    assert api(bob).post(url, body(ssh_key), format="json").status_code == 403
    host = hosting.create_host(workspace=team_a, name="edge-1", address="10.0.0.5", ssh_key=ssh_key)
    for response in [
        api(bob).patch(f"{url}{host.id}/", {"capacity": 1}, format="json"),
        api(bob).delete(f"{url}{host.id}/"),
        api(bob).post(f"{url}{host.id}/provision/"),
        api(bob).post(f"{url}{host.id}/restarts/"),
        api(bob).delete(f"{url}{host.id}/host-key/"),
    ]:
        assert response.status_code == 403
    assert Host.objects.get().capacity == 10 and not HostRestart.objects.exists()


def test_another_workspaces_people_find_nothing(alice, charlie, team_a, team_b, api, ssh_key):
    host = hosting.create_host(workspace=team_a, name="edge-1", address="10.0.0.5", ssh_key=ssh_key)
    shared = hosting.create_host(name="shared", address="10.0.0.6", ssh_key=ssh_key)
    mine = f"/api/v1/workspaces/{team_b.id}/hosts/"
    theirs = f"/api/v1/workspaces/{team_a.id}/hosts/"
    responses = [
        api(charlie).get(theirs),
        api(charlie).post(theirs, body(ssh_key), format="json"),
        api(charlie).get(f"{theirs}{host.id}/"),
        api(charlie).patch(f"{theirs}{host.id}/", {"capacity": 1}, format="json"),
        api(charlie).delete(f"{theirs}{host.id}/"),
        api(charlie).post(f"{theirs}{host.id}/provision/"),
        api(charlie).get(f"{theirs}{host.id}/restarts/"),
        api(charlie).post(f"{theirs}{host.id}/restarts/"),
        api(charlie).delete(f"{theirs}{host.id}/host-key/"),
        # Through his own workspace: another's host, or a shared one, is not his either.
        api(charlie).get(f"{mine}{host.id}/"),
        api(charlie).patch(f"{mine}{shared.id}/", {"capacity": 1}, format="json"),
    ]
    assert [r.status_code for r in responses] == [404] * len(responses)
    assert Host.objects.get(pk=host.pk).capacity == 10 and Host.objects.count() == 2


def test_provision_restart_clear_the_key_and_delete(
    alice, team_a, api, ssh_key, django_capture_on_commit_callbacks
):
    host = hosting.create_host(workspace=team_a, name="edge-1", address="10.0.0.5", ssh_key=ssh_key)
    hosting.pin_host_key(
        host, "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl"
    )
    url = f"/api/v1/workspaces/{team_a.id}/hosts/{host.id}/"
    assert api(alice).get(url).json()["hostKeyFingerprint"].startswith("SHA256:")
    with django_capture_on_commit_callbacks(execute=True):
        assert api(alice).post(f"{url}provision/").status_code == 202
        restart = api(alice).post(f"{url}restarts/")
    assert restart.status_code == 202 and restart.json()["status"] == "running"
    assert [q.func() for q in OrmQ.objects.all()] == [
        "work.jobs.provision_host",
        "work.jobs.restart_host",
    ]
    assert [r["id"] for r in api(alice).get(f"{url}restarts/").json()["results"]] == [
        restart.json()["id"]
    ]
    assert api(alice).delete(f"{url}host-key/").status_code == 204
    assert api(alice).get(url).json()["hostKeyFingerprint"] == ""

    # Not removed while an agent runs there.
    hosting.place_agent(create_agent(alice, name="Vega"), host)
    refused = api(alice).delete(url)
    assert refused.status_code == 409 and refused.json()["error"]["code"] == "host_in_use"
    assert Host.objects.filter(pk=host.pk).exists()


def test_the_settings_page_shows_admins_their_hosts(alice, bob, team_a, client, ssh_key):
    host = hosting.create_host(workspace=team_a, name="edge-1", address="10.0.0.5", ssh_key=ssh_key)
    hosting.place_agent(create_agent(alice, name="Vega"), host)
    HostRestart.objects.create(
        host=host, status="failed", report=[{"name": "Vega", "outcome": "timed out"}]
    )
    client.force_login(alice)
    page = client.get(f"/w/{team_a.id}/members/").content.decode()
    assert f'data-host-id="{host.id}"' in page and "1 / 10" in page
    assert "Vega: timed out" in page and ssh_key.split("\n")[1] not in page
    client.force_login(bob)
    assert "edge-1" not in client.get(f"/w/{team_a.id}/members/").content.decode()


def test_actions_without_a_body_refuse_one(alice, team_a, api, ssh_key):
    host = hosting.create_host(workspace=team_a, name="edge-1", address="10.0.0.5", ssh_key=ssh_key)
    url = f"/api/v1/workspaces/{team_a.id}/hosts/{host.id}/"
    for action in ("provision/", "restarts/"):
        assert api(alice).post(url + action, [None], format="json").status_code == 400
        assert api(alice).post(url + action, {"x": 1}, format="json").status_code == 400
    assert not HostRestart.objects.exists() and not OrmQ.objects.exists()


@pytest.mark.parametrize(
    "address", ["127.0.0.1", "10.0.0.5", "169.254.169.254", "fe80::1", "fd00::2"]
)
def test_a_workspace_host_at_a_private_address_is_refused(alice, team_a, api, ssh_key, address):
    """Anyone can make a workspace: its hosts must not reach the server's own network."""
    url = f"/api/v1/workspaces/{team_a.id}/hosts/"
    refused = api(alice).post(url, body(ssh_key, address=address), format="json")
    assert refused.status_code == 400
    assert "HOSTS_ALLOW_PRIVATE" in refused.json()["error"]["fields"]["address"]
    assert not Host.objects.exists()


def test_a_deployment_on_its_own_network_allows_private_hosts(
    alice, team_a, api, ssh_key, settings
):
    settings.HOSTS_ALLOW_PRIVATE = True
    url = f"/api/v1/workspaces/{team_a.id}/hosts/"
    assert api(alice).post(url, body(ssh_key, address="10.0.0.5"), format="json").status_code == 201


def test_a_name_resolving_to_a_private_address_is_not_dialled(alice, team_a, ssh_key):
    """A name is checked where it is resolved, and the address checked is the one dialled."""
    from work import hosting as work_hosting

    theirs = hosting.create_host(workspace=team_a, name="sly", address="localhost", ssh_key=ssh_key)
    with pytest.raises(work_hosting.HostUnreachable) as refused:
        work_hosting.Session(theirs)
    assert "private, local or reserved" in refused.value.message
    staff = hosting.create_host(name="staff-own", address="localhost", ssh_key=ssh_key)
    assert work_hosting.address_to_dial(staff) == "localhost"  # staff's own hosts are theirs
