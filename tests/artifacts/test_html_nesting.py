"""artifacts.html_nesting: how deep a page nests, told before the sanitiser's parser sees it.

The parser itself is the judge: each hostile page below is sanitised (with every element kept)
and the depth of the tree it builds is what the count must never fall below."""

import math
import random
from html.parser import HTMLParser

import nh3
import pytest

from artifacts.html_nesting import MAX_HTML_DEPTH, html_nesting_depth

ELEMENTS = (
    "a b big button caption center code col colgroup dd desc div dl dt em font foreignobject g "
    "h1 h2 i li marquee math mi mtext nobr object ol optgroup option p path rb rp rt ruby s "
    "select small span strong sub svg table tbody td tfoot th thead tr tt u ul"
).split()
VOID = {"br", "col", "hr", "img", "input"}


class TreeDepth(HTMLParser):
    """The depth of the tree the sanitiser built, read back from its (well-formed) output."""

    def __init__(self, html):
        super().__init__()
        self.depth = self.deepest = 0
        self.feed(html)

    def handle_starttag(self, tag, attrs):
        if tag not in VOID:
            self.depth += 1
            self.deepest = max(self.deepest, self.depth)

    def handle_endtag(self, tag):
        if tag not in VOID:
            self.depth -= 1


def parser_depth(html: str) -> int:
    kept = nh3.clean(
        html, tags=set(ELEMENTS) | VOID, clean_content_tags=set(), attributes={}, link_rel=None
    )
    return TreeDepth(kept).deepest


@pytest.mark.parametrize(
    ("html", "depth"),
    [
        ("<p>one</p><p>two</p>", 1),
        ("<main><section><div>x</div></section></main>", 3),
        ("<p>a<p>b<p>c<div>d</div><p>e", 1),
        ("<ul><li>a<li>b<li><p>c<li>d</ul>" * 100, 3),
        ("<dl><dt>a<dd>b<dt>c<dd>d</dl>" * 100, 2),
        ("<table><tr><td>a<td>b<tr><td>c</table>" * 100, 4),
        ("<table><thead><tr><th>a</th></tr></thead><tbody><tr><td><p>x</td></tr></table>", 5),
        (
            "<!DOCTYPE html><html><head><title>T</title><style>p { color: red }</style></head>"
            "<body><main><h1>Hi</h1><p>text <br> more</p></main></body></html>",
            2,
        ),
        ("<svg viewBox='0 0 9 9'>" + "<path d='M0 0'/>" * 300 + "</svg>", 1),
        ("<div><!-- <div><div> --><script>x = '<div><div>'</script></div>", 2),
        ('<div title="<div><div>">x</div>' * 100, 1),
    ],
)
def test_it_counts_what_ordinary_pages_nest(html, depth):
    assert html_nesting_depth(html) == depth


HOSTILE = {
    "nested divs": "<div>",
    "unclosed spans": "<span>",
    "paragraph inside div": "<div><p>",
    "formatting reopened in every paragraph": "<p><b id={i}></p>x",
    "end tag the parser ignores": "<span><div></span>",
    "misnested formatting": "<b><div></b>",
    "optgroups outside a select": "<optgroup>",
    "cells outside a table": "<rt><td/>",
    "tables in cells": "<table><td>",
    "lists in items": "<li><ul>",
    "svg breakout": "<svg><div/><div/>",
    "foster-parented formatting": "<math/><table id=1><a id={i}><th>",
    "end tag hidden in a comment": "<div><!-- </div> -->",
    "end tag hidden in an attribute": '<div title="</div>">',
    "end tag hidden in a script": "<div><script>'</div>'</script>",
    "end tag hidden in a script escape": "<div><script><!--<script></script></div>--></script>",
    "end tag hidden in raw text": "<div><textarea></div></textarea>",
}


@pytest.mark.parametrize("pattern", HOSTILE.values(), ids=HOSTILE.keys())
def test_it_never_counts_less_than_the_parser_nests(pattern):
    html = "".join(pattern.format(i=i) for i in range(300))
    assert parser_depth(html) >= 300  # the page really nests that deep
    assert html_nesting_depth(html, limit=10**6) >= parser_depth(html)
    assert html_nesting_depth(html) > MAX_HTML_DEPTH


def test_it_stops_counting_past_the_limit():
    assert html_nesting_depth("<div>" * 100_000, limit=10) == 11


def test_it_gives_up_where_the_parser_may_not_read_raw_text_as_raw_text():
    # Past unclosed formatting (not followed exactly), inside a select the parser may drop the
    # <style> tag and read what follows as markup.
    assert html_nesting_depth("<p><b>x</p><select><style>x</style></select>") == math.inf
    assert html_nesting_depth("<select><style>x</style></select>") == math.inf


def test_it_never_counts_less_than_the_parser_on_tag_soup():
    chaff = ["x", "<!--", "-->", "<![CDATA[", "]]>", "<br>", "<g/>", "<p/>", "<script>", "'"]
    for seed in range(300):
        pick = random.Random(seed)
        soup = "".join(
            pick.choice(chaff)
            if pick.random() < 0.15
            else f"<{'/' * (pick.random() < 0.4)}{pick.choice(ELEMENTS)}>"
            for _ in range(pick.randint(1, 300))
        )
        assert html_nesting_depth(soup, limit=10**6) >= parser_depth(soup), soup
