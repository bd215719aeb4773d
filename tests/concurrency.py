"""Calls made at the same instant, each on its own thread and database connection: how the
races that the claim pattern, unique indexes and row locks settle are driven in tests."""

import threading

from django.db import connection


def run_together(fn, argument_lists, *, prepare=None, catching=()):
    """Call fn(*arguments) for each of ARGUMENT_LISTS, each on its own thread and database
    connection, all released together by a barrier; return what each call returned, in the
    order of ARGUMENT_LISTS.

    An exception of a type in CATCHING is returned in place of its call's result; any other is
    raised here once every thread has finished. PREPARE(*arguments), when given, runs on the
    thread before the barrier (a request loads its rows before it writes, so the loading is
    not part of the race), and fn is called with the arguments it returns."""
    argument_lists = [tuple(arguments) for arguments in argument_lists]
    start = threading.Barrier(len(argument_lists))
    results = [None] * len(argument_lists)
    raised = [None] * len(argument_lists)

    def run(index, arguments):
        try:
            if prepare is not None:
                arguments = prepare(*arguments)
            start.wait()
        except BaseException as exc:
            # Whoever is already waiting would wait for this thread forever.
            start.abort()
            raised[index] = exc
            connection.close()
            return
        try:
            results[index] = fn(*arguments)
        except catching as exc:
            results[index] = exc
        except BaseException as exc:
            raised[index] = exc
        finally:
            connection.close()

    threads = [
        threading.Thread(target=run, args=(index, arguments))
        for index, arguments in enumerate(argument_lists)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    failures = [exc for exc in raised if exc is not None]
    if failures:
        # The failure itself, rather than the broken barrier it left the other threads.
        broken = threading.BrokenBarrierError
        raise next((e for e in failures if not isinstance(e, broken)), failures[0])
    return results


def backend_pid() -> int:
    """This thread's database session."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        return cursor.fetchone()[0]


def sessions_waiting_on_me() -> set[int]:
    """The database sessions now waiting for a lock this thread's session holds, directly or
    queued behind another such session (the second to want a locked row waits for the first).
    Read from pg_locks, which is live: pg_stat_activity shows, for the rest of a transaction,
    what it showed at its first read there."""
    with connection.cursor() as cursor:
        cursor.execute(
            """
            WITH RECURSIVE waiting(pid) AS (
                SELECT pid FROM pg_locks
                 WHERE NOT granted AND pg_backend_pid() = ANY(pg_blocking_pids(pid))
                UNION
                SELECT queued.pid FROM pg_locks queued, waiting
                 WHERE NOT queued.granted AND waiting.pid = ANY(pg_blocking_pids(queued.pid))
            )
            SELECT pid FROM waiting
            """
        )
        return {pid for (pid,) in cursor.fetchall()}
