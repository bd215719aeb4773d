"""``agntchat-host`` under trouble, no agntchat server: a bridge that cannot be started (its
system user gone, its Python missing, its directory not writable) is one agent's problem, said
in the state file, not the end of the supervisor or of its socket (which serves every other
agent); a server that refuses its token is asked again less and less often, not every second."""

import asyncio
import json
import sys
import time

import websockets
from agntchat_bridge import host


def _supervisor(tmp_path, **entry):
    agents = tmp_path / "agents"
    for agent_id in ("broken", "fine"):
        (agents / agent_id).mkdir(parents=True)
        fields = {"id": agent_id, "name": agent_id, "workdir": str(agents / agent_id / "work")}
        fields["tokenFile"] = str(agents / agent_id / "token")
        if agent_id == "broken":
            fields.update(entry)
        (agents / agent_id / "agent.json").write_text(json.dumps(fields))
    (tmp_path / "t").write_text("aht_supervisor")
    config = tmp_path / "host.json"
    config.write_text(
        json.dumps(
            {
                "url": "http://127.0.0.1:1",
                "tokenFile": str(tmp_path / "t"),
                "agentsDir": str(agents),
                # A "bridge" that waits to be stopped: what runs does not matter here.
                "python": sys.executable,
            }
        )
    )
    return host.Supervisor(host.read_config(config))


async def _wake_both(supervisor):
    supervisor.bridge_command = lambda entry: (
        ([entry["python"]] if "python" in entry else [sys.executable])
        + ["-c", "import time; time.sleep(60)"]
    )
    await supervisor.on_frame({"type": "hello", "agents": [{"id": "broken", "name": "broken"}]})
    await supervisor.on_frame({"type": "wake", "agent": "broken"})
    await supervisor.on_frame({"type": "wake", "agent": "fine"})


async def test_it_survives_a_bridge_whose_system_user_is_gone(tmp_path):
    supervisor = _supervisor(tmp_path, user="agt-no-such-user-x")
    try:
        await _wake_both(supervisor)
        assert supervisor.states["broken"]["state"] == "failed"
        assert "agt-no-such-user-x" in supervisor.states["broken"]["error"]
        assert "broken" not in supervisor.processes
        assert supervisor.states["fine"]["state"] == "running"
        saved = json.loads((tmp_path / "host-state.json").read_text())
        assert saved["agents"]["broken"]["state"] == "failed"
        said = host.status_lines(supervisor.config)
        assert any(line.startswith("  broken: failed to start: ") for line in said)
    finally:
        await supervisor.stop_all()


async def test_it_survives_a_bridge_whose_python_is_missing(tmp_path):
    supervisor = _supervisor(tmp_path, python=str(tmp_path / "no" / "python"))
    try:
        await _wake_both(supervisor)
        assert supervisor.states["broken"]["state"] == "failed"
        assert supervisor.states["fine"]["state"] == "running"
    finally:
        await supervisor.stop_all()


async def test_it_survives_a_bridge_whose_directory_cannot_be_made(tmp_path):
    (tmp_path / "a-file").write_text("")
    supervisor = _supervisor(tmp_path, workdir=str(tmp_path / "a-file" / "work"))
    try:
        await _wake_both(supervisor)
        assert supervisor.states["broken"]["state"] == "failed"
        assert supervisor.states["fine"]["state"] == "running"
    finally:
        await supervisor.stop_all()


async def test_a_refused_token_is_tried_again_less_and_less_often(tmp_path, monkeypatch):
    """The server accepts the socket, then refuses the token (4401: a host deleted, a token
    revoked) or the address (4429). Each such connection used to count as a good one and reset
    the wait to a second: a stale supervisor knocked every second for ever, each knock a
    failure that kept its address (and everyone's behind it) locked out of /ws/host/."""
    knocks = []

    async def refuse(ws):
        knocks.append(time.monotonic())
        await ws.send(json.dumps({"type": "error", "code": "unauthorized", "message": "ended"}))
        await ws.close(4401)

    monkeypatch.setattr(host.random, "random", lambda: 0.0)  # each wait: half its backoff
    (tmp_path / "t").write_text("aht_revoked")
    async with websockets.serve(refuse, "127.0.0.1", 0) as server:
        port = server.sockets[0].getsockname()[1]
        config = tmp_path / "host.json"
        config.write_text(
            json.dumps({"url": f"http://127.0.0.1:{port}", "tokenFile": str(tmp_path / "t")})
        )
        supervisor = host.Supervisor(host.read_config(config))
        running = asyncio.ensure_future(supervisor.run_forever())
        await asyncio.sleep(3.2)
        supervisor.stopping.set()
        await asyncio.wait_for(running, 5)
    # Waits of 0.5, 1 and 2 s: knocks at 0, 0.5 and 1.5 s (every 0.5 s before: seven).
    assert len(knocks) == 3
    assert supervisor.connected is False
