"""How deeply an HTML page nests, measured before the sanitiser parses it.

The sanitiser's parser (html5ever, inside nh3) walks its stack of open elements for scope checks
and for formatting elements to reopen, so its time grows with the number of tags times the
depth (figures: docs/benchmarks.md, bench/html_pages.py). Pages nesting deeper than
MAX_HTML_DEPTH are refused before the sanitiser sees them.

The count reads tags as the HTML tokenizer does (comments, raw text, script escapes, quoted
attributes, SVG/MathML) and follows the tree builder's stack of open elements exactly through
what pages are made of: unclosed <p>, <li>, cells and rows, implied tbody, elements closed by
their ancestors' end tags. Past markup it does not follow exactly (misnested formatting, select,
forms, templates, …) it only closes an element when the parser certainly closes it, so from
there on it may count more than the parser, never less, however the markup is arranged; where
it cannot tell how the parser will read what follows (raw text inside a select, a template or
SVG past such markup), the page counts as too deep.
"""

import math
import re
from collections import defaultdict
from functools import cache

# Far deeper than pages nest (browsers stop nesting at 512), shallow enough that no arrangement
# of the 500 KB a page may have keeps the sanitiser walking long.
MAX_HTML_DEPTH = 256

_WS = r"\t\n\f\r "
_ATTRIBUTES = (
    rf"(?:[{_WS}]|/(?!>))*+"  # separators; a / right before > makes the tag self-closing
    rf"(?:[^{_WS}/>][^{_WS}/>=]*+"  # a name (may start with = or hold quotes, as HTML allows)
    rf"(?:[{_WS}]*+=[{_WS}]*+(?:\"[^\"]*+\"|'[^']*+'|[^{_WS}>\"'][^{_WS}>]*+)?)?"  # = value
    rf"(?:[{_WS}]|/(?!>))*+)*+"
)
_MARKUP = re.compile(
    r"<!--(?:-?>|.*?--!?>|.*)"  # a comment, to --> or --!> or the end
    r"|(?P<cdata><!\[CDATA\[)"  # a CDATA section in SVG/MathML, else a bogus comment
    r"|<[!?][^>]*+>?|</(?![A-Za-z])[^>]*+>?"  # doctype, bogus comments
    rf"|<(?P<end>/?)(?P<name>[A-Za-z][^{_WS}/>]*+){_ATTRIBUTES}(?P<closed>/?)(?:>|(?P<eof>\Z))",
    re.DOTALL,
)
_CDATA_END = re.compile(r"\]\]>")
_TAG_END = re.compile(r">")
_RAW_TEXT_END = {}  # tag name → the pattern of its end tag, filled below
_SCRIPT_DATA = re.compile(rf"<!--|</script[{_WS}/>]", re.IGNORECASE)
_SCRIPT_ESCAPED = re.compile(rf"-->|</script[{_WS}/>]|<script[{_WS}/>]", re.IGNORECASE)
_SCRIPT_DOUBLE_ESCAPED = re.compile(rf"-->|</script[{_WS}/>]", re.IGNORECASE)

VOID = {
    "area", "base", "basefont", "bgsound", "br", "col", "embed", "frame", "hr", "image", "img",
    "input", "keygen", "link", "meta", "param", "source", "track", "wbr",
}  # fmt: skip
# Their content is text up to their own end tag (noscript too: the sanitiser parses with
# scripting on).
RAW_TEXT = {"iframe", "noembed", "noframes", "noscript", "style", "textarea", "title", "xmp"}
RAW_TEXT_OR_PLAIN = RAW_TEXT | {"plaintext", "script"}
# A fragment already has these; their tags never open anything.
NEVER_OPENED = {"html", "head", "body", "frameset"}
FORMATTING = {
    "a", "b", "big", "code", "em", "font", "i", "nobr", "s", "small", "strike", "strong", "tt", "u",
}  # fmt: skip
HEADINGS = {"h1", "h2", "h3", "h4", "h5", "h6"}
SPECIAL = VOID | RAW_TEXT | HEADINGS | NEVER_OPENED | {
    "address", "applet", "article", "aside", "blockquote", "button", "caption", "center",
    "colgroup", "dd", "details", "dir", "div", "dl", "dt", "fieldset", "figcaption", "figure",
    "footer", "form", "header", "hgroup", "li", "listing", "main", "marquee", "menu", "nav",
    "object", "ol", "p", "plaintext", "pre", "script", "search", "section", "select", "summary",
    "table", "tbody", "td", "template", "tfoot", "th", "thead", "tr", "ul",
}  # fmt: skip
# What "generate implied end tags" closes.
IMPLIED_END = {"dd", "dt", "li", "optgroup", "option", "p", "rb", "rp", "rt", "rtc"}
CLOSES_P = HEADINGS | {
    "address", "article", "aside", "blockquote", "center", "dd", "details", "dialog", "dir",
    "div", "dl", "dt", "fieldset", "figcaption", "figure", "footer", "form", "header", "hgroup",
    "hr", "li", "listing", "main", "menu", "nav", "ol", "p", "plaintext", "pre", "search",
    "section", "summary", "table", "ul", "xmp",
}  # fmt: skip
# Elements whose closing also forgets the formatting elements opened inside them.
MARKERS = {"applet", "caption", "marquee", "object", "td", "template", "th"}
SECTIONS = {"tbody", "tfoot", "thead"}
# Start tags that end SVG/MathML content and go back to HTML.
BREAKOUT = HEADINGS | {
    "b", "big", "blockquote", "body", "br", "center", "code", "dd", "div", "dl", "dt", "em",
    "embed", "head", "hr", "i", "img", "li", "listing", "menu", "meta", "nobr", "ol", "p", "pre",
    "ruby", "s", "small", "span", "strike", "strong", "sub", "sup", "table", "tt", "u", "ul", "var",
}  # fmt: skip
# SVG/MathML elements whose content is HTML again.
INTEGRATION_POINTS = {
    "svg": {"desc", "foreignobject", "title"},
    "math": {"annotation-xml", "mi", "mn", "mo", "ms", "mtext"},
}
SCOPE = {"applet", "caption", "html", "marquee", "object", "table", "td", "template", "th"}
# Where the parser's insertion mode comes from: the nearest of these open elements.
TABLE_MODES = SECTIONS | {"caption", "colgroup", "select", "table", "td", "template", "th", "tr"}

for _name in RAW_TEXT | {"script"}:
    _RAW_TEXT_END[_name] = re.compile(rf"</{_name}[{_WS}/>]", re.IGNORECASE)


@cache
def _groups(key: tuple[str, str]) -> tuple:
    """The groups an open element counts in, for finding the nearest of a kind at once."""
    name, namespace = key
    if namespace:
        boundary = name in INTEGRATION_POINTS[namespace]
        return (key, "foreign") + (("scope", "special", "li-stop") if boundary else ())
    groups = [key, "html"]
    if name in SCOPE:
        groups.append("scope")
    if name in SPECIAL:
        groups.append("special")
        if name not in ("address", "div", "p"):
            groups.append("li-stop")
    for group, names in (
        ("button", {"button"}),
        ("list", {"ol", "ul"}),
        ("table-scope", {"html", "table", "template"}),
        ("marker", MARKERS),
        ("heading", HEADINGS),
        ("dd-dt", {"dd", "dt"}),
        ("cell", {"td", "th"}),
        ("section", SECTIONS),
        ("table-mode", TABLE_MODES),
    ):
        if name in names:
            groups.append(group)
    return tuple(groups)


class OpenElements:
    """The parser's stack of open elements, followed from the tags alone."""

    def __init__(self):
        # (tag name, namespace: "svg", "math" or "" for HTML) of each, innermost last
        self.stack: list[tuple[str, str]] = []
        # How many of the parser's elements each entry stands for: a cell or row the parser may
        # have put into a tbody and row of its own counts for those too, once not exact.
        self.weights: list[int] = []
        self.depth = 0
        # group → indexes in the stack of its open elements, innermost last
        self.positions: defaultdict[object, list[int]] = defaultdict(list)
        # While exact, the stack is the parser's. Once not, elements close only where the
        # parser certainly closes them.
        self.exact = True

    def __len__(self) -> int:
        return self.depth

    # ---- the stack ----------------------------------------------------------------------

    def push(self, name: str, namespace: str = "", weight: int = 1) -> None:
        key = (name, namespace)
        index = len(self.stack)
        for group in _groups(key):
            self.positions[group].append(index)
        self.stack.append(key)
        self.weights.append(weight)
        self.depth += weight

    def pop(self) -> None:
        for group in _groups(self.stack.pop()):
            self.positions[group].pop()
        self.depth -= self.weights.pop()

    def nearest(self, group) -> int:
        """The index of the innermost open element of GROUP (a group or a (name, namespace) key);
        -1 if none is open."""
        positions = self.positions[group]
        return positions[-1] if positions else -1

    def in_scope(self, group, *boundaries: str) -> int:
        """The nearest element of GROUP with no boundary of the scope inside it, or -1. The
        boundaries are the groups named, by default the scope boundaries."""
        index = self.nearest(group)
        inner = max(self.nearest(boundary) for boundary in boundaries or ("scope",))
        return index if index >= inner else -1

    def top(self) -> str | None:
        """The innermost open element's name, if it is an HTML element."""
        return self.stack[-1][0] if self.stack and not self.stack[-1][1] else None

    def in_foreign(self) -> bool:
        """Whether a tag is read as SVG/MathML here."""
        return self.at_foreign() and not self.at_integration_point()

    def at_foreign(self) -> bool:
        return bool(self.stack) and bool(self.stack[-1][1])

    def at_integration_point(self) -> bool:
        """Whether the innermost element is SVG/MathML whose content is HTML again."""
        return self.at_foreign() and self.stack[-1][0] in INTEGRATION_POINTS[self.stack[-1][1]]

    def reads_tags_as_parser(self) -> bool:
        """Whether the parser certainly reads what follows a raw text tag (<style>, <script>, …)
        or <![CDATA[ as this does. Not past markup not followed exactly while SVG/MathML, a
        select or a template is open: there the parser may take those tags for no tag at all."""
        return self.exact or not (
            self.positions["foreign"]
            or self.nearest(("select", "")) >= 0
            or self.nearest(("template", "")) >= 0
        )

    def close_to(self, index: int) -> None:
        """Close the element at INDEX and everything inside it. The formatting elements among
        them stay counted: the parser reopens them (unless a cell or the like closed with them)."""
        if index < 0:
            return
        if index == len(self.stack) - 1 and self.stack[index][0] not in FORMATTING:
            self.pop()
            return
        markers = [i for i in range(index, len(self.stack)) if self.stack[i][0] in MARKERS]
        reopened = [
            key
            for key in self.stack[index : markers[0] if markers else None]
            if key[0] in FORMATTING and not key[1]
        ]
        while len(self.stack) > index:
            self.pop()
        for key in reopened:
            self.push(*key)
        if reopened:
            self.exact = False

    def close_implied(self, *, but: str | None = None) -> None:
        while self.top() in IMPLIED_END and self.top() != but:
            self.pop()

    # ---- tags ---------------------------------------------------------------------------

    def start(self, name: str, *, self_closing: bool) -> bool:
        """A start tag; returns whether it opened an HTML element."""
        if self.in_foreign():
            if name not in BREAKOUT:
                if name == "font":  # a breakout too, but only with some attributes
                    self.exact = False
                # <path/> opens nothing; once not exact, it may be an HTML element that does.
                if not self_closing or not self.exact:
                    self.push(name, self.stack[-1][1])
                return False
            while self.in_foreign():
                self.pop()
        elif self.at_integration_point() and self.stack[-1][1] == "math":
            self.exact = False  # MathML's own rules on what is HTML inside these
        if name in ("svg", "math"):
            if not self_closing or not self.exact:
                self.push(name, name)
            return False
        if name in NEVER_OPENED or name == "frame":
            return False
        if name in ("select", "template", "form", "caption", "colgroup", "col"):
            self.exact = False  # rare in pages, and their rules are long
        if name in CLOSES_P:
            self.close_p()
        weight = 1
        if name in ("td", "th", "tr") or name in SECTIONS:
            weight = self.table_part(name)
            if not weight:
                return False
        elif name in VOID:
            return False
        elif name == "li":
            self.close_list_item({"li"}, ("li", ""))
        elif name in ("dd", "dt"):
            self.close_list_item({"dd", "dt"}, "dd-dt")
        elif self.exact:
            self.close_by_start_exact(name)
        self.push(name, weight=weight)
        return True

    def close_p(self) -> None:
        p = self.in_scope(("p", ""), "scope", "button")
        if self.exact:
            self.close_to(p)
        elif self.top() == "p":
            self.pop()

    def close_list_item(self, names: set, group) -> None:
        """A new list item (or dd/dt) closes the open one, unless something in between keeps it."""
        if self.exact:
            item = self.nearest(group)
            if item >= 0 and item >= self.nearest("li-stop"):
                self.close_to(item)
        elif self.top() in names:
            self.pop()

    def close_by_start_exact(self, name: str) -> None:
        """What other start tags close, followed only while exact."""
        if name in HEADINGS and self.top() in HEADINGS:
            self.pop()
        elif name in ("option", "optgroup") and self.top() == "option":
            self.pop()
        elif name in ("rb", "rtc", "rp", "rt") and self.in_scope(("ruby", "")) >= 0:
            self.close_implied(but="rtc" if name in ("rp", "rt") else None)
        elif name == "button":
            self.close_to(self.in_scope(("button", "")))
        elif name in ("a", "nobr"):
            # An open <a> (or <nobr>) is closed first: simply when it is the innermost element.
            index = self.nearest((name, ""))
            if index > self.nearest("marker") and (name == "a" or self.in_scope((name, "")) >= 0):
                if index == len(self.stack) - 1:
                    self.pop()
                else:
                    self.exact = False
        elif name == "table" and self.mode() in ("table", "section", "row"):
            self.exact = False

    def mode(self) -> str | None:
        """The parser's insertion mode in a table (None outside tables), as the stack sets it."""
        index = self.nearest("table-mode")
        if index < 0:
            return None
        name = self.stack[index][0]
        return {"td": "cell", "th": "cell", "tr": "row", "table": "table"}.get(
            name, "section" if name in SECTIONS else name
        )

    def table_part(self, name: str) -> int:
        """A row, cell or table section: close the open cell or row first, add the tbody and row
        the parser adds. Returns the weight of the element it opens (0: it opens none)."""
        if self.exact:
            mode = self.mode()
            if mode is None:
                return 0  # outside a table the parser ignores them
            if mode in ("cell", "row", "section", "table"):
                self.close_table_parts(name, mode)
                if self.exact:
                    return 1
            self.exact = False
        # Only what certainly closes: the innermost cell, row or section, when it is one. The
        # rows and sections the parser may add around it are counted with it.
        if self.top() in ("td", "th"):
            self.pop()
        if name not in ("td", "th") and self.top() == "tr":
            self.pop()
        if name in SECTIONS and self.top() in SECTIONS:
            self.pop()
        return {"td": 3, "th": 3, "tr": 2}.get(name, 1)

    def close_table_parts(self, name: str, mode: str) -> None:
        """Exactly what a new row, cell or section closes and adds in MODE; stops where that
        leaves formatting elements to reopen (no longer exact)."""
        if mode == "cell":
            self.close_to(self.nearest("cell"))
            mode = "row"
        if mode == "row":
            self.close_to(self.nearest(("tr", "")) + 1)
            if not self.exact:
                return
            if name not in ("td", "th"):
                self.pop()
                mode = "section"
        if mode == "section":
            self.close_to(self.nearest("section") + 1)
            if not self.exact:
                return
            if name in SECTIONS:
                self.pop()
                mode = "table"
        if mode == "table":
            self.close_to(self.nearest(("table", "")) + 1)
            if not self.exact:
                return
            if name not in SECTIONS:
                self.push("tbody")
        if name in ("td", "th") and mode != "row":
            self.push("tr")

    def end(self, name: str) -> None:
        """An end tag."""
        if self.stack and self.stack[-1][0] == name:
            # The usual case: whatever the element, its end tag closes it. (Once not exact, the
            # parser may have reopened formatting elements inside SVG's HTML islands, where an
            # end tag of the island then closes nothing.)
            if self.exact or not self.at_integration_point():
                self.pop()
            return
        if name in ("p", "br"):
            while self.in_foreign():  # these end SVG/MathML content, as their start tags do
                self.pop()
        if self.at_foreign():
            # SVG/MathML: the nearest element of that name, looking no further than HTML.
            index = max(self.nearest((name, "svg")), self.nearest((name, "math")))
            if index > self.nearest("html"):
                if self.exact:
                    self.close_to(index)
                return
            # Otherwise the HTML rules below apply, with SVG/MathML open inside.
        if not self.exact:
            self.end_inexact(name)
        elif name in ("table", "tbody", "tfoot", "thead", "tr"):
            self.close_to(self.in_scope((name, ""), "table-scope"))
        elif name in ("td", "th"):
            if self.mode() == "cell":
                self.close_to(self.in_scope((name, "")))
        elif name in ("p", "li", "dd", "dt") or name in HEADINGS:
            group = "heading" if name in HEADINGS else (name, "")
            extra = {"p": ("button",), "li": ("list",)}.get(name, ())
            self.close_to(self.in_scope(group, "scope", *extra))
        elif name in FORMATTING:
            if self.top() == name:
                self.pop()
            elif self.nearest((name, "")) >= 0:
                self.exact = False  # misnested formatting: the adoption agency's business
        elif name in ("form", "template", "caption", "colgroup", "select"):
            self.exact = False
            self.end_inexact(name)
        elif name in SPECIAL:
            if name not in NEVER_OPENED and name not in VOID:
                self.close_to(self.in_scope((name, "")))
        else:
            index = self.nearest((name, ""))
            if index > self.nearest("special"):
                self.close_to(index)

    def end_inexact(self, name: str) -> None:
        """Close only the innermost element, and only when the parser certainly closes it."""
        if self.top() == name or (name in HEADINGS and self.top() in HEADINGS):
            self.pop()


def html_nesting_depth(html: str, limit: int = MAX_HTML_DEPTH) -> float:
    """The most elements the parser keeps open at once on HTML, or more; counting stops as soon
    as it passes LIMIT. Infinite where markup too irregular to follow makes it impossible to
    tell. Linear in the length of HTML."""
    open_elements = OpenElements()
    deepest = 0
    position = 0
    while (found := _MARKUP.search(html, position)) is not None:
        position = found.end()
        if found["cdata"]:
            if not open_elements.reads_tags_as_parser():
                return math.inf
            # Text up to ]]> inside SVG/MathML; elsewhere a bogus comment up to the next >.
            end = (_CDATA_END if open_elements.in_foreign() else _TAG_END).search(html, position)
            position = end.end() if end else len(html)
            continue
        if found["eof"] is not None:
            break  # the input ends inside this tag: the parser drops it and stops
        if found["name"] is None:
            continue  # a comment or a doctype
        name = found["name"].lower()
        if found["end"]:
            open_elements.end(name)
            continue
        if name in RAW_TEXT_OR_PLAIN and not open_elements.reads_tags_as_parser():
            return math.inf
        opened = open_elements.start(name, self_closing=bool(found["closed"]))
        deepest = max(deepest, len(open_elements))
        if deepest > limit or (opened and name == "plaintext"):
            break
        if opened and name in _RAW_TEXT_END:
            end = _raw_text_end(html, position, name)
            if end is None:
                break  # the rest is text
            position = end
    return deepest


def _raw_text_end(html: str, position: int, name: str) -> int | None:
    """Where the text of raw text element NAME (opened just before POSITION) ends: at its end
    tag, found as the tokenizer finds it. None if the text runs to the end."""
    if name != "script":
        end = _RAW_TEXT_END[name].search(html, position)
        return end.start() if end else None
    # Script text has escapes: inside <!-- … -->, a <script> … </script> pair is still text.
    pattern = _SCRIPT_DATA
    while (found := pattern.search(html, position)) is not None:
        token = found.group().lower()
        if token.startswith("</script"):
            if pattern is not _SCRIPT_DOUBLE_ESCAPED:
                return found.start()
            pattern, position = _SCRIPT_ESCAPED, found.end() - 1
        elif token == "<!--":
            # The dashes of <!-- count towards a closing -->, as in "<!-->".
            pattern, position = _SCRIPT_ESCAPED, found.start() + 2
        elif token == "-->":
            pattern, position = _SCRIPT_DATA, found.end()
        else:  # <script inside an escape
            pattern, position = _SCRIPT_DOUBLE_ESCAPED, found.end() - 1
    return None
