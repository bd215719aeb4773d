"""What an agent connection can claim: the kinds of work, each a Claimable queue (MSG-6).

Every kind is claimed by the same ``core.claims`` functions; a kind only says which table holds
it and how to describe one item to the bridge. Later kinds (tasks, permission requests) register
here too.
"""

from django.conf import settings
from django.utils import timezone

from agntchat.core import claims
from agntchat.core.events import wire
from conversations.models import Delivery
from conversations.payloads import conversation_data, message_data


def message_work(ids) -> dict:
    """Work payloads for message deliveries, by delivery id."""
    deliveries = Delivery.objects.select_related(
        "message__conversation__workspace", "message__author_user", "message__author_agent"
    ).filter(id__in=ids)
    out = {}
    for delivery in deliveries:
        message = delivery.message
        conversation = message.conversation
        out[delivery.id] = {
            "message": message_data(message),
            "conversation": conversation_data(conversation),
            "workspace": {"id": conversation.workspace_id, "name": conversation.workspace.name},
            "attempt": delivery.attempts,
            "directives": {},
        }
    return out


# kind name → (queue model, payload builder)
WORK_KINDS = {
    "message": (Delivery, message_work),
}


def claim_work(
    agent_id, connection_id: str, capacity: int, lease_seconds: int | None = None
) -> list[dict]:
    """Claim up to CAPACITY items across every kind; return ready-to-send work frames."""
    lease = lease_seconds or settings.CLAIM_LEASE_SECONDS
    frames = []
    for kind, (model, build) in WORK_KINDS.items():
        room = capacity - len(frames)
        if room <= 0:
            break
        ids = claims.claim(model, agent_id, connection_id, room, timezone.now(), lease)
        if ids:
            payloads = build(ids)
            frames += [
                wire({"type": "work", "kind": kind, "id": i, "payload": payloads[i]})
                for i in ids
                if i in payloads
            ]
    return frames


def ack_work(kind: str, item_id, connection_id: str) -> bool:
    return claims.ack(WORK_KINDS[kind][0], item_id, connection_id, timezone.now())


def extend_work(kind: str, item_id, connection_id: str, lease_seconds: int | None = None):
    return claims.extend(
        WORK_KINDS[kind][0],
        item_id,
        connection_id,
        timezone.now(),
        lease_seconds or settings.CLAIM_LEASE_SECONDS,
    )


def release_work(connection_id: str) -> int:
    return sum(claims.release(model, connection_id) for model, _ in WORK_KINDS.values())


def agent_load(agent_id) -> int:
    return sum(claims.open_count(model, agent_id) for model, _ in WORK_KINDS.values())
