"""Workspace hosts against a hostile co-admin, a hostile SSH server and plain floods: changing
where a host is moves the others' agents off it; an SSH command has a deadline and a hung one
marks the host unreachable; one provisioning per host at a time; caps on hosts and on shared
places; a supervisor socket ends with its token; bad keys and a delete racing a placement are
4xx, not 500."""

import asyncio
import math
import os
import signal
import socket
import threading
import time
from pathlib import Path

import pytest
from asgiref.sync import sync_to_async
from channels.testing import WebsocketCommunicator
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from django.db import connection, transaction
from django_q.models import OrmQ
from rest_framework.test import APIClient

from agents import hosting
from agents.actions import create_agent
from agents.models import Agent, Host, HostRestart, HostToken
from agntchat.asgi import application
from agntchat.core.presence import client as redis
from tests.concurrency import run_together
from tests.conftest import client_for
from tests.socket_helpers import free_port, next_frame
from tests.work import sshd as loopback
from tests.work.sshd import keygen
from tests.work.test_host_socket_ends import closed_for_good, supervisor
from tests.work.test_hosting_residue_gone import told_gone
from work import hosting as work_hosting
from work.host_socket import _principal
from workspaces import actions as workspace_actions
from workspaces.models import AuditEntry, Role, User

# Never parsed: for hosts no test connects to.
KEY = "-----BEGIN OPENSSH PRIVATE KEY-----\nnot used here\n-----END OPENSSH PRIVATE KEY-----\n"
PINNED = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl"

# Mangled OpenSSH keys on which paramiko raises IndexError and AssertionError (not SSHException).
TRUNCATED_KEY = """-----BEGIN OPENSSH PRIVATE KEY-----
b3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQAAAAAAAAABAAAAMwAAAAtzc2gtZW
QyNTUxOQAAACBNO90DZMRKs63K1g1wMcpzJtRVGiBkLGm3EzTj+L8XmAAAAJDTNp9O0zaf
TgAAAAtzc2gtZWQyNTUx
-----END OPENSSH PRIVATE KEY-----
"""
BAD_LENGTH_KEY = """-----BEGIN OPENSSH PRIVATE KEY-----
b3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQAAAAAAAAABAAAAMwAAAAtzc2gtZW
QyNTUxOQAAACBNO90DZMRKs63K1g1wMcpzJtRVGiBkLGm3EzTj+L8XmAAAAJDTNp9O0zaf
TgAAAAtzc2gtZWQyNTUxOQAAACBNO90DZMRKs63K1g1wMcpzJtRVGiBkLGm3EzTj+L8XmA
AAAECVCJaFZvVJjLfRIhMDi78udZ0bal71B+uAnHkl0S8j2E073QNkxEqzrcrWDXAxynMm
1FUaIGQsabcTNP////+YAAAAB3Jvb3RAdm0BAgMEBQY=
-----END OPENSSH PRIVATE KEY-----
"""


@pytest.fixture
def ssh_key(tmp_path):
    keygen(tmp_path / "k")
    return (tmp_path / "k").read_text()


def hosts_url(workspace) -> str:
    return f"/api/v1/workspaces/{workspace.id}/hosts/"


def session_with(token: str) -> int:
    return (
        APIClient().post("/api/v1/agent/session/", HTTP_AUTHORIZATION=f"Bearer {token}").status_code
    )


# --- a co-admin changing where a host is ----------------------------------------------------


@pytest.mark.django_db
@pytest.mark.parametrize(
    "change",
    [
        {"address": "bob-box.example.net"},
        {"port": 2222},
        {"sshUser": "bob"},
        {"sshKey": "bob's key"},
        "host-key",
    ],
    ids=["address", "port", "user", "key", "host-key"],
)
def test_changing_where_a_host_is_moves_the_other_owners_agents_off_it(
    alice, bob, team_a, api, tmp_path, change
):
    """Otherwise the next provisioning writes every placed agent's placement token to wherever
    the host now points: a co-admin's own machine, and he then acts as another admin's agent in
    workspaces he is not in."""
    workspace_actions.change_role(
        team_a.memberships.get(user=alice), team_a.memberships.get(user=bob), Role.ADMIN
    )
    keygen(tmp_path / "alice")
    host = hosting.create_host(
        workspace=team_a,
        name="edge-1",
        address="edge-1.example.com",
        ssh_key=(tmp_path / "alice").read_text(),
    )
    hosting.pin_host_key(host, PINNED)
    nova = hosting.place_agent(create_agent(alice, name="Nova", backend="scripted"), host)
    bobs = hosting.place_agent(create_agent(bob, name="Bobs", backend="scripted"), host)
    novas_token = hosting.issue_host_token(host, nova)
    bobs_token = hosting.issue_host_token(host, bobs)

    url = f"{hosts_url(team_a)}{host.id}/"
    if change == "host-key":
        assert api(bob).delete(f"{url}host-key/").status_code == 204
    else:
        if "sshKey" in change:
            keygen(tmp_path / "bob")
            change = {"sshKey": (tmp_path / "bob").read_text()}
        assert api(bob).patch(url, change, format="json").status_code == 200

    nova.refresh_from_db()
    assert (nova.runtime, nova.host_id) == (Agent.Runtime.LOCAL, None)
    assert session_with(novas_token) == 401
    assert Agent.objects.get(pk=bobs.pk).host_id == host.pk  # his own agent stays
    assert session_with(bobs_token) == 200
    moved = AuditEntry.objects.get(action="host.agent_made_local")
    assert (moved.workspace_id, moved.actor_user_id, moved.details["agent_name"]) == (
        team_a.id,
        bob.id,
        "Nova",
    )


@pytest.fixture
def staff_client(client):
    staff = User.objects.create_superuser("staff", "s@example.com", "pw-staff-123456")
    client.force_login(staff)
    return client


@pytest.mark.django_db
def test_staff_moving_a_host_to_another_workspace_moves_its_agents_off_it(
    alice, bob, team_a, staff_client, ssh_key
):
    """Else the agents of the old workspace's people go on running on a machine the new
    workspace's admins now manage, and the next provisioning hands them their tokens."""
    workspace_actions.change_role(
        team_a.memberships.get(user=alice), team_a.memberships.get(user=bob), Role.ADMIN
    )
    bobs_team = workspace_actions.create_team_workspace(bob, "Bob's team")
    host = hosting.create_host(
        workspace=team_a, name="edge-1", address="edge-1.example.com", ssh_key=ssh_key
    )
    nova = hosting.place_agent(create_agent(alice, name="Nova", backend="scripted"), host)
    bobs = hosting.place_agent(create_agent(bob, name="Bobs", backend="scripted"), host)
    novas_token = hosting.issue_host_token(host, nova)

    form = {
        "name": "edge-1",
        "workspace": str(bobs_team.pk),
        "address": "edge-1.example.com",  # where it is stays: only whose it is changes
        "port": "22",
        "ssh_user": "root",
        "capacity": "10",
        "root": "/opt/agntchat",
        "python": "python3",
        "ssh_key": "",
    }
    saved = staff_client.post(f"/admin/agents/host/{host.pk}/change/", form)
    assert saved.status_code == 302, saved.content.decode()[:2000]

    assert Host.objects.get(pk=host.pk).workspace_id == bobs_team.pk
    nova.refresh_from_db()
    assert (nova.runtime, nova.host_id) == (Agent.Runtime.LOCAL, None)
    assert session_with(novas_token) == 401
    assert Agent.objects.get(pk=bobs.pk).host_id == host.pk  # he manages the new workspace
    moved = AuditEntry.objects.get(action="host.agent_made_local")
    assert (moved.workspace_id, moved.details["agent_name"], moved.details["reason"]) == (
        team_a.id,
        "Nova",
        "workspace_changed",
    )


@pytest.mark.django_db
def test_other_changes_leave_the_agents_where_they_are(alice, bob, team_a, api, ssh_key):
    workspace_actions.change_role(
        team_a.memberships.get(user=alice), team_a.memberships.get(user=bob), Role.ADMIN
    )
    host = hosting.create_host(
        workspace=team_a, name="edge-1", address="edge-1.example.com", ssh_key=ssh_key
    )
    nova = hosting.place_agent(create_agent(alice, name="Nova"), host)
    same = {"name": "edge-one", "capacity": 4, "address": "edge-1.example.com", "sshKey": ssh_key}
    assert api(bob).patch(f"{hosts_url(team_a)}{host.id}/", same, format="json").status_code == 200
    assert Agent.objects.get(pk=nova.pk).host_id == host.pk


# --- SSH commands with a deadline -----------------------------------------------------------


def hostile_sshd(tmp_path, force_command):
    """The loopback sshd, every command replaced by FORCE_COMMAND (a host that misbehaves)."""
    server = loopback.Sshd(tmp_path)
    config = tmp_path / "sshd_config"
    config.write_text(config.read_text() + f"ForceCommand {force_command}\n")
    server.rekey()  # restarted on the new config
    return server


def stop_with_sessions(server):
    """The sshd, and what its sessions left running: a session's command outlives its channel
    (told by its SSH_CONNECTION, which ends with this server's address and port)."""
    server.stop()
    ours = f" 127.0.0.1 {server.port}"
    for environ in Path("/proc").glob("[0-9]*/environ"):
        try:
            variables = environ.read_bytes().decode(errors="replace").split("\0")
            if any(v.startswith("SSH_CONNECTION=") and v.endswith(ours) for v in variables):
                os.kill(int(environ.parent.name), signal.SIGKILL)
        except OSError:  # gone meanwhile
            continue


@pytest.mark.django_db(transaction=True)
@pytest.mark.skipif(bool(loopback.available()), reason=loopback.available() or "")
@pytest.mark.parametrize(
    "force_command",
    [
        "while :; do echo x; sleep 1; done",  # drips output, for ever
        "exec >&- 2>&-; sleep 20",  # ends its output, never its exit status
        "sleep 20",  # silent
    ],
    ids=["drip", "no-exit-status", "silent"],
)
def test_a_command_past_its_deadline_marks_the_host_unreachable(
    tmp_path, team_a, settings, monkeypatch, force_command
):
    monkeypatch.setattr(work_hosting, "COMMAND_TIMEOUT", 2)
    settings.HOSTS_ALLOW_PRIVATE = True  # the loopback sshd stands for a public machine
    server = hostile_sshd(tmp_path, force_command)
    try:
        host = hosting.create_host(
            workspace=team_a,
            name="slow",
            address="127.0.0.1",
            port=server.port,
            ssh_user="root",
            ssh_key=server.client_key,
            root=str(tmp_path / "root"),
        )
        started = time.monotonic()
        with pytest.raises(work_hosting.HostUnreachable, match="did not finish within 2 s"):
            work_hosting.provision_host(host)
        assert time.monotonic() - started < 10
        host.refresh_from_db()
        assert host.status == Host.Status.UNREACHABLE and "did not finish" in host.problem
    finally:
        stop_with_sessions(server)


# --- one provisioning at a time per host ----------------------------------------------------


@pytest.mark.django_db
def test_a_second_provisioning_or_restart_while_one_is_queued_is_refused(
    alice, team_a, api, django_capture_on_commit_callbacks
):
    host = hosting.create_host(workspace=team_a, name="edge-1", address="10.0.0.5", ssh_key=KEY)
    url = f"{hosts_url(team_a)}{host.id}/"
    with django_capture_on_commit_callbacks(execute=True):
        for action in ("provision/", "restarts/"):
            assert api(alice).post(url + action).status_code == 202
            again = api(alice).post(url + action)
            assert again.status_code == 409 and again.json()["error"]["code"] == "host_busy"
    assert [q.func() for q in OrmQ.objects.all()] == [
        "work.jobs.provision_host",
        "work.jobs.restart_host",
    ]
    # Once the job has run (here: the host refused, a private address), another may be asked.
    with pytest.raises(work_hosting.HostUnreachable):
        work_hosting.provision_host(host)
    assert api(alice).post(url + "provision/").status_code == 202


@pytest.mark.django_db
@pytest.mark.parametrize("kind", ["provision", "restart"])
def test_a_claim_rolled_back_with_its_request_holds_the_host_briefly(
    team_a, kind, settings, django_capture_on_commit_callbacks
):
    """The claim is made before the request commits: one that rolls back queues no job, and
    must not leave the host busy for the broker's whole retry period."""
    host = hosting.create_host(workspace=team_a, name="edge-1", address="10.0.0.5", ssh_key=KEY)
    key = work_hosting._queued_key(kind, host.pk)

    def request():
        if kind == "provision":
            work_hosting.request_provision(host)
        else:
            work_hosting.request_restart(host)

    with pytest.raises(RuntimeError), transaction.atomic():
        request()
        raise RuntimeError("the request fails after its claim")
    assert 0 < redis().ttl(key) <= 30
    assert not OrmQ.objects.exists() and not HostRestart.objects.exists()

    redis().delete(key)  # as once those seconds have passed
    with django_capture_on_commit_callbacks(execute=True):
        request()
    assert redis().ttl(key) > settings.Q_CLUSTER["retry"] - 10
    assert OrmQ.objects.count() == 1


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("action", "busy"),
    [("provision", "a provisioning"), ("rolling_restart", "a restart")],
)
def test_the_admin_actions_queue_one_job_per_host_and_warn_when_busy(
    staff_client, action, busy, django_capture_on_commit_callbacks
):
    host = hosting.create_host(name="edge-1", address="10.0.0.5", ssh_key=KEY)
    for _ in range(2):
        with django_capture_on_commit_callbacks(execute=True):
            page = staff_client.post(
                "/admin/agents/host/",
                {"action": action, "_selected_action": [host.pk]},
                follow=True,
            )
        assert page.status_code == 200
    said = [(m.level_tag, m.message) for m in page.context["messages"]]
    assert ("warning", f"edge-1: {busy} is already queued or running.") in said
    assert OrmQ.objects.count() == 1


FILES: dict = {}
FIRST: list = [None]


class SlowFirstSession:
    """The SSH session to the host: the first job's token write is slow (a slower link)."""

    def __init__(self, host, deadline=None):
        self.first = threading.current_thread().name == FIRST[0]

    def run(self, command):
        return ""

    def write(self, path, data, mode=0o600):
        if self.first and path.endswith("supervisor.token"):
            time.sleep(1.0)  # its token is issued already
        FILES[path] = data.decode()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        pass


@pytest.mark.django_db(transaction=True)
def test_two_provisionings_of_one_host_never_run_at_once(team_a, monkeypatch, tmp_path):
    """Each issues a supervisor token revoking the other's: run together, the file written last
    could hold a revoked one, and the host's supervisor never sign in again."""
    host = hosting.create_host(
        workspace=team_a, name="h", address="x.example.com", ssh_key=KEY, root="/opt/agntchat"
    )
    monkeypatch.setattr(work_hosting, "Session", SlowFirstSession)
    (tmp_path / "x.whl").write_bytes(b"w")
    monkeypatch.setattr(work_hosting, "bridge_wheel", lambda: tmp_path / "x.whl")

    def job(delay):
        if delay == 0:
            FIRST[0] = threading.current_thread().name
        time.sleep(delay)
        return work_hosting.provision_host(Host.objects.get(pk=host.pk))

    run_together(job, [(0,), (0.3,)])
    assert Host.objects.get(pk=host.pk).status == Host.Status.READY
    assert _principal(FILES["/opt/agntchat/supervisor.token"]) is not None


# --- caps -----------------------------------------------------------------------------------


@pytest.mark.django_db
def test_a_workspace_has_at_most_hosts_per_workspace(alice, team_a, api, ssh_key, settings):
    settings.HOSTS_PER_WORKSPACE = 2
    url = hosts_url(team_a)
    for name in ("a", "b"):
        body = {"name": name, "address": f"{name}.example.com", "sshKey": ssh_key}
        assert api(alice).post(url, body, format="json").status_code == 201
    body = {"name": "c", "address": "c.example.com", "sshKey": ssh_key}
    refused = api(alice).post(url, body, format="json")
    assert refused.status_code == 409 and refused.json()["error"]["code"] == "too_many_hosts"
    assert "HOSTS_PER_WORKSPACE" in refused.json()["error"]["message"]
    assert Host.objects.filter(workspace=team_a).count() == 2


@pytest.mark.django_db
def test_one_person_takes_at_most_their_share_of_the_shared_hosts(alice, bob, api, settings):
    settings.SHARED_HOST_PLACES_PER_PERSON = 2
    for name in ("s1", "s2"):
        hosting.create_host(name=name, address=f"{name}.example.com", ssh_key=KEY, capacity=15)
    body = {"runtime": "hosted", "backend": "scripted"}
    for n in range(2):
        made = api(alice).post("/api/v1/agents/", {"name": f"A{n}", **body}, format="json")
        assert made.status_code == 201, made.json()
    refused = api(alice).post("/api/v1/agents/", {"name": "A2", **body}, format="json")
    assert refused.status_code == 409
    assert "SHARED_HOST_PLACES_PER_PERSON" in refused.json()["error"]["message"]
    assert not Agent.objects.filter(name="A2").exists()
    # Someone else still finds room; moving one's own agent between shared hosts is no new place.
    assert (
        api(bob).post("/api/v1/agents/", {"name": "B0", **body}, format="json").status_code == 201
    )
    a0 = Agent.objects.get(name="A0")
    other = Host.objects.exclude(pk=a0.host_id).get(workspace=None)
    assert hosting.place_agent(a0, other).host_id == other.pk


# --- input -----------------------------------------------------------------------------------


def mersenne_rsa_key(a: int, b: int) -> str:
    """A valid RSA key whose primes are the Mersenne primes 2^A-1 and 2^B-1: a huge key made at
    once (finding primes that size takes minutes), and as slow to check as any other."""
    p, q, e = 2**a - 1, 2**b - 1, 65537
    phi = (p - 1) * (q - 1)
    assert math.gcd(e, phi) == 1
    d = pow(e, -1, phi)
    public = rsa.RSAPublicNumbers(e, p * q)
    numbers = rsa.RSAPrivateNumbers(p, q, d, d % (p - 1), d % (q - 1), pow(q, -1, p), public)
    key = numbers.private_key(unsafe_skip_rsa_key_validation=True)
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.OpenSSH,
        serialization.NoEncryption(),
    ).decode()


@pytest.mark.django_db
def test_an_rsa_key_above_8192_bits_is_a_400_before_it_is_checked(alice, team_a, api):
    """Checking a 14,112-bit RSA key took paramiko about 30 s (a 16,384-bit one fits in the
    20,000 characters a key may have): a web worker's time for each such request."""
    huge = mersenne_rsa_key(4423, 9689)
    assert len(huge) <= 20_000
    body = {"name": "x", "address": "x.example.com", "sshKey": huge}
    started = time.monotonic()
    made = api(alice).post(hosts_url(team_a), body, format="json")
    assert time.monotonic() - started < 2
    assert made.status_code == 400 and "at most 8192" in str(made.json()["error"])
    assert not Host.objects.exists()
    # An RSA key of a usual size is still taken.
    usual = rsa.generate_private_key(65537, 2048).private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.OpenSSH,
        serialization.NoEncryption(),
    )
    assert work_hosting.load_key(usual.decode()).get_bits() == 2048


def _listener(chatter: bytes | None):
    """A TCP service on loopback that is not SSH: it says CHATTER to each client then hangs up,
    or (None) says nothing at all."""
    server = socket.create_server(("127.0.0.1", 0))
    if chatter is not None:

        def serve():
            while True:
                try:
                    conn, _ = server.accept()
                except OSError:  # closed: the test is over
                    return
                with conn:
                    conn.sendall(chatter)

        threading.Thread(target=serve, daemon=True).start()
    return server


@pytest.mark.django_db
def test_a_failed_connection_does_not_tell_what_is_at_that_port(
    team_a, settings, monkeypatch, ssh_key
):
    """Anyone may make a workspace and point a host at any public address and port: the status
    its provisioning leaves must not tell a closed port from a silent one or from another
    service, nor repeat what that service said."""
    monkeypatch.setattr(work_hosting, "SSH_TIMEOUT", 1)
    settings.HOSTS_ALLOW_PRIVATE = True  # loopback stands for a public machine
    silent = _listener(None)
    chatty = _listener(b"HTTP/1.1 400 Bad Request from secret-service 2.4\r\n" * 120)
    ports = {
        "closed": free_port(),
        "silent": silent.getsockname()[1],
        "chatty": chatty.getsockname()[1],
    }
    problems = {}
    try:
        for what, port in ports.items():
            host = hosting.create_host(
                workspace=team_a, name="probe", address="127.0.0.1", port=port, ssh_key=ssh_key
            )
            with pytest.raises(work_hosting.HostUnreachable):
                work_hosting.provision_host(host)
            problems[what] = Host.objects.get(pk=host.pk).problem
            hosting.delete_host(host)
    finally:
        silent.close()
        chatty.close()
    assert set(problems.values()) == {
        "Could not connect to probe over SSH (no SSH server answered)."
    }, problems


@pytest.mark.django_db
@pytest.mark.skipif(bool(loopback.available()), reason=loopback.available() or "")
def test_an_ssh_server_refusing_the_key_is_told_as_such(tmp_path, team_a, settings, ssh_key):
    """What an SSH server answered is the host owner's to fix: still said."""
    settings.HOSTS_ALLOW_PRIVATE = True
    (tmp_path / "sshd").mkdir()
    server = loopback.Sshd(tmp_path / "sshd")
    try:
        host = hosting.create_host(
            workspace=team_a, name="edge", address="127.0.0.1", port=server.port, ssh_key=ssh_key
        )
        with pytest.raises(work_hosting.HostUnreachable, match="Authentication failed"):
            work_hosting.provision_host(host)
    finally:
        server.stop()


@pytest.mark.django_db
@pytest.mark.parametrize("bad", [TRUNCATED_KEY, BAD_LENGTH_KEY], ids=["truncated", "bad-length"])
def test_a_malformed_ssh_key_is_a_400(alice, team_a, api, ssh_key, bad):
    client = api(alice)
    client.raise_request_exception = False
    url = hosts_url(team_a)
    made = client.post(url, {"name": "x", "address": "x.example.com", "sshKey": bad}, format="json")
    assert made.status_code == 400 and "cannot be read" in str(made.json()["error"])
    host = hosting.create_host(
        workspace=team_a, name="ok", address="x.example.com", ssh_key=ssh_key
    )
    changed = client.patch(f"{url}{host.id}/", {"sshKey": bad}, format="json")
    assert changed.status_code == 400
    assert hosting.ssh_key_of(Host.objects.get(pk=host.pk)) == ssh_key


@pytest.mark.django_db(transaction=True)
def test_deleting_a_host_while_an_agent_is_placed_on_it_is_a_409(alice, team_a):
    host = hosting.create_host(workspace=team_a, name="h", address="10.0.0.5", ssh_key=KEY)
    agent = create_agent(alice, name="Vega")
    placed, release = threading.Event(), threading.Event()
    outcome = {}

    def place():
        try:
            with transaction.atomic():
                hosting.place_agent(Agent.objects.get(pk=agent.pk), Host.objects.get(pk=host.pk))
                placed.set()
                release.wait(10)
        finally:
            connection.close()

    def delete():
        client = client_for(alice)
        client.raise_request_exception = False
        try:
            outcome["delete"] = client.delete(f"{hosts_url(team_a)}{host.id}/")
        finally:
            connection.close()

    placing = threading.Thread(target=place)
    placing.start()
    assert placed.wait(10)
    deleting = threading.Thread(target=delete)
    deleting.start()
    time.sleep(1)  # the delete now waits on the host's row
    release.set()
    placing.join(15)
    deleting.join(15)
    response = outcome["delete"]
    assert response.status_code == 409 and response.json()["error"]["code"] == "host_in_use"
    assert Agent.objects.get(pk=agent.pk).host_id == host.pk


# --- the host socket ------------------------------------------------------------------------


def host_with_supervisor():
    host = hosting.create_host(name="h1", address="127.0.0.1", ssh_key=KEY)
    return host, hosting.issue_host_token(host)


@pytest.mark.django_db(transaction=True)
async def test_a_supervisor_socket_ends_when_its_token_is_reissued(alice):
    host, old = await sync_to_async(host_with_supervisor)()
    comm = await supervisor(old)
    new = await sync_to_async(hosting.issue_host_token)(host)  # a provisioning: `old` revoked
    assert await closed_for_good(comm)
    kept = await supervisor(new)
    await asyncio.sleep(0.5)
    await kept.send_json_to({"type": "heartbeat"})
    assert await next_frame(kept) == {"type": "heartbeat.ok"}
    await kept.disconnect()


@pytest.mark.django_db(transaction=True)
async def test_a_supervisor_socket_ends_with_its_host(alice):
    host, secret = await sync_to_async(host_with_supervisor)()
    comm = await supervisor(secret)
    await sync_to_async(hosting.delete_host)(host)
    assert await told_gone(comm)  # and its supervisor exits
    assert not await sync_to_async(HostToken.objects.filter(host_id=host.pk).exists)()


def host_socket(secret: str, address: str) -> WebsocketCommunicator:
    comm = WebsocketCommunicator(
        application, "/ws/host/", headers=[(b"authorization", f"Bearer {secret}".encode())]
    )
    comm.scope["client"] = (address, 40000)  # before it runs: what daphne would set
    return comm


async def refused_with(comm) -> tuple[str, int]:
    assert (await comm.connect())[0]
    error = await next_frame(comm)
    closed = await comm.receive_output(timeout=5)
    return error["code"], closed["code"]


@pytest.mark.django_db(transaction=True)
async def test_wrong_tokens_lock_their_address_out_of_the_host_socket(alice, settings):
    """Each token tried is a database lookup: an address that keeps trying is held off."""
    settings.HOST_SOCKET_FAILURES_PER_ADDRESS = 3
    settings.LOGIN_LOCK_SECONDS = 2
    _, secret = await sync_to_async(workspace_actions.issue_api_token)(alice)
    for wrong in ("apt_wrong", "aht_wrong", "nothing"):
        refused = await refused_with(host_socket(wrong, "203.0.113.7"))
        assert refused == ("unauthorized", 4401)
    # Now even the right token is refused from there, as the agent socket refuses (4429)...
    assert await refused_with(host_socket(secret, "203.0.113.7")) == ("rate_limited", 4429)
    # ... not from elsewhere, nor from there once the lock is over.
    elsewhere = host_socket(secret, "198.51.100.2")
    assert (await elsewhere.connect())[0]
    assert (await next_frame(elsewhere))["type"] == "hello"
    await elsewhere.disconnect()
    await asyncio.sleep(2.2)
    again = host_socket(secret, "203.0.113.7")
    assert (await again.connect())[0]
    assert (await next_frame(again))["type"] == "hello"
    await again.disconnect()


@pytest.mark.django_db(transaction=True)
async def test_the_host_socket_limits_its_frames(alice, settings):
    settings.HOST_FRAMES_PER_MINUTE = 1
    settings.HOST_FRAMES_BURST = 2
    _, secret = await sync_to_async(workspace_actions.issue_api_token)(alice)
    comm = await supervisor(secret)
    for _ in range(3):
        await comm.send_json_to({"type": "heartbeat"})
    answers = [await next_frame(comm) for _ in range(3)]
    assert answers[:2] == [{"type": "heartbeat.ok"}] * 2
    assert answers[2]["type"] == "error" and answers[2]["code"] == "rate_limited"
    await comm.disconnect()
