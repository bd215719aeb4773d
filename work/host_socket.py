"""The host socket: where a host's supervisor (``agntchat-host``) hears what to start (GW-4).

A shared host's supervisor authenticates with its supervisor token (``aht_…``) and serves the
agents placed on that host; a person's laptop supervisor authenticates with the person's API
token and serves their local agents (AGT-3's desktop side). Either way the socket follows the
same topics as those agents' own connections: when work arrives for an agent with no live
connection, a ``wake`` frame goes to the supervisor, which starts the agent's bridge; the work
is then claimed the normal way. Stops (the agent moved off the host) and restarts (a rolling
restart) come through the host's topic. Frames are in docs/protocol.md §12.
"""

import asyncio
import time
from types import SimpleNamespace

from channels.db import database_sync_to_async
from django.conf import settings

from agents import hosting
from agents.auth import bearer_secret, person_for_token
from agents.models import Agent
from agntchat.core import presence, throttle
from agntchat.core.events import group_name, wire
from agntchat.core.exceptions import wait_words
from agntchat.core.sockets import JsonSocket, header
from work import frames, gateway
from work.hosting import supervisor_id
from workspaces.login import api_token_topic, client_address

# A wake-up for an agent already woken this recently is not sent again (its bridge is starting).
WAKE_AGAIN_SECONDS = 10
# How long the agents changed are gathered before they are read again: the events of one bulk
# move (a host's agents moved off together) arrive within it, and are read in one query.
CHANGES_SETTLE_SECONDS = 0.1
# A supervisor token of a deleted host: the supervisor is told so, and exits (4410, Gone).
GONE = "gone"
HOST_GONE = "This host was deleted from agntchat: its supervisor stops."


def _principal(secret: str):
    """(host, None, token topic) for a supervisor token, (None, person, token topic) for a
    person's API token: the topic where the socket hears that token end. GONE for a supervisor
    token of a deleted host."""
    if secret.startswith("aht_"):
        token = hosting.supervisor_token(secret)
        if token is not None:
            return token.host, None, hosting.host_token_topic(token.pk)
        if hosting.host_gone(secret):
            return GONE
    if secret.startswith("apt_"):
        person = person_for_token(secret)
        if person is not None:
            return None, person, api_token_topic(person.token_id)
    return None


def _failures() -> throttle.Rule:
    return throttle.failure_rule("host_socket:address", settings.HOST_SOCKET_FAILURES_PER_ADDRESS)


def _signed_in(secret: str, address: str):
    """(0, _principal(secret)), the attempt counted for ADDRESS, a failure if it is None; or,
    while ADDRESS is locked for its failures, (seconds to wait, None) and SECRET not looked up:
    tokens cannot be tried for ever, each a database lookup.

    A deleted host's supervisor token is answered GONE first, and uncounted: else its supervisor,
    retrying, locks its address out (other hosts and laptops behind it) and, once locked, hears
    "try again later" for ever instead of stopping. This opens no way to probe tokens: only a
    dead token's keyed hash (HMAC with SECRET_KEY) answers so, and it opens nothing; any other
    secret, a live token too, goes the counted way. It costs one Redis look-up, as the lock's."""
    if secret.startswith("aht_") and hosting.host_gone(secret):
        return 0, GONE
    checks = [(_failures(), address)]
    wait = throttle.begin_attempt(checks)
    if wait:
        return wait, None
    principal = _principal(secret)
    throttle.end_attempt(checks, failed=principal is None)
    return 0, principal


def _served(host, person):
    if host is not None:
        return Agent.objects.filter(host=host)
    return Agent.objects.filter(owner=person, runtime=Agent.Runtime.LOCAL)


def _served_agents(host, person) -> list[Agent]:
    return list(_served(host, person).order_by("name"))


def _served_among(host, person, agent_ids) -> dict[str, Agent]:
    """Those of AGENT_IDS served now, by id."""
    return {str(a.id): a for a in _served(host, person).filter(pk__in=agent_ids)}


class HostSocket(JsonSocket):
    socket_kind = "host"
    check_in_frame = "heartbeat"  # what keeps its place under the cap (presence.beat)
    handlers = {"heartbeat": ("on_heartbeat", frames.EmptyFrame)}
    # Each heartbeat is a Redis round trip: a supervisor sends one every few seconds at most.
    frame_rate = ("HOST_FRAMES_PER_MINUTE", "HOST_FRAMES_BURST")

    async def connect(self):
        secret = bearer_secret(header(self.scope, b"authorization")) or ""
        # Counted as sign-ins count it (workspaces/login.py takes a request: its address only).
        remote = (self.scope.get("client") or ("", 0))[0]
        address = client_address(SimpleNamespace(META={"REMOTE_ADDR": remote}))
        wait, principal = await database_sync_to_async(_signed_in)(secret, address)
        if wait:
            await self.refuse(
                f"Too many invalid tokens from this address: try again in {wait_words(wait)}.",
                "rate_limited",
                4429,
            )
            return
        if principal == GONE:
            await self.refuse(HOST_GONE, "host_gone", 4410)
            return
        if principal is None:
            await self.refuse(
                "A host supervisor token (aht_…) or a person's API token (apt_…) is required."
            )
            return
        self.host, self.person, token_topic = principal
        presence_id = supervisor_id(self.host.pk) if self.host else f"laptop-{self.person.pk}"
        self.connection_id = f"{time.time_ns():x}"
        cap = settings.AGENT_MAX_CONNECTIONS  # a supervisor needs one; a few while it restarts
        self.checked_in_at = time.monotonic()  # before its place's TTL starts: closed in time
        if not await database_sync_to_async(presence.join)(presence_id, self.connection_id, cap):
            await self.refuse(
                f"This host or laptop has {cap} supervisor connections open already, the most "
                "allowed (AGENT_MAX_CONNECTIONS); close one first.",
                "too_many_connections",
                4429,
            )
            return
        self.presence_id = presence_id
        self.woken: dict[str, float] = {}
        self.agent_groups: set[str] = set()
        self.changed: set[str] = set()  # agents to read again (moved on or off, set up again)
        self.reading = None  # the task reading them
        self.host_group = group_name(
            hosting.host_topic(self.host.pk) if self.host else hosting.laptop_topic(self.person.pk)
        )
        # A supervisor lasts as long as the token it signed in with (a host's supervisor token,
        # reissued at each provisioning and revoked with its host; a laptop's API token).
        self.token_group = group_name(token_topic)
        await self.accept()
        self.watch_check_ins()
        await self.channel_layer.group_add(self.host_group, self.channel_name)
        await self.channel_layer.group_add(self.token_group, self.channel_name)
        await self.follow_agents(hello=True)

    async def follow_agents(self, hello: bool = False) -> None:
        """Follow the topics of the agents served now; wake those with work and no bridge."""
        agents = await database_sync_to_async(_served_agents)(self.host, self.person)
        self.agents = {str(a.id): a for a in agents}
        await self.served_changed(list(self.agents), "hello" if hello else "agents")

    async def served_changed(self, check: list[str], frame: str = "agents") -> None:
        """Follow the topics of the agents in self.agents (and no other), tell the supervisor
        which they are, and wake those of CHECK with work and no bridge."""
        groups = {group_name(f"agent.{agent_id}") for agent_id in self.agents}
        for group in groups - self.agent_groups:
            await self.channel_layer.group_add(group, self.channel_name)
        for group in self.agent_groups - groups:
            await self.channel_layer.group_discard(group, self.channel_name)
        self.agent_groups = groups
        agents = sorted(self.agents.values(), key=lambda a: (a.name, str(a.id)))
        await self.send_json(
            wire(
                {
                    "type": frame,
                    "host_id": self.host.pk if self.host else None,
                    "agents": [{"id": a.id, "name": a.name} for a in agents],
                }
            )
        )
        if check:
            waiting = await database_sync_to_async(gateway.agents_with_work)(check)
            for agent_id in waiting:
                await self.wake(str(agent_id))

    async def follow_changed(self) -> None:
        """Read again the agents changed since the last look, and only those: a bulk move of N
        agents is a few reads of a few rows, not N reads of all those served."""
        await asyncio.sleep(CHANGES_SETTLE_SECONDS)
        while self.changed:
            changed, self.changed = self.changed, set()
            now = await database_sync_to_async(_served_among)(self.host, self.person, changed)
            for agent_id in changed:
                self.agents.pop(agent_id, None)
            self.agents.update(now)
            # Those still served woken if their work waits: one set up again may have had a
            # wake-up before it could be started.
            await self.served_changed(list(now))

    async def wake(self, agent_id: str) -> None:
        if agent_id not in self.agents:
            return
        now = time.monotonic()
        if now - self.woken.get(agent_id, -WAKE_AGAIN_SECONDS) < WAKE_AGAIN_SECONDS:
            return
        if await database_sync_to_async(presence.is_online)(agent_id):
            return  # a bridge is connected: it claims the work itself
        self.woken[agent_id] = now
        await self.send_json({"type": "wake", "agent": agent_id})

    async def release(self):
        if getattr(self, "presence_id", None) is None:
            return
        if self.reading is not None:
            self.reading.cancel()
        for group in (self.host_group, *self.agent_groups, self.token_group):
            if group:
                await self.channel_layer.group_discard(group, self.channel_name)
        self.agent_groups = set()
        await database_sync_to_async(presence.leave)(self.presence_id, self.connection_id)

    async def on_heartbeat(self, data):
        beat_at = time.monotonic()  # no later than the refresh
        await database_sync_to_async(presence.beat)(self.presence_id, self.connection_id)
        self.checked_in_at = beat_at
        await self.send_json({"type": "heartbeat.ok"})

    # Events from the channel layer.
    async def session_ended(self, event):
        """Its token was revoked (a host's supervisor token reissued, or its host deleted; a
        laptop's API token revoked, or its person made inactive): closed at once (4401). Its
        host deleted: told so, and the supervisor exits (4410)."""
        if event.get("reason") == "host_gone":
            await self.send_error("host_gone", HOST_GONE)
            await self.hang_up(4410)
            return
        await self.send_error("unauthorized", "The token this socket signed in with ended.")
        await self.hang_up(4401)

    async def work_available(self, event):
        await self.wake(event.get("agent") or "")

    async def host_bridge(self, event):
        """Stop, restart or set up again one agent's bridge; that agent is read again (with the
        others changed meanwhile) and the served list sent."""
        agent_id, action = event["agent"], event["action"]
        if action in ("stop", "reload"):
            self.changed.add(agent_id)
            if self.reading is None or self.reading.done():
                self.reading = asyncio.ensure_future(self.follow_changed())
        if action in ("stop", "restart"):
            await self.send_json({"type": action, "agent": agent_id})

    # An agent's own socket events this socket also hears, with nothing to do here.
    async def agent_changed(self, event):
        pass

    async def task_cancel(self, event):
        pass
