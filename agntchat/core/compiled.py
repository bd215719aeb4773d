"""Hot statements whose SQL is compiled once per process, then run again with other values.

Django compiles a queryset to SQL on every run, and the reads on the message path (access checks,
turn planning, the work payload's joins) run for every message: most of their cost in Python is
that compiling (what it buys: docs/benchmarks.md). ``compiled_objects`` (model instances, with their ``select_related`` objects and
annotations) and ``compiled_rows`` (plain rows) build the queryset once with stand-in values,
keep its SQL and how its rows become objects, and later bind the real values at the stand-ins'
positions. The rules stay written once, as the querysets every other caller uses.
``compiled_insert`` does the same for the inserts of every post.
"""

import secrets
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from functools import cached_property

from django.db import connection
from django.db.models import QuerySet
from django.db.models.constants import OnConflict
from django.db.models.query import get_related_populators
from django.db.models.sql import InsertQuery
from django.db.models.sql.compiler import SQLCompiler


@dataclass
class Compiled:
    sql: str
    slots: list  # per SQL parameter: (value name, None) or (None, constant)
    compiler: SQLCompiler  # knows the columns: their converters, and which model each fills
    converters: dict

    def params(self, values: dict) -> list:
        return [values[name] if name else constant for name, constant in self.slots]

    @cached_property
    def builder(self):
        """Row → model instance, the way Django's own model iterable does it, from the
        compiler's record of which columns belong to which model."""
        compiler = self.compiler
        info, select, alias = compiler.klass_info, compiler.select, compiler.using
        first, last = info["select_fields"][0], info["select_fields"][-1] + 1
        names = [column[0].target.attname for column in select[first:last]]
        related = get_related_populators(info, select, alias)
        annotations = list(compiler.annotation_col_map.items())

        def build(row):
            obj = info["model"].from_db(alias, names, row[first:last])
            for populator in related:
                populator.populate(row, obj)
            for name, position in annotations:
                setattr(obj, name, row[position])
            return obj

        return build

    def objects(self, rows) -> list:
        """Model instances from rows of this statement, as iterating its queryset gives them."""
        if self.converters:
            rows = self.compiler.apply_converters(rows, self.converters)
        return [self.builder(row) for row in rows]


_cache: dict = {}


def _stand_in(value):
    """A value of VALUE's type that cannot occur by chance, so its position in the compiled
    parameters says where VALUE goes."""
    if isinstance(value, uuid.UUID):
        return uuid.uuid4()
    if isinstance(value, str):
        return f"stand-in-{uuid.uuid4().hex}"
    if isinstance(value, datetime):  # a random microsecond of the 1900s
        return datetime(1900, 1, 1, tzinfo=UTC) + timedelta(microseconds=secrets.randbelow(10**15))
    raise TypeError(f"compiled SQL binds UUIDs, strings and datetimes, not {type(value).__name__}")


def _compiled(shape, build, values: dict) -> Compiled:
    """The compiled form of SHAPE, compiling BUILD once with stand-ins for VALUES."""
    entry = _cache.get(shape)
    if entry is None:
        stand_ins = {name: _stand_in(value) for name, value in values.items()}
        queryset: QuerySet = build(**stand_ins)
        compiler = queryset.query.get_compiler(connection.alias)
        sql, params = compiler.as_sql()
        by_value = {v: name for name, v in stand_ins.items()}
        slots = [(by_value[p], None) if p in by_value else (None, p) for p in params]
        missing = set(values) - {name for name, _ in slots}
        if missing:
            raise ValueError(f"{shape}: the compiled SQL does not bind {sorted(missing)}")
        columns = [column[0] for column in compiler.select[: compiler.col_count]]
        entry = _cache[shape] = Compiled(sql, slots, compiler, compiler.get_converters(columns))
    return entry


def _fetch(entry: Compiled, values: dict) -> list[tuple]:
    with connection.cursor() as cursor:
        cursor.execute(entry.sql, entry.params(values))
        return cursor.fetchall()


def compiled_rows(shape, build, **values) -> list[tuple]:
    """The rows of ``build(**values)`` (a ``values_list`` queryset of plain columns: ids, text,
    numbers; no field converters are applied), with the SQL compiled once per SHAPE."""
    return _fetch(_compiled(shape, build, values), values)


def compiled_objects(shape, build, **values) -> list:
    """The model instances of ``build(**values)``, as iterating that queryset gives them (with
    ``select_related`` objects and annotations), its SQL compiled once per SHAPE.

    SHAPE names everything that changes the SQL's form (not its values); BUILD takes VALUES by
    name and returns a queryset."""
    entry = _compiled(shape, build, values)
    return entry.objects(_fetch(entry, values))


def compiled_read(shape, build) -> Compiled:
    """``build()``'s queryset compiled once per SHAPE, for a read that runs as part of a larger
    statement (a claim's final SELECT, core.claims): its ``sql`` and ``params({})``, and
    ``objects(rows)`` for what the statement returns."""
    return _compiled(shape, build, {})


def compiled_first(shape, build, **values):
    """The first instance ``compiled_objects`` returns, or None."""
    return next(iter(compiled_objects(shape, build, **values)), None)


def _insert_sql(obj, ignore_conflicts: bool) -> str:
    model = type(obj)
    shape = ("insert", model, ignore_conflicts)
    sql = _cache.get(shape)
    if sql is None:
        query = InsertQuery(model, on_conflict=OnConflict.IGNORE if ignore_conflicts else None)
        query.insert_values(model._meta.local_concrete_fields, [obj])
        ((sql, _),) = query.get_compiler(connection.alias).as_sql()
        _cache[shape] = sql
    return sql


def compiled_insert(*objs, ignore_conflicts: bool = False, then=None):
    """Insert new instances (their keys set in Python) as ``save()`` would, all in one
    statement, each INSERT compiled once per model. No model signals are sent: nothing here
    listens to them.

    THEN, when given, is called once the rows' own values are set (``created_at``…) and returns
    what else the statement does, with its parameters (``%s`` style): as in ``claims.ack_many``,
    more CTEs (starting with a comma) and the final statement, whose rows are returned. The
    parts of one statement do not see each other's writes. A post writes its message, turn
    decision, deliveries and the conversation's update this way: one round trip instead of
    four."""
    statements, params = [], []
    for obj in objs:
        fields = type(obj)._meta.local_concrete_fields
        statements.append(_insert_sql(obj, ignore_conflicts))
        # pre_save fills what fills itself on insert (auto_now_add…), on the instance too.
        params += [
            field.get_db_prep_save(field.pre_save(obj, True), connection) for field in fields
        ]
    if then is None and len(statements) == 1:
        sql = statements[0]
    else:
        rest, rest_params = then() if then is not None else ("SELECT 1", [])
        ctes = ", ".join(f"insert_{i} AS ({s})" for i, s in enumerate(statements))
        # PostgreSQL runs every data-modifying WITH part, whether or not the rest reads it.
        sql = f"WITH {ctes}\n{rest}"
        params += rest_params
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        rows = cursor.fetchall() if then is not None else None
    for obj in objs:
        obj._state.adding, obj._state.db = False, connection.alias
    return rows
