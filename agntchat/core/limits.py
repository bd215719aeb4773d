"""What any JSON taken in must satisfy, wherever it comes from, before anything uses it.

Python's json accepts what the rest of the stack cannot: NaN and Infinity, integers of any
size, text with NUL or unpaired surrogates (PostgreSQL stores neither), and nesting deep
enough to exhaust the recursion of whatever walks it next. DRF's CharField refuses such text
in a string field; this is the same rule for JSON of any shape.
"""

import math
import re

MAX_JSON_DEPTH = 32
# The integers every JSON reader agrees on (RFC 7493); beyond them, numbers are mangled.
MAX_SAFE_INTEGER = 2**53 - 1
UNSTORABLE_TEXT = re.compile("[\x00\ud800-\udfff]")


def json_problem(value) -> str | None:
    """Why VALUE (parsed JSON) may not be taken in, or None if it may."""
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, str):
            if UNSTORABLE_TEXT.search(item):
                return "Text may not contain NUL characters or unpaired surrogates."
        elif isinstance(item, bool) or item is None:
            continue
        elif isinstance(item, int):
            if abs(item) > MAX_SAFE_INTEGER:
                return f"Whole numbers must lie within ±{MAX_SAFE_INTEGER}."
        elif isinstance(item, float):
            if not math.isfinite(item):
                return "Numbers must be finite (no NaN or Infinity)."
        elif isinstance(item, (dict, list)):
            if depth > MAX_JSON_DEPTH:
                return f"JSON may be nested at most {MAX_JSON_DEPTH} levels deep."
            if isinstance(item, dict):
                stack.extend((key, depth) for key in item)
                stack.extend((child, depth + 1) for child in item.values())
            else:
                stack.extend((child, depth + 1) for child in item)
    return None
