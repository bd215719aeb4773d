from agntchat.core.exceptions import AppError, Conflict, NotFound


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
