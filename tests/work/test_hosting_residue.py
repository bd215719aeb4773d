"""Hosted agents' residue, on the server's side: a job whose host is deleted meanwhile ends
quietly; provisioning writes nothing for an agent deleted or moved off while it runs. The SSH
host is a recording stand-in here (tests/work/test_hosting_residue_ssh.py uses a real sshd)."""

import logging

import pytest

from agents import hosting
from agents.actions import create_agent, delete_agent
from agents.models import Agent, Host, HostToken
from work import hosting as work_hosting
from work import jobs

# Never parsed: no test here connects to the host.
KEY = "-----BEGIN OPENSSH PRIVATE KEY-----\nnot used here\n-----END OPENSSH PRIVATE KEY-----\n"

pytestmark = pytest.mark.django_db(transaction=True)


class Host_:
    """The SSH side of a host: what was written where, and a hook run at a given write."""

    files: dict = {}
    when = None  # (path suffix, callable): run once, at the first write of such a path

    def __init__(self, host, deadline=None):
        self.host = host

    def run(self, command):
        return ""

    def write(self, path, data, mode=0o600):
        type(self).files[path] = data
        when = type(self).when
        if when and path.endswith(when[0]):
            type(self).when = None
            when[1](path)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        pass


@pytest.fixture
def ssh_host(monkeypatch, tmp_path):
    Host_.files, Host_.when = {}, None
    monkeypatch.setattr(work_hosting, "Session", Host_)
    (tmp_path / "b.whl").write_bytes(b"w")
    monkeypatch.setattr(work_hosting, "bridge_wheel", lambda: tmp_path / "b.whl")
    return Host_


def a_host(**fields):
    return hosting.create_host(
        name="h1", address="h1.example.com", ssh_key=KEY, root="/opt/agntchat", **fields
    )


def noisy(caplog) -> list:
    return [r for r in caplog.records if r.levelno >= logging.WARNING]


# --- a host deleted mid-job ------------------------------------------------------------------


def test_a_provisioning_whose_host_is_deleted_meanwhile_ends_quietly(ssh_host, caplog):
    host = a_host()
    ssh_host.when = (".whl", lambda path: hosting.delete_host(Host.objects.get(pk=host.pk)))
    caplog.set_level(logging.INFO)
    jobs.provision_host(str(host.pk))
    assert not Host.objects.filter(pk=host.pk).exists()
    assert not HostToken.objects.filter(host_id=host.pk).exists()
    assert not noisy(caplog)
    assert any(
        r.levelno == logging.INFO and "deleted" in r.getMessage() and str(host.pk) in r.getMessage()
        for r in caplog.records
    )


def test_a_provisioning_queued_for_a_host_deleted_before_it_runs_ends_quietly(ssh_host, caplog):
    host = a_host()
    host_id = str(host.pk)
    hosting.delete_host(host)
    caplog.set_level(logging.INFO)
    jobs.provision_host(host_id)
    assert not noisy(caplog) and not ssh_host.files


def test_forgetting_an_agent_on_a_host_deleted_meanwhile_ends_quietly(ssh_host, caplog):
    host = a_host()
    gone = Host.objects.get(pk=host.pk)
    hosting.delete_host(gone)
    caplog.set_level(logging.INFO)
    work_hosting.forget_agent(host, "7f1c9a4e-0000-4000-8000-000000000000")
    assert not noisy(caplog) and not ssh_host.files


def test_an_unreachable_host_still_fails_its_job_loudly(team_a, settings):
    """Only a host that is gone ends quietly: one that is there but refuses is recorded."""
    host = hosting.create_host(workspace=team_a, name="h", address="10.0.0.5", ssh_key=KEY)
    with pytest.raises(work_hosting.HostUnreachable):
        jobs.provision_host(str(host.pk))
    assert Host.objects.get(pk=host.pk).status == Host.Status.UNREACHABLE


# --- an agent deleted or moved off mid-provisioning ------------------------------------------


def test_provisioning_writes_nothing_for_an_agent_deleted_or_moved_off_meanwhile(
    alice, ssh_host, caplog
):
    host = a_host()
    agents = [
        hosting.place_agent(create_agent(alice, name=name, backend="scripted"), host)
        for name in ("Ara", "Bex", "Cyd")
    ]
    changed = {}

    def delete_one_and_move_another(path):
        # The first agent set up: of the other two, one is deleted and one made local.
        first = path.split("/")[-2]
        others = [a for a in agents if str(a.id) != first]
        delete_agent(Agent.objects.get(pk=others[0].pk))
        hosting.make_agent_local(Agent.objects.get(pk=others[1].pk))
        changed.update(deleted=others[0], moved=others[1], kept=first)

    ssh_host.when = ("agent.json", delete_one_and_move_another)
    caplog.set_level(logging.INFO)
    work_hosting.provision_host(host)

    assert Host.objects.get(pk=host.pk).status == Host.Status.READY
    assert not noisy(caplog)
    for agent in (changed["deleted"], changed["moved"]):
        assert not [p for p in ssh_host.files if str(agent.id) in p]
    moved = changed["moved"]
    assert not HostToken.objects.filter(agent_id=moved.pk, revoked_at__isnull=True).exists()
    kept = f"/opt/agntchat/agents/{changed['kept']}"
    assert {f"{kept}/token", f"{kept}/agent.json"} <= set(ssh_host.files)


def test_a_placement_token_is_not_issued_for_an_agent_moved_off_since_it_was_read(alice):
    host = a_host()
    agent = hosting.place_agent(create_agent(alice, name="Ara", backend="scripted"), host)
    stale = Agent.objects.get(pk=agent.pk)
    hosting.make_agent_local(Agent.objects.get(pk=agent.pk))
    with pytest.raises(hosting.AgentRule):
        hosting.issue_host_token(host, stale)
    assert not HostToken.objects.filter(agent_id=agent.pk, revoked_at__isnull=True).exists()
