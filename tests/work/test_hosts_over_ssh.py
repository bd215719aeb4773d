"""Hosts provisioned over a real OpenSSH server on loopback (AGT-3…6, GW-4, WS-4): the bridge
wheel and the supervisor installed over SSH, a hosted agent woken by its work and replying, a
rolling restart one bridge at a time, a host that drops mid-restart, a rebuilt host's new key
refused, and on a multi-tenant host each agent a system user of its own."""

import os
import pwd
import shutil
import signal
import threading
from pathlib import Path

import pytest

from agents import hosting
from agents.actions import create_agent
from agents.models import Host, HostRestart
from agntchat.core import presence
from conversations.actions import create_conversation, post_message
from conversations.models import Message
from tests.socket_helpers import Daphne
from tests.waiting import wait_until
from tests.work import sshd as loopback
from work import hosting as work_hosting
from work import jobs

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.slow,
    pytest.mark.skipif(bool(loopback.available()), reason=loopback.available() or ""),
]


@pytest.fixture
def ssh_server(tmp_path):
    server = loopback.Sshd(tmp_path)
    yield server
    server.stop()


@pytest.fixture(scope="module")
def python_of_hosts():
    python, problem = loopback.host_python()
    yield python, problem
    shutil.rmtree(Path(python).parents[1], ignore_errors=True)


@pytest.fixture
def server(settings):
    daphne = Daphne()
    settings.AGNTCHAT_URL = daphne.url
    yield daphne
    daphne.stop()


@pytest.fixture
def host_root():
    root = loopback.open_directory("agntchat-host-")
    yield root
    loopback.kill_processes_under(root)
    shutil.rmtree(root, ignore_errors=True)


def make_host(ssh_server, root, python, **fields):
    return hosting.create_host(
        name="h1",
        address="127.0.0.1",
        port=ssh_server.port,
        ssh_user="root",
        ssh_key=ssh_server.client_key,
        root=str(root),
        python=python,
        **fields,
    )


def hosted_agent(alice, name, host):
    agent = create_agent(alice, name=name, backend="scripted")
    return hosting.place_agent(agent, host)


def replies(conversation, agent):
    return list(Message.objects.filter(conversation=conversation, author_agent=agent))


def test_a_host_is_provisioned_over_ssh_and_wakes_its_agent_for_work(
    alice, team_a, ssh_server, server, host_root, python_of_hosts
):
    host = make_host(ssh_server, host_root, python_of_hosts[0])
    vega, orion = hosted_agent(alice, "Vega", host), hosted_agent(alice, "Orion", host)

    work_hosting.provision_host(host)
    host.refresh_from_db()
    assert host.status == Host.Status.READY and host.problem == ""
    # Trust on first use: the key the host showed is pinned.
    assert host.host_key == ssh_server.host_key
    # The bridge the host runs is the wheel installed there, not this checkout.
    venv = Path(python_of_hosts[0]).parents[1]
    assert list(venv.glob("lib/python*/site-packages/agntchat_bridge/host.py"))
    wait_until(lambda: work_hosting.supervisor_online(host.pk), what="the supervisor's socket")
    # Nothing runs until there is work: no bridge is connected yet.
    assert not presence.is_online(vega.id) and not presence.is_online(orion.id)

    room = create_conversation(
        alice, team_a, kind="channel", title="ops", agent_ids=[vega.id, orion.id]
    )
    post_message(alice, room, "@vega status?")
    reply = wait_until(lambda: replies(room, vega), timeout=40, what="Vega's reply from the host")
    assert reply[0].body == "Echo: @vega status?"
    assert not presence.is_online(orion.id)  # only the agent with work was woken

    # Placement tokens sit in each agent's private directory, unreadable by others.
    token = Path(host_root) / "agents" / str(vega.id) / "token"
    assert token.stat().st_mode & 0o777 == 0o600
    assert (token.parent.stat().st_mode & 0o777) == 0o700
    assert (Path(host_root) / "supervisor.token").stat().st_mode & 0o777 == 0o600

    post_message(alice, room, "@orion and you?")
    wait_until(lambda: replies(room, orion), timeout=40, what="Orion's reply")

    # A rolling restart: one bridge at a time, each back (a new connection) before the next.
    restart = work_hosting.restart_host_bridges(HostRestart.objects.create(host=host), timeout=40)
    assert restart.status == HostRestart.Status.DONE
    assert [(r["name"], r["outcome"]) for r in restart.report] == [
        ("Orion", "restarted"),
        ("Vega", "restarted"),
    ]
    # Both still answer after it.
    post_message(alice, room, "@vega again")
    wait_until(lambda: len(replies(room, vega)) == 2, timeout=40, what="Vega after the restart")

    # An agent moved onto the running host later: set up there by its job, the supervisor told
    # to read its agents again, then woken like the others.
    lyra = work_hosting.set_runtime(create_agent(alice, name="Lyra", backend="scripted"), "hosted")
    assert lyra.host_id == host.pk
    jobs.provision_hosted_agent(str(lyra.id))
    room2 = create_conversation(alice, team_a, kind="channel", title="late", agent_ids=[lyra.id])
    post_message(alice, room2, "@lyra hello")
    wait_until(lambda: replies(room2, lyra), timeout=40, what="Lyra's reply")


def test_a_host_that_drops_mid_restart_stops_the_restart_with_a_report(
    alice, team_a, ssh_server, server, host_root, python_of_hosts
):
    host = make_host(ssh_server, host_root, python_of_hosts[0])
    agents = [hosted_agent(alice, name, host) for name in ("Ara", "Bex", "Cyd")]
    work_hosting.provision_host(host)
    wait_until(lambda: work_hosting.supervisor_online(host.pk), what="the supervisor's socket")
    room = create_conversation(
        alice, team_a, kind="channel", title="ops", agent_ids=[a.id for a in agents]
    )
    for agent in agents:
        post_message(alice, room, f"@{agent.handle} hi")
    for agent in agents:
        wait_until(lambda a=agent: replies(room, a), timeout=40, what=f"{agent.name}'s reply")

    before = set(presence.connections(agents[0].id))
    supervisor_pid = int((Path(host_root) / "host.pid").read_text())

    def drop_host_once_the_first_is_back():
        wait_until(
            lambda: set(presence.connections(agents[0].id)) - before,
            timeout=40,
            what="Ara back",
        )
        os.kill(supervisor_pid, signal.SIGKILL)

    dropper = threading.Thread(target=drop_host_once_the_first_is_back)
    dropper.start()
    restart = work_hosting.restart_host_bridges(HostRestart.objects.create(host=host), timeout=40)
    dropper.join()
    assert restart.status == HostRestart.Status.FAILED and restart.finished_at
    assert [(r["name"], r["outcome"]) for r in restart.report] == [
        ("Ara", "restarted"),
        ("Bex", "host unreachable"),
        ("Cyd", "not reached"),
    ]
    assert not work_hosting.supervisor_online(host.pk)


def test_a_host_showing_another_key_is_refused(alice, ssh_server, host_root, python_of_hosts):
    host = make_host(ssh_server, host_root, python_of_hosts[0])
    with work_hosting.Session(host) as ssh:
        assert ssh.run("echo reached").strip() == "reached"
    host.refresh_from_db()
    pinned = host.host_key
    assert pinned == ssh_server.host_key

    ssh_server.rekey()  # rebuilt, or someone in between
    with pytest.raises(work_hosting.HostKeyMismatch) as refused:
        work_hosting.provision_host(host)
    host.refresh_from_db()
    assert host.status == Host.Status.UNREACHABLE
    assert work_hosting.fingerprint(pinned) in refused.value.message
    assert work_hosting.fingerprint(ssh_server.host_key) in host.problem
    assert host.host_key == pinned  # never replaced without a person clearing it
    assert not (Path(host_root) / "host.json").exists()  # nothing was done there


def test_on_a_multi_tenant_host_each_agent_runs_as_its_own_user(
    alice, team_a, ssh_server, server, host_root, python_of_hosts
):
    python, problem = python_of_hosts
    if problem:
        pytest.skip(f"agents' system users cannot run the host's Python: {problem}")
    host = make_host(ssh_server, host_root, python, multi_tenant=True)
    vega = hosted_agent(alice, "Vega", host)
    user = work_hosting.system_user(vega.id)
    try:
        work_hosting.provision_host(host)
        home = Path(host_root) / "agents" / str(vega.id)
        uid = pwd.getpwnam(user).pw_uid
        assert home.stat().st_uid == uid and home.stat().st_mode & 0o777 == 0o700
        assert (home / "token").stat().st_uid == uid
        # The CLIs' one login is shared through the agents' group, never with the world.
        cli = Path(host_root) / "cli"
        assert cli.stat().st_mode & 0o7777 == 0o2770

        wait_until(lambda: work_hosting.supervisor_online(host.pk), what="the supervisor")
        room = create_conversation(alice, team_a, kind="channel", title="ops", agent_ids=[vega.id])
        post_message(alice, room, "@vega who are you?")
        wait_until(lambda: replies(room, vega), timeout=40, what="Vega's reply")
        bridge_uids = wait_until(lambda: _uids_of_bridges(home), what="the bridge process")
        assert bridge_uids == {uid}
        # What its CLI writes in the shared login stays the agents' group's to read and write.
        umask = next(
            line.split()[1]
            for pid in _pids_of_bridges(home)
            for line in Path(f"/proc/{pid}/status").read_text().splitlines()
            if line.startswith("Umask:")
        )
        assert umask == "0007"

        # Back to local: the host stops its bridge and forgets it.
        work_hosting.set_runtime(vega, "local")
        vega.refresh_from_db()
        assert vega.host_id is None
        wait_until(lambda: not _uids_of_bridges(home), what="the bridge stopped")
        work_hosting.forget_agent(host, vega.id)
        assert not home.exists()
        with pytest.raises(KeyError):
            pwd.getpwnam(user)
    finally:
        loopback.kill_processes_under(host_root)
        os.system(f"userdel {user} >/dev/null 2>&1")


def _pids_of_bridges(home: Path) -> list[str]:
    """The bridge processes running from HOME."""
    pids = []
    for pid in [p for p in os.listdir("/proc") if p.isdigit()]:
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        if b"agntchat_bridge\x00" in cmdline and str(home).encode() in cmdline:
            pids.append(pid)
    return pids


def _uids_of_bridges(home: Path) -> set[int]:
    """The real user ids of the bridge processes running from HOME."""
    uids = set()
    for pid in _pids_of_bridges(home):
        try:
            uids.add(os.stat(f"/proc/{pid}").st_uid)
        except OSError:
            continue
    return uids
