"""A real OpenSSH server on loopback, and a host machine behind it, for the hosting tests.

The server runs as root (as on a host we provision), on its own port, with its own host key,
accepting one client key. The "host" is a directory on this machine: its Python is a venv that
sees this checkout's installed dependencies through a .pth line, so provisioning installs only
the bridge wheel, the way a host that already has its dependencies would.
"""

import os
import shutil
import signal
import socket
import stat
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path

from tests.socket_helpers import free_port
from tests.waiting import wait_until

SSHD = shutil.which("sshd") or "/usr/sbin/sshd"

CONFIG = """Port {port}
ListenAddress 127.0.0.1
HostKey {dir}/host_key
PidFile {dir}/sshd.pid
AuthorizedKeysFile {dir}/authorized_keys
PermitRootLogin prohibit-password
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
StrictModes no
Subsystem sftp internal-sftp
"""


def available() -> str | None:
    """Why the SSH tests cannot run here, or None."""
    if not os.path.exists(SSHD):
        return "OpenSSH sshd is not installed (Debian: apt-get install openssh-server)"
    if os.geteuid() != 0:
        return "sshd on loopback, like a host we provision, needs root"
    return None


def keygen(path: Path) -> None:
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(path)], check=True, timeout=30
    )


class Sshd:
    def __init__(self, directory: Path):
        self.dir = directory
        self.port = free_port()
        keygen(directory / "client_key")
        (directory / "authorized_keys").write_text((directory / "client_key.pub").read_text())
        (directory / "sshd_config").write_text(CONFIG.format(port=self.port, dir=directory))
        self.client_key = (directory / "client_key").read_text()
        self.proc = None
        self.rekey()

    def rekey(self) -> None:
        """A new host key, as when a host is rebuilt (or someone sits in between)."""
        self.stop()
        for name in ("host_key", "host_key.pub"):
            (self.dir / name).unlink(missing_ok=True)
        keygen(self.dir / "host_key")
        self.host_key = " ".join((self.dir / "host_key.pub").read_text().split()[:2])
        Path("/run/sshd").mkdir(exist_ok=True)  # sshd's privilege separation directory
        self.proc = subprocess.Popen(
            [SSHD, "-D", "-e", "-f", str(self.dir / "sshd_config")],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        wait_until(self.listening, timeout=20, what="sshd listening")

    def listening(self) -> bool:
        if self.proc.poll() is not None:
            raise RuntimeError("sshd exited: " + self.proc.stderr.read().decode()[-2000:])
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=0.2):
                return True
        except OSError:
            return False

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(timeout=10)


def _world_reachable(path: Path) -> bool:
    """Whether another system user can reach PATH (every directory above it traversable)."""
    return all(p.stat().st_mode & stat.S_IXOTH for p in [path, *path.parents] if p.is_dir())


def open_directory(prefix: str) -> Path:
    """A directory under /tmp that the hosts' system users can traverse (pytest's are 0700)."""
    path = Path(tempfile.mkdtemp(prefix=prefix, dir="/tmp"))
    path.chmod(0o755)
    return path


def host_python() -> tuple[str, str | None]:
    """A host's own Python (a venv) and why its agents' system users could not run it, if so."""
    base = "/usr/bin/python3"
    probe = subprocess.run(
        [base, "-c", "import sys; print(sys.version_info[:2])"], capture_output=True, text=True
    )
    if probe.returncode != 0 or probe.stdout.strip() != str(tuple(sys.version_info[:2])):
        base = getattr(sys, "_base_executable", sys.executable)
    root = open_directory("agntchat-hostpy-")
    subprocess.run([base, "-m", "venv", str(root)], check=True, timeout=120)
    purelib = Path(sysconfig.get_paths()["purelib"])
    site = Path(
        subprocess.run(
            [
                str(root / "bin" / "python"),
                "-c",
                "import sysconfig; print(sysconfig.get_paths()['purelib'])",
            ],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    )
    # Only a path line: the checkout's own .pth files (its editable installs) are not processed,
    # so the bridge the host runs is the wheel provisioning installs.
    (site / "agntchat-test-dependencies.pth").write_text(f"{purelib}\n")
    python = str(root / "bin" / "python")
    unreachable = next(
        (p for p in (Path(os.path.realpath(python)), purelib) if not _world_reachable(p)), None
    )
    return python, (f"{unreachable} is not reachable by other users" if unreachable else None)


def kill_processes_under(path: Path) -> None:
    """Every process whose command line names PATH (a host's supervisor and bridges)."""
    marker = str(path).encode()
    for pid in [p for p in os.listdir("/proc") if p.isdigit()]:
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        if marker in cmdline and int(pid) != os.getpid():
            try:
                os.kill(int(pid), signal.SIGKILL)
            except ProcessLookupError:
                pass
