from agntchat.core.exceptions import AppError, NotFound


class ConversationNotFound(NotFound):
    code = "conversation_not_found"
    default_message = "Conversation not found."


class MessageNotFound(NotFound):
    code = "message_not_found"
    default_message = "Message not found."


class ConversationRule(AppError):
    code = "conversation_invalid"
