"""Each thread that may hold a pooled database connection is counted in the pool's size: the
agent sockets' work runs in SOCKET_THREADS threads of its own, not asyncio's default pool, which
grows with the machine's cores (CPUs + 4, up to 32) past any fixed pool, where a thread would
wait up to the pool's timeout for a connection and fail."""

import os
import threading

import pytest
from django.conf import settings

from work.consumers import in_pool


async def test_socket_work_runs_in_the_sockets_threads():
    name = await in_pool(lambda: threading.current_thread().name)()
    assert name.startswith("sockets")


@pytest.mark.skipif(bool(os.environ.get("DB_POOL_MAX")), reason="DB_POOL_MAX is set")
def test_the_pool_holds_a_connection_for_every_thread_that_may_take_one():
    pool = settings.DATABASES["default"]["OPTIONS"].get("pool")
    if not pool:
        pytest.skip("no connection pool (behind a transaction pooler)")
    threads = settings.HTTP_THREADS + settings.SOCKET_THREADS + settings.MEMORY_THREADS
    assert pool["max_size"] > threads
    assert settings.TOOL_THREADS < settings.SOCKET_THREADS
