"""What a full-text search (work/search.py) costs in a big workspace, in one process.

A channel of --messages messages of 30 random words each; a common word ("project") is in
every other one, a rare word ("zebra") in 20. Times ``search.search`` as the search page, the
REST endpoint and the agents' tool call it (one page of 20, every kind), median and p90 of
--count runs after warming. With --migration it also times the migration that stores the
messages' and tasks' search vectors (conversations 0027) on that many messages: it migrates
back before it, fills the table, and migrates forward.

    .venv/bin/python -m bench.search                      # 100,000 messages
    .venv/bin/python -m bench.search --messages 20000 --migration

Same database and settings as pipeline.py (the bench database is recreated): set BENCH_DB,
BENCH_REDIS_PREFIX and REDIS_URL to keep off another run's.
"""

import argparse
import random
import statistics
import string
import time

from bench import pipeline

COMMON, RARE = "project", "zebra"
WORDS_PER_MESSAGE = 30


def vocabulary(size: int = 5000) -> list[str]:
    """SIZE made-up words of 4 to 9 letters (the same on every run)."""
    rng = random.Random(0)
    return ["".join(rng.choices(string.ascii_lowercase, k=rng.randint(4, 9))) for _ in range(size)]


def fill(channel, person, messages: int) -> None:
    """MESSAGES messages by PERSON in CHANNEL, written by PostgreSQL itself (in SQL, so as well
    before as after the migration that adds the vector column)."""
    from django.db import connection

    words = vocabulary()
    with connection.cursor() as cursor:
        cursor.execute("SELECT setseed(0)")
        cursor.execute(
            f"""
            INSERT INTO conversations_message (id, created_at, updated_at, conversation_id,
                author_user_id, kind, body, payload, client_ref, reply_count, reactions)
            SELECT gen_random_uuid(), now() - n * interval '1 second', now(), %(channel)s,
                %(person)s, 'text',
                (SELECT string_agg((%(words)s::text[])[1 + floor(random() * %(size)s)::int], ' ')
                   FROM generate_series(1, %(count)s) WHERE n > 0)
                || CASE WHEN n %% 2 = 0 THEN ' {COMMON}' ELSE '' END
                || CASE WHEN n %% %(every)s = 0 THEN ' {RARE}' ELSE '' END,
                '{{}}', '', 0, '{{}}'
            FROM generate_series(1, %(messages)s) n
            """,
            {
                "channel": channel.id,
                "person": person.id,
                "words": words,
                "size": len(words),
                "count": WORDS_PER_MESSAGE,
                "messages": messages,
                "every": max(1, messages // 20),
            },
        )
        cursor.execute("ANALYZE")


def times_ms(operation, count: int) -> list[float]:
    times = []
    for _ in range(count):
        start = time.perf_counter()
        operation()
        times.append((time.perf_counter() - start) * 1000)
    return sorted(times)


def time_migration(channel, person, messages: int) -> float:
    """Seconds to migrate conversations to 0027 with MESSAGES messages in the table."""
    from django.core.management import call_command
    from django.db import connection

    call_command("migrate", "conversations", "0026", verbosity=0)
    fill(channel, person, messages)
    start = time.perf_counter()
    call_command("migrate", "conversations", "0027", verbosity=0)
    seconds = time.perf_counter() - start
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE")  # as autovacuum soon does: the new column has no statistics
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=100000)
    parser.add_argument("--count", type=int, default=20)
    parser.add_argument("--migration", action="store_true", help="time the migration too")
    args = parser.parse_args()
    pipeline.fresh_start()

    from django.conf import settings

    from work import search

    # A benchmark measures the query, not the rate limit.
    settings.SEARCHES_PER_MINUTE = settings.SEARCHES_BURST = 10**9
    scene = pipeline.create_scene(["search"])
    _, channel, _ = scene.phases["search"]
    person = scene.user
    if args.migration:
        seconds = time_migration(channel, person, args.messages)
        print(f"migration conversations 0027 on {args.messages} messages: {seconds:.2f} s")
    else:
        fill(channel, person, args.messages)

    print(
        f"A channel of {args.messages} messages, {WORDS_PER_MESSAGE} words each; search.search, "
        f"a page of 20 of every kind; wall time of {args.count} runs:"
    )
    for label, text in (
        (f"common word ({COMMON}, in half)", COMMON),
        (f"rare word ({RARE}, in 20)", RARE),
        (f"both ({COMMON} {RARE})", f"{COMMON} {RARE}"),
    ):
        hits, _ = search.search(person, text)  # warm, and check it finds something
        assert hits, text
        times = times_ms(lambda text=text: search.search(person, text), args.count)
        p50, p90 = statistics.median(times), times[int(len(times) * 0.9) - 1]
        print(f"  {label:34s} p50 {p50:8.1f} ms   p90 {p90:8.1f} ms")


if __name__ == "__main__":
    main()
