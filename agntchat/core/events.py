"""Publish realtime events through the channel layer, only after the writing transaction commits.

Event payloads leave here as plain JSON types in camelCase (the channel layer speaks msgpack,
which knows no UUIDs or datetimes), converted once in ``wire()``.
"""

import json

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.core.serializers.json import DjangoJSONEncoder
from django.db import transaction
from djangorestframework_camel_case.util import camelize


def wire(data):
    """Plain JSON types, camelCase keys: the one conversion for sockets and events."""
    return camelize(json.loads(json.dumps(data, cls=DjangoJSONEncoder)))


def group_name(topic: str) -> str:
    """Channel-layer group names allow only [a-zA-Z0-9_.-]."""
    return topic.replace(":", ".")


async def apublish_now(topic: str, event: dict) -> None:
    """Publish from async code that has no transaction to wait for (consumers)."""
    await get_channel_layer().group_send(group_name(topic), wire(event))


def publish(topic: str, event: dict) -> None:
    """Publish on commit of the current transaction: a rolled-back write announces nothing."""
    event = wire(event)
    transaction.on_commit(
        lambda: async_to_sync(get_channel_layer().group_send)(group_name(topic), event), robust=True
    )


def publish_many(topics, event: dict) -> None:
    """One event to several topics, after commit."""
    event = wire(event)

    def send():
        layer = get_channel_layer()

        async def fan_out():
            for topic in topics:
                await layer.group_send(group_name(topic), event)

        async_to_sync(fan_out)()

    transaction.on_commit(send, robust=True)
