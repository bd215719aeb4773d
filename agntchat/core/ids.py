"""User-supplied ids: anything that is not a UUID simply matches nothing."""

import uuid


def as_uuid(value) -> uuid.UUID | None:
    if isinstance(value, uuid.UUID):
        return value
    try:
        return uuid.UUID(str(value))
    except (TypeError, ValueError, AttributeError):
        return None
