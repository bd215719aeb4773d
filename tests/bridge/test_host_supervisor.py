"""``agntchat-host`` on its own, no server: the unit it installs at login (systemd, launchd),
what ``status`` says in each state, the configuration it reads, the environment its bridges
get."""

import json
import os
import plistlib
import subprocess
import sys

import pytest
from agntchat_bridge import host


def test_install_writes_a_systemd_user_unit_and_a_launchd_agent(tmp_path):
    config = tmp_path / "conf" / "host.json"
    command = [sys.executable, "-m", "agntchat_bridge.host", "run", "--config", str(config)]

    unit = host.install(config, platform="linux", home=tmp_path)
    assert unit == tmp_path / ".config/systemd/user/agntchat-host.service"
    assert f"ExecStart={' '.join(command)}\n" in unit.read_text()
    assert "WantedBy=default.target" in unit.read_text()

    plist = host.install(config, platform="darwin", home=tmp_path)
    assert plist == tmp_path / "Library/LaunchAgents/chat.agnt.host.plist"
    agent = plistlib.loads(plist.read_bytes())
    assert agent["ProgramArguments"] == command
    assert agent["RunAtLoad"] is True and agent["KeepAlive"] is True


def test_install_says_how_to_start_it(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("HOME", str(tmp_path))
    config = tmp_path / "host.json"
    config.write_text(json.dumps({"url": "http://127.0.0.1:1", "tokenFile": "t"}))
    host.main(["install", "--config", str(config)])
    assert "systemctl --user enable --now agntchat-host" in capsys.readouterr().out
    assert (tmp_path / ".config/systemd/user/agntchat-host.service").exists()


def write_state(tmp_path, pid, agents):
    config = host.read_config(_config(tmp_path))
    with open(config["stateFile"], "w") as f:
        json.dump({"pid": pid, "connected": True, "agents": agents}, f)
    return config


def _config(tmp_path):
    path = tmp_path / "host.json"
    path.write_text(json.dumps({"url": "http://agntchat.example/", "tokenFile": "t"}))
    return path


def test_status_in_each_state(tmp_path):
    config = host.read_config(_config(tmp_path))
    assert host.status_lines(config) == ["agntchat-host is not running (no state yet)."]

    config = write_state(
        tmp_path,
        os.getpid(),
        {
            "a": {"name": "Vega", "state": "running", "pid": 4242},
            "b": {"name": "Orion", "state": "exited", "code": 3},
        },
    )
    lines = host.status_lines(config)
    assert lines[0].endswith("is connected to http://agntchat.example.")
    assert lines[1:] == ["  Vega: running (pid 4242)", "  Orion: exited (exit code 3)"]

    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    config = write_state(tmp_path, gone.pid, {})
    assert host.status_lines(config) == ["agntchat-host is not running."]


def test_the_configuration_and_the_agents_it_can_run(tmp_path):
    agents = tmp_path / "agents"
    (agents / "x").mkdir(parents=True)
    (agents / "x" / "agent.json").write_text(json.dumps({"id": "x", "workdir": "/w/x"}))
    (agents / "broken").mkdir()
    (agents / "broken" / "agent.json").write_text("{not json")
    path = tmp_path / "host.json"
    path.write_text(
        json.dumps(
            {
                "url": "http://agntchat.example/",
                "tokenFile": "t",
                "agentsDir": str(agents),
                "agents": [{"id": "y", "workdir": "/w/y"}],
            }
        )
    )
    config = host.read_config(path)
    assert config["url"] == "http://agntchat.example"
    assert config["stateFile"] == str(tmp_path / "host-state.json")
    assert config["cliHome"] == str(tmp_path / "cli") and config["python"] == sys.executable
    assert sorted(host.agent_entries(config)) == ["x", "y"]


def test_bridges_share_the_cli_login_and_never_inherit_a_key(tmp_path, monkeypatch):
    monkeypatch.setenv("AGNTCHAT_AGENT_KEY", "agk_leak")
    supervisor = host.Supervisor(host.read_config(_config(tmp_path)))
    env = supervisor.bridge_environment({"workdir": "/srv/agents/a/work", "user": "agt-a"})
    assert env["CLAUDE_CONFIG_DIR"] == str(tmp_path / "cli" / "claude")
    assert env["CODEX_HOME"] == str(tmp_path / "cli" / "codex")
    assert "AGNTCHAT_AGENT_KEY" not in env
    assert (env["HOME"], env["USER"], env["LOGNAME"]) == ("/srv/agents/a", "agt-a", "agt-a")
    # Its private directory, for CLI homes of its own when it has an API key of its own.
    assert env["AGNTCHAT_OWN_CLI_HOME"] == "/srv/agents/a/cli"
    laptop = supervisor.bridge_environment({"workdir": "/home/me/agents/a"})
    assert "AGNTCHAT_OWN_CLI_HOME" not in laptop


def test_a_missing_configuration_is_said_clearly(tmp_path, capsys):
    with pytest.raises(SystemExit) as stopped:
        host.main(["run", "--config", str(tmp_path / "nope.json")])
    assert stopped.value.code == 2
    assert "cannot read the configuration" in capsys.readouterr().err


def test_init_needs_a_persons_token(tmp_path, capsys):
    config = tmp_path / "h" / "host.json"
    with pytest.raises(SystemExit):
        host.main(["init", "--config", str(config), "--url", "http://x"])
    assert "needs --url and --token" in capsys.readouterr().err
    host.main(["init", "--config", str(config), "--url", "http://x/", "--token", "apt_abc"])
    written = json.loads(config.read_text())
    assert written["url"] == "http://x" and written["startAll"] is True
    assert (tmp_path / "h" / "token").read_text() == "apt_abc"
