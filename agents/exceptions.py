from agntchat.core.exceptions import AppError, NotFound, PermissionDenied


class AgentNotFound(NotFound):
    code = "agent_not_found"
    default_message = "Agent not found."


class NotAgentOwner(PermissionDenied):
    code = "not_agent_owner"
    default_message = "Only the agent's owner can do that."


class AgentRule(AppError):
    code = "agent_invalid"


class HandleTaken(AppError):
    code = "handle_taken"
    status = 409
    default_message = "You already have an agent with this handle."


class TaskNotFound(NotFound):
    code = "task_not_found"
    default_message = "Task not found."
