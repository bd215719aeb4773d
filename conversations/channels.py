"""Channel names: one per workspace among live channels, written as Slack writes them."""

import re
import unicodedata

MAX_LENGTH = 80
SEPARATORS = re.compile(r"[\s.]+")
NOT_ALLOWED = re.compile(r"[^\w-]")  # \w: letters and digits of any script, and "_"
HYPHENS = re.compile(r"-{2,}")


def channel_name(raw: str) -> str:
    """RAW as a channel name: a leading # dropped, lowercase, spaces and periods turned into
    hyphens, anything but letters, digits, hyphens and underscores removed, no leading,
    trailing or doubled hyphens, at most 80 characters. "" when nothing is left."""
    name = unicodedata.normalize("NFKC", raw or "").strip().lstrip("#").lower()
    name = NOT_ALLOWED.sub("", SEPARATORS.sub("-", name))
    return HYPHENS.sub("-", name).strip("-")[:MAX_LENGTH].rstrip("-")
