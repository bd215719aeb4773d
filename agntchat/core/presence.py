"""Who is online: a heartbeat registry in Redis, shared by every server node (GW-1…3).

Each agent has a sorted set of its live connections scored by when they expire. An agent is
online while any connection's score is in the future. The key itself expires too, so a crashed
node leaves nothing behind for long. PostgreSQL stays the durable truth; this is ephemeral.
"""

import time
import uuid
from functools import cache

import redis
from django.conf import settings


@cache
def client() -> redis.Redis:
    return redis.Redis.from_url(settings.REDIS_URL, socket_timeout=2, health_check_interval=30)


def _key(owner_id, kind: str = "agent") -> str:
    # KIND "person": a person's browser sockets, counted for their cap only (not presence).
    return f"{settings.REDIS_PREFIX}:presence:{kind}:{owner_id}"


def _seen_key() -> str:
    # One hash for every agent: agent id → when it last beat or left (epoch seconds).
    return f"{settings.REDIS_PREFIX}:presence:seen"


def beat(agent_id, connection_id: str, ttl: int | None = None) -> None:
    """Register or refresh one connection of an agent."""
    ttl = ttl or settings.PRESENCE_TTL_SECONDS
    now = time.time()
    key = _key(agent_id)
    pipe = client().pipeline()
    pipe.zadd(key, {connection_id: now + ttl})
    pipe.zremrangebyscore(key, "-inf", now)
    pipe.expire(key, ttl)
    pipe.hset(
        _seen_key(), str(agent_id), now
    )  # same round trip: the staff health page's "last seen"
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


def join(
    agent_id, connection_id: str, cap: int, ttl: int | None = None, kind: str = "agent"
) -> bool:
    """Register a new connection of an agent (or KIND's owner) unless it already has CAP live
    ones (0: no cap); whether it was registered. One round trip, as a beat."""
    ttl = ttl or settings.PRESENCE_TTL_SECONDS
    now = time.time()
    return bool(
        _join_script()(keys=[_key(agent_id, kind)], args=[now, now + ttl, ttl, cap, connection_id])
    )


def refresh(owner_id, connection_id: str, ttl: int, kind: str) -> None:
    """Keep a connection joined with ``join`` counted for TTL seconds more."""
    key = _key(owner_id, kind)
    pipe = client().pipeline()
    pipe.zadd(key, {connection_id: time.time() + ttl})
    pipe.expire(key, ttl)
    pipe.execute()


def leave(agent_id, connection_id: str, kind: str = "agent") -> None:
    pipe = client().pipeline()
    pipe.zrem(_key(agent_id, kind), connection_id)
    if kind == "agent":
        pipe.hset(_seen_key(), str(agent_id), time.time())
    pipe.execute()


def last_seen(agent_ids) -> dict:
    """{agent_id: epoch seconds or None}: when each agent's bridge last beat or left."""
    agent_ids = list(agent_ids)
    if not agent_ids:
        return {}
    values = client().hmget(_seen_key(), [str(agent_id) for agent_id in agent_ids])
    return {
        agent_id: float(value) if value is not None else None
        for agent_id, value in zip(agent_ids, values, strict=True)
    }


def online_count() -> int:
    """Agents online now, over every node (a scan of the presence keys: for /metrics, not for
    the hot path). Hosts' supervisors share the registry under ids that are no agent's UUID."""
    now = time.time()
    prefix = f"{settings.REDIS_PREFIX}:presence:agent:"
    pipe = client().pipeline()
    count = 0
    for key in client().scan_iter(match=f"{prefix}*", count=500):
        try:
            uuid.UUID(key.decode().removeprefix(prefix))
        except ValueError:
            continue
        pipe.zcount(key, now, "+inf")
        count += 1
    return sum(1 for live in pipe.execute() if live) if count else 0


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
