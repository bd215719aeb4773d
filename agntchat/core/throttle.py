"""Failure throttling in Redis, shared by every server node.

A key (a username, a client address) that fails LIMIT times within WINDOW seconds is locked;
each lock within a day lasts twice the one before, up to a cap. Three Redis keys per key: the
failure count (expires with the window), the number of locks so far (a day) and the lock itself
(expires when the lock ends). Each attempt (a password, an agent key) is counted before it is
checked and uncounted if it succeeds (begin_attempt, end_attempt), so attempts sent together
cannot all pass the lock before the first of them fails.

Beside it, rate limits (Rate, hit, limit) for what succeeds too: posts, token and session exchanges,
socket frames (Bucket, per connection).
"""

import hashlib
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache

from django.conf import settings

from agntchat.core.exceptions import RateLimited
from agntchat.core.presence import client

STRIKES_TTL = 24 * 3600

# An attempt BEGIN_ATTEMPT counted failed: it stays counted; at the limit, the count starts
# over and the key is locked for the next period (each lock within a day twice the last).
# KEYS: fails, strikes, lock. ARGV: limit, window, first lock, longest lock, strikes ttl.
FAIL_ATTEMPT = """
local fails = tonumber(redis.call('GET', KEYS[1]) or 0)
if fails < tonumber(ARGV[1]) then return 0 end
redis.call('DEL', KEYS[1])
local strikes = redis.call('INCR', KEYS[2])
redis.call('EXPIRE', KEYS[2], ARGV[5])
local seconds = math.min(tonumber(ARGV[3]) * 2 ^ math.min(strikes - 1, 30), tonumber(ARGV[4]))
redis.call('SET', KEYS[3], 1, 'EX', math.floor(seconds))
return math.floor(seconds)
"""

# One attempt, before it is checked (checking the lock first and counting the failure after
# would let attempts sent together all through): refused while a key that holds it back is
# locked, or already has LIMIT attempts counted (failed, or still being checked: the ones after
# wait for the lock they are about to start); else counted against every key, as a failure
# until it ends.
# KEYS: fails, strikes, lock of each key in turn.
# ARGV: of each key in turn: limit, window, first lock, 1 if it holds the attempt back.
# Returns 0 when the attempt is counted, else the milliseconds to wait.
BEGIN_ATTEMPT = """
local wait = 0
for i = 0, #KEYS / 3 - 1 do
  if ARGV[4 * i + 4] == '1' then
    wait = math.max(wait, redis.call('PTTL', KEYS[3 * i + 3]))
    if tonumber(redis.call('GET', KEYS[3 * i + 1]) or 0) >= tonumber(ARGV[4 * i + 1]) then
      wait = math.max(wait, tonumber(ARGV[4 * i + 3]) * 1000)
    end
  end
end
if wait > 0 then return wait end
for i = 0, #KEYS / 3 - 1 do
  if redis.call('INCR', KEYS[3 * i + 1]) == 1 then
    redis.call('EXPIRE', KEYS[3 * i + 1], ARGV[4 * i + 2])
  end
end
return 0
"""

# An attempt BEGIN_ATTEMPT counted succeeded: it is no failure. (Not below 0: a lock may have
# started the count over meanwhile.)
# KEYS: fails.
RELEASE_ATTEMPT = """
if tonumber(redis.call('GET', KEYS[1]) or 0) > 0 then redis.call('DECR', KEYS[1]) end
"""


@dataclass(frozen=True)
class Rule:
    name: str
    limit: int  # failures within WINDOW that lock the key
    window: int  # seconds
    first_lock: int  # seconds; doubled with each lock within a day
    longest_lock: int


def failure_rule(name: str, limit: int) -> Rule:
    """LIMIT failures lock out, timed as sign-in's (LOGIN_FAILURE_WINDOW, LOGIN_LOCK_…):
    passwords, agent keys and host tokens tried from one place are locked out alike."""
    return Rule(
        name,
        limit=limit,
        window=settings.LOGIN_FAILURE_WINDOW,
        first_lock=settings.LOGIN_LOCK_SECONDS,
        longest_lock=settings.LOGIN_LOCK_MAX_SECONDS,
    )


def _keys(rule: Rule, key: str) -> list[str]:
    # Hashed: keys may be anything a client typed.
    digest = hashlib.sha256(key.encode()).hexdigest()[:32]
    base = f"{settings.REDIS_PREFIX}:throttle:{rule.name}:{digest}"
    return [f"{base}:fails", f"{base}:strikes", f"{base}:lock"]


def _lock_args(rule: Rule) -> list[int]:
    return [rule.limit, rule.window, rule.first_lock, rule.longest_lock, STRIKES_TTL]


def _script(source: str):
    return _registered(client(), source)


@cache
def _registered(redis, source: str):
    # Per client: a script object calls through the client it was registered on, and that
    # client may be made again (presence.client.cache_clear, as tests of an outage do).
    return redis.register_script(source)


def begin_attempt(
    checks: Sequence[tuple[Rule, str]], also_counted: Sequence[tuple[Rule, str]] = ()
) -> int:
    """Before an attempt is checked (a password): 0, and it is counted against each (rule, key)
    of CHECKS and ALSO_COUNTED as a failure until end_attempt. Or, while a key of CHECKS is
    locked or already has its limit of attempts counted, the seconds to wait, and nothing is
    counted. One atomic step: attempts sent together get no more checks than the limit."""
    keys, args = [], []
    for held_back, counted in ((1, checks), (0, also_counted)):
        for rule, key in counted:
            keys += _keys(rule, key)
            args += [rule.limit, rule.window, rule.first_lock, held_back]
    wait_ms = _script(BEGIN_ATTEMPT)(keys=keys, args=args)
    return math.ceil(int(wait_ms) / 1000) if wait_ms else 0


def end_attempt(checks: Sequence[tuple[Rule, str]], failed: bool) -> int:
    """An attempt begin_attempt counted against CHECKS is over. Failed, it stays counted and
    locks the keys at their limit (the longest lock started, in seconds); else it is uncounted."""
    if not failed:
        for rule, key in checks:
            _script(RELEASE_ATTEMPT)(keys=_keys(rule, key))
        return 0
    return max(
        (
            _script(FAIL_ATTEMPT)(keys=_keys(rule, key), args=_lock_args(rule))
            for rule, key in checks
        ),
        default=0,
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


def hit(rate: Rate, key, cost: int = 1) -> int:
    """Count one request of KEY under RATE (COST of them: a request that weighs more): 0 if it
    is allowed, else the seconds (at least 1) until it would be, and it is not counted. One Redis
    round trip; none for an unlimited rate. A COST past the burst is cut to the burst (it waits
    for a full bucket, rather than never fitting)."""
    if rate.per <= 0:
        return 0
    cost = max(1, min(cost, rate.burst_size))
    wait_ms = _script(RATE_HIT)(
        keys=[_rate_key(rate, key)], args=[rate.interval_ms, rate.burst_size, cost]
    )
    return math.ceil(int(wait_ms) / 1000) if wait_ms else 0


def limit(rate: Rate, key, what: str, cost: int = 1) -> None:
    """hit, refused: RateLimited ("Too many WHAT: try again in …") when KEY is past RATE."""
    wait = hit(rate, key, cost)
    if wait:
        raise RateLimited(wait, what)


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
