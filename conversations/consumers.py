"""The browser socket: live events of every conversation a person can read, and nothing else."""

from channels.db import database_sync_to_async
from rest_framework import serializers

from agntchat.core.api import StrictSerializer
from agntchat.core.events import group_name, publish_live, wire
from agntchat.core.origin import origin_allowed
from agntchat.core.sockets import JsonSocket
from conversations.access import access_conversation
from conversations.live import audience_topics
from workspaces.models import Membership


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

    handlers = {"ping": "on_ping", "typing": ("on_typing", TypingFrame)}
    frame_rate = ("BROWSER_FRAMES_PER_MINUTE", "BROWSER_FRAMES_BURST")
    quiet_when_limited = frozenset({"typing"})

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
        self.user = user
        self.groups_joined: set[str] = set()
        await self.accept()
        await self.sync_groups()
        await self.send_json(wire({"type": "hello", "user_id": user.id}))

    async def sync_groups(self) -> None:
        """Follow membership changes: join new workspaces' topics, leave old ones."""
        wanted = {group_name(f"user.{self.user.id}")} | {
            group_name(f"workspace.{w}") for w in await _workspace_ids(self.user)
        }
        for group in wanted - self.groups_joined:
            await self.channel_layer.group_add(group, self.channel_name)
        for group in self.groups_joined - wanted:
            await self.channel_layer.group_discard(group, self.channel_name)
        self.groups_joined = wanted

    async def disconnect(self, code):
        for group in getattr(self, "groups_joined", ()):
            await self.channel_layer.group_discard(group, self.channel_name)

    async def on_ping(self, frame):
        await self.send_json({"type": "pong"})

    async def on_typing(self, data):
        # An unknown id, or one of another workspace, raises ConversationNotFound: an error frame.
        await _announce_typing(self.user, data["conversation_id"])

    async def live_event(self, event):
        await self.send_json(event["event"])

    async def live_regroup(self, event):
        await self.sync_groups()
        await self.send_json(event["event"])
