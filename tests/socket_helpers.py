"""Helpers for socket tests: in-process ASGI communicators and a real daphne server."""

import asyncio
import contextlib
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import uuid

from channels.layers import get_channel_layer
from channels.testing import WebsocketCommunicator

from agntchat.asgi import application
from tests.waiting import wait_until


class AgentCommunicator(WebsocketCommunicator):
    """An agent socket's communicator, which remembers its agent from the hello frame (for
    change_heard)."""

    agent_id: str | None = None

    async def receive_json_from(self, timeout=1):
        frame = await super().receive_json_from(timeout)
        if isinstance(frame, dict) and frame.get("type") == "hello":
            self.agent_id = frame["agentId"]
        return frame


def agent_communicator(token: str, query: str = "") -> AgentCommunicator:
    path = "/ws/agent/" + (f"?{query}" if query else "")
    return AgentCommunicator(
        application, path, headers=[(b"authorization", f"Bearer {token}".encode())]
    )


async def lose_group_events(group: str) -> None:
    """Lose the events of GROUP for real, as a dropped message would: this process's channel
    layer stops hearing the group in Redis, though its sockets still count themselves in it."""
    layer = get_channel_layer()._get_layer()
    channel = layer._get_group_channel_name(group)
    await layer._get_shard(channel).unsubscribe(channel)


async def next_frame(comm, timeout=3) -> dict:
    return await comm.receive_json_from(timeout=timeout)


async def frames_until(comm, predicate, timeout=5) -> list[dict]:
    """Read frames until one satisfies PREDICATE; return all read."""
    seen = []
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        remaining = deadline - asyncio.get_running_loop().time()
        if remaining <= 0:
            raise AssertionError(f"no matching frame; saw {seen}")
        frame = await comm.receive_json_from(timeout=remaining)
        seen.append(frame)
        if predicate(frame):
            return seen


async def change_heard(comm) -> None:
    """After a change to the agent: wait until the socket has handled its agent.changed event,
    so the next item is claimed with the change. A frame answered proves nothing here: frames
    and events come in apart, and the event (even one sent: events_sent) may still be on its
    way. So a marker wake-up is published after it, on the same topic: the socket handles its
    events one at a time, in order, and notes such a wake-up (HANDLED_WAKES) before claiming.
    The permission lane: it always has room, so the wake-up is noted."""
    from agntchat.core.events import publisher, work_available
    from tests.waiting import until
    from work.consumers import HANDLED_WAKES

    marker = work_available(comm.agent_id, "permission")
    publisher.submit([f"agent.{comm.agent_id}"], marker)  # queued after the change's event
    await until(lambda: marker["wake"] in HANDLED_WAKES, what="the agent.changed event handled")


async def settled(comm, ack: str | None = None) -> list[dict]:
    """Wait until the agent socket has handled what it had received: frames and events are
    handled one at a time, in order, so once a frame sent now is answered, a claim started by
    an earlier wake-up is over (a claim under way when a change lands rightly carries what it
    read). ACK: an item just acked, whose write (a trip of its own, beside the frames, that may
    claim a refill after it, with what the socket knows by then) is waited for first. The frames
    read meanwhile."""
    if ack is not None:
        from conversations.models import Delivery
        from tests.waiting import until

        written = Delivery.objects.filter(pk=ack, acked_at__isnull=False)
        await until(written.aexists, what="the ack written")
    await comm.send_json_to({"type": "personality.get"})
    return await frames_until(comm, lambda f: f["type"] == "personality")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def database_url() -> str:
    """The test database as a URL, for server subprocesses."""
    from django.db import connection

    s = connection.settings_dict
    host = s["HOST"] or ""
    if host.startswith("/"):
        from urllib.parse import quote

        host = quote(host, safe="")
    port = f":{s['PORT']}" if s["PORT"] else ""
    return f"postgres://{s['USER']}@{host}{port}/{s['NAME']}"


class LoggedProcess(subprocess.Popen):
    """A process whose output (stdout and stderr) goes to a file, not a pipe: a pipe nobody reads
    fills up (64 KB) and then blocks the process at its next write, so a server that logs every
    message hangs in the middle of a test. ``output()`` reads what it wrote so far;
    ``communicate()`` waits for it to end and returns (all of it, None), as a pipe would.
    One still running when this interpreter exits (a run interrupted past a fixture's
    teardown) is killed then: a bridge left behind would go on claiming work."""

    def __init__(self, args, *, stderr_only: bool = False, **kwargs):
        import atexit

        fd, self.log_path = tempfile.mkstemp(prefix="agntchat-test-", suffix=".log")
        os.close(fd)
        # Appending: the child's writes never land where a read of ours has moved an offset.
        with open(self.log_path, "ab") as sink:
            stdout = subprocess.DEVNULL if stderr_only else sink
            super().__init__(args, stdout=stdout, stderr=sink, **kwargs)
        atexit.register(self.kill_if_running)

    def kill_if_running(self) -> None:
        if self.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                self.kill()

    def output(self) -> str:
        with open(self.log_path, "rb") as log:
            return log.read().decode(errors="replace")

    def communicate(self, input=None, timeout=None):
        self.wait(timeout)
        output = self.output()
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.log_path)
        return output, None


class Daphne:
    """A real daphne process serving agntchat on the test database.

    It never outlives the test run. It runs in a session of its own, and ``stop`` ends its whole
    process group; a start that fails or is interrupted stops it; whatever a test or a fixture
    left running (an interrupted run skips teardowns) is stopped when this interpreter exits;
    and if this process dies without that (SIGKILL, SIGTERM), the kernel sends it SIGTERM: its
    parent-death signal, set by util-linux's setpriv where there is one. That signal comes
    when the thread that started the server ends, so start it from one that outlives it (the
    main thread, as fixtures do)."""

    def __init__(self, extra_env=None, port=None):
        import atexit
        import shutil

        self.port = port or free_port()
        env = dict(os.environ, DATABASE_URL=database_url(), DEBUG="1", **(extra_env or {}))
        setpriv = shutil.which("setpriv")
        dies_with_us = [setpriv, "--pdeathsig", "TERM", "--"] if setpriv else []
        self.proc = LoggedProcess(
            [
                *dies_with_us,
                sys.executable,
                "-m",
                "daphne",
                "-b",
                "127.0.0.1",
                "-p",
                str(self.port),
                # As the Procfile starts it: frames past the 1 MiB limit get an error frame.
                "--websocket-max-message-size",
                str(4 * 1024 * 1024),
                "--websocket-max-frame-size",
                str(4 * 1024 * 1024),
                # As the Procfile: a burst of connects queues longer than daphne's CLI 5 s.
                "--websocket_connect_timeout",
                "20",
                "agntchat.asgi:application",
            ],
            env=env,
            stderr_only=True,  # its logs; daphne's own access lines go to stdout
            start_new_session=True,  # a process group of its own, for stop to end
        )
        atexit.register(self.stop)
        try:
            wait_until(self.listening, timeout=30, what=f"daphne listening on {self.port}")
        except BaseException:  # not listening, or the run interrupted (KeyboardInterrupt)
            self.stop()
            raise
        self.url = f"http://127.0.0.1:{self.port}"
        self.ws_url = f"ws://127.0.0.1:{self.port}"

    def listening(self) -> bool:
        if self.proc.poll() is not None:
            raise RuntimeError("daphne exited: " + self.proc.output()[-2000:])
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=0.2):
                return True
        except OSError:
            return False

    def stop(self):
        """End the server and its process group (SIGTERM, then SIGKILL after 10 s); once
        stopped, or after a test killed it, there is nothing to do."""
        import atexit
        import signal

        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        atexit.unregister(self.stop)  # only once it is gone: an interrupted stop is redone


def dumps(frame: dict) -> str:
    return json.dumps(frame)


async def drain(comm, quiet=0.3) -> list[dict]:
    """Every frame that arrives until the socket has been quiet for QUIET seconds.

    (A timed-out receive on a channels communicator cancels the application, so we ask
    receive_nothing first and only then read.)"""
    frames = []
    while not await comm.receive_nothing(timeout=quiet):
        frames.append(await comm.receive_json_from())
    return frames


def live_communicator(client) -> WebsocketCommunicator:
    """A browser's /ws/live/ socket under CLIENT's session (a signed-in test client), not yet
    connected: for a test that expects it refused."""
    cookie = f"sessionid={client.cookies['sessionid'].value}".encode()
    return WebsocketCommunicator(
        application,
        "/ws/live/",
        headers=[(b"cookie", cookie), (b"origin", b"http://127.0.0.1"), (b"host", b"127.0.0.1")],
    )


async def live_socket_for(user, client=None) -> WebsocketCommunicator:
    """A browser's /ws/live/ socket, logged in as USER the way a browser is (session cookie);
    CLIENT: a test client of USER's already, whose session the socket is to use."""
    from asgiref.sync import sync_to_async
    from django.test import Client

    if client is None:
        client = Client()
        await sync_to_async(client.force_login)(user)
    comm = live_communicator(client)
    assert (await comm.connect())[0]
    assert (await next_frame(comm))["type"] == "hello"
    return comm


class TopicInbox:
    """Live topics heard from sync test code: a Redis subscription of its own to the channel
    layer's groups (a pub/sub layer's channels live in one event loop, and sync code has none)."""

    def __init__(self, *topics: str):
        import redis
        from channels.layers import get_channel_layer
        from django.conf import settings

        from agntchat.core.events import group_name

        self.layer = get_channel_layer()
        prefix = settings.CHANNEL_LAYERS["default"]["CONFIG"]["prefix"]
        self.pubsub = redis.Redis.from_url(settings.REDIS_URL).pubsub()
        self.pubsub.subscribe(*(f"{prefix}__group__{group_name(topic)}" for topic in topics))
        for _ in topics:  # subscribed for sure before anything is published
            while self.pubsub.get_message(timeout=3) is None:
                pass

    def next(self, timeout: float = 3) -> dict:
        deadline = time.monotonic() + timeout
        while (left := deadline - time.monotonic()) > 0:
            message = self.pubsub.get_message(timeout=left)
            if message is not None and message["type"] == "message":
                return self.layer.deserialize(message["data"])
        raise TimeoutError

    def all(self, quiet: float = 1) -> list[dict]:
        """Every event until none has come for QUIET seconds."""
        received = []
        while True:
            try:
                received.append(self.next(timeout=quiet))
            except TimeoutError:
                return received


def events_sent() -> None:
    """Wait until every event this process queued so far has gone out (fixtures' included): the
    publisher thread sends in order, so once a marker queued now is heard, all before it were
    sent, and a socket opened after hears none of them."""
    from agntchat.core.events import publisher

    topic = f"test.flush.{uuid.uuid4().hex}"
    inbox = TopicInbox(topic)
    publisher.submit([topic], {"type": "flush"})
    assert inbox.next(timeout=30)["type"] == "flush"
    inbox.pubsub.close()


def start_bridge(server, agent, tmp_path, options="{}", **extra_env) -> subprocess.Popen:
    """A real bridge process for AGENT against SERVER, with a key of its own (the scripted
    backend's table in OPTIONS, JSON)."""
    from agents import actions as agent_actions

    _, key = agent_actions.create_agent_key(agent)
    env = dict(
        os.environ,
        AGNTCHAT_URL=server.url,
        AGNTCHAT_AGENT_KEY=key,
        AGNTCHAT_WORKDIR=str(tmp_path),
        AGNTCHAT_BACKEND_OPTIONS=options,
        **extra_env,
    )
    return LoggedProcess([sys.executable, "-m", "agntchat_bridge"], env=env)


def agent_replies(conversation, agent) -> list:
    from conversations.models import Message

    return list(
        Message.objects.filter(conversation=conversation, author_agent=agent).order_by("created_at")
    )
