"""Text cut to a size: one way, an ellipsis marking the cut."""


def clipped(text: str, limit: int) -> str:
    """TEXT, or when longer than LIMIT characters its start with an ellipsis, LIMIT in all."""
    return text if len(text) <= limit else text[: limit - 1] + "…"
