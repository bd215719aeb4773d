"""The agent socket's frames as serializers (docs/protocol.md §4).

A frame that does what a REST request does is validated by that request's serializer, with the
frame's own fields added; the rest use the same field types. Ids of rows stay plain strings:
an unknown one is "not found" (or "not held"), as in a REST path.
"""

from rest_framework import serializers

from agntchat.core.api import StrictSerializer
from agntchat.core.api import _flatten as error_fields
from agntchat.core.sockets import FrameError
from conversations.actions import MAX_BODY
from conversations.api import MessageInput, ResolveInput
from conversations.models import Task
from work.api import PersonalityInput

ID = {"max_length": 64}
COUNT = {"min_value": 0, "max_value": 2**31 - 1, "required": False}


class UsageInput(StrictSerializer):
    """What one turn cost (RUN-8), as the bridge reports it."""

    input_tokens = serializers.IntegerField(**COUNT)
    output_tokens = serializers.IntegerField(**COUNT)
    cache_read_tokens = serializers.IntegerField(**COUNT)
    cache_write_tokens = serializers.IntegerField(**COUNT)
    latency_ms = serializers.IntegerField(**COUNT)
    # What TurnUsage.cost_usd holds: 12 digits, 6 of them decimals.
    cost_usd = serializers.FloatField(
        min_value=0, max_value=999_999, required=False, allow_null=True
    )
    backend = serializers.CharField(max_length=20, required=False, allow_blank=True)
    model = serializers.CharField(max_length=100, required=False, allow_blank=True)


class ItemFrame(StrictSerializer):
    """A frame about one work item this connection holds."""

    id = serializers.CharField(**ID)


class AckFrame(ItemFrame):
    done = serializers.BooleanField(required=False, default=False)
    usage = UsageInput(required=False, allow_null=True, default=None)


class EventFrame(ItemFrame):
    event = serializers.DictField()


class TaskResultInput(StrictSerializer):
    text = serializers.CharField(required=False, allow_blank=True, trim_whitespace=False)
    blocks = serializers.ListField(child=serializers.DictField(), required=False)


class ResultFrame(ItemFrame):
    status = serializers.ChoiceField(choices=[status.value for status in Task.TERMINAL])
    result = TaskResultInput(required=False, default=dict)
    error = serializers.CharField(
        required=False, allow_blank=True, default="", trim_whitespace=False
    )
    usage = UsageInput(required=False, allow_null=True, default=None)


class ConversationFrame(StrictSerializer):
    conversation_id = serializers.CharField(**ID)


class PostFrame(MessageInput):
    conversation_id = serializers.CharField(**ID)
    notice = serializers.BooleanField(required=False, default=False)
    # A reply cut short by a person's Stop: what the turn had written so far (may be blank).
    # Honoured only if a Stop was pressed (work.consumers, as_unstopped).
    stopped = serializers.BooleanField(required=False, default=False)

    def validate(self, data):
        if data.get("stopped") and not data.get("body"):
            data.setdefault("body", "")
            return data
        return super().validate(data)


def as_unstopped(data: dict) -> dict:
    """A post's DATA marked ``stopped`` when no Stop was pressed on the turn it answers: an
    ordinary post, whose blank body is refused as any post's is (as frame_data refuses it)."""
    try:
        return PostFrame().validate({**data, "stopped": False})
    except serializers.ValidationError as exc:
        raise FrameError("Some fields are invalid.", fields=error_fields(exc.detail)) from None


class DraftFrame(ItemFrame):
    """The text so far of a chat turn this connection holds (streaming replies)."""

    text = serializers.CharField(max_length=MAX_BODY, allow_blank=True, trim_whitespace=False)


class ResolveFrame(ResolveInput):
    conversation_id = serializers.CharField(**ID)


LANE_SIZE = {"min_value": 1, "max_value": 100, "required": False}


class ConfigureFrame(StrictSerializer):
    prefetch = serializers.IntegerField(**LANE_SIZE)
    tasks = serializers.IntegerField(**LANE_SIZE)


class ConfigureQuery(serializers.Serializer):
    """The same sizes in the socket's URL (``?prefetch=4&tasks=2``, as the bridge connects):
    every value there is text, so numbers are read from digits, as REST reads its query
    parameters; other parameters are ignored, as REST ignores them."""

    prefetch = serializers.IntegerField(**LANE_SIZE)
    tasks = serializers.IntegerField(**LANE_SIZE)


# The REST input as it is: an agent cannot force a shrink (only the owner can).
PersonalitySetFrame = PersonalityInput


class SessionRenewFrame(StrictSerializer):
    token = serializers.CharField(max_length=200)


class ToolCallFrame(ItemFrame):
    """A tool call of the turn working on item ``id`` (docs/protocol.md §4)."""

    call_id = serializers.CharField(max_length=64)
    name = serializers.CharField(max_length=128)
    input = serializers.DictField()
    ref = serializers.CharField(max_length=80, required=False, allow_blank=True, default="")


class EmptyFrame(StrictSerializer):
    """heartbeat, personality.get: nothing but the type."""
