from agntchat.core.exceptions import AppError, Conflict, NotFound, PermissionDenied


class ConversationNotFound(NotFound):
    code = "conversation_not_found"
    default_message = "Conversation not found."


class MessageNotFound(NotFound):
    code = "message_not_found"
    default_message = "Message not found."


class AttachmentNotFound(NotFound):
    code = "file_not_found"
    default_message = "File not found."


class ConversationRule(AppError):
    code = "conversation_invalid"


class ChannelNameTaken(Conflict):
    code = "channel_name_taken"


class ConversationArchived(Conflict):
    code = "conversation_archived"
    default_message = "This channel is archived: nothing can be posted in it."


# ---- edits, reactions, reply threads (issue 28) ----


class NotYourMessage(PermissionDenied):
    code = "not_your_message"
    default_message = "Only its author can change or delete a message."


class MessageNotEditable(Conflict):
    code = "message_not_editable"
    default_message = "This message cannot be changed."
