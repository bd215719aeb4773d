"""The browser socket: live events of every conversation a person can read, and nothing else."""

from channels.db import database_sync_to_async

from agntchat.core.events import group_name
from agntchat.core.sockets import JsonSocket
from workspaces.models import Membership


@database_sync_to_async
def _workspace_ids(user) -> set[str]:
    return {
        str(w) for w in Membership.objects.filter(user=user).values_list("workspace_id", flat=True)
    }


class LiveSocket(JsonSocket):
    """Subscribed to the person's own topic and to each of their workspaces' topics."""

    handlers = {"ping": "on_ping"}

    async def connect(self):
        user = self.scope.get("user")
        if user is None or not user.is_authenticated:
            await self.refuse("Log in first.")
            return
        self.user = user
        self.groups_joined: set[str] = set()
        await self.accept()
        await self.sync_groups()
        await self.send_json({"type": "hello", "userId": str(user.id)})

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

    async def live_event(self, event):
        await self.send_json(event["event"])

    async def workspace_event(self, event):
        await self.sync_groups()
        await self.send_json(event["event"])
