"""Pure rendering helpers for artifacts: markdown, sanitised HTML, code, JSON and diffs."""

import difflib
import importlib
import json
import re
from functools import lru_cache
from html import escape
from types import FunctionType

import nh3
from markdown_it import MarkdownIt
from markdown_it.token import Token
from pygments import highlight
from pygments.formatters import HtmlFormatter
from pygments.lexers import get_lexer_by_name
from pygments.util import ClassNotFound

from agntchat.core.validation import MAX_JSON_DEPTH, json_depth
from artifacts.html_nesting import MAX_HTML_DEPTH, html_nesting_depth

LINK_REL = "noopener noreferrer nofollow"
SAFE_URL_SCHEMES = {"http", "https", "mailto"}

# Class-based output so the page can theme it; nowrap because we add <pre><code> ourselves.
_FORMATTER = HtmlFormatter(nowrap=True)
_LANGUAGE_RE = re.compile(r"^[A-Za-z0-9_+#.-]{1,40}$")


# Past this, code is shown as plain text: pygments' lexers cost tens of regex tries per token
# (a 480 KB file of "(" took 30 s, holding a request thread), while most code is far smaller.
HIGHLIGHT_MAX_CHARS = 100_000


def highlight_code(code, language):
    """Return `code` as class-highlighted HTML, or escaped plain text for an unknown language
    or a long text."""
    lexer = None
    if language and _LANGUAGE_RE.match(language) and len(code) <= HIGHLIGHT_MAX_CHARS:
        try:
            lexer = get_lexer_by_name(language)
        except ClassNotFound:
            lexer = None
    if lexer is None:
        return f"<pre><code>{escape(code, quote=False)}</code></pre>\n"
    body = highlight(code, lexer, _FORMATTER)
    # The language went through _LANGUAGE_RE, but escape anyway: it lands in an attribute.
    return f'<pre class="highlight"><code class="language-{escape(language)}">{body}</code></pre>\n'


def _fence_highlight(code, language, _attrs):
    # markdown-it uses the result verbatim when it starts with "<pre"; "" means "do the default".
    return highlight_code(code, language) if language else ""


# A bare web address in text becomes a link: http and https only (never javascript: or
# data:), not inside a link or code already, trailing punctuation left out of it.
_BARE_URL_RE = re.compile(r"\bhttps?://[^\s<>\"'`]+", re.I)
_URL_TAIL = ".,;:!?'\")]}*_~"


def _url_end(url: str) -> str:
    """URL less the punctuation that ends the sentence around it (a ")" it opened stays)."""
    while url and url[-1] in _URL_TAIL:
        if url[-1] == ")" and url.count("(") >= url.count(")"):
            break
        url = url[:-1]
    return url


def _link_bare_urls(state) -> None:
    for block in state.tokens:
        if block.type != "inline" or not block.children:
            continue
        children, in_link = [], 0
        for token in block.children:
            in_link += {"link_open": 1, "link_close": -1}.get(token.type, 0)
            if token.type != "text" or in_link or "://" not in token.content:
                children.append(token)
                continue
            text, at = token.content, 0
            for match in _BARE_URL_RE.finditer(text):
                url = _url_end(match.group())
                href = state.md.normalizeLink(url)
                if len(url) <= len("https://") or not state.md.validateLink(href):
                    continue
                if match.start() > at:
                    children.append(_text_token(state, text[at : match.start()]))
                opening = Token("link_open", "a", 1)
                opening.attrs = {"href": href}
                children += [opening, _text_token(state, url), Token("link_close", "a", -1)]
                at = match.start() + len(url)
            if at < len(text):
                children.append(_text_token(state, text[at:]))
        block.children = children


def _text_token(_state, content: str):
    token = Token("text", "", 0)
    token.content = content
    return token


# markdown-it pads each short table row with empty cells up to the header's count, 65,536 of
# them at most: a 20,000-character message of one-cell rows under a wide header rendered to
# 800 KB in over a second, on every page showing it. Past this many the table ends there.
MAX_PADDED_CELLS = 1_000
# The module, not the rule function of the same name that markdown_it.rules_block exports.
_TABLES = importlib.import_module("markdown_it.rules_block.table")
_TABLES.MAX_AUTOCOMPLETED_CELLS = MAX_PADDED_CELLS


def _table(state, start_line, end_line, silent):
    """markdown-it's table rule with MAX_PADDED_CELLS spent over the whole text, not per table
    (a hundred small tables padded to 1 MB): once it is spent, a table ends at its first short
    row; tables written out whole still show."""
    left = state.env.get("padding_left", MAX_PADDED_CELLS)
    # The rule reads its limit from its module's globals: this call gets its own copy of them.
    rule = FunctionType(
        _TABLES.table.__code__, {**_TABLES.table.__globals__, "MAX_AUTOCOMPLETED_CELLS": left}
    )
    first = len(state.tokens)
    found = rule(state, start_line, end_line, silent)
    if found and not silent:
        # Empty cells: the padding, and any written empty (so at least what the padding took).
        empty = sum(1 for t in state.tokens[first:] if t.type == "inline" and not t.content)
        state.env["padding_left"] = max(0, left - empty)
    return found


_MARKDOWN = MarkdownIt(
    "commonmark", {"html": False, "linkify": False, "highlight": _fence_highlight}
).enable(["table", "strikethrough"])
_MARKDOWN.block.ruler.at("table", _table, {"alt": ["paragraph", "reference"]})
_MARKDOWN.core.ruler.push("bare_urls", _link_bare_urls)

_MARKDOWN_CLEANER = nh3.Cleaner(
    tags={
        "p", "br", "hr", "h1", "h2", "h3", "h4", "h5", "h6", "strong", "em", "s", "del",
        "code", "pre", "blockquote", "ul", "ol", "li", "a", "img", "span",
        "table", "thead", "tbody", "tr", "th", "td",
    },
    attributes={
        "a": {"href", "title"},
        "img": {"src", "alt", "title"},
        "ol": {"start"},
        "code": {"class"},
        "pre": {"class"},
        "span": {"class"},
        "th": {"style"},
        "td": {"style"},
    },
    # Table alignment is the only inline style markdown-it emits.
    filter_style_properties={"text-align"},
    url_schemes=SAFE_URL_SCHEMES,
    link_rel=LINK_REL,
)  # fmt: skip


# Past this, markdown is shown as plain text: markdown-it's inline rules retry at every
# bracket or emphasis mark, so a long run of "[" costs several times what prose does
# (480 KB of them held a request thread for seconds), while most documents are far smaller.
# Nesting needs no limit of its own: markdown-it stops nesting blocks at maxNesting.
FORMAT_MAX_CHARS = 100_000
TOO_LARGE_TO_FORMAT = "This document is too large to format: it is shown as plain text."


# Pages render message bodies at each view, and a hostile body within a message's 20,000
# characters costs up to a second or more (a run of "![" or of backticks; prose, a millisecond):
# the renderings of long texts are kept, a few hundred per process, so each costs that once.
KEPT_FROM_CHARS = 2_000


def render_markdown(text):
    """Render untrusted markdown to safe HTML (raw HTML in the source is shown as text); a
    text longer than FORMAT_MAX_CHARS is shown escaped and whole, with a note saying why."""
    text = text or ""
    if len(text) > FORMAT_MAX_CHARS:
        return f'<p class="render-note">{TOO_LARGE_TO_FORMAT}</p>\n' + highlight_code(text, None)
    if len(text) >= KEPT_FROM_CHARS:
        return _rendered_kept(text)
    return _rendered(text)


def _rendered(text: str) -> str:
    return _MARKDOWN_CLEANER.clean(_MARKDOWN.render(text))


@lru_cache(maxsize=256)
def _rendered_kept(text: str) -> str:
    return _rendered(text)


_DATA_IMAGE_RE = re.compile(r"^data:image/(png|jpeg|gif|webp);base64,[A-Za-z0-9+/=\s]*$", re.I)
# nh3 filters style properties by name only; values can still carry old-IE expression(),
# url() or backslash escapes that hide either, so such declarations are dropped.
_BAD_CSS_RE = re.compile(r"expression|url\s*\(|javascript:|@import|\\", re.I)


def _page_attribute_filter(element, attribute, value):
    if attribute == "style":
        return ";".join(d for d in value.split(";") if not _BAD_CSS_RE.search(d)) or None
    # "data" is an allowed scheme only so inline images work; refuse it everywhere else.
    if value.strip().lower().startswith("data:"):
        if element == "img" and attribute == "src" and _DATA_IMAGE_RE.match(value.strip()):
            return value
        return None
    return value


_PAGE_CLEANER = nh3.Cleaner(
    tags=(nh3.ALLOWED_TAGS | {"main", "section", "tfoot", "abbr", "address"}),
    attributes={
        **nh3.ALLOWED_ATTRIBUTES,
        "*": {"class", "id", "title", "lang", "dir", "style"},
        "a": {"href", "hreflang", "title"},
    },
    attribute_filter=_page_attribute_filter,
    # Property names only; nothing that takes url() (background, list-style-image, …).
    filter_style_properties={
        "color", "background-color", "font-family", "font-size", "font-style", "font-weight",
        "line-height", "letter-spacing", "text-align", "text-decoration", "text-transform",
        "vertical-align", "white-space", "margin", "margin-top", "margin-right",
        "margin-bottom", "margin-left", "padding", "padding-top", "padding-right",
        "padding-bottom", "padding-left", "border", "border-top", "border-right",
        "border-bottom", "border-left", "border-color", "border-style", "border-width",
        "border-radius", "border-collapse", "border-spacing", "width", "height", "max-width",
        "min-width", "max-height", "min-height", "display", "gap", "flex", "flex-direction",
        "flex-wrap", "align-items", "justify-content", "grid-template-columns", "list-style-type",
    },
    url_schemes=SAFE_URL_SCHEMES | {"data"},
    link_rel=LINK_REL,
)  # fmt: skip


def sanitize_html(html):
    """Clean an untrusted HTML page: formatting kept; scripts, handlers, forms and frames gone."""
    return _PAGE_CLEANER.clean(html or "")


# Past this, JSON is shown as sent, not indented: at 64 levels each line gains up to 128
# spaces, so 480 KB of JSON became a 31 MB rendering, stored and served with every read.
PRETTY_MAX_CHARS = 1_000_000


def render_artifact(kind, content, language=None):
    """Render an artifact body of `kind` (markdown, html, code, json) to safe HTML, once, when
    it is stored. Content nested beyond the limits (only versions stored before there were
    limits) is shown as text: parsing it would take too long or exhaust the recursion limit."""
    if kind == "markdown":
        return render_markdown(content)
    if kind == "html":
        if html_nesting_depth(content or "") > MAX_HTML_DEPTH:
            return highlight_code(content, None)
        return sanitize_html(content)
    if kind == "code":
        return highlight_code(content or "", language)
    if kind == "json":
        if json_depth(content or "") > MAX_JSON_DEPTH:
            return highlight_code(content, None)
        try:
            pretty = json.dumps(json.loads(content), indent=2, ensure_ascii=False)
        except (TypeError, ValueError):
            return highlight_code(content or "", None)
        if len(pretty) > PRETTY_MAX_CHARS:
            return highlight_code(content, None)  # shown as sent
        return highlight_code(pretty, "json")
    raise ValueError(f"unknown artifact kind: {kind!r}")


# Steps of the matcher's search (see _BoundedMatcher) one diff may take. difflib pairs each
# line with every equal line of the other version, again at each level of its recursion, so
# its time grows with the square of the line count or worse, and versions go up to 500 KB.
# Enough for exact diffs of documents of a few thousand lines; a cap on one request's cost.
DIFF_BUDGET = 2_000_000
TOO_LARGE_TO_COMPARE = (
    "These versions are too large to compare line by line: everything from the first "
    "changed line to the last is shown as removed and added."
)


# Rows of the diff's table at most: each costs ~120 bytes of markup whatever its line, so two
# 500 KB versions of one-letter lines made a 66 MB table. The unified text and counts stay whole.
DIFF_MAX_ROWS = 5_000
TABLE_CUT = "The table stops here: {} more lines are in the unified diff."


class _OverBudget(Exception):
    pass


class _BoundedMatcher(difflib.SequenceMatcher):
    """difflib's line matcher (no autojunk: repeated lines still match) that stops once its
    search would pass BUDGET steps. Its matches are then only the lines equal at both ends,
    so everything from the first change to the last shows as removed and added; `exact`
    says whether that happened."""

    def __init__(self, a, b, budget):
        self.budget, self.exact = budget, True
        super().__init__(None, a, b, autojunk=False)

    def find_longest_match(self, alo, ahi, blo, bhi):
        # Its loop visits each line of a[alo:ahi] and every place that line occurs in b:
        # charged before it runs, so the budget is never overspent.
        self.budget -= (ahi - alo) + sum(len(self.b2j.get(line, ())) for line in self.a[alo:ahi])
        if self.budget < 0:
            raise _OverBudget
        return super().find_longest_match(alo, ahi, blo, bhi)

    def get_matching_blocks(self):
        try:
            return super().get_matching_blocks()
        except _OverBudget:
            self.exact = False
        a, b = self.a, self.b
        head = 0
        while head < min(len(a), len(b)) and a[head] == b[head]:
            head += 1
        tail = 0
        while tail < min(len(a), len(b)) - head and a[-1 - tail] == b[-1 - tail]:
            tail += 1
        ends = [(0, 0, head), (len(a) - tail, len(b) - tail, tail)]
        return [block for block in ends if block[2]] + [(len(a), len(b), 0)]


def diff_versions(old, new, old_label="old", new_label="new"):
    """Compare two versions line by line: unified text, an escaped HTML table and counts.
    `exact` is False when they were too large to compare line by line: the lines from the
    first change to the last are then shown removed and added whole, and the table says so."""
    old_lines, new_lines = (old or "").splitlines(), (new or "").splitlines()
    matcher = _BoundedMatcher(old_lines, new_lines, DIFF_BUDGET)
    # The text and the table come from the same matches, so they always agree.
    text, rows, added, removed = [], [], 0, 0

    def row(make, *args):
        # Made only while the table has room (DIFF_MAX_ROWS); the rest is counted in the note.
        if len(rows) < DIFF_MAX_ROWS:
            rows.append(make(*args))

    for group in matcher.get_grouped_opcodes(3):
        first, last = group[0], group[-1]
        old_range, new_range = _hunk_range(first[1], last[2]), _hunk_range(first[3], last[4])
        text.append(f"@@ -{old_range} +{new_range} @@")
        row(_hunk_row, old_range, new_range)
        for tag, i1, i2, j1, j2 in group:
            if tag == "equal":
                for k in range(i2 - i1):
                    text.append(" " + old_lines[i1 + k])
                    row(_diff_row, "ctx", i1 + k + 1, j1 + k + 1, old_lines[i1 + k])
                continue
            for k in range(i1, i2):
                text.append("-" + old_lines[k])
                row(_diff_row, "del", k + 1, "", old_lines[k])
            for k in range(j1, j2):
                text.append("+" + new_lines[k])
                row(_diff_row, "ins", "", k + 1, new_lines[k])
            removed += i2 - i1
            added += j2 - j1
    if len(text) > len(rows):
        rows.append(
            f'<tr class="diff-note"><td colspan="3">{TABLE_CUT.format(len(text) - len(rows))}'
            "</td></tr>"
        )
    if text:
        text[:0] = [f"--- {old_label}", f"+++ {new_label}"]
    if not matcher.exact:
        rows.insert(0, f'<tr class="diff-note"><td colspan="3">{TOO_LARGE_TO_COMPARE}</td></tr>')
    html = (
        f'<table class="diff"><thead><tr><th>{escape(old_label)}</th><th>{escape(new_label)}'
        f"</th><th></th></tr></thead><tbody>{''.join(rows)}</tbody></table>"
    )
    return {
        "unified": "\n".join(text),
        "html": html,
        "added": added,
        "removed": removed,
        "exact": matcher.exact,
    }


def _hunk_range(start, stop):
    # Same notation as difflib.unified_diff, so the table and the text agree.
    length = stop - start
    if length == 1:
        return f"{start + 1}"
    return f"{start + 1 if length else start},{length}"


def _hunk_row(old_range, new_range):
    return f'<tr class="diff-hunk"><td colspan="3">@@ -{old_range} +{new_range} @@</td></tr>'


def _diff_row(kind, old_no, new_no, text):
    line = escape(text, quote=False)
    if kind != "ctx":
        line = f"<{kind}>{line}</{kind}>"
    return (
        f'<tr class="diff-{kind}"><td class="diff-no">{old_no}</td>'
        f'<td class="diff-no">{new_no}</td><td class="diff-line">{line}</td></tr>'
    )
