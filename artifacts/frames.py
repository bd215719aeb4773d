"""Agent socket frames for artifacts and cards: plain sync functions the agent socket calls.

Each takes the connected agent and the frame (camelCase, as received), validates it with a
serializer below (the REST input of the same action, plus the frame's own fields), and returns
the reply frame; a refusal raises an AppError, which the socket turns into an ``error`` frame.
"""

from rest_framework import serializers

from agntchat.core.api import StrictSerializer
from agntchat.core.events import wire
from agntchat.core.sockets import frame_data
from artifacts import actions
from artifacts.access import access_artifact
from artifacts.api import ArtifactInput, VersionInput
from conversations.access import access_conversation
from conversations.actions import MAX_BODY

ID = {"max_length": 64}
REF = {"max_length": 64, "required": False, "allow_blank": True, "default": ""}


class PublishFrame(ArtifactInput):
    conversation_id = serializers.CharField(**ID)
    ref = serializers.CharField(**REF)


class UpdateFrame(VersionInput):
    artifact_id = serializers.CharField(**ID)


class CardFrame(StrictSerializer):
    conversation_id = serializers.CharField(**ID)
    card = serializers.JSONField()  # its shape is checked when it is sealed: card_invalid
    body = serializers.CharField(max_length=MAX_BODY, required=False, allow_blank=True, default="")
    ref = serializers.CharField(**REF)


def _with_ref(reply: dict, data: dict) -> dict:
    """The reply frame as sent (converted by wire()), with the ref the frame came with."""
    if data.get("ref"):
        reply["ref"] = data["ref"]
    return wire(reply)


def publish_artifact(agent, frame: dict) -> dict:
    """``artifact.publish`` (PublishFrame) → ``artifact.published`` {artifactId, version,
    messageId}. The same ref again is the same artifact."""
    data = frame_data(PublishFrame, frame)
    conversation = access_conversation(agent, data["conversation_id"])
    artifact = actions.publish_artifact(
        agent,
        conversation,
        data["title"],
        data["kind"],
        data["content"],
        language=data["language"],
        client_ref=data["ref"],
    )
    return _with_ref(
        {
            "type": "artifact.published",
            "artifact_id": artifact.id,
            "version": 1,
            "message_id": artifact.message_id,
        },
        data,
    )


def update_artifact(agent, frame: dict) -> dict:
    """``artifact.update`` (UpdateFrame) → ``artifact.updated`` {artifactId, version}."""
    data = frame_data(UpdateFrame, frame)
    artifact = access_artifact(agent, data["artifact_id"])
    version = actions.update_artifact(agent, artifact, data["content"], data["note"])
    return wire({"type": "artifact.updated", "artifact_id": artifact.id, "version": version.number})


def post_card(agent, frame: dict) -> dict:
    """``card.post`` (CardFrame) → ``posted`` {messageId, ref}. A malformed card is refused with
    ``card_invalid`` naming the field; nothing is stored."""
    data = frame_data(CardFrame, frame)
    conversation = access_conversation(agent, data["conversation_id"])
    message = actions.post_card(
        agent, conversation, data["card"], data["body"], client_ref=data["ref"]
    )
    return _with_ref({"type": "posted", "message_id": message.id}, data)
