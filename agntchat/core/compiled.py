"""Hot reads whose SQL is compiled once per process, then run again with other values.

Django compiles a queryset to SQL on every run. For the few reads on the message path that carry
visibility subqueries (access checks, turn planning), compiling costs several times what
PostgreSQL needs to answer. ``compiled_raw`` (model instances) and ``compiled_rows`` (plain
rows) build the queryset once with stand-in values, keep its SQL, and later bind the real values
at the stand-ins' positions. The rules stay
written once, as the querysets every other caller uses.
"""

import uuid

from django.db import connection
from django.db.models import QuerySet

_cache: dict = {}


def _stand_in(value):
    """A value of VALUE's type that cannot occur by chance, so its position in the compiled
    parameters says where VALUE goes."""
    if isinstance(value, uuid.UUID):
        return uuid.uuid4()
    if isinstance(value, str):
        return f"stand-in-{uuid.uuid4().hex}"
    raise TypeError(f"compiled SQL binds UUIDs and strings, not {type(value).__name__}")


def _compiled(shape, build, values: dict):
    """(model, SQL, params) for SHAPE, compiling BUILD once with stand-ins for VALUES."""
    entry = _cache.get(shape)
    if entry is None:
        stand_ins = {name: _stand_in(value) for name, value in values.items()}
        queryset: QuerySet = build(**stand_ins)
        sql, params = queryset.query.sql_with_params()
        by_value = {v: name for name, v in stand_ins.items()}
        slots = [(by_value[p], None) if p in by_value else (None, p) for p in params]
        missing = set(values) - {name for name, _ in slots}
        if missing:
            raise ValueError(f"{shape}: the compiled SQL does not bind {sorted(missing)}")
        entry = _cache[shape] = (queryset.model, sql, slots)
    model, sql, slots = entry
    return model, sql, [values[name] if name else constant for name, constant in slots]


def compiled_rows(shape, build, **values) -> list[tuple]:
    """The rows of ``build(**values)`` (a ``values_list`` queryset of plain columns: ids, text,
    numbers; no field converters are applied), with the SQL compiled once per SHAPE."""
    _, sql, params = _compiled(shape, build, values)
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.fetchall()


def compiled_raw(shape, build, **values):
    """``build(**values).model.objects.raw(...)``, with the SQL compiled once per SHAPE.

    SHAPE names everything that changes the SQL's form (not its values); BUILD takes VALUES by
    name and returns a queryset. Rows come back as model instances with annotations as
    attributes (select_related is not kept: related objects load lazily)."""
    model, sql, params = _compiled(shape, build, values)
    return model.objects.raw(sql, params)


def compiled_first(shape, build, **values):
    """The first instance ``compiled_raw`` returns, or None."""
    return next(iter(compiled_raw(shape, build, **values)), None)
