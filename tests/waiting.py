"""Waiting for something that happens elsewhere (a server starting, a reply arriving): poll until
it holds, up to a deadline that only bounds a failing test. Never a fixed sleep: the test moves
on as soon as the thing happened, and a slow machine only makes it wait longer."""

import asyncio
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
