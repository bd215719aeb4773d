"""The channel layer: channels_redis, with a batched group send for the event publisher.

channels_redis sends to one group in four Redis round trips (expire members, read members,
expire messages, add messages). Every post publishes to two groups or more, so the publisher
sends everything it has queued in two round trips per Redis host: all members read in one
pipeline, all messages added by one script.
"""

import collections
import logging
import time

from channels_redis.core import RedisChannelLayer

log = logging.getLogger(__name__)

# Per channel key: drop expired messages, then add the new one unless the key is at capacity
# (as channels_redis does). Returns how many were dropped for capacity.
ADD_MESSAGES = """
local count = #KEYS
local expiry = tonumber(ARGV[3 * count + 1])
local dropped = 0
for i = 1, count do
    local score = tonumber(ARGV[count + i])
    redis.call('ZREMRANGEBYSCORE', KEYS[i], 0, score - expiry)
    if redis.call('ZCOUNT', KEYS[i], '-inf', '+inf') < tonumber(ARGV[2 * count + i]) then
        redis.call('ZADD', KEYS[i], score, ARGV[i])
        redis.call('EXPIRE', KEYS[i], expiry)
    else
        dropped = dropped + 1
    end
end
return dropped
"""


class RedisLayer(RedisChannelLayer):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.last_score = 0.0
        self.add_messages = None  # the script, registered with the first connection used

    def next_score(self) -> float:
        """Strictly increasing send times: messages queued for one channel in one batch are
        received in the order they were published (receivers pop the lowest score first)."""
        self.last_score = max(time.time(), self.last_score + 1e-6)
        return self.last_score

    async def group_send_many(self, sends) -> None:
        """SENDS: (group, message) pairs, delivered in order, as ``group_send`` would."""
        sends = list(sends)
        by_host = collections.defaultdict(list)
        for group, message in sends:
            assert self.require_valid_group_name(group), "Group name not valid"
            by_host[self.consistent_hash(group)].append((group, message))
        members = {}
        for index, items in by_host.items():
            pipe = self.connection(index).pipeline(transaction=False)
            for group, _ in items:
                key = self._group_key(group)
                pipe.zremrangebyscore(key, min=0, max=int(time.time()) - self.group_expiry)
                pipe.zrange(key, 0, -1)
            replies = await pipe.execute()
            for (group, _), names in zip(items, replies[1::2], strict=True):
                members[group] = [name.decode("utf8") for name in names]
        # Per Redis host: channel keys with their message, send time and capacity, in order.
        adds = collections.defaultdict(lambda: ([], [], [], []))
        for group, message in sends:
            if not members[group]:
                continue
            by_index, messages, capacities = self._map_channel_keys_to_connection(
                members[group], message
            )
            for index, keys in by_index.items():
                batch = adds[index]
                for key in keys:
                    batch[0].append(key)
                    batch[1].append(messages[key])
                    batch[2].append(self.next_score())
                    batch[3].append(capacities[key])
        for index, (keys, messages, scores, capacities) in adds.items():
            connection = self.connection(index)
            if self.add_messages is None:
                self.add_messages = connection.register_script(ADD_MESSAGES)
            dropped = await self.add_messages(
                keys=keys, args=[*messages, *scores, *capacities, self.expiry], client=connection
            )
            if dropped:
                log.info("%s of %s channel messages over capacity, dropped", dropped, len(keys))
