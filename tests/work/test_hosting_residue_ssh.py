"""Hosted agents' residue, over a real OpenSSH server on loopback: a host that takes data at a
trickle cannot hold a provisioning past its job's timeout."""

import socket
import threading
import time

import pytest

from agents import hosting
from agents.models import Host
from tests.work import sshd as loopback
from work import hosting as work_hosting

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.slow,
    pytest.mark.skipif(bool(loopback.available()), reason=loopback.available() or ""),
]


class Trickle:
    """A slow link in front of PORT: what the client sends gets through at RATE bytes a second,
    what the server sends at full speed. One connection at a time, until stopped."""

    def __init__(self, port: int, rate: int):
        self.target, self.rate, self.done = port, rate, threading.Event()
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.listener.settimeout(0.2)
        self.port = self.listener.getsockname()[1]
        self.threads = [threading.Thread(target=self.serve, daemon=True)]
        self.threads[0].start()

    def serve(self):
        while not self.done.is_set():
            try:
                client, _ = self.listener.accept()
            except TimeoutError:
                continue
            server = socket.create_connection(("127.0.0.1", self.target))
            for source, sink, rate in ((client, server, self.rate), (server, client, None)):
                relay = threading.Thread(target=self.relay, args=(source, sink, rate), daemon=True)
                relay.start()
                self.threads.append(relay)

    def relay(self, source, sink, rate):
        source.settimeout(0.2)
        try:
            while not self.done.is_set():
                try:
                    data = source.recv(1024 if rate else 65536)
                except TimeoutError:
                    continue
                if not data:
                    break
                sink.sendall(data)
                if rate:
                    self.done.wait(len(data) / rate)
        except OSError:
            pass
        finally:
            for s in (source, sink):
                s.close()

    def stop(self):
        self.done.set()
        for thread in self.threads:
            thread.join(5)
        self.listener.close()


@pytest.fixture
def ssh_server(tmp_path):
    server = loopback.Sshd(tmp_path)
    yield server
    server.stop()


def test_a_host_taking_the_upload_at_a_trickle_fails_the_job_before_its_timeout(
    ssh_server, tmp_path, settings, monkeypatch
):
    """Each SFTP request is answered in time, but the whole upload would outlast the job."""
    # 3 s for the job's SSH work (what its 30 s margin leaves).
    settings.Q_CLUSTER = {**settings.Q_CLUSTER, "timeout": 33}
    wheel = tmp_path / "agntchat_bridge-0-py3-none-any.whl"
    wheel.write_bytes(b"w" * 3_000_000)  # 15 s through the trickle
    monkeypatch.setattr(work_hosting, "bridge_wheel", lambda: wheel)
    link = Trickle(ssh_server.port, rate=200_000)
    try:
        host = hosting.create_host(
            name="slow-link",
            address="127.0.0.1",
            port=link.port,
            ssh_user="root",
            ssh_key=ssh_server.client_key,
            root=str(tmp_path / "root"),
            python="/usr/bin/python3",
        )
        started = time.monotonic()
        with pytest.raises(work_hosting.HostUnreachable) as failed:
            work_hosting.provision_host(host)
        assert time.monotonic() - started < 8
    finally:
        link.stop()
    assert "did not finish within the job's 3 s" in failed.value.message
    host.refresh_from_db()
    assert host.status == Host.Status.UNREACHABLE
    assert host.problem == failed.value.message
    assert "agntchat_bridge-0-py3-none-any.whl" in host.problem
