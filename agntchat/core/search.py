"""Full-text search in PostgreSQL, one way for every app: a query of any of a text's significant
words (or a person's own web-search syntax), matched against a vector of columns and ranked. The
GIN indexes that serve it are declared on the models with the same CONFIG."""

import re

from django.contrib.postgres.search import SearchQuery, SearchRank, SearchVector
from django.db.models import FloatField, Value

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


def matching(queryset, document: SearchVector, query: SearchQuery | None):
    """QUERYSET's rows whose DOCUMENT matches QUERY, annotated with their ``rank`` (order by
    "-rank" for the best first); none when there is no query (a text of stop words only)."""
    if query is None:
        return queryset.annotate(rank=Value(0.0, output_field=FloatField())).none()
    return (
        queryset.annotate(document=document)
        .filter(document=query)
        .annotate(rank=SearchRank(document, query))
    )
