from agntchat.core.exceptions import AppError, NotFound, PermissionDenied, wait_words


class AgentNotFound(NotFound):
    code = "agent_not_found"
    default_message = "Agent not found."


class HostNotFound(NotFound):
    code = "host_not_found"
    default_message = "Host not found."


class KeyNotFound(NotFound):
    code = "key_not_found"
    default_message = "Key not found."


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


class CredentialNotForAgent(AppError):
    """A credential may go only to agents whose owner can read it (a manager of its workspace)."""

    code = "credential_not_for_agent"
    default_message = (
        "Only agents owned by an admin or the owner of this workspace can use its credentials."
    )


class KeyExchangeThrottled(AppError):
    """Too many failed key exchanges from a client address: locked for a while."""

    code = "key_exchange_throttled"
    status = 429

    def __init__(self, retry_after: int):
        super().__init__(
            "Too many invalid agent keys from this address. "
            f"Try again in {wait_words(retry_after)}."
        )
        self.retry_after = retry_after
