"""The agent socket (the gateway): claims work for a connected bridge and takes its replies.

Frames are documented in docs/protocol.md. Each connection holds at most ``prefetch`` unacked
items. It claims on connect (catch-up), whenever its agent's topic says work is available, after
each ack, and on each heartbeat, so a push lost by the channel layer only delays an item until
the next of these (MSG-3…5, MSG-7).
"""

import uuid
from collections import OrderedDict
from urllib.parse import parse_qs

from channels.db import database_sync_to_async

from agents import gateway
from agents.access import agent_for_session_token
from agntchat.core import presence
from agntchat.core.auth import bearer_secret
from agntchat.core.claims import NotHeld
from agntchat.core.events import apublish_now, group_name
from agntchat.core.sockets import FrameError, JsonSocket, header
from conversations import actions as conversation_actions
from conversations.access import access_conversation, access_message

MAX_PREFETCH = 100


def _prefetch(value) -> int:
    try:
        number = int(value)
    except (TypeError, ValueError):
        raise FrameError("prefetch must be a whole number from 1 to 100.") from None
    if not 1 <= number <= MAX_PREFETCH:
        raise FrameError("prefetch must be a whole number from 1 to 100.")
    return number


@database_sync_to_async
def _agent_for(secret):
    return agent_for_session_token(secret) if secret and secret.startswith("ags_") else None


@database_sync_to_async
def _post(agent, frame):
    conversation = access_conversation(agent, frame.get("conversationId"))
    reply_to = access_message(agent, frame["replyTo"]) if frame.get("replyTo") else None
    body = frame.get("body")
    if not isinstance(body, str):
        raise FrameError("post needs a string 'body'.")
    return conversation_actions.post_message(agent, conversation, body, reply_to=reply_to)


class AgentSocket(JsonSocket):
    handlers = {
        "ack": "on_ack",
        "heartbeat": "on_heartbeat",
        "extend": "on_extend",
        "post": "on_post",
        "configure": "on_configure",
    }

    async def connect(self):
        self.agent = await _agent_for(bearer_secret(header(self.scope, b"authorization")))
        if self.agent is None:
            await self.refuse(
                "A valid agent session token is required (Authorization: Bearer ags_…)."
            )
            return
        query = parse_qs(self.scope.get("query_string", b"").decode())
        self.connection_id = uuid.uuid4().hex
        self.held: dict[str, str] = {}  # item id → kind
        self.recently_acked: OrderedDict[str, None] = OrderedDict()
        self.prefetch = 1
        self.topic = group_name(f"agent.{self.agent.id}")
        await self.accept()
        if "prefetch" in query:
            try:
                self.prefetch = _prefetch(query["prefetch"][0])
            except FrameError as exc:
                await self.send_error(exc.code, exc.message)
        await self.channel_layer.group_add(self.topic, self.channel_name)
        await database_sync_to_async(presence.beat)(self.agent.id, self.connection_id)
        await self.send_json(
            {
                "type": "hello",
                "agentId": str(self.agent.id),
                "connectionId": self.connection_id,
                "prefetch": self.prefetch,
            }
        )
        await self.fill()

    async def disconnect(self, code):
        if getattr(self, "agent", None) is None or not hasattr(self, "connection_id"):
            return
        await self.channel_layer.group_discard(self.topic, self.channel_name)
        released = await database_sync_to_async(gateway.release_work)(self.connection_id)
        await database_sync_to_async(presence.leave)(self.agent.id, self.connection_id)
        if released:
            # Its unacked items are free again at once: wake the agent's other connections.
            await apublish_now(f"agent.{self.agent.id}", {"type": "work.available"})

    async def fill(self) -> None:
        """Claim as many items as this connection has room for and push them."""
        room = self.prefetch - len(self.held)
        if room <= 0:
            return
        frames = await database_sync_to_async(gateway.claim_work)(
            self.agent.id, self.connection_id, room
        )
        for frame in frames:
            self.held[frame["id"]] = frame["kind"]
            await self.send_json(frame)

    # Events from the channel layer.
    async def work_available(self, event):
        await self.fill()

    # Frames from the bridge.
    async def on_ack(self, frame):
        item_id = str(frame.get("id", ""))
        kind = self.held.get(item_id)
        if kind is None:
            if item_id in self.recently_acked:
                return  # acks are idempotent
            raise FrameError("This connection does not hold that item.", code="not_held")
        try:
            await database_sync_to_async(gateway.ack_work)(kind, item_id, self.connection_id)
        except NotHeld:
            # Its lease ran out and another connection has it now: free the slot here.
            del self.held[item_id]
            await self.fill()
            raise
        del self.held[item_id]
        self.recently_acked[item_id] = None
        if len(self.recently_acked) > 1000:
            self.recently_acked.popitem(last=False)
        await self.fill()

    async def on_extend(self, frame):
        item_id = str(frame.get("id", ""))
        kind = self.held.get(item_id)
        if kind is None:
            raise FrameError("This connection does not hold that item.", code="not_held")
        try:
            expires = await database_sync_to_async(gateway.extend_work)(
                kind, item_id, self.connection_id
            )
        except NotHeld:
            self.held.pop(item_id, None)
            raise
        await self.send_json(
            {"type": "extended", "id": item_id, "leaseExpiresAt": expires.isoformat()}
        )

    async def on_heartbeat(self, frame):
        await database_sync_to_async(presence.beat)(self.agent.id, self.connection_id)
        await self.fill()

    async def on_configure(self, frame):
        if "prefetch" in frame:
            self.prefetch = _prefetch(frame["prefetch"])
        await self.send_json({"type": "configured", "prefetch": self.prefetch})
        await self.fill()

    async def on_post(self, frame):
        message = await _post(self.agent, frame)
        reply = {"type": "posted", "messageId": str(message.id)}
        if frame.get("ref") is not None:
            reply["ref"] = frame["ref"]
        await self.send_json(reply)
