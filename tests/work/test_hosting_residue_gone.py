"""A deleted host's supervisor is told so ("host_gone", 4410), on its open socket and at every
later try with its token, and exits by itself (stopping its bridges) rather than retrying for
ever. Stopping it over SSH is no option: the delete takes the host's SSH key and pinned host
key with its row."""

import json
import sys

import pytest
from asgiref.sync import sync_to_async
from channels.testing import WebsocketCommunicator

from agents import hosting
from agntchat.asgi import application
from tests.socket_helpers import LoggedProcess, next_frame
from tests.waiting import wait_until
from tests.work.test_host_socket_ends import supervisor

pytestmark = pytest.mark.django_db(transaction=True)

KEY = "-----BEGIN OPENSSH PRIVATE KEY-----\nnot used here\n-----END OPENSSH PRIVATE KEY-----\n"


def host_with_supervisor(name="h1"):
    host = hosting.create_host(name=name, address="127.0.0.1", ssh_key=KEY)
    return host, hosting.issue_host_token(host)


async def told_gone(comm) -> bool:
    error = await next_frame(comm, timeout=15)
    closed = await comm.receive_output(timeout=15)
    return error["code"] == "host_gone" and closed == {"type": "websocket.close", "code": 4410}


async def test_a_deleted_hosts_supervisor_is_told_its_host_is_gone(alice):
    host, secret = await sync_to_async(host_with_supervisor)()
    comm = await supervisor(secret)
    await sync_to_async(hosting.delete_host)(host)
    assert await told_gone(comm)

    # Its next try, and every one after: told the same, not "unauthorized" as a wrong token is.
    again = WebsocketCommunicator(
        application, "/ws/host/", headers=[(b"authorization", f"Bearer {secret}".encode())]
    )
    assert (await again.connect())[0]
    assert await told_gone(again)


async def test_a_token_reissued_is_not_told_gone(alice):
    """Only the host's deletion is "gone": a token replaced by a provisioning is unauthorized."""
    host, old = await sync_to_async(host_with_supervisor)()
    await sync_to_async(hosting.issue_host_token)(host)
    comm = WebsocketCommunicator(
        application, "/ws/host/", headers=[(b"authorization", f"Bearer {old}".encode())]
    )
    assert (await comm.connect())[0]
    assert (await next_frame(comm))["code"] == "unauthorized"


@pytest.mark.slow
def test_the_supervisor_of_a_deleted_host_exits_by_itself(server, tmp_path):
    host, secret = host_with_supervisor()
    (tmp_path / "supervisor.token").write_text(secret)
    config = tmp_path / "host.json"
    config.write_text(
        json.dumps(
            {
                "url": server.url,
                "tokenFile": str(tmp_path / "supervisor.token"),
                "agentsDir": str(tmp_path / "agents"),
                "stateFile": str(tmp_path / "state.json"),
            }
        )
    )
    run = LoggedProcess(
        [sys.executable, "-m", "agntchat_bridge.host", "run", "--config", str(config)]
    )
    try:
        wait_until(
            lambda: (
                json.loads((tmp_path / "state.json").read_text())["connected"]
                if (tmp_path / "state.json").exists()
                else False
            ),
            timeout=40,
            what="the supervisor connected",
        )
        hosting.delete_host(host)
        wait_until(lambda: run.poll() is not None, timeout=40, what="the supervisor exiting")
        assert run.returncode == 0
        assert "host was deleted" in run.output()
    finally:
        run.kill_if_running()
