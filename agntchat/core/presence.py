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
