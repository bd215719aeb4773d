"""Full-text search in PostgreSQL, one way for every app: a query of any of a text's significant
words (or a person's own web-search syntax), matched against a vector of columns and ranked. The
GIN indexes that serve it are declared on the models with the same CONFIG; where many rows match,
the models store each row's vector (a column a trigger keeps, read through ``stored``)."""

import re
from functools import reduce

from django.contrib.postgres.search import (
    SearchQuery,
    SearchRank,
    SearchVector,
    SearchVectorField,
)
from django.db import migrations
from django.db.models import F, FloatField, Func, Value
from django.db.models.expressions import CombinedExpression

CONFIG = "english"
WORD = re.compile(r"[a-z0-9]{3,}")
STOP = frozenset(
    "the and for you are with this that have from your was were what when will can not but "
    "all any our out about into just they them then than there their would could should".split()
)


def content_words(text: str) -> set[str]:
    return {w for w in WORD.findall(text.lower()) if w not in STOP}


def any_word_text(text: str, most: int = 12) -> str | None:
    """TEXT's significant words as a raw query matching any of them (``raw_query``); None when
    it has none. Words are letters and digits only, so the raw syntax is safe."""
    found = sorted(content_words(text), key=len, reverse=True)[:most]
    return " | ".join(found) if found else None


def raw_query(words: str) -> SearchQuery:
    return SearchQuery(words, search_type="raw", config=CONFIG)


def any_word_query(text: str, most: int = 12) -> SearchQuery | None:
    """A full-text query matching any of TEXT's significant words (ranked by how many match);
    None when it has none."""
    words = any_word_text(text, most)
    return raw_query(words) if words else None


# A run of "-" that each negate what follows (only separators between them): PostgreSQL's parser
# holds 32 of them at most ("tsquery stack too small", a 500 for "-" typed 33 times).
NEGATIONS = re.compile(r"(?<![^\s!&()<|])-(?:[\s!&()<|]*-){2,}")


def web_query(text: str) -> SearchQuery:
    """TEXT in web-search syntax ("quoted phrases", or, -excluded). A run of minus signs counts
    as one, or two when even (the same query: not-not is yes); a NUL, which no PostgreSQL text
    may hold, as a space."""
    text = NEGATIONS.sub(
        lambda run: "-" if run[0].count("-") % 2 else "--", text.replace("\0", " ")
    )
    return SearchQuery(text, search_type="websearch", config=CONFIG)


def vector(*fields, **weights) -> SearchVector:
    """The columns FIELDS, then WEIGHTS' columns by their weight (A highest)."""
    out = SearchVector(*fields, config=CONFIG) if fields else None
    for field, weight in weights.items():
        part = SearchVector(field, weight=weight, config=CONFIG)
        out = part if out is None else out + part
    return out


def stored(*fields, **weights):
    """The stored vector columns FIELDS, then WEIGHTS' columns by their weight (A highest): as
    ``vector`` of their texts, without computing a vector for every row."""
    parts = [F(field) for field in fields] + [
        Func(F(field), Value(weight), function="setweight", output_field=SearchVectorField())
        for field, weight in weights.items()
    ]
    return reduce(
        lambda out, part: CombinedExpression(out, "||", part, output_field=SearchVectorField()),
        parts,
    )


def vector_trigger(table: str, column: str) -> migrations.RunSQL:
    """A migration's operation: TABLE's ``search_vector`` is kept the vector of its COLUMN by
    PostgreSQL on every INSERT and every UPDATE that sets either, whoever writes (an edit, a
    deletion, a bulk or raw write), whatever value the writer sent for the vector; updates of
    other columns only (a claim's lease, a reaction) do not run it. A trigger rather than a
    generated column: adding one of those rewrites the table under a lock that stops every read."""
    name = f"{table}_search_vector"
    return migrations.RunSQL(
        f"""
        CREATE FUNCTION {name}() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            IF TG_OP = 'INSERT' OR NEW.{column} IS DISTINCT FROM OLD.{column}
                    OR OLD.search_vector IS NULL THEN
                NEW.search_vector := to_tsvector('{CONFIG}', COALESCE(NEW.{column}, ''));
            ELSE
                NEW.search_vector := OLD.search_vector;
            END IF;
            RETURN NEW;
        END $$;
        CREATE TRIGGER {name} BEFORE INSERT OR UPDATE OF {column}, search_vector ON {table}
            FOR EACH ROW EXECUTE FUNCTION {name}();
        """,
        f"DROP TRIGGER {name} ON {table}; DROP FUNCTION {name}();",
    )


def fill_vectors(table: str, batch: int = 5000) -> migrations.RunPython:
    """A migration's operation (of a non-atomic migration): the vectors of TABLE's rows written
    before ``vector_trigger``, by the trigger, BATCH rows per transaction in key order, so no
    lock is held long."""

    def fill(apps, schema_editor):
        last = "00000000-0000-0000-0000-000000000000"  # before every key
        with schema_editor.connection.cursor() as cursor:
            while True:
                cursor.execute(
                    f"SELECT max(id::text)::uuid FROM "
                    f"(SELECT id FROM {table} WHERE id > %s ORDER BY id LIMIT %s) AS b",
                    [last, batch],
                )
                (upto,) = cursor.fetchone()
                if upto is None:
                    return
                cursor.execute(
                    f"UPDATE {table} SET search_vector = NULL "
                    "WHERE id > %s AND id <= %s AND search_vector IS NULL",
                    [last, upto],
                )
                last = upto

    return migrations.RunPython(fill, migrations.RunPython.noop, elidable=True)


def matching(queryset, document, query: SearchQuery | None):
    """QUERYSET's rows whose DOCUMENT matches QUERY, annotated with their ``rank`` (order by
    "-rank" for the best first); none when there is no query (a text of stop words only)."""
    if query is None:
        return queryset.annotate(rank=Value(0.0, output_field=FloatField())).none()
    return (
        queryset.annotate(document=document)
        .filter(document=query)
        .annotate(rank=SearchRank(document, query))
    )
