"""Waiting for something that happens elsewhere (a server starting, a reply arriving): poll until
it holds, up to a deadline that only bounds a failing test. Never a fixed sleep: the test moves
on as soon as the thing happened, and a slow machine only makes it wait longer."""

import asyncio
import contextlib
import inspect
import time

POLL = 0.05  # seconds between looks


def wait_until(predicate, timeout: float = 20, what: str = "the condition"):
    """PREDICATE's first true value, polled until TIMEOUT seconds have passed."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(POLL)  # the poll interval, not a wait for anything in particular


async def until(predicate, timeout: float = 20, what: str = "the condition"):
    """``wait_until`` for async tests: the event loop keeps running between looks. PREDICATE
    may be a coroutine function."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if inspect.isawaitable(value):
            value = await value
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        await asyncio.sleep(POLL)  # the poll interval, not a wait for anything in particular


@contextlib.asynccontextmanager
async def loop_stalls(tick: float = 0.002):
    """The event loop's longest stall while the block runs, in seconds, as a one-item list
    filled on exit: a ticker asks to wake every TICK and notes how late each wake-up was (the
    tick after the block's last stall included)."""
    gaps, longest = [], []

    async def ticker():
        loop = asyncio.get_running_loop()
        while True:
            before = loop.time()
            await asyncio.sleep(tick)
            gaps.append(loop.time() - before)

    running = asyncio.ensure_future(ticker())
    try:
        yield longest
        await asyncio.sleep(10 * tick)  # the tick after a stall, if there was one
    finally:
        running.cancel()
    longest.append(max(gaps))
