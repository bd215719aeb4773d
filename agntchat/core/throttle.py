"""Failure throttling in Redis, shared by every server node.

A key (a username, a client address) that fails LIMIT times within WINDOW seconds is locked;
each lock within a day lasts twice the one before, up to a cap. Three Redis keys per key: the
failure count (expires with the window), the number of locks so far (a day) and the lock itself
(expires when the lock ends).
"""

import hashlib
import math
from dataclasses import dataclass
from functools import cache

from django.conf import settings

from agntchat.core.presence import client

STRIKES_TTL = 24 * 3600

# One failure, atomically: count it; at the limit start over and lock for the next period.
# KEYS: fails, strikes, lock. ARGV: limit, window, first lock, longest lock, strikes ttl.
RECORD_FAILURE = """
local fails = redis.call('INCR', KEYS[1])
if fails == 1 then redis.call('EXPIRE', KEYS[1], ARGV[2]) end
if fails < tonumber(ARGV[1]) then return 0 end
redis.call('DEL', KEYS[1])
local strikes = redis.call('INCR', KEYS[2])
redis.call('EXPIRE', KEYS[2], ARGV[5])
local seconds = math.min(tonumber(ARGV[3]) * 2 ^ math.min(strikes - 1, 30), tonumber(ARGV[4]))
redis.call('SET', KEYS[3], 1, 'EX', math.floor(seconds))
return math.floor(seconds)
"""


@dataclass(frozen=True)
class Rule:
    name: str
    limit: int  # failures within WINDOW that lock the key
    window: int  # seconds
    first_lock: int  # seconds; doubled with each lock within a day
    longest_lock: int


def _keys(rule: Rule, key: str) -> list[str]:
    # Hashed: keys may be anything a client typed.
    digest = hashlib.sha256(key.encode()).hexdigest()[:32]
    base = f"{settings.REDIS_PREFIX}:throttle:{rule.name}:{digest}"
    return [f"{base}:fails", f"{base}:strikes", f"{base}:lock"]


def locked_for(checks: list[tuple[Rule, str]]) -> int:
    """Seconds until every (rule, key) of CHECKS is unlocked; 0 when none is locked."""
    pipe = client().pipeline(transaction=False)
    for rule, key in checks:
        pipe.pttl(_keys(rule, key)[2])
    return max((math.ceil(ms / 1000) for ms in pipe.execute() if ms > 0), default=0)


@cache
def _record_failure_script():
    return client().register_script(RECORD_FAILURE)


def record_failure(checks: list[tuple[Rule, str]]) -> int:
    """Count one failure against each (rule, key); the longest lock it started, in seconds."""
    return max(
        _record_failure_script()(
            keys=_keys(rule, key),
            args=[rule.limit, rule.window, rule.first_lock, rule.longest_lock, STRIKES_TTL],
        )
        for rule, key in checks
    )


def forget(rule: Rule, key: str) -> None:
    """Clear the failures, locks and lock history of KEY under RULE."""
    client().delete(*_keys(rule, key))
