"""Agent socket frames for artifacts and cards: plain sync functions the agent socket calls.

Each takes the connected agent and the frame (camelCase, as received) and returns the reply
frame; a refusal raises an AppError, which the socket turns into an ``error`` frame.
"""

from agntchat.core.sockets import FrameError
from artifacts import actions
from artifacts.access import access_artifact
from conversations.access import access_conversation


def _text(frame: dict, name: str, *, required: bool = True) -> str:
    value = frame.get(name)
    if value is None and not required:
        return ""
    if not isinstance(value, str):
        raise FrameError(
            f"{frame.get('type', 'frame')} needs a string '{name}'.",
            fields={name: "Must be a string."},
        )
    return value


def _with_ref(reply: dict, frame: dict) -> dict:
    if frame.get("ref") is not None:
        reply["ref"] = frame["ref"]
    return reply


def publish_artifact(agent, frame: dict) -> dict:
    """``artifact.publish`` {conversationId, title, kind, content, language?, ref?} →
    ``artifact.published`` {artifactId, version, messageId}. The same ref again is the same
    artifact."""
    conversation = access_conversation(agent, frame.get("conversationId"))
    artifact = actions.publish_artifact(
        agent,
        conversation,
        _text(frame, "title"),
        _text(frame, "kind"),
        _text(frame, "content"),
        language=_text(frame, "language", required=False),
        client_ref=_text(frame, "ref", required=False),
    )
    return _with_ref(
        {
            "type": "artifact.published",
            "artifactId": str(artifact.id),
            "version": 1,
            "messageId": str(artifact.message_id),
        },
        frame,
    )


def update_artifact(agent, frame: dict) -> dict:
    """``artifact.update`` {artifactId, content, note?} → ``artifact.updated`` {artifactId,
    version}."""
    artifact = access_artifact(agent, frame.get("artifactId"))
    version = actions.update_artifact(
        agent, artifact, _text(frame, "content"), _text(frame, "note", required=False)
    )
    return _with_ref(
        {"type": "artifact.updated", "artifactId": str(artifact.id), "version": version.number},
        frame,
    )


def post_card(agent, frame: dict) -> dict:
    """``card.post`` {conversationId, card, body?, ref?} → ``posted`` {messageId, ref}. A
    malformed card is refused with ``card_invalid`` naming the field; nothing is stored."""
    conversation = access_conversation(agent, frame.get("conversationId"))
    if "card" not in frame:
        raise FrameError("card.post needs a 'card' object.", fields={"card": "Required."})
    message = actions.post_card(
        agent,
        conversation,
        frame["card"],
        _text(frame, "body", required=False),
        client_ref=_text(frame, "ref", required=False),
    )
    return _with_ref({"type": "posted", "messageId": str(message.id)}, frame)
