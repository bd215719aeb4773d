"""The channel layer: channels_redis, with a Redis connection pool that waits for a free
connection instead of failing.

channels_redis keeps one redis-py pool per event loop, and redis-py's plain pool raises
"Too many connections" past ``max_connections`` (100 by default since redis-py 5). A daphne
process has one loop for all its sockets, so when a thousand sockets close at once (a balancer
restart, a network blip) their ``group_discard`` calls outnumber the pool: those beyond it failed
and left their group memberships behind. redis-py's ``BlockingConnectionPool`` makes them queue
for a connection (up to its ``timeout``) instead; each waits a few milliseconds.
"""

from channels_redis.core import RedisChannelLayer
from redis.asyncio import BlockingConnectionPool


class WaitingRedisChannelLayer(RedisChannelLayer):
    def create_pool(self, index):
        # A host is {"address": url, **pool options} in settings.CHANNEL_LAYERS.
        options = dict(self.hosts[index])
        return BlockingConnectionPool.from_url(options.pop("address"), **options)
