"""The supervisor on a person's own laptop (AGT-3's desktop side), against a real daphne: set up
once with the person's API token, it gives each local agent a key of its own, starts them all,
their replies come through the pipeline, and the next start reuses the keys. An agent moved to
a host has its laptop bridge stopped; SIGTERM stops every bridge it started."""

import json
import os
import signal
import subprocess
import sys

import pytest

from agents import hosting
from agents.actions import create_agent
from agents.models import AgentKey
from agntchat.core import presence
from conversations.actions import create_conversation, post_message
from conversations.models import Message
from tests.socket_helpers import LoggedProcess
from tests.waiting import wait_until
from workspaces.actions import issue_api_token

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


def host_command(*args):
    return [sys.executable, "-m", "agntchat_bridge.host", *args]


def supervise(config):
    return LoggedProcess(host_command("run", "--config", str(config)))


def bridges_of(config_dir) -> list[int]:
    marker = str(config_dir).encode()
    pids = []
    for pid in [p for p in os.listdir("/proc") if p.isdigit()]:
        try:
            cmdline = open(f"/proc/{pid}/cmdline", "rb").read()
        except OSError:
            continue
        if b"agntchat_bridge\x00" in cmdline and marker in cmdline:
            pids.append(int(pid))
    return pids


def test_a_laptop_runs_all_its_owners_agents(alice, team_a, server, tmp_path):
    vega = create_agent(alice, name="Vega", backend="scripted")
    orion = create_agent(alice, name="Orion", backend="scripted")
    _, token = issue_api_token(alice, "laptop")
    config = tmp_path / "host.json"
    refused = subprocess.run(
        host_command("init", "--config", str(config), "--url", server.url, "--token", "agk_x"),
        capture_output=True,
        text=True,
    )
    assert refused.returncode == 2 and "apt_" in refused.stderr and not config.exists()
    subprocess.run(
        host_command("init", "--config", str(config), "--url", server.url, "--token", token),
        check=True,
        capture_output=True,
    )
    assert (tmp_path / "token").stat().st_mode & 0o777 == 0o600
    assert json.loads(config.read_text())["startAll"] is True

    supervisor = supervise(config)
    try:
        wait_until(
            lambda: presence.is_online(vega.id) and presence.is_online(orion.id),
            timeout=40,
            what="both bridges connected",
        )
        assert AgentKey.objects.filter(agent__in=[vega, orion]).count() == 2
        assert (tmp_path / "agents" / str(vega.id) / "key").stat().st_mode & 0o777 == 0o600

        room = create_conversation(alice, team_a, kind="channel", title="desk", agent_ids=[vega.id])
        post_message(alice, room, "@vega ping")
        reply = wait_until(
            lambda: Message.objects.filter(conversation=room, author_agent=vega).first(),
            timeout=30,
            what="Vega's reply from the laptop",
        )
        assert reply.body == "Echo: @vega ping"
        status = subprocess.run(
            host_command("status", "--config", str(config)), capture_output=True, text=True
        ).stdout
        assert "is connected" in status and "Vega: running" in status and "Orion: running" in status

        # Moved to a host: its laptop bridge stops, the other keeps running.
        host = hosting.create_host(name="h1", address="10.0.0.1", ssh_key="unused")
        hosting.place_agent(orion, host)
        wait_until(lambda: not presence.is_online(orion.id), timeout=30, what="Orion stopped")
        assert presence.is_online(vega.id)
    finally:
        supervisor.send_signal(signal.SIGTERM)
        output = supervisor.communicate(timeout=30)[0]
    assert supervisor.returncode == 0, output
    assert "Traceback" not in output, output
    # SIGTERM stops every bridge it started.
    wait_until(lambda: not bridges_of(tmp_path), timeout=20, what="the bridges stopped")

    # The next start reuses the keys it gave.
    again = supervise(config)
    try:
        wait_until(lambda: presence.is_online(vega.id), timeout=40, what="Vega again")
        assert AgentKey.objects.filter(agent__in=[vega, orion]).count() == 2
    finally:
        again.send_signal(signal.SIGTERM)
        again.communicate(timeout=30)
        for pid in bridges_of(tmp_path):
            os.kill(pid, signal.SIGKILL)
