from agntchat.core.exceptions import AppError, Conflict, NotFound


class ArtifactNotFound(NotFound):
    code = "artifact_not_found"
    default_message = "Artifact not found."


class VersionNotFound(NotFound):
    code = "version_not_found"
    default_message = "Artifact version not found."


class CommentNotFound(NotFound):
    code = "comment_not_found"
    default_message = "Comment not found."


class CardNotFound(NotFound):
    code = "card_not_found"
    default_message = "This message carries no card."


class ArtifactRule(AppError):
    code = "artifact_invalid"


class CardInvalid(AppError):
    """A structured result that cannot be accepted; `fields` names the offending path."""

    code = "card_invalid"


class CardActionRule(AppError):
    """A click that is malformed (its item index is not a whole number)."""

    code = "card_action_invalid"


class CardActionNotFound(NotFound):
    """A click that names an item or a button the card does not show."""

    code = "card_action_not_found"
    default_message = "The card has no such button."


class CardActionUnavailable(Conflict):
    """The card's buttons reach no agent (posted by a person, or its author is gone)."""

    code = "card_action_unavailable"


class ActionUsed(Conflict):
    code = "action_used"
    default_message = "This button has already been used."
