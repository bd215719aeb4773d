"""The browser socket: live events of every conversation a person can read, and nothing else."""

import time
import uuid
from importlib import import_module
from types import SimpleNamespace

from channels.db import database_sync_to_async
from django.conf import settings
from django.contrib.auth import get_user
from rest_framework import serializers

from agntchat.core import presence, throttle
from agntchat.core.api import StrictSerializer
from agntchat.core.events import group_name, publish_live, wire
from agntchat.core.origin import origin_allowed
from agntchat.core.sockets import JsonSocket
from conversations.access import access_conversation
from conversations.live import audience_topics
from workspaces.models import Membership

SIGNED_IN_CHECK_SECONDS = 300
# A socket that has not checked in for 2 * SIGNED_IN_CHECK_SECONDS and this long more is closed,
# and its place in its person's count lasts as long again: it never stays open uncounted.
CHECK_IN_SLACK_SECONDS = 30
# How long a socket that left a topic waits for its fence (LiveSocket.fence_off) to come back.
FENCE_SECONDS = 10


def _counted_seconds() -> int:
    # How long a socket stays counted against its person's cap unless checked in again: a
    # node that died without saying its sockets closed frees their places by then.
    return 2 * SIGNED_IN_CHECK_SECONDS + 2 * CHECK_IN_SLACK_SECONDS


def _unchecked_seconds() -> int:
    # How long an open socket may go without checking in (a client that sends no ping).
    return 2 * SIGNED_IN_CHECK_SECONDS + CHECK_IN_SLACK_SECONDS


@database_sync_to_async
def _socket_opened(user_id, socket_id: str) -> bool:
    """Count a new socket of the person, unless they have BROWSER_MAX_CONNECTIONS already."""
    cap = settings.BROWSER_MAX_CONNECTIONS
    return presence.join(user_id, socket_id, cap, ttl=_counted_seconds(), kind="person")


@database_sync_to_async
def _socket_closed(user_id, socket_id: str) -> None:
    presence.leave(user_id, socket_id, kind="person")


@database_sync_to_async
def _still_signed_in(scope, socket_id: str) -> bool:
    """Whether the session the socket was opened with still signs its person in, read afresh
    (not the copy the socket loaded): not logged out, expired or deleted, the password not
    changed since, the person still active. While it does, the socket stays counted."""
    session = import_module(settings.SESSION_ENGINE).SessionStore(scope["session"].session_key)
    user = get_user(SimpleNamespace(session=session))
    if not (user.is_authenticated and user.pk == scope["user"].pk):
        return False
    presence.refresh(user.pk, socket_id, _counted_seconds(), "person")
    return True


@database_sync_to_async
def _workspace_ids(user) -> set[str]:
    return {
        str(w) for w in Membership.objects.filter(user=user).values_list("workspace_id", flat=True)
    }


@database_sync_to_async
def _announce_typing(user, conversation_id) -> None:
    """Tell everyone who may read the conversation that USER is typing there. Nothing is stored,
    and the sender is not excluded: each browser ignores its own user."""
    conversation = access_conversation(user, conversation_id)
    # Per person, not per socket: ten tabs must not make ten times the noise for everyone.
    rate = throttle.Rate("typing:person", settings.TYPING_PER_MINUTE, burst=settings.TYPING_BURST)
    if throttle.hit(rate, user.pk):
        return
    publish_live(
        audience_topics(conversation),
        "typing",
        conversation_id=conversation.id,
        user={"id": user.id, "name": user.label},
    )


class TypingFrame(StrictSerializer):
    conversation_id = serializers.CharField(max_length=64)


class LiveSocket(JsonSocket):
    """Subscribed to the person's own topic and to each of their workspaces' topics."""

    socket_kind = "browser"
    check_in_frame = "ping"  # its sign-in check, on a ping (on_ping)

    handlers = {"ping": "on_ping", "typing": ("on_typing", TypingFrame)}
    frame_rate = ("BROWSER_FRAMES_PER_MINUTE", "BROWSER_FRAMES_BURST")
    quiet_when_limited = frozenset({"typing"})
    # The fence this socket sent itself on leaving a topic, not back yet (live_regroup), and
    # whether it dropped a live event meanwhile.
    fence: str | None = None
    fenced_at = 0.0
    dropped = False

    async def connect(self):
        if not origin_allowed(self.scope):
            # Checked before the cookie: a page of another origin learns nothing about the person.
            await self.refuse(
                "This socket serves this site's own pages only.", "forbidden_origin", 4403
            )
            return
        user = self.scope.get("user")
        if user is None or not user.is_authenticated:
            await self.refuse("Log in first.")
            return
        socket_id = uuid.uuid4().hex
        if not await _socket_opened(user.pk, socket_id):
            await self.refuse(
                f"You have {settings.BROWSER_MAX_CONNECTIONS} live connections open already, "
                "the most allowed: close a tab or another device's page first.",
                "too_many_connections",
                4429,
            )
            return
        self.user, self.socket_id = user, socket_id
        self.checked_in_at = time.monotonic()
        self.groups_joined: set[str] = set()
        await self.accept()
        self.watch_check_ins()
        if await self.sync_groups():
            await self.fence_off()
        await self.say_hello()

    async def say_hello(self) -> None:
        """The first frame of a socket, and again after it dropped events (live_fence): the page
        reloads what it shows."""
        await self.send_json(wire({"type": "hello", "user_id": self.user.id}))

    async def sync_groups(self) -> bool:
        """Follow membership changes: join new workspaces' topics, leave old ones; whether it
        left any."""
        wanted = await self.topics_now()
        joining = wanted - self.groups_joined
        for group in joining:
            await self.channel_layer.group_add(group, self.channel_name)
        if joining:
            # A membership ended after the read, before the socket heard the topic, was
            # announced where it did not hear yet: read again, now that it hears.
            wanted &= await self.topics_now()
        left = (self.groups_joined | joining) - wanted
        for group in left:
            await self.channel_layer.group_discard(group, self.channel_name)
        self.groups_joined = wanted
        return bool(left)

    async def topics_now(self) -> set[str]:
        """The groups of the person's own topic and of their workspaces', read now."""
        return {group_name(f"user.{self.user.id}")} | {
            group_name(f"workspace.{w}") for w in await _workspace_ids(self.user)
        }

    def unchecked_seconds(self) -> int:
        return _unchecked_seconds()

    async def disconnect(self, code):
        for group in getattr(self, "groups_joined", ()):
            await self.channel_layer.group_discard(group, self.channel_name)
        if hasattr(self, "socket_id"):
            await _socket_closed(self.user.pk, self.socket_id)

    async def on_ping(self, frame):
        # The browser pings every 25 s; its sign-in is checked again on one of them every
        # SIGNED_IN_CHECK_SECONDS, for what sends no event (a password changed, a session run
        # out or deleted). Logging out and deactivation close the socket at once (session_ended).
        now = time.monotonic()
        if now - self.checked_in_at >= SIGNED_IN_CHECK_SECONDS:
            if not await _still_signed_in(self.scope, self.socket_id):
                await self.session_ended({"session": None})
                return
            self.checked_in_at = now
        await self.send_json({"type": "pong"})

    async def session_ended(self, event):
        """Its person logged out (this session, or every one: SESSION None) or was deactivated
        (workspaces.login): the socket closes now, on every node (4401)."""
        if event["session"] in (None, self.scope["session"].session_key):
            await self.send_error("unauthorized", "You are logged out.")
            await self.hang_up(4401)

    async def on_typing(self, data):
        # An unknown id, or one of another workspace, raises ConversationNotFound: an error frame.
        await _announce_typing(self.user, data["conversation_id"])

    async def live_event(self, event):
        if self.fence is None:
            await self.send_json(event["event"])
        else:
            await self.drop()

    async def live_regroup(self, event):
        if await self.sync_groups():
            await self.fence_off()
            await self.send_json(event["event"])
        elif self.fence is None:
            await self.send_json(event["event"])
        else:
            await self.drop()

    async def drop(self) -> None:
        """An event come in behind a fence not back yet: dropped. A fence lost on its way (the
        channel layer is at-most-once) must not leave the socket deaf: past FENCE_SECONDS it
        hangs up as one that fell behind, and the page reconnects and reloads."""
        self.dropped = True
        if time.monotonic() - self.fenced_at > FENCE_SECONDS:
            await self.channel_overflow({})  # an error frame, then 4503

    async def fence_off(self) -> None:
        """The socket left a topic (a workspace it was removed from, or that is gone): events of
        that topic that came in before it left wait for it still, and nothing tells them apart
        from others. Every live event is dropped until a fence sent now comes back, behind them."""
        self.fence, self.fenced_at = uuid.uuid4().hex, time.monotonic()
        await self.channel_layer.send(
            self.channel_name, {"type": "live.fence", "fence": self.fence}
        )

    async def live_fence(self, event):
        if event["fence"] != self.fence:
            return  # an earlier fence: a later one is on its way
        self.fence = None
        if self.dropped:
            # What it dropped may have been for the person: a hello makes the page reload it,
            # as after a reconnect.
            self.dropped = False
            await self.say_hello()
