"""``agntchat-host``: one supervisor for the bridges of a machine, a shared host or a laptop.

It keeps a socket open to the server (``/ws/host/``) and starts an agent's bridge when a
``wake`` frame says work arrived for it and no bridge of it is connected (GW-4); it stops or
restarts one bridge when told (the agent moved away, a rolling restart). Every bridge it starts
shares one login session of each coding CLI (CLAUDE_CONFIG_DIR, CODEX_HOME under ``cliHome``)
and runs, on a multi-tenant host, as the agent's own system user.

    agntchat-host init --url URL --token apt_…   a laptop: write the configuration (once)
    agntchat-host run [--config FILE]       serve (what the unit or the host runs)
    agntchat-host install [--config FILE]   a laptop: start it at login (systemd user unit on
                                            Linux, launchd agent on macOS)
    agntchat-host status [--config FILE]    each agent's bridge: running, stopped, exited

The configuration (JSON): ``url``; ``tokenFile`` (the host's supervisor token ``aht_…``, or on
a laptop the person's API token ``apt_…``); agents listed in ``agents`` (``id``, ``keyFile``,
``workdir``, optional ``user``) and/or one ``agent.json`` each under ``agentsDir``;
``startAll`` (a laptop: start every agent at once, not only on wake-up); ``stateFile``.
Like the bridge, no Django here: it speaks only the documented protocol (docs/protocol.md §12).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import os
import random
import signal
import socket
import sys
import time
from pathlib import Path

import httpx
import websockets

from .backends.base import OWN_CLI_HOME

log = logging.getLogger("agntchat.host")

DEFAULT_CONFIG = Path.home() / ".agntchat" / "host.json"
HEARTBEAT_SECONDS = 20.0
STOP_GRACE_SECONDS = 10.0


def read_config(path: Path) -> dict:
    config = json.loads(path.read_text())
    base = path.parent
    config.setdefault("stateFile", str(base / "host-state.json"))
    config.setdefault("python", sys.executable)
    config.setdefault("cliHome", str(base / "cli"))
    config["url"] = config["url"].rstrip("/")
    return config


def agent_entries(config: dict) -> dict[str, dict]:
    """Every agent this machine can run, by id: listed, and found under ``agentsDir``."""
    entries = {str(a["id"]): a for a in config.get("agents", [])}
    agents_dir = config.get("agentsDir")
    if agents_dir:
        for path in sorted(Path(agents_dir).glob("*/agent.json")):
            with contextlib.suppress(OSError, ValueError):
                entry = json.loads(path.read_text())
                entries[str(entry["id"])] = entry
    return entries


class Supervisor:
    def __init__(self, config: dict):
        self.config = config
        self.processes: dict[str, asyncio.subprocess.Process] = {}
        self.states: dict[str, dict] = {}
        self.served: dict[str, str] = {}  # agent id → name, as the server last said
        self.connected = False
        self.stopping = asyncio.Event()
        self.ws = None

    # --- bridges ---------------------------------------------------------------------------

    def bridge_command(self, entry: dict) -> list[str]:
        credential = entry.get("tokenFile") or entry.get("keyFile")
        return [
            self.config["python"],
            "-m",
            "agntchat_bridge",
            "--url",
            self.config["url"],
            "--key-file",
            credential,
            "--workdir",
            entry["workdir"],
        ]

    def bridge_environment(self, entry: dict) -> dict:
        env = dict(os.environ)
        cli = Path(self.config["cliHome"])
        # One login session of each CLI for every bridge of the machine.
        env["CLAUDE_CONFIG_DIR"] = str(cli / "claude")
        env["CODEX_HOME"] = str(cli / "codex")
        if entry.get("user"):
            env["HOME"] = str(Path(entry["workdir"]).parent)
            env["USER"] = env["LOGNAME"] = entry["user"]
            # An agent with its own API key keeps its CLIs' homes (transcripts) there, private.
            env[OWN_CLI_HOME] = str(Path(env["HOME"]) / "cli")
        env.pop("AGNTCHAT_AGENT_KEY", None)
        return env

    async def start(self, agent_id: str) -> None:
        process = self.processes.get(agent_id)
        if process is not None and process.returncode is None:
            return
        entry = agent_entries(self.config).get(agent_id)
        if entry is None:
            log.warning("asked to start agent %s, which is not set up on this machine", agent_id)
            return
        # As the agent's own user, files it writes in the shared CLI login stay the group's.
        extra = {"user": entry["user"], "umask": 0o007} if entry.get("user") else {}
        try:
            Path(entry["workdir"]).mkdir(parents=True, exist_ok=True)
            for name in ("claude", "codex"):
                (Path(self.config["cliHome"]) / name).mkdir(parents=True, exist_ok=True)
            process = await asyncio.create_subprocess_exec(
                *self.bridge_command(entry),
                env=self.bridge_environment(entry),
                stdin=asyncio.subprocess.DEVNULL,
                start_new_session=True,
                **extra,
            )
        except (OSError, KeyError, ValueError) as exc:
            # One agent's problem (its user gone, its Python missing, its directory not
            # writable), said in the state file: not the end of the socket serving the others
            # (an OSError there reconnected it at once, again at each wake-up; KeyError, an
            # unknown user, ended the supervisor).
            log.error("cannot start the bridge of %s: %s", entry.get("name") or agent_id, exc)
            self.record(agent_id, "failed", error=str(exc)[:500])
            return
        self.processes[agent_id] = process
        self.record(agent_id, "running", pid=process.pid)
        log.info("started the bridge of %s (pid %s)", entry.get("name") or agent_id, process.pid)
        asyncio.ensure_future(self.watch(agent_id, process))

    async def watch(self, agent_id: str, process) -> None:
        code = await process.wait()
        if self.processes.get(agent_id) is process:
            del self.processes[agent_id]
            self.record(agent_id, "exited", code=code)

    async def stop(self, agent_id: str) -> None:
        process = self.processes.pop(agent_id, None)
        if process is None or process.returncode is not None:
            self.record(agent_id, "stopped")
            return
        process.terminate()
        try:
            await asyncio.wait_for(process.wait(), STOP_GRACE_SECONDS)
        except TimeoutError:
            process.kill()
            await process.wait()
        self.record(agent_id, "stopped")

    async def restart(self, agent_id: str) -> None:
        await self.stop(agent_id)
        await self.start(agent_id)

    async def stop_all(self) -> None:
        await asyncio.gather(*(self.stop(agent_id) for agent_id in list(self.processes)))

    # --- state, for `agntchat-host status` -----------------------------------------------------

    def record(self, agent_id: str, state: str, **details) -> None:
        self.states[agent_id] = {"state": state, "since": time.time(), **details}
        self.save_state()

    def save_state(self) -> None:
        path = Path(self.config["stateFile"])
        state = {
            "pid": os.getpid(),
            "connected": self.connected,
            "agents": {
                agent_id: {
                    "name": self.served.get(agent_id, ""),
                    **self.states.get(agent_id, {"state": "stopped"}),
                }
                for agent_id in sorted(set(self.served) | set(self.states))
            },
        }
        with contextlib.suppress(OSError):
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_suffix(".tmp")
            tmp.write_text(json.dumps(state, indent=2))
            tmp.replace(path)

    # --- the socket ----------------------------------------------------------------------------

    @property
    def ws_url(self) -> str:
        url = self.config["url"].replace("https://", "wss://", 1).replace("http://", "ws://", 1)
        return f"{url}/ws/host/"

    async def run_forever(self) -> None:
        backoff = 1.0
        while not self.stopping.is_set():
            token = self.token()
            try:
                async with websockets.connect(
                    self.ws_url, additional_headers={"Authorization": f"Bearer {token}"}
                ) as ws:
                    self.ws = ws
                    await self.serve(ws)
            except (OSError, TimeoutError, websockets.WebSocketException) as exc:
                log.warning(
                    "host socket lost (%s); reconnecting in ~%.0fs", type(exc).__name__, backoff
                )
            finally:
                self.ws = None
                if self.connected:
                    # Served (the server said hello): the next wait starts short again. A
                    # socket accepted and then refused (a token revoked, the address locked
                    # out) does not reset it, or a stale supervisor would knock every second.
                    backoff = 1.0
                    self.connected = False
                    self.save_state()
            if not self.stopping.is_set():
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self.stopping.wait(), backoff * (0.5 + random.random()))
                backoff = min(backoff * 2, 30.0)
        await self.stop_all()

    async def serve(self, ws) -> None:
        beat = asyncio.ensure_future(self.heartbeat(ws))
        try:
            async for text in ws:
                frame = json.loads(text)
                await self.on_frame(frame)
        finally:
            beat.cancel()

    @property
    def on_laptop(self) -> bool:
        """A person's own machine: the supervisor holds their API token, not a host's."""
        return self.token().startswith("apt_")

    def token(self) -> str:
        return Path(self.config["tokenFile"]).expanduser().read_text().strip()

    async def give_keys(self) -> None:
        """On a laptop, each served agent with no entry here gets a key of its own, made once
        over the REST API with the person's token and kept 0600 beside this configuration."""
        missing = [a for a in self.served if a not in agent_entries(self.config)]
        if not missing:
            return
        agents_dir = Path(self.config.setdefault("agentsDir", str(self.base / "agents")))
        headers = {"Authorization": f"Bearer {self.token()}"}
        async with httpx.AsyncClient(base_url=self.config["url"], headers=headers) as http:
            for agent_id in missing:
                response = await http.post(
                    f"/api/v1/agents/{agent_id}/keys/",
                    json={"name": f"agntchat-host on {socket.gethostname()}"[:80]},
                )
                if response.status_code != 201:
                    log.error(
                        "the server refused a key for %s (%s): %s",
                        self.served[agent_id],
                        response.status_code,
                        response.text[:300],
                    )
                    continue
                home = agents_dir / agent_id
                (home / "work").mkdir(parents=True, exist_ok=True)
                home.chmod(0o700)
                key_file = home / "key"
                key_file.touch(mode=0o600)
                key_file.write_text(response.json()["key"])
                entry = {
                    "id": agent_id,
                    "name": self.served[agent_id],
                    "keyFile": str(key_file),
                    "workdir": str(home / "work"),
                }
                (home / "agent.json").write_text(json.dumps(entry, indent=2))
                log.info("gave %s a key of its own on this machine", self.served[agent_id])

    @property
    def base(self) -> Path:
        return Path(self.config["stateFile"]).parent

    async def heartbeat(self, ws) -> None:
        while True:
            await asyncio.sleep(HEARTBEAT_SECONDS)
            await ws.send(json.dumps({"type": "heartbeat"}))

    async def on_frame(self, frame: dict) -> None:
        kind = frame.get("type")
        if kind in ("hello", "agents"):
            self.served = {a["id"]: a["name"] for a in frame["agents"]}
            self.connected = True
            if self.on_laptop:
                await self.give_keys()
            # An agent no longer served here (moved away) has its bridge stopped.
            for agent_id in [a for a in self.processes if a not in self.served]:
                await self.stop(agent_id)
            self.save_state()
            if self.config.get("startAll"):
                for agent_id in self.served:
                    await self.start(agent_id)
        elif kind == "wake":
            await self.start(frame["agent"])
        elif kind == "stop":
            await self.stop(frame["agent"])
        elif kind == "restart":
            await self.restart(frame["agent"])
        elif kind == "error" and frame.get("code") == "host_gone":
            # For good: retrying would only be refused again. Its bridges are stopped on the way.
            log.warning("the server says this host was deleted: stopping its bridges and exiting")
            self.stopping.set()
        elif kind == "error":
            log.error("the server says: %s", frame.get("message"))


# --- installing on a laptop ------------------------------------------------------------------

SYSTEMD_UNIT = """[Unit]
Description=agntchat agents (agntchat-host)
After=network-online.target

[Service]
ExecStart={command}
Restart=always
RestartSec=5

[Install]
WantedBy=default.target
"""

LAUNCHD_PLIST = """<?xml version="1.0" encoding="UTF-8"?>
<!DOCTYPE plist PUBLIC "-//Apple//DTD PLIST 1.0//EN" "http://www.apple.com/DTDs/PropertyList-1.0.dtd">
<plist version="1.0">
<dict>
  <key>Label</key><string>chat.agnt.host</string>
  <key>ProgramArguments</key>
  <array>{arguments}</array>
  <key>RunAtLoad</key><true/>
  <key>KeepAlive</key><true/>
</dict>
</plist>
"""


def install(config_path: Path, platform: str | None = None, home: Path | None = None) -> Path:
    """Write the unit that starts the supervisor at login; return its path. Enabling it is
    left to the printed command (systemctl --user / launchctl), run by the person."""
    platform = platform or sys.platform
    home = home or Path.home()
    arguments = [
        sys.executable,
        "-m",
        "agntchat_bridge.host",
        "run",
        "--config",
        str(config_path.resolve()),
    ]
    if platform == "darwin":
        path = home / "Library" / "LaunchAgents" / "chat.agnt.host.plist"
        body = LAUNCHD_PLIST.format(arguments="".join(f"<string>{a}</string>" for a in arguments))
    else:
        path = home / ".config" / "systemd" / "user" / "agntchat-host.service"
        body = SYSTEMD_UNIT.format(command=" ".join(arguments))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(body)
    return path


def init(config_path: Path, url: str, token: str) -> Path:
    """A laptop's configuration: the server, the person's API token (0600), every one of their
    local agents started at once and given a key of its own at the first start."""
    if not token.startswith("apt_"):
        raise ValueError("a person's API token (apt_…) is expected: create one on your profile")
    base = config_path.parent
    base.mkdir(parents=True, exist_ok=True)
    token_file = base / "token"
    token_file.touch(mode=0o600)
    token_file.chmod(0o600)
    token_file.write_text(token)
    config = {
        "url": url.rstrip("/"),
        "tokenFile": str(token_file),
        "agentsDir": str(base / "agents"),
        "startAll": True,
    }
    config_path.write_text(json.dumps(config, indent=2))
    return config_path


def status_lines(config: dict) -> list[str]:
    try:
        state = json.loads(Path(config["stateFile"]).read_text())
    except (OSError, ValueError):
        return ["agntchat-host is not running (no state yet)."]
    alive = True
    try:
        os.kill(state["pid"], 0)
    except (OSError, KeyError):
        alive = False
    if not alive:
        head = "agntchat-host is not running."
    else:
        head = f"agntchat-host (pid {state['pid']}) is {'connected' if state['connected'] else 'not connected'} to {config['url']}."
    lines = [head]
    for agent_id, agent in state.get("agents", {}).items():
        detail = (
            f" (pid {agent['pid']})" if agent.get("state") == "running" and "pid" in agent else ""
        )
        if agent.get("state") == "exited":
            detail = f" (exit code {agent.get('code')})"
        if agent.get("state") == "failed":
            detail = f" to start: {agent.get('error')}"
        lines.append(f"  {agent.get('name') or agent_id}: {agent.get('state')}{detail}")
    return lines


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(prog="agntchat-host", description=__doc__.split("\n\n")[0])
    parser.add_argument("command", choices=["init", "run", "install", "status"])
    parser.add_argument(
        "--config", default=os.environ.get("AGNTCHAT_HOST_CONFIG", str(DEFAULT_CONFIG))
    )
    parser.add_argument("--url", help="init: the agntchat server, e.g. https://agntchat.example")
    parser.add_argument("--token", help="init: your API token (apt_…)")
    parser.add_argument("--token-file", help="init: a file holding your API token")
    args = parser.parse_args(argv)
    config_path = Path(args.config).expanduser()
    if args.command == "init":
        token = args.token or (
            Path(args.token_file).expanduser().read_text().strip() if args.token_file else ""
        )
        if not args.url or not token:
            parser.error("init needs --url and --token (or --token-file)")
        try:
            init(config_path, args.url, token)
        except ValueError as exc:
            parser.error(str(exc))
        print(f"Wrote {config_path}. Start it with: agntchat-host run --config {config_path}")
        return
    logging.basicConfig(
        level=os.environ.get("LOG_LEVEL", "INFO"),
        format="%(asctime)s host %(levelname)s %(message)s",
    )
    try:
        config = read_config(config_path)
    except (OSError, ValueError, KeyError) as exc:
        parser.error(f"cannot read the configuration {config_path}: {exc}")
    if args.command == "status":
        print("\n".join(status_lines(config)))
        return
    if args.command == "install":
        path = install(config_path)
        enable = (
            f"launchctl load -w {path}"
            if sys.platform == "darwin"
            else "systemctl --user daemon-reload && systemctl --user enable --now agntchat-host"
        )
        print(f"Wrote {path}. Start it now and at every login with:\n  {enable}")
        return
    asyncio.run(serve(config))


async def serve(config: dict) -> None:
    supervisor = Supervisor(config)
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, supervisor.stopping.set)
    stopper = asyncio.ensure_future(_close_on_stop(supervisor))
    try:
        await supervisor.run_forever()
    finally:
        stopper.cancel()


async def _close_on_stop(supervisor: Supervisor) -> None:
    await supervisor.stopping.wait()
    if supervisor.ws is not None:
        await supervisor.ws.close()


if __name__ == "__main__":
    main()
