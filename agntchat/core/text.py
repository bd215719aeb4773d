"""Text for people: cut to a size (one way, an ellipsis marking the cut), and counts of things."""


def clipped(text: str, limit: int) -> str:
    """TEXT, or when longer than LIMIT characters its start with an ellipsis, LIMIT in all."""
    return text if len(text) <= limit else text[: limit - 1] + "…"


def counted(number: int, noun: str) -> str:
    """ "1 task", "3 tasks", "1,200 tasks" (NOUN, singular, takes an s)."""
    return f"{number:,} {noun}{'' if number == 1 else 's'}"
