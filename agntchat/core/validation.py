"""Limits on JSON from outside, checked on the text before anything parses it: REST bodies,
socket frames, JSON artifacts. Python's json parser recurses once per level of nesting, and so
do wire() and the renderers after it: a document nested a few thousand levels deep raises
RecursionError in whichever of them meets it first, a 500 or a dropped socket."""

import math
import re
from itertools import accumulate

from agntchat.core.exceptions import AppError

# Far deeper than any request, frame or data set of the product nests; far shallower than
# where recursion in the parser or the renderers could fail.
MAX_JSON_DEPTH = 64

# A JSON string, its escapes included. The closing quote is optional so that an unterminated
# string ends the scan in one match instead of being retried at every quote after it.
_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"?', re.DOTALL)
_NOT_BRACKET = re.compile(rb"[^\[\]{}]+")
_NESTING = {ord("["): 1, ord("{"): 1, ord("]"): -1, ord("}"): -1}


class JSONTooDeep(AppError):
    code = "too_deep"
    default_message = f"JSON can be nested at most {MAX_JSON_DEPTH} levels deep."


class JSONTooLarge(AppError):
    code = "too_large"
    status = 413


def json_depth(text: str | bytes) -> int:
    """The deepest nesting of arrays and objects in JSON TEXT (brackets inside strings do not
    count), without parsing it: linear time, no recursion, whatever the input."""
    if isinstance(text, str):
        text = text.encode("utf-8", "surrogatepass")
    # UTF-8 never has a quote, backslash or bracket byte inside a multi-byte character.
    brackets = _NOT_BRACKET.sub(b"", _STRING.sub(b"", text))
    return max(accumulate(map(_NESTING.__getitem__, brackets)), default=0)


def check_json_text(text: str | bytes, *, max_bytes: int, max_depth: int = MAX_JSON_DEPTH):
    """Refuse JSON TEXT longer than MAX_BYTES (UTF-8) or nested deeper than MAX_DEPTH, before
    it is parsed. Raises JSONTooLarge (413) or JSONTooDeep (400)."""
    size = len(text.encode("utf-8", "surrogatepass")) if isinstance(text, str) else len(text)
    if size > max_bytes:
        raise JSONTooLarge(f"JSON can be at most {max_bytes} bytes; this is {size}.")
    if json_depth(text) > max_depth:
        raise JSONTooDeep(f"JSON can be nested at most {max_depth} levels deep.")


# The integers every JSON reader agrees on (RFC 7493); beyond them, numbers are mangled.
MAX_SAFE_INTEGER = 2**53 - 1
UNSTORABLE_TEXT = re.compile("[\x00\ud800-\udfff]")


def json_value_problem(value) -> str | None:
    """What makes parsed JSON VALUE unfit to take in, or None: Python's parser accepts what the
    rest of the stack cannot, NaN and Infinity, integers of any size, and text with NUL or
    unpaired surrogates (PostgreSQL stores neither). DRF's CharField refuses such text in a
    string field; this is the same rule for JSON of any shape (check the depth first)."""
    stack = [value]
    while stack:
        item = stack.pop()
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
        elif isinstance(item, dict):
            stack.extend(item)
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return None
