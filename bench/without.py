"""Bench-only switches: run the product without one of its performance mechanisms.

``BENCH_WITHOUT`` (comma-separated names of ``SWITCHES``) is read by every process of a bench
run: ``bench/settings.py`` for what lives in settings, ``bench/asgi.py`` for what lives in the
ASGI application, ``apply()`` (daphne's process and the in-process benches, after
``django.setup()``) for what lives in code, and ``apply_database()`` (after migrating) for what
lives in the schema. Each "without" is what the product would be with the mechanism removed:
plain Django, channels_redis' public API, PostgreSQL's defaults. ``bench/mechanisms.py``
alternates runs with and without each one.
"""

import os
import sys

# name → what goes, in the words of docs/benchmarks.md
SWITCHES = {
    "compiled": "core/compiled.py: querysets run by the ORM, inserts by bulk_create",
    "http": "core/http.py: Django's own ASGI handler serves HTTP",
    "n_distinct": "the n_distinct override on conversation_id: reset, then ANALYZE",
    "prepared": "server-side binding and prepared statements: Django's client-side binding",
    "relaxed_commit": "synchronous_commit=off inside claims, acks and releases: durable commits",
    "publisher_thread": "the publisher thread: events sent by async_to_sync in the committing thread",
    "thread_cache": "messages marked as having no side threads: one prefetch for every message",
}


def switched_off() -> set[str]:
    names = {name for name in os.environ.get("BENCH_WITHOUT", "").split(",") if name}
    unknown = names - set(SWITCHES)
    if unknown:
        raise SystemExit(f"BENCH_WITHOUT: unknown {sorted(unknown)}; known: {sorted(SWITCHES)}")
    return names


def apply() -> None:
    """Swap out, in this process, the code-level mechanisms named in BENCH_WITHOUT (after
    ``django.setup()``)."""
    off = switched_off()
    if off:
        _load_product()
    if "compiled" in off:
        _without_compiled()
    if "relaxed_commit" in off:
        from agntchat.core import claims

        claims.RELAXED = ""
    if "thread_cache" in off:
        _without_thread_cache()
    if "publisher_thread" in off:
        _without_publisher_thread()


def apply_database(connection) -> None:
    """Schema-level switches, on a freshly migrated database (a psycopg connection)."""
    if "n_distinct" in switched_off():
        for table in ("conversations_message", "conversations_turndecision"):
            connection.execute(
                f"ALTER TABLE {table} ALTER COLUMN conversation_id RESET (n_distinct)"
            )


def _load_product() -> None:
    """Import every module of the project's apps, so that a switched function is replaced
    wherever it was imported by name."""
    import importlib
    import pkgutil
    from pathlib import Path

    from django.apps import apps

    root = Path(__file__).resolve().parent.parent
    for config in apps.get_app_configs():
        if not Path(config.path).is_relative_to(root) or "site-packages" in config.path:
            continue
        for module in pkgutil.walk_packages([config.path], f"{config.name}."):
            if not {"migrations", "management", "bridge"} & set(module.name.split(".")):
                importlib.import_module(module.name)


def _replace(module_name: str, name: str, replacement) -> None:
    """Replace NAME in its module and wherever it was imported by name."""
    original = getattr(sys.modules[module_name], name)
    for module in list(sys.modules.values()):
        if getattr(module, name, None) is original:
            setattr(module, name, replacement)


def _without_compiled() -> None:
    """Every compiled_* call as the plain ORM runs it: the queryset evaluated (compiled on every
    call), a claim's read as a second query on the ids claimed, inserts by ``bulk_create`` and
    the rest of the statement as a statement of its own, all in one transaction."""
    from django.db import connection, transaction

    def compiled_objects(shape, build, **values):
        return list(build(**values))

    def compiled_first(shape, build, **values):
        return next(iter(build(**values)), None)

    class ReadByIds:
        """A claim's read: the claimed ids, then the queryset on them."""

        def __init__(self, queryset):
            self.queryset = queryset
            table = connection.ops.quote_name(queryset.model._meta.db_table)
            self.sql = f"SELECT {table}.id FROM {table} ORDER BY {table}.created_at, {table}.id"

        def params(self, values):
            return []

        def objects(self, rows):
            return list(self.queryset.filter(pk__in=[row[0] for row in rows]))

    def compiled_read(shape, build):
        return ReadByIds(build())

    def compiled_insert(*objs, ignore_conflicts=False, then=None):
        with transaction.atomic():
            by_model = {}
            for obj in objs:
                by_model.setdefault(type(obj), []).append(obj)
            for model, rows in by_model.items():
                model.objects.bulk_create(rows, ignore_conflicts=ignore_conflicts)
            if then is None:
                return None
            sql, params = then()
            if sql.lstrip().startswith(","):  # more CTEs, then the final statement
                sql = "WITH " + sql.lstrip()[1:]
            with connection.cursor() as cursor:
                cursor.execute(sql, params)
                return cursor.fetchall()

    _replace("agntchat.core.compiled", "compiled_objects", compiled_objects)
    _replace("agntchat.core.compiled", "compiled_rows", compiled_objects)
    _replace("agntchat.core.compiled", "compiled_first", compiled_first)
    _replace("agntchat.core.compiled", "compiled_read", compiled_read)
    _replace("agntchat.core.compiled", "compiled_insert", compiled_insert)


def _without_thread_cache() -> None:
    """Side threads prefetched for every message shown; a new message's read by query."""
    from django.db.models import prefetch_related_objects

    from conversations.models import Message

    def with_thread_cards(messages):
        prefetch_related_objects(
            list(messages), "threads__participants__agent", "threads__participants__user"
        )
        return messages

    Message.has_no_threads = lambda self, empty=None: None
    _replace("conversations.payloads", "with_thread_cards", with_thread_cards)


def _without_publisher_thread() -> None:
    """Each event sent on commit by the thread that committed, as Channels' docs show it."""
    from asgiref.sync import async_to_sync

    from agntchat.core import events

    send = async_to_sync(events.Publisher.send)
    events.publisher.submit = lambda topics, event: send([(topics, event)])
