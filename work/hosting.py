"""Hosts, from the server's side: provisioning over SSH, placement, rolling restarts (AGT-3…6).

Over SSH (paramiko) a host gets the bridge package (a wheel built from this checkout's
``bridge/``), the host supervisor ``agntchat-host`` running under the SSH user, and per placed
agent a private working directory holding its placement token, owned on multi-tenant hosts by
a system user of its own. The host's SSH key is pinned at the first connection and any other
key is refused after. Once running, the supervisor keeps a socket open to the server
(work/host_socket.py): wake-ups, stops and restarts reach it there.
"""

from __future__ import annotations

import base64
import hashlib
import io
import json
import logging
import shlex
import socket
import subprocess
import sys
import time
import uuid
from contextlib import contextmanager
from functools import cache
from pathlib import Path

import paramiko
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from django.conf import settings
from django.db import transaction
from django.utils import timezone
from django_q.tasks import async_task

from agents import hosting
from agents.exceptions import AgentRule
from agents.models import Agent, Host, HostRestart
from agntchat.core import presence
from agntchat.core.events import publish
from agntchat.core.exceptions import AppError
from agntchat.core.presence import client as redis
from work.tools import platform_web

log = logging.getLogger(__name__)

SSH_TIMEOUT = 15
# The most one remote command (or one SFTP request) may take, all of it: a host is anyone's
# machine, and one that drips output or never sends an exit status must not hold a job worker.
# Below the job timeout (Q_CLUSTER), so the host is marked unreachable rather than the job killed.
COMMAND_TIMEOUT = 240
# All the SSH work of one job (provisioning a host, setting an agent up or forgetting it), from
# the job's start: below the job timeout (Q_CLUSTER) by this margin, so a host that takes data
# at a trickle fails the job with its reason recorded, not has it killed with nothing said.
JOB_MARGIN_SECONDS = 30
MAX_OUTPUT = 1_000_000  # of a command's output kept (the commands here print little)
# Checking an RSA key (that its primes are primes) took 3-4 s at 8192 bits and 30-70 s at the
# 14,000-20,000 bits that fit in the 20,000 characters a key may have (a busy 2-core machine):
# larger ones are refused before that check.
MAX_RSA_BITS = 8192


class HostUnreachable(AppError):
    code = "host_unreachable"
    status = 502


class HostKeyMismatch(HostUnreachable):
    code = "host_key_mismatch"


class HostBusy(AppError):
    code = "host_busy"
    status = 409
    default_message = (
        "A provisioning or restart of this host is already queued or running: wait for it to end."
    )


class HostLocked(AppError):
    code = "host_locked"
    status = 409


def host_key_line(key: paramiko.PKey) -> str:
    return f"{key.get_name()} {key.get_base64()}"


def fingerprint(host_key: str) -> str:
    """The SHA256 fingerprint ssh-keygen shows for a pinned "type base64" key."""
    if not host_key:
        return ""
    blob = base64.b64decode(host_key.split()[1])
    return "SHA256:" + base64.b64encode(hashlib.sha256(blob).digest()).decode().rstrip("=")


class _Pin(paramiko.MissingHostKeyPolicy):
    """First contact: remember the key the host showed, to pin once the login succeeds."""

    def __init__(self):
        self.seen: str | None = None

    def missing_host_key(self, client, hostname, key):
        self.seen = host_key_line(key)


def _rsa_bits(text: str) -> int:
    """The size of the RSA key in TEXT, read without checking the key; 0 when it holds none."""
    data = text.encode(errors="replace")
    for load in (serialization.load_ssh_private_key, serialization.load_pem_private_key):
        try:
            key = load(data, None, unsafe_skip_rsa_key_validation=True)
        except Exception:  # noqa: BLE001 (not this format, or no key: paramiko says which)
            continue
        return key.key_size if isinstance(key, rsa.RSAPrivateKey) else 0
    return 0


def load_key(text: str) -> paramiko.PKey:
    bits = _rsa_bits(text)
    if bits > MAX_RSA_BITS:
        raise HostUnreachable(
            f"The host's SSH key is an RSA key of {bits} bits: at most {MAX_RSA_BITS} are taken "
            "(checking a larger one takes too long). An Ed25519 key is best."
        )
    for kind in (paramiko.Ed25519Key, paramiko.ECDSAKey, paramiko.RSAKey):
        try:
            return kind.from_private_key(io.StringIO(text))
        except Exception:  # noqa: BLE001 (a malformed key raises IndexError, AssertionError…)
            continue
    raise HostUnreachable("The host's SSH key cannot be read (OpenSSH private key expected).")


def private_address_refusal(address: str) -> str:
    return (
        f"{address} is, or resolves to, a private, local or reserved address: this server "
        "connects a workspace's hosts on the public internet only (HOSTS_ALLOW_PRIVATE)."
    )


def address_to_dial(host: Host) -> str:
    """The address to connect to for HOST: its own, or, for a workspace's host, the one its name
    resolves to, refused when private (anyone may make a workspace and register a host: the
    server's own network and the cloud's metadata address must not be theirs to reach). The
    checked address is the one dialled, so the name cannot change in between."""
    if host.workspace_id is None or settings.HOSTS_ALLOW_PRIVATE:
        return host.address  # staff's own hosts, or a deployment inside its own network
    try:
        found = [info[4][0] for info in socket.getaddrinfo(host.address, host.port)]
    except (socket.gaierror, UnicodeError):
        raise HostUnreachable(
            f"Cannot reach {host.name}: {host.address} does not resolve."
        ) from None
    if any(platform_web.refused_address(a) for a in found):
        # Not which address: that would tell anyone how the server's own names resolve.
        raise HostUnreachable(f"Cannot reach {host.name}: {private_address_refusal(host.address)}")
    return found[0]


def job_seconds() -> int:
    return settings.Q_CLUSTER["timeout"] - JOB_MARGIN_SECONDS


def job_deadline() -> float:
    """When the SSH work of a job starting now must be done by (time.monotonic())."""
    return time.monotonic() + job_seconds()


class Session:
    """One SSH connection to a host: commands checked for their exit status, files by SFTP;
    each within COMMAND_TIMEOUT, all of them before DEADLINE (the job's, by default)."""

    def __init__(self, host: Host, deadline: float | None = None):
        self.host = host
        self.deadline = job_deadline() if deadline is None else deadline
        self.client = paramiko.SSHClient()
        policy = _Pin()
        address = address_to_dial(host)
        if host.host_key:
            kind, blob = host.host_key.split()[:2]
            name = address if host.port == 22 else f"[{address}]:{host.port}"
            pinned = paramiko.PKey.from_type_string(kind, base64.b64decode(blob))
            self.client.get_host_keys().add(name, kind, pinned)
            self.client.set_missing_host_key_policy(paramiko.RejectPolicy())
        else:
            self.client.set_missing_host_key_policy(policy)
        try:
            self.client.connect(
                address,
                port=host.port,
                username=host.ssh_user,
                pkey=load_key(hosting.ssh_key_of(host)),
                timeout=SSH_TIMEOUT,
                banner_timeout=SSH_TIMEOUT,
                auth_timeout=SSH_TIMEOUT,
                allow_agent=False,
                look_for_keys=False,
            )
        except paramiko.BadHostKeyException as exc:
            raise HostKeyMismatch(
                f"{host.name} showed a different SSH host key ({fingerprint(host_key_line(exc.key))}) "
                f"than the one pinned ({fingerprint(host.host_key)}). Refused: if the host was "
                "rebuilt, an admin clears the pinned key."
            ) from None
        except (paramiko.SSHException, OSError) as exc:
            transport = self.client.get_transport()
            if isinstance(exc, paramiko.AuthenticationException) or (
                transport is not None and transport.remote_version
            ):
                # An SSH server answered: what went wrong is the host owner's to fix.
                reason = str(exc)[:300]
            else:
                # Not whether nothing listens, a firewall drops it or another service answers
                # (nor what that service said): anyone may point a host at any public address.
                reason = "no SSH server answered"
            self.client.close()
            raise HostUnreachable(
                f"Could not connect to {host.name} over SSH ({reason})."
            ) from None
        if policy.seen:
            hosting.pin_host_key(host, policy.seen)

    def _late(self, doing: str) -> HostUnreachable:
        return HostUnreachable(
            f"On {self.host.name}, {doing} did not finish within the job's {job_seconds()} s."
        )

    def _time_left(self) -> float:
        """What one step may take now: COMMAND_TIMEOUT, or less as the deadline nears."""
        left = min(COMMAND_TIMEOUT, self.deadline - time.monotonic())
        if left <= 0:
            raise TimeoutError
        return left

    def run(self, command: str) -> str:
        """COMMAND's output; HostUnreachable when it fails, or is not done (its output all read
        and its exit status in) within COMMAND_TIMEOUT, or by the session's deadline."""
        deadline = min(time.monotonic() + COMMAND_TIMEOUT, self.deadline)
        out, err = bytearray(), bytearray()
        try:
            channel = self.client.get_transport().open_session(timeout=SSH_TIMEOUT)
        except (paramiko.SSHException, OSError) as exc:
            raise HostUnreachable(f"Lost {self.host.name} over SSH: {exc}") from None
        try:
            channel.settimeout(0.5)  # each read, so the deadline is looked at in between
            channel.exec_command(command)
            while True:  # until the end of its output (both streams end together)
                if time.monotonic() > deadline:
                    raise TimeoutError
                while channel.recv_stderr_ready():
                    err = (err + channel.recv_stderr(65536))[-4096:]
                try:
                    chunk = channel.recv(65536)
                except TimeoutError:
                    continue
                if not chunk:
                    break
                if len(out) < MAX_OUTPUT:
                    out += chunk
            if not channel.status_event.wait(max(0.0, deadline - time.monotonic())):
                raise TimeoutError
            status = channel.recv_exit_status()
            while channel.recv_stderr_ready():
                err = (err + channel.recv_stderr(65536))[-4096:]
        except TimeoutError:
            if time.monotonic() >= self.deadline:
                raise self._late(f"`{command[:120]}`") from None
            raise HostUnreachable(
                f"On {self.host.name}, `{command[:120]}` did not finish within {COMMAND_TIMEOUT} s."
            ) from None
        except (paramiko.SSHException, OSError) as exc:
            raise HostUnreachable(f"Lost {self.host.name} over SSH: {exc}") from None
        finally:
            channel.close()
        if status != 0:
            raise HostUnreachable(
                f"On {self.host.name}, `{command[:120]}` failed ({status}): "
                f"{err.decode(errors='replace').strip()[-500:]}"
            )
        return out.decode(errors="replace")

    def write(self, path: str, data: bytes, mode: int = 0o600) -> None:
        """A file on the host, by SFTP; each SFTP request answered within COMMAND_TIMEOUT, and
        all of it written by the session's deadline."""
        try:
            channel = self.client.get_transport().open_session(timeout=SSH_TIMEOUT)
        except (paramiko.SSHException, OSError) as exc:
            raise HostUnreachable(f"Lost {self.host.name} over SSH: {exc}") from None
        try:
            channel.settimeout(self._time_left())
            channel.invoke_subsystem("sftp")
            sftp = paramiko.SFTPClient(channel)
            with sftp.open(path, "wb") as remote:
                # A request at a time, each given what is left: a host answering every one in
                # time, but slowly, must not stretch the whole upload past the deadline.
                for start in range(0, len(data), paramiko.SFTPFile.MAX_REQUEST_SIZE):
                    channel.settimeout(self._time_left())
                    remote.write(data[start : start + paramiko.SFTPFile.MAX_REQUEST_SIZE])
                channel.settimeout(self._time_left())
            channel.settimeout(self._time_left())
            sftp.chmod(path, mode)
        except (paramiko.SSHException, OSError, EOFError) as exc:
            if time.monotonic() >= self.deadline:
                raise self._late(f"writing {path}") from None
            raise HostUnreachable(
                f"Cannot write {path} on {self.host.name}: {str(exc) or 'timed out'}"
            ) from None
        finally:
            channel.close()

    def close(self) -> None:
        self.client.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


# --- one job at a time per host ------------------------------------------------------------

# Compare-and-delete: a lock is released only by the job holding it (not after it expired and
# another took it).
RELEASE = "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end"


def _queued_key(kind: str, host_id) -> str:
    return f"{settings.REDIS_PREFIX}:hosts:queued:{kind}:{host_id}"


# How long a claim holds its host until the transaction that made it commits: one that rolls
# back queues nothing, and must not leave the host busy for the whole retry period.
UNCOMMITTED_CLAIM_SECONDS = 30


def _claim_queue(kind: str, host: Host) -> None:
    """At most one job of KIND (provision, restart) queued or running per host: a person asking
    again meanwhile is told so (HostBusy), not queued another. Until its job ends, or at most
    the broker's retry period (a job killed on the way never ends); until commit, briefly."""
    if not redis().set(_queued_key(kind, host.pk), 1, nx=True, ex=UNCOMMITTED_CLAIM_SECONDS):
        raise HostBusy()


def _enqueue_claimed(kind: str, host_id, job: str, *args) -> None:
    """After commit: the claim of KIND on the host held for the retry period, and JOB queued."""

    def queue():
        redis().set(_queued_key(kind, host_id), 1, ex=settings.Q_CLUSTER["retry"])
        enqueue(job, *args)

    transaction.on_commit(queue)


def _queue_done(kind: str, host_id) -> None:
    redis().delete(_queued_key(kind, host_id))


@contextmanager
def host_lock(host: Host, deadline: float | None = None):
    """Held while a job talks to HOST over SSH (provisioning, setting an agent up or removing
    it): two never run at once for one host, or each would issue tokens that revoke the other's
    and the last file written could hold a revoked one. In Redis (session-level advisory locks
    do not survive a transaction pooler), expiring with the job timeout: a job killed by it
    holds the lock no longer. Waited for until DEADLINE (time.monotonic(); the job's by
    default), then HostLocked: a job stuck behind another is not killed with nothing said. HOST
    is read again once it is held."""
    deadline = job_deadline() if deadline is None else deadline
    key, mine = f"{settings.REDIS_PREFIX}:hosts:lock:{host.pk}", uuid.uuid4().hex
    while not redis().set(key, mine, nx=True, ex=settings.Q_CLUSTER["timeout"]):
        left = deadline - time.monotonic()
        if left <= 0:
            raise HostLocked(
                f"Another job on {host.name} (provisioning, or setting an agent up or removing "
                "it) held the host until this job's time ran out, so this one did nothing: "
                "run it again once that one is done."
            )
        time.sleep(min(0.2, left))
    try:
        host.refresh_from_db()
        yield host
    finally:
        redis().eval(RELEASE, 1, key, mine)


@contextmanager
def unless_gone(host_id, job: str):
    """JOB on the host HOST_ID, ended quietly (logged at info) if the host is deleted meanwhile:
    whatever failed then (its row, its tokens gone under it) is nothing to fix."""
    try:
        yield
    except Exception:
        if Host.objects.filter(pk=host_id).exists():
            raise
        log.info("%s of host %s ended: the host was deleted meanwhile", job, host_id)


@cache
def bridge_wheel() -> Path:
    """The bridge package as a wheel: BRIDGE_WHEEL, or built once from this checkout."""
    if settings.BRIDGE_WHEEL:
        return Path(settings.BRIDGE_WHEEL)
    out = Path(settings.VAR_DIR) / "wheels"
    source = Path(settings.BASE_DIR) / "bridge"
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(out), str(source)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    return max(out.glob("agntchat_bridge-*.whl"), key=lambda p: p.stat().st_mtime)


def layout(host: Host) -> dict:
    root = host.root.rstrip("/")
    return {
        "root": root,
        "config": f"{root}/host.json",
        "token": f"{root}/supervisor.token",
        "agents": f"{root}/agents",
        "pid": f"{root}/host.pid",
        "log": f"{root}/host.log",
        "cli": f"{root}/cli",
    }


# On a multi-tenant host the agents' system users share the CLIs' one login through this group.
AGENTS_GROUP = "agntchat-agents"


def system_user(agent_id) -> str:
    """The system user of an agent on a multi-tenant host."""
    return f"agt-{str(agent_id).replace('-', '')[:12]}"


def _python(host: Host) -> str:
    """The Python the bridges run on: HOST.python when it is a path (an environment prepared
    there), else a venv under the host's root, made with HOST.python (a command, "python3")."""
    if host.python.startswith("/"):
        return host.python
    return f"{host.root.rstrip('/')}/venv/bin/python"


def provision_host(host: Host) -> Host:
    """Install or update the bridge package and the supervisor on HOST, (re)start the
    supervisor with a fresh token, and set up every agent placed on it. Records the outcome."""
    deadline = job_deadline()  # the lock waited for counts: it is the job's time
    host_id = host.pk
    try:
        with unless_gone(host_id, "Provisioning"), host_lock(host, deadline):
            return _provision_host(host, deadline)
    finally:
        _queue_done("provision", host_id)


def request_provision(host: Host) -> None:
    """Provision HOST on the worker, unless its provisioning is queued or running (HostBusy)."""
    _claim_queue("provision", host)
    _enqueue_claimed("provision", host.pk, "work.jobs.provision_host", str(host.pk))


def _provision_host(host: Host, deadline: float) -> Host:
    paths = layout(host)
    q = shlex.quote
    python = _python(host)
    try:
        with Session(host, deadline) as ssh:
            ssh.run(
                f"mkdir -p {q(paths['agents'])} && chmod 755 {q(paths['root'])} {q(paths['agents'])}"
            )
            if host.python.startswith("/"):
                ssh.run(f"test -x {q(python)} || {{ echo no Python at {q(python)} >&2; exit 1; }}")
            else:
                venv = str(Path(python).parent.parent)
                maker = q(host.python or "python3")
                ssh.run(f"test -x {q(python)} || {maker} -m venv {q(venv)}")
            wheel = bridge_wheel()
            remote_wheel = f"{paths['root']}/{wheel.name}"
            ssh.write(remote_wheel, wheel.read_bytes(), 0o644)
            ssh.run(f"{q(python)} -m pip install -q --no-input --upgrade {q(remote_wheel)}")
            config = {
                "url": settings.AGNTCHAT_URL,
                "tokenFile": paths["token"],
                "agentsDir": paths["agents"],
                "python": python,
                "stateFile": f"{paths['root']}/state.json",
                "cliHome": paths["cli"],
            }
            ssh.write(paths["config"], json.dumps(config, indent=2).encode(), 0o600)
            ssh.write(paths["token"], hosting.issue_host_token(host).encode(), 0o600)
            cli = q(paths["cli"])
            ssh.run(f"mkdir -p {cli}/claude {cli}/codex")
            if host.multi_tenant:
                # Group-owned and setgid: what one agent's CLI writes there, the others read.
                ssh.run(
                    f"getent group {AGENTS_GROUP} >/dev/null || groupadd --system {AGENTS_GROUP}; "
                    f"chgrp -R {AGENTS_GROUP} {cli} && chmod -R u=rwX,g=rwXs,o= {cli}"
                )
            for agent in Agent.objects.filter(host=host):
                _set_up_agent(ssh, host, agent)
            # The supervisor restarts on the new package and token; the bridges it started
            # are stopped with it and started again on their next wake-up.
            ssh.run(
                f"if test -f {q(paths['pid'])}; then kill $(cat {q(paths['pid'])}) 2>/dev/null; "
                f"for i in $(seq 50); do kill -0 $(cat {q(paths['pid'])}) 2>/dev/null || break; sleep 0.1; done; fi; "
                f"nohup setsid {q(python)} -m agntchat_bridge.host run --config {q(paths['config'])} "
                f">>{q(paths['log'])} 2>&1 </dev/null & echo $! > {q(paths['pid'])}"
            )
    except HostUnreachable as exc:
        hosting.record_host_status(host, Host.Status.UNREACHABLE, exc.message)
        raise
    hosting.record_host_status(host, Host.Status.READY)
    return host


def _set_up_agent(ssh: Session, host: Host, agent: Agent) -> bool:
    """AGENT's private directory on HOST with its placement token and entry for the supervisor;
    on a multi-tenant host owned by (and readable only by) the agent's own system user. Nothing
    is written (False) for an agent no longer placed there: its token is issued first, refused
    then. One moved off or deleted after that has its directory forgotten by the job its move
    queued, which waits on the host's lock held here."""
    q = shlex.quote
    home = f"{layout(host)['agents']}/{agent.id}"
    user = system_user(agent.id) if host.multi_tenant else None
    try:
        token = hosting.issue_host_token(host, agent)
    except AgentRule:
        log.info("agent %s left host %s before its set-up there: skipped", agent.id, host.pk)
        return False
    ssh.run(f"mkdir -p {q(home)}/work && chmod 700 {q(home)}")
    if user:
        ssh.run(
            f"id -u {user} >/dev/null 2>&1 || useradd --system --home-dir {q(home)} "
            f"--shell /usr/sbin/nologin --groups {AGENTS_GROUP} {user}"
        )
    ssh.write(f"{home}/token", token.encode(), 0o600)
    entry = {
        "id": str(agent.id),
        "name": agent.name,
        "user": user,
        "workdir": f"{home}/work",
        "tokenFile": f"{home}/token",
    }
    ssh.write(f"{home}/agent.json", json.dumps(entry).encode(), 0o644)
    if user:
        ssh.run(f"chown -R {user}: {q(home)} && chown root: {q(home)}/agent.json")
    return True


def provision_agent(agent: Agent) -> None:
    """Set AGENT up on its host and tell the supervisor to read its agents again."""
    host = agent.host
    if host is None:
        return
    deadline = job_deadline()
    with unless_gone(host.pk, f"Setting agent {agent.id} up"), host_lock(host, deadline):
        agent.refresh_from_db(fields=["host", "runtime"])
        if agent.host_id != host.pk:
            return  # moved off meanwhile: its placement token is not issued again
        try:
            with Session(host, deadline) as ssh:
                _set_up_agent(ssh, host, agent)
        except HostUnreachable as exc:
            hosting.record_host_status(host, Host.Status.UNREACHABLE, exc.message)
            raise
        publish(
            hosting.host_topic(host.pk),
            {"type": "host.bridge", "action": "reload", "agent": str(agent.id)},
        )


def forget_agent(host: Host, agent_id) -> None:
    """Remove a former agent's directory (and system user) from HOST, unless it is placed there
    again (seen under the host's lock: its set-up may have run just before)."""
    q = shlex.quote
    deadline = job_deadline()
    with unless_gone(host.pk, f"Forgetting agent {agent_id}"), host_lock(host, deadline):
        if Agent.objects.filter(pk=agent_id, host_id=host.pk).exists():
            return
        with Session(host, deadline) as ssh:
            home = f"{layout(host)['agents']}/{agent_id}"
            ssh.run(f"rm -rf {q(home)}")
            if host.multi_tenant:
                ssh.run(f"userdel {system_user(agent_id)} 2>/dev/null || true")


def set_runtime(agent: Agent, runtime: str, host: Host | None = None) -> Agent:
    """Where AGENT runs: local clears the placement and stops its bridge on the host; hosted
    places it (on HOST or wherever there is room) and sets it up there after commit."""
    if runtime == Agent.Runtime.LOCAL:
        former = agent.host_id
        agent = hosting.make_agent_local(agent)
        if former is not None:
            forget_after_commit(agent, former)
        return agent
    agent = hosting.place_agent(agent, host)
    transaction.on_commit(lambda: enqueue("work.jobs.provision_hosted_agent", str(agent.id)))
    return agent


def forget_after_commit(agent: Agent, host_id) -> None:
    """AGENT's directory and system user on the host HOST_ID go, on the worker."""
    # The ids now: an agent deleted in the same transaction has no id by commit (None).
    args = (str(host_id), str(agent.id))
    transaction.on_commit(lambda: enqueue("work.jobs.forget_hosted_agent", *args))


def agent_evicted(sender, agent: Agent, host_id, **kwargs) -> None:
    """agents.signals.agent_evicted: the host forgets it, as when its owner makes it local."""
    forget_after_commit(agent, host_id)


def enqueue(job: str, *args) -> None:
    async_task(job, *args)


# --- rolling restart -------------------------------------------------------------------------


def supervisor_id(host_id) -> str:
    """A host's supervisor in the presence registry, beside the agents."""
    return f"host-{host_id}"


def supervisor_online(host_id) -> bool:
    return presence.is_online(supervisor_id(host_id))


# How long one restart job waits on bridges, below the job timeout (Q_CLUSTER): a host with
# more agents than that allows is restarted over several jobs, each going on where the last
# stopped (killed by the timeout, a job would leave its report "running" for ever).
RESTART_JOB_SECONDS = COMMAND_TIMEOUT


def restart_host_bridges(
    restart: HostRestart, *, timeout: float | None = None, poll: float = 0.2
) -> HostRestart:
    """Restart HOST's bridges one at a time, each waited for until it is present again (a new
    connection) before the next: they share one CLI login session (AGT-6). A bridge not back
    within TIMEOUT, or the host's supervisor gone, stops the restart; the report says what
    became of each. Past RESTART_JOB_SECONDS, the rest is left to another job (queued, the host
    kept busy); a restart already ended is left as it is."""
    going_on = False
    try:
        if restart.status != HostRestart.Status.RUNNING:
            return restart
        with unless_gone(restart.host_id, "A rolling restart"):
            restart = _restart_host_bridges(restart, timeout, poll)
            going_on = restart.status == HostRestart.Status.RUNNING
        return restart
    finally:
        if not going_on:
            _queue_done("restart", restart.host_id)


def _restart_host_bridges(restart: HostRestart, timeout: float | None, poll: float):
    timeout = settings.HOST_RESTART_TIMEOUT_SECONDS if timeout is None else timeout
    timeout = min(timeout, RESTART_JOB_SECONDS)  # each wait fits in a job
    host = restart.host
    agents = list(Agent.objects.filter(host=host).order_by("name", "id"))
    # Those restarted by an earlier job of this restart are not restarted again.
    report = [r for r in restart.report if r.get("outcome") == "restarted"]
    done, failed = {r["agent"] for r in report}, False
    job_started = time.monotonic()
    for agent in agents:
        if str(agent.id) in done:
            continue
        if failed:
            report.append({"agent": str(agent.id), "name": agent.name, "outcome": "not reached"})
            continue
        waited = len(report) > len(done)  # on one bridge at least, in this job
        if waited and time.monotonic() - job_started + timeout > RESTART_JOB_SECONDS:
            # No time left in this job to wait on another bridge: the next job goes on.
            HostRestart.objects.filter(pk=restart.pk).update(report=report)
            restart.report = report
            _enqueue_claimed("restart", host.pk, "work.jobs.restart_host", str(restart.pk))
            return restart
        started = time.monotonic()
        before = set(presence.connections(agent.id))
        outcome = "timed out"
        if not supervisor_online(host.pk):
            outcome = "host unreachable"
        else:
            publish(
                hosting.host_topic(host.pk),
                {"type": "host.bridge", "action": "restart", "agent": str(agent.id)},
            )
            while time.monotonic() - started < timeout:
                now = set(presence.connections(agent.id))
                if now - before:
                    outcome = "restarted"
                    break
                if not supervisor_online(host.pk):
                    outcome = "host unreachable"
                    break
                time.sleep(poll)
        failed = outcome != "restarted"
        report.append(
            {
                "agent": str(agent.id),
                "name": agent.name,
                "outcome": outcome,
                "seconds": round(time.monotonic() - started, 1),
            }
        )
        HostRestart.objects.filter(pk=restart.pk).update(report=report)
    restart.report = report
    restart.status = HostRestart.Status.FAILED if failed else HostRestart.Status.DONE
    restart.finished_at = timezone.now()
    restart.save(update_fields=["report", "status", "finished_at", "updated_at"])
    return restart


def request_restart(host: Host, by=None) -> HostRestart:
    """Record a rolling restart of HOST and run it on the worker, unless one is queued or running
    (HostBusy)."""
    _claim_queue("restart", host)
    restart = HostRestart.objects.create(host=host, requested_by=by)
    _enqueue_claimed("restart", host.pk, "work.jobs.restart_host", str(restart.pk))
    return restart
