"""Hosts probed where the hardening tests did not go: a rolling restart longer than one job
may run, a job asked again after its work is done, a supervisor whose host goes with its
workspace, an agent placed again while its former directory is being forgotten, a co-admin
changing how a host runs the others' agents, an agent taken off a host when its owner stops
managing the host's workspace, a host rooted at / itself."""

import threading
import uuid

import pytest
from asgiref.sync import sync_to_async
from django.db import connection
from django_q.models import OrmQ

from agents import hosting
from agents.actions import create_agent
from agents.models import Agent, HostRestart, HostToken
from agntchat.core import presence
from agntchat.core.presence import client as redis
from tests.conftest import client_for
from tests.work.sshd import keygen
from tests.work.test_host_socket_ends import supervisor
from tests.work.test_hosting_residue_gone import told_gone
from work import hosting as work_hosting
from work import jobs
from workspaces import actions as workspace_actions
from workspaces.models import AuditEntry, Membership, Role

# Never parsed: no test here connects to the host.
KEY = "-----BEGIN OPENSSH PRIVATE KEY-----\nnot used here\n-----END OPENSSH PRIVATE KEY-----\n"


class Bridges:
    """The host's side, with no host: its supervisor online and every bridge of AGENTS coming
    back (a new connection) again and again, as restarted bridges do."""

    def __init__(self, host, agents):
        self.host, self.agents, self.done = host, agents, threading.Event()
        presence.join(work_hosting.supervisor_id(host.pk), "supervisor", 0)
        self.thread = threading.Thread(target=self.reconnect, daemon=True)

    def reconnect(self):
        while not self.done.wait(0.05):
            for agent in self.agents:
                presence.join(agent.id, uuid.uuid4().hex, 0)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.done.set()
        self.thread.join()


@pytest.mark.django_db
def test_a_rolling_restart_longer_than_a_job_goes_on_in_the_next(
    alice, settings, monkeypatch, django_capture_on_commit_callbacks
):
    """One job stops waiting on bridges before the job timeout kills it (its report then stuck
    "running", the host busy until the broker's retry): the rest go on in the next job."""
    host = hosting.create_host(name="edge-1", address="10.0.0.5", ssh_key=KEY, capacity=5)
    agents = [
        hosting.place_agent(create_agent(alice, name=name, backend="scripted"), host)
        for name in ("Ara", "Bel", "Cyd")
    ]
    # Each job has time for one bridge: a wait of up to a second, in a job of a second.
    settings.HOST_RESTART_TIMEOUT_SECONDS = 1
    monkeypatch.setattr(work_hosting, "RESTART_JOB_SECONDS", 1, raising=False)
    with django_capture_on_commit_callbacks(execute=True):
        restart = work_hosting.request_restart(host)
    assert [q.func() for q in OrmQ.objects.all()] == ["work.jobs.restart_host"]
    OrmQ.objects.all().delete()

    with Bridges(host, agents):
        with django_capture_on_commit_callbacks(execute=True):  # a job runs in autocommit
            jobs.restart_host(str(restart.pk))
        restart.refresh_from_db()
        assert restart.status == HostRestart.Status.RUNNING
        assert [(r["name"], r["outcome"]) for r in restart.report] == [("Ara", "restarted")]
        # The next job queued, and the host still busy meanwhile.
        assert [(q.func(), q.args()) for q in OrmQ.objects.all()] == [
            ("work.jobs.restart_host", (str(restart.pk),))
        ]
        assert redis().exists(work_hosting._queued_key("restart", host.pk))
        with pytest.raises(work_hosting.HostBusy):
            work_hosting.request_restart(host)

        for _ in range(2):
            OrmQ.objects.all().delete()
            with django_capture_on_commit_callbacks(execute=True):
                jobs.restart_host(str(restart.pk))
    restart.refresh_from_db()
    assert restart.status == HostRestart.Status.DONE and restart.finished_at is not None
    assert [(r["name"], r["outcome"]) for r in restart.report] == [
        ("Ara", "restarted"),
        ("Bel", "restarted"),
        ("Cyd", "restarted"),
    ]
    assert not OrmQ.objects.exists()
    assert not redis().exists(work_hosting._queued_key("restart", host.pk))


@pytest.mark.django_db
def test_a_restart_job_run_again_once_done_restarts_nothing(alice, settings):
    """Jobs are idempotent: one run again by the broker (or for a host deleted meanwhile) is a
    no-op, not a second round of restarts or an error."""
    settings.HOST_RESTART_TIMEOUT_SECONDS = 2
    host = hosting.create_host(name="edge-1", address="10.0.0.5", ssh_key=KEY)
    agent = hosting.place_agent(create_agent(alice, name="Ara", backend="scripted"), host)
    restart = HostRestart.objects.create(host=host)
    with Bridges(host, [agent]):
        jobs.restart_host(str(restart.pk))
    restart.refresh_from_db()
    first = (restart.status, restart.report, restart.finished_at)
    assert first[0] == HostRestart.Status.DONE

    jobs.restart_host(str(restart.pk))  # no bridge comes back now: it would time out
    restart.refresh_from_db()
    assert (restart.status, restart.report, restart.finished_at) == first

    host.delete()
    jobs.restart_host(str(restart.pk))  # gone with its host: nothing to do


@pytest.mark.django_db(transaction=True)
async def test_a_supervisor_socket_ends_when_its_hosts_workspace_is_deleted(alice, team_a):
    """Its host (and token) deleted with the workspace: the socket no longer stays open on
    nothing, heartbeating for ever."""

    def build():
        host = hosting.create_host(workspace=team_a, name="edge-1", address="10.0.0.5", ssh_key=KEY)
        return host, hosting.issue_host_token(host)

    host, secret = await sync_to_async(build)()
    comm = await supervisor(secret)
    owner = await sync_to_async(Membership.objects.get)(workspace=team_a, user=alice)
    await sync_to_async(workspace_actions.delete_workspace)(owner)
    assert await told_gone(comm)  # and its supervisor exits
    assert not await sync_to_async(HostToken.objects.filter(host_id=host.pk).exists)()


@pytest.mark.django_db(transaction=True)
def test_forgetting_an_agent_placed_there_again_meanwhile_leaves_it_be(alice):
    """The agent was made local (its directory to be removed), then placed on the same host
    again while another job of the host (its set-up) held the host: once that job is done, the
    removal must not take the directory just set up. Here the host refuses connections, so a
    removal that still ran would fail (HostUnreachable)."""
    host = hosting.create_host(name="edge-1", address="127.0.0.1", port=1, ssh_key=KEY)
    agent = create_agent(alice, name="Ara", backend="scripted")
    outcome = []

    def forget():
        try:
            jobs.forget_hosted_agent(str(host.pk), str(agent.id))
            outcome.append("left be")
        except work_hosting.HostUnreachable:
            outcome.append("removal tried")
        finally:
            connection.close()

    with work_hosting.host_lock(host):  # the set-up job of another agent, say
        remover = threading.Thread(target=forget)
        remover.start()
        remover.join(1)  # past the job's check: waiting for the host
        assert remover.is_alive()
        hosting.place_agent(agent, host)  # placed there again meanwhile
    remover.join(30)
    assert outcome == ["left be"]


@pytest.mark.django_db
@pytest.mark.parametrize(
    "change",
    [
        {"python": "/opt/agntchat/agents/BOBS/work/python"},
        {"root": "/opt/agntchat/agents/BOBS/work"},
        {"multiTenant": False},
    ],
    ids=["python", "root", "not-multi-tenant"],
)
def test_changing_how_a_host_runs_agents_moves_the_other_owners_agents_off_it(
    alice, bob, team_a, change
):
    """On a multi-tenant host each agent runs as its own user. A co-admin whose agent there
    writes an executable in its own directory (its user owns it) and makes that the host's
    Python, or its directory the host's root (the venv made under it, replaceable by him), has
    the next provisioning run it as root and every bridge run it as its agent's user: he then
    reads the others' placement tokens. Turning multi-tenancy off runs every bridge as one
    user, each able to read the others' tokens. So these move the others' agents off it, as a
    change of address does."""
    workspace_actions.change_role(
        team_a.memberships.get(user=alice), team_a.memberships.get(user=bob), Role.ADMIN
    )
    host = hosting.create_host(
        workspace=team_a, name="edge-1", address="edge-1.example.com", ssh_key=KEY
    )
    hosting.update_host(host, multi_tenant=True, by=alice)
    nova = hosting.place_agent(create_agent(alice, name="Nova", backend="scripted"), host)
    bobs = hosting.place_agent(create_agent(bob, name="Bobs", backend="scripted"), host)
    change = {
        k: v.replace("BOBS", str(bobs.id)) if isinstance(v, str) else v for k, v in change.items()
    }

    url = f"/api/v1/workspaces/{team_a.id}/hosts/{host.id}/"
    assert client_for(bob).patch(url, change, format="json").status_code == 200

    nova.refresh_from_db()
    assert (nova.runtime, nova.host_id) == (Agent.Runtime.LOCAL, None)
    assert Agent.objects.get(pk=bobs.pk).host_id == host.pk  # his own agent stays
    moved = AuditEntry.objects.get(action="host.agent_made_local")
    assert (moved.actor_user_id, moved.details["agent_name"]) == (bob.id, "Nova")


@pytest.mark.django_db
def test_making_a_host_multi_tenant_moves_no_one(alice, bob, team_a):
    workspace_actions.change_role(
        team_a.memberships.get(user=alice), team_a.memberships.get(user=bob), Role.ADMIN
    )
    host = hosting.create_host(
        workspace=team_a, name="edge-1", address="edge-1.example.com", ssh_key=KEY
    )
    nova = hosting.place_agent(create_agent(alice, name="Nova", backend="scripted"), host)
    url = f"/api/v1/workspaces/{team_a.id}/hosts/{host.id}/"
    assert client_for(bob).patch(url, {"multiTenant": True}, format="json").status_code == 200
    assert Agent.objects.get(pk=nova.pk).host_id == host.pk


@pytest.mark.django_db
@pytest.mark.parametrize("how", ["demoted", "removed", "left"])
def test_an_agent_taken_off_a_host_with_its_owners_role_is_forgotten_there(
    alice, bob, team_a, how, django_capture_on_commit_callbacks
):
    """As when its owner makes it local: its directory (its work, its revoked token) and its
    system user on the workspace's machine go, not left there for good."""
    owner, bobs_membership = team_a.memberships.get(user=alice), team_a.memberships.get(user=bob)
    workspace_actions.change_role(owner, bobs_membership, Role.ADMIN)
    host = hosting.create_host(
        workspace=team_a, name="edge-1", address="edge-1.example.com", ssh_key=KEY
    )
    bobs = hosting.place_agent(create_agent(bob, name="Bobs", backend="scripted"), host)
    with django_capture_on_commit_callbacks(execute=True):
        if how == "demoted":
            workspace_actions.change_role(owner, bobs_membership, Role.MEMBER)
        elif how == "removed":
            workspace_actions.remove_member(owner, bobs_membership)
        else:
            workspace_actions.leave_workspace(bobs_membership)
    assert Agent.objects.get(pk=bobs.pk).host_id is None
    assert [(q.func(), q.args()) for q in OrmQ.objects.all()] == [
        ("work.jobs.forget_hosted_agent", (str(host.pk), str(bobs.pk)))
    ]


@pytest.mark.django_db
def test_a_hosted_agent_deleted_is_forgotten_on_its_host_once_its_row_is_gone(
    alice, django_capture_on_commit_callbacks
):
    """DELETE makes it local first: the job queued then still removes its directory (here the
    host refuses connections: the removal is tried, not skipped for want of the agent's row)."""
    host = hosting.create_host(name="edge-1", address="127.0.0.1", port=1, ssh_key=KEY)
    agent = hosting.place_agent(create_agent(alice, name="Ara", backend="scripted"), host)
    with django_capture_on_commit_callbacks(execute=True):
        assert client_for(alice).delete(f"/api/v1/agents/{agent.id}/").status_code == 204
    assert not Agent.objects.filter(pk=agent.pk).exists()
    assert not HostToken.objects.filter(agent_id=agent.pk).exists()
    jobs_queued = [(q.func(), q.args()) for q in OrmQ.objects.all()]
    assert jobs_queued == [("work.jobs.forget_hosted_agent", (str(host.pk), str(agent.pk)))]
    with pytest.raises(work_hosting.HostUnreachable):
        jobs.forget_hosted_agent(*jobs_queued[0][1])


@pytest.mark.django_db
@pytest.mark.parametrize("root", ["/", "//", "/opt/../", "/."])
def test_a_host_rooted_at_the_filesystem_root_is_a_400(alice, team_a, tmp_path, root):
    """Its layout would be /agents, /host.json, /venv…, its first command `chmod 755 ''` (the
    host then marked unreachable, for no network reason): refused when given, nothing made."""
    keygen(tmp_path / "k")
    url = f"/api/v1/workspaces/{team_a.id}/hosts/"
    body = {"name": "edge-1", "address": "edge-1.example.com", "root": root}
    response = client_for(alice).post(
        url, {**body, "sshKey": (tmp_path / "k").read_text()}, format="json"
    )
    assert response.status_code == 400 and "root" in response.json()["error"]["fields"]
    assert not team_a.hosts.exists()
