"""The base of every domain error: a stable machine-readable code and an HTTP status."""

from agntchat.core.text import counted


class AppError(Exception):
    """A refused action. Mapped once to a REST error body or a socket error frame."""

    code = "error"
    status = 400
    default_message = "The request was refused."
    retry_after: int | None = None  # seconds, for a refusal that lifts by itself (429)

    def __init__(
        self,
        message: str | None = None,
        *,
        code: str | None = None,
        status: int | None = None,
        fields=None,
    ):
        message = message or self.default_message
        super().__init__(message)
        self.message = message
        if code:
            self.code = code
        if status:
            self.status = status
        self.fields = fields or {}


class NotFound(AppError):
    """Missing, or not visible to the actor: the two are never told apart."""

    code = "not_found"
    status = 404


class PermissionDenied(AppError):
    """The actor can see the object but may not do this to it."""

    code = "permission_denied"
    status = 403


class Conflict(AppError):
    code = "conflict"
    status = 409


def wait_words(seconds: int) -> str:
    """A wait as a person reads it: "1 second", "40 seconds", "2 minutes"."""
    if seconds < 60:
        return counted(seconds, "second")
    minutes = -(-seconds // 60)
    return counted(minutes, "minute")


class RateLimited(AppError):
    """Too many requests of one kind from one actor within a while (core.throttle.hit)."""

    code = "rate_limited"
    status = 429

    def __init__(self, retry_after: int, what: str = "requests"):
        retry_after = max(1, int(retry_after))
        super().__init__(f"Too many {what}: try again in {wait_words(retry_after)}.")
        self.retry_after = retry_after
