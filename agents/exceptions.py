from agntchat.core.exceptions import AppError, NotFound, PermissionDenied


class AgentNotFound(NotFound):
    code = "agent_not_found"

    def __init__(self, message="Agent not found."):
        super().__init__(message)


class NotAgentOwner(PermissionDenied):
    code = "not_agent_owner"

    def __init__(self, message="Only the agent's owner can do that."):
        super().__init__(message)


class AgentRule(AppError):
    code = "agent_invalid"


class TaskNotFound(NotFound):
    code = "task_not_found"

    def __init__(self, message="Task not found."):
        super().__init__(message)
