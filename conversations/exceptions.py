from agntchat.core.exceptions import AppError, NotFound


class ConversationNotFound(NotFound):
    code = "conversation_not_found"

    def __init__(self, message="Conversation not found."):
        super().__init__(message)


class MessageNotFound(NotFound):
    code = "message_not_found"

    def __init__(self, message="Message not found."):
        super().__init__(message)


class ConversationRule(AppError):
    code = "conversation_invalid"
