"""Who is online: a heartbeat registry in Redis, shared by every server node (GW-1…3).

Each agent has a sorted set of its live connections scored by when they expire. An agent is
online while any connection's score is in the future. The key itself expires too, so a crashed
node leaves nothing behind for long. PostgreSQL stays the durable truth; this is ephemeral.
"""

import time
from functools import cache

import redis
from django.conf import settings


@cache
def client() -> redis.Redis:
    return redis.Redis.from_url(settings.REDIS_URL, socket_timeout=2, health_check_interval=30)


def _key(agent_id) -> str:
    return f"{settings.REDIS_PREFIX}:presence:agent:{agent_id}"


def beat(agent_id, connection_id: str, ttl: int | None = None) -> None:
    """Register or refresh one connection of an agent."""
    ttl = ttl or settings.PRESENCE_TTL_SECONDS
    now = time.time()
    key = _key(agent_id)
    pipe = client().pipeline()
    pipe.zadd(key, {connection_id: now + ttl})
    pipe.zremrangebyscore(key, "-inf", now)
    pipe.expire(key, ttl)
    pipe.execute()


# Join only under the cap, atomically (two nodes racing for the last place admit one).
# KEYS: the agent's connections. ARGV: now, expiry of this connection, ttl, cap (0: none), id.
JOIN = """
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', ARGV[1])
local cap = tonumber(ARGV[4])
if cap > 0 and redis.call('ZCARD', KEYS[1]) >= cap then return 0 end
redis.call('ZADD', KEYS[1], ARGV[2], ARGV[5])
redis.call('EXPIRE', KEYS[1], ARGV[3])
return 1
"""


@cache
def _join_script():
    return client().register_script(JOIN)


def join(agent_id, connection_id: str, cap: int, ttl: int | None = None) -> bool:
    """Register a new connection of an agent unless it already has CAP live ones (0: no cap);
    whether it was registered. One round trip, as a beat."""
    ttl = ttl or settings.PRESENCE_TTL_SECONDS
    now = time.time()
    return bool(
        _join_script()(keys=[_key(agent_id)], args=[now, now + ttl, ttl, cap, connection_id])
    )


def leave(agent_id, connection_id: str) -> None:
    client().zrem(_key(agent_id), connection_id)


def online(agent_ids) -> dict:
    """{agent_id: bool} for several agents in one round trip."""
    agent_ids = list(agent_ids)
    now = time.time()
    pipe = client().pipeline()
    for agent_id in agent_ids:
        pipe.zcount(_key(agent_id), now, "+inf")
    return {agent_id: count > 0 for agent_id, count in zip(agent_ids, pipe.execute(), strict=True)}


def connections(agent_id) -> list[str]:
    """The ids of an agent's live connections (a restart waits for a new one)."""
    now = time.time()
    return [c.decode() for c in client().zrangebyscore(_key(agent_id), now, "+inf")]


def is_online(agent_id) -> bool:
    return online([agent_id])[agent_id]
