"""A deleted host's supervisor learns its host is gone even from an address locked out for bad
tokens, and its tries count as no failure; a job waits for its host's lock no longer than its own
deadline."""

import threading
import time

import pytest
from asgiref.sync import sync_to_async
from django.db import connection

from agents import hosting
from agents.actions import create_agent
from tests.socket_helpers import next_frame
from tests.work.test_host_hardening import host_socket, refused_with
from tests.work.test_hosting_residue_gone import host_with_supervisor
from work import hosting as work_hosting
from work import jobs
from workspaces import actions as workspace_actions

pytestmark = pytest.mark.django_db(transaction=True)

ADDRESS = "203.0.113.9"


async def a_deleted_hosts_token() -> str:
    host, secret = await sync_to_async(host_with_supervisor)()
    await sync_to_async(hosting.delete_host)(host)
    return secret


async def test_a_deleted_hosts_supervisor_is_told_gone_from_a_locked_out_address(settings):
    settings.HOST_SOCKET_FAILURES_PER_ADDRESS = 2
    secret = await a_deleted_hosts_token()
    for wrong in ("aht_wrong", "aht_wrong_again"):
        assert await refused_with(host_socket(wrong, ADDRESS)) == ("unauthorized", 4401)
    assert await refused_with(host_socket("aht_third", ADDRESS)) == ("rate_limited", 4429)
    # Told to stop, not to try again later (it would, for ever).
    assert await refused_with(host_socket(secret, ADDRESS)) == ("host_gone", 4410)


async def test_a_deleted_hosts_supervisor_retrying_locks_nobody_out(alice, settings):
    """Its tries are no bad tokens: the laptop supervisor behind the same address still signs
    in after more of them than the address's limit of failures."""
    settings.HOST_SOCKET_FAILURES_PER_ADDRESS = 2
    secret = await a_deleted_hosts_token()
    for _ in range(3):
        assert await refused_with(host_socket(secret, ADDRESS)) == ("host_gone", 4410)
    _, api_token = await sync_to_async(workspace_actions.issue_api_token)(alice)
    comm = host_socket(api_token, ADDRESS)
    assert (await comm.connect())[0]
    assert (await next_frame(comm))["type"] == "hello"
    await comm.disconnect()


KEY = "-----BEGIN OPENSSH PRIVATE KEY-----\nnot used here\n-----END OPENSSH PRIVATE KEY-----\n"


def test_a_job_waits_for_its_hosts_lock_no_longer_than_its_deadline(alice, monkeypatch):
    """Another job holds the host (stuck, say, until the lock's own expiry, the job timeout):
    this one fails by its deadline, saying so, instead of waiting past it to be killed."""
    host = hosting.create_host(name="edge-1", address="127.0.0.1", port=1, ssh_key=KEY)
    agent = create_agent(alice, name="Ara", backend="scripted")
    monkeypatch.setattr(work_hosting, "job_seconds", lambda: 0.5)
    outcome = []

    def forget():
        try:
            jobs.forget_hosted_agent(str(host.pk), str(agent.id))
            outcome.append("ran")
        except work_hosting.HostLocked as exc:
            outcome.append(exc.code)
        finally:
            connection.close()

    with work_hosting.host_lock(host):  # the other job
        waiting = threading.Thread(target=forget)
        waiting.start()
        waiting.join(20)
        assert not waiting.is_alive()
    waiting.join()
    assert outcome == ["host_locked"]


def test_a_lock_free_before_the_deadline_is_taken(alice):
    host = hosting.create_host(name="edge-1", address="127.0.0.1", port=1, ssh_key=KEY)
    with work_hosting.host_lock(host, time.monotonic() + 5) as held:
        assert held.pk == host.pk
    # Released: the next job takes it at once, even with no time to wait.
    with work_hosting.host_lock(host, time.monotonic()):
        pass
