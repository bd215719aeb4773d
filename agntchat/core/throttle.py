"""Failure throttling in Redis, shared by every server node.

A key (a username, a client address) that fails LIMIT times within WINDOW seconds is locked;
each lock within a day lasts twice the one before, up to a cap. Three Redis keys per key: the
failure count (expires with the window), the number of locks so far (a day) and the lock itself
(expires when the lock ends).

Beside it, rate limits (Rate, hit) for what succeeds too: posts, token and session exchanges,
socket frames (Bucket, per connection).
"""

import hashlib
import math
import time
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


# Rate limits: how often a key (a person, an agent, a client address) may do something, as a
# generic cell rate algorithm in one Redis key per (rate, key): the "theoretical arrival time" of
# the next request. PER requests per WINDOW seconds on average, BURST of them at once. One EVALSHA
# per hit; Redis's clock, so every node counts alike.
# KEYS: tat. ARGV: interval (ms between requests on average), burst, cost (in requests: an
# upload of N megabytes counts N).
# Returns 0 when the hit is allowed (and counted), else the milliseconds until one would be.
RATE_HIT = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local interval = tonumber(ARGV[1])
local tat = tonumber(redis.call('GET', KEYS[1]) or 0)
if tat < now then tat = now end
local new_tat = tat + interval * tonumber(ARGV[3])
local wait = new_tat - now - tonumber(ARGV[2]) * interval
if wait > 0 then return wait end
redis.call('SET', KEYS[1], new_tat, 'PX', new_tat - now + 1000)
return 0
"""


@dataclass(frozen=True)
class Rate:
    name: str
    per: int  # requests per WINDOW on average; 0 or less: unlimited
    window: int = 60  # seconds
    burst: int = 0  # requests allowed at once (at least 1); 0: PER

    @property
    def interval_ms(self) -> int:
        return max(1, round(self.window * 1000 / self.per))

    @property
    def burst_size(self) -> int:
        return max(1, self.burst or self.per)


def _rate_key(rate: Rate, key: str) -> str:
    digest = hashlib.sha256(str(key).encode()).hexdigest()[:32]
    return f"{settings.REDIS_PREFIX}:rate:{rate.name}:{digest}"


@cache
def _rate_script():
    return client().register_script(RATE_HIT)


def hit(rate: Rate, key, cost: int = 1) -> int:
    """Count one request of KEY under RATE (COST of them: a request that weighs more): 0 if it
    is allowed, else the seconds (at least 1) until it would be, and it is not counted. One Redis
    round trip; none for an unlimited rate. A COST past the burst is cut to the burst (it waits
    for a full bucket, rather than never fitting)."""
    if rate.per <= 0:
        return 0
    cost = max(1, min(cost, rate.burst_size))
    wait_ms = _rate_script()(
        keys=[_rate_key(rate, key)], args=[rate.interval_ms, rate.burst_size, cost]
    )
    return math.ceil(int(wait_ms) / 1000) if wait_ms else 0


class Bucket:
    """The same rule for what one process alone sees (the frames of one socket, which lives on
    one node): PER per WINDOW seconds on average, BURST at once, counted in memory."""

    def __init__(self, per: int, window: float = 60, burst: int = 0):
        self.per = per
        self.interval = window / per if per > 0 else 0
        self.tolerance = max(1, burst or per) * self.interval
        self.tat = 0.0

    def hit(self, now: float | None = None) -> float:
        """0 if allowed (and counted), else the seconds until one would be."""
        if self.per <= 0:
            return 0
        now = time.monotonic() if now is None else now
        new_tat = max(self.tat, now) + self.interval
        wait = new_tat - now - self.tolerance
        if wait > 0:
            return wait
        self.tat = new_tat
        return 0
