"""Artifact rendering: hostile input comes out inert, ordinary formatting survives."""

import html
import re
from html.parser import HTMLParser

import pytest

from artifacts import rendering
from artifacts.rendering import (
    TOO_LARGE_TO_COMPARE,
    TOO_LARGE_TO_FORMAT,
    diff_versions,
    highlight_code,
    render_artifact,
    render_markdown,
    sanitize_html,
)

XSS_PAYLOADS = [
    "<script>alert(1)</script>",
    "<SCRIPT SRC=https://evil.example/x.js></SCRIPT>",
    "<scr<script>ipt>alert(1)</scr</script>ipt>",
    "<img src=x onerror=alert(1)>",
    "<img src=\"x\" onerror='alert(1)'//>",
    '<a href="javascript:alert(1)">click</a>',
    '<a href="JaVaScRiPt:alert(1)">click</a>',
    '<a href="&#106;&#97;&#118;&#97;&#115;&#99;&#114;&#105;&#112;&#116;&#58;alert(1)">x</a>',
    '<a href="&#x6A;avascript&colon;alert(1)">x</a>',
    '<a href="java\tscript:alert(1)">tab</a>',
    '<a href=" &#14; javascript:alert(1)">ctl</a>',
    '<a href="vbscript:msgbox(1)">vb</a>',
    '<a href="data:text/html;base64,PHNjcmlwdD5hbGVydCgxKTwvc2NyaXB0Pg==">data</a>',
    "<svg onload=alert(1)><circle r=10 /></svg>",
    "<svg><script>alert(1)</script></svg>",
    '<iframe src="https://evil.example"></iframe>',
    '<iframe srcdoc="<script>alert(1)</script>"></iframe>',
    '<object data="javascript:alert(1)"></object>',
    '<embed src="https://evil.example/x.swf">',
    "<style>body{background:url(javascript:alert(1))} p{width:expression(alert(1))}</style>",
    '<p style="width: expression(alert(1)); background: url(javascript:alert(1))">x</p>',
    "<math><mtext><table><mglyph><style><img src=x onerror=alert(1)></style></mglyph></table></mtext></math>",
    '<math href="javascript:alert(1)">CLICK</math>',
    '<div title="x" " onmouseover="alert(1)">quote breaking</div>',
    "<a href='x' onclick='alert(1)'>x</a>",
    '"><script>alert(1)</script>',
    "'><img src=x onerror=alert(1)>",
    '<body onload="alert(1)">',
    '<form action="javascript:alert(1)"><input type="submit"></form>',
    '<button formaction="javascript:alert(1)">x</button>',
    '<meta http-equiv="refresh" content="0;url=javascript:alert(1)">',
    '<base href="javascript:alert(1)//">',
    '<link rel="stylesheet" href="javascript:alert(1)">',
    '<details open ontoggle="alert(1)">x</details>',
    '<img src="data:image/svg+xml;base64,PHN2ZyBvbmxvYWQ9YWxlcnQoMSk+">',
    "<!--<img src=x onerror=alert(1)>-->",
    "[x](javascript:alert(1))",
    "[x](JAVASCRIPT:alert(1))",
    "[x](&#106;avascript:alert(1))",
    "[x](data:text/html,<script>alert(1)</script>)",
    '![img](javascript:alert(1) "t")',
    "[ref]\n\n[ref]: javascript:alert(1)",
    "<javascript:alert(1)>",
    "**bold** <img src=x onerror=alert(1)> and <script>alert(2)</script>",
    "```html\n<script>alert(1)</script>\n```",
    '```"><script>alert(1)</script>\nx\n```',
]

FORBIDDEN_TAGS = {"script", "iframe", "object", "embed", "style", "form", "input", "button",
                  "meta", "base", "link", "svg", "math", "frame", "frameset"}  # fmt: skip
URL_ATTRIBUTES = {"href", "src", "action", "formaction", "data", "xlink:href", "srcset", "poster"}


class _Collector(HTMLParser):
    """Records every start tag and attribute the browser would see."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.tags = []

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, attrs))

    handle_startendtag = handle_starttag


def assert_inert(output):
    """Fail if `output` has script, frames, event handlers or script URLs anywhere active."""
    assert "<script" not in output.lower()
    parser = _Collector()
    parser.feed(output)
    parser.close()
    for tag, attrs in parser.tags:
        assert tag not in FORBIDDEN_TAGS, output
        for name, value in attrs:
            assert not name.startswith("on"), output
            # Browsers drop whitespace and control characters before reading the scheme.
            normalised = re.sub(r"[\x00-\x20]", "", html.unescape(value or "")).lower()
            assert "javascript:" not in normalised, output
            assert "vbscript:" not in normalised, output
            assert "expression(" not in normalised, output
            if name in URL_ATTRIBUTES:
                assert not normalised.startswith("data:text"), output
                assert not normalised.startswith("data:image/svg"), output


@pytest.mark.parametrize("payload", XSS_PAYLOADS)
def test_markdown_neutralises_xss(payload):
    assert_inert(render_markdown(payload))


@pytest.mark.parametrize("payload", XSS_PAYLOADS)
def test_html_pages_neutralise_xss(payload):
    assert_inert(sanitize_html(payload))


@pytest.mark.parametrize("payload", XSS_PAYLOADS)
def test_every_artifact_kind_neutralises_xss(payload):
    for kind in ("markdown", "html", "code", "json"):
        assert_inert(render_artifact(kind, payload, language="html"))


def test_it_shows_raw_html_in_markdown_as_text():
    out = render_markdown("hello <b>world</b>")
    assert "&lt;b&gt;world&lt;/b&gt;" in out
    assert "<b>" not in out


def test_it_keeps_markdown_formatting():
    out = render_markdown(
        "# Title\n\n## Sub\n\n- one\n- two\n\n1. first\n\n**bold** *em* ~~gone~~ `code`\n\n"
        "> quoted\n\n| a | b |\n|---|--:|\n| 1 | 2 |\n"
    )
    for piece in ("<h1>Title</h1>", "<h2>Sub</h2>", "<li>one</li>", "<ol>", "<strong>bold</strong>",
                  "<em>em</em>", "<s>gone</s>", "<code>code</code>", "<blockquote>", "<table>",
                  "<th>a</th>", '<td style="text-align:right">2</td>'):  # fmt: skip
        assert piece in out


def test_it_keeps_safe_links_with_rel():
    out = render_markdown("[site](https://example.com/a?b=1&c=2) and [mail](mailto:a@example.com)")
    assert 'href="https://example.com/a?b=1&amp;c=2"' in out
    assert 'href="mailto:a@example.com"' in out
    assert 'rel="noopener noreferrer nofollow"' in out


def test_it_highlights_fenced_code_with_classes():
    out = render_markdown("```python\ndef f():\n    return '<x>'\n```")
    assert '<pre class="highlight"><code class="language-python">' in out
    assert '<span class="k">def</span>' in out
    assert "&lt;x&gt;" in out
    assert "style=" not in out


def test_highlight_code_falls_back_to_plain_for_unknown_language():
    assert highlight_code("a < b", "no-such-lang") == "<pre><code>a &lt; b</code></pre>\n"
    assert highlight_code("a < b", None) == "<pre><code>a &lt; b</code></pre>\n"


def test_code_past_the_highlight_limit_is_shown_plain_and_whole():
    """pygments costs tens of regex tries per token: a long file of "(" held a request thread
    for half a minute. Past HIGHLIGHT_MAX_CHARS the text is escaped, not lexed."""
    long = "f(<" * (rendering.HIGHLIGHT_MAX_CHARS // 3 + 1)
    out = highlight_code(long, "python")
    assert out == f"<pre><code>{html.escape(long, quote=False)}</code></pre>\n"
    # So long a fence is also past FORMAT_MAX_CHARS: the whole document is shown plain.
    fenced = render_markdown(f"```python\n{long}\n```")
    assert 'class="highlight"' not in fenced and "f(&lt;f(&lt;" in fenced
    short = highlight_code("f(<" * 10, "python")
    assert short.startswith('<pre class="highlight">')


def test_markdown_past_the_format_limit_is_shown_plain_and_whole():
    """markdown-it retries its inline rules at every bracket: 480 KB of "[" held a request
    thread for seconds. Past FORMAT_MAX_CHARS the text is escaped, not parsed, with a note."""
    long = "[<b>*" * (rendering.FORMAT_MAX_CHARS // 5 + 1)
    plain = (
        f'<p class="render-note">{TOO_LARGE_TO_FORMAT}</p>\n'
        f"<pre><code>{html.escape(long, quote=False)}</code></pre>\n"
    )
    assert render_markdown(long) == plain
    assert render_artifact("markdown", long) == plain
    at_limit = render_markdown("# " + "a" * (rendering.FORMAT_MAX_CHARS - 2))
    assert at_limit.startswith("<h1>aaa") and TOO_LARGE_TO_FORMAT not in at_limit
    ordinary = render_artifact("markdown", "# Title\n\n**bold** and [a link](https://example.com)")
    assert ordinary.startswith("<h1>Title</h1>\n<p><strong>bold</strong> and <a href=")
    assert TOO_LARGE_TO_FORMAT not in ordinary and "<pre>" not in ordinary


def test_highlight_code_refuses_odd_language_names():
    out = highlight_code("x", '"><script>')
    assert out == "<pre><code>x</code></pre>\n"


def test_sanitize_html_keeps_page_structure():
    page = (
        '<main><h1 class="t" style="color: red; position: fixed">Report</h1>'
        '<table><tr><td colspan="2">cell</td></tr></table>'
        '<a href="https://example.com">link</a><img src="https://example.com/a.png" alt="a">'
        '<img src="data:image/png;base64,iVBORw0KGgo=" alt="inline"></main>'
    )
    out = sanitize_html(page)
    assert '<h1 class="t" style="color:red">Report</h1>' in out
    assert '<td colspan="2">cell</td>' in out
    assert 'href="https://example.com"' in out
    assert 'src="https://example.com/a.png"' in out
    assert 'src="data:image/png;base64,iVBORw0KGgo="' in out


def test_sanitize_html_drops_data_urls_outside_images():
    out = sanitize_html('<a href="data:image/png;base64,AAAA">x</a>')
    assert "data:" not in out


def test_sanitize_html_drops_script_content_not_just_tags():
    assert "alert" not in sanitize_html("<p>ok</p><script>alert(1)</script><style>x{}</style>")


def test_render_artifact_pretty_prints_json():
    out = render_artifact("json", '{"a":[1,2]}')
    assert 'class="language-json"' in out
    assert '<span class="nt">&quot;a&quot;</span>' in out or '<span class="nt">"a"</span>' in out


def test_render_artifact_shows_invalid_json_escaped():
    assert render_artifact("json", "{oops <b>") == "<pre><code>{oops &lt;b&gt;</code></pre>\n"


def test_render_artifact_rejects_unknown_kind():
    with pytest.raises(ValueError):
        render_artifact("pdf", "x")


def test_diff_versions_counts_and_escapes():
    diff = diff_versions("a\n<b>\nc\n", "a\n<B>\nc\nd\n", "v1", "v2")
    assert diff["added"] == 2
    assert diff["removed"] == 1
    assert diff["unified"].splitlines() == [
        "--- v1", "+++ v2", "@@ -1,3 +1,4 @@", " a", "-<b>", "+<B>", " c", "+d",
    ]  # fmt: skip
    assert "<del>&lt;b&gt;</del>" in diff["html"]
    assert "<ins>&lt;B&gt;</ins>" in diff["html"]
    assert '<td colspan="3">@@ -1,3 +1,4 @@</td>' in diff["html"]
    assert "<b>" not in diff["html"]
    assert diff["exact"] is True and TOO_LARGE_TO_COMPARE not in diff["html"]


def test_diff_versions_of_identical_texts_is_empty():
    diff = diff_versions("same\n", "same\n", "v1", "v2")
    assert diff == {
        "unified": "",
        "html": '<table class="diff"><thead><tr><th>v1</th><th>v2</th><th></th></tr></thead>'
        "<tbody></tbody></table>",
        "added": 0,
        "removed": 0,
        "exact": True,
    }


def test_diff_versions_escapes_labels():
    assert "<script>" not in diff_versions("a", "b", "<script>", "new")["html"]


# Line by line, difflib pairs each line with every equal line of the other version (hours for
# the first pair), again at each level of its recursion (many minutes for the second). Either
# way what is shown is a true diff: the lines from the first change to the last.
PATHOLOGICAL_PAIRS = {
    "300 KB of one line": ("a\n" * 150_000, "b\n" + "a\n" * 150_000, 1, 0, "@@ -1,3 +1,4 @@"),
    "three lines turned around": (
        "1\n2\n3\n" * 500,
        "3\n2\n1\n" * 500,
        1500,
        1500,
        "@@ -1,1500 +1,1500 @@",
    ),
}


@pytest.mark.parametrize(
    "old, new, added, removed, hunk", PATHOLOGICAL_PAIRS.values(), ids=PATHOLOGICAL_PAIRS.keys()
)
def test_diff_versions_gives_up_comparing_line_by_line_within_a_budget(
    old, new, added, removed, hunk
):
    diff = diff_versions(old, new, "v1", "v2")
    assert diff["exact"] is False
    assert f'<tr class="diff-note"><td colspan="3">{TOO_LARGE_TO_COMPARE}</td></tr>' in diff["html"]
    assert (diff["added"], diff["removed"]) == (added, removed)
    assert diff["unified"].splitlines()[2] == hunk


def test_diff_versions_over_budget_shows_the_changed_span_whole(monkeypatch):
    old = "title\n\nintro\nkeep 1\nkeep 2\nkeep 3\nkeep 4\nend\n"
    new = "title\n\nINTRO\nkeep 1\nkeep 2\nkeep 3\nkeep 4\nEND\n"
    exact = diff_versions(old, new, "v1", "v2")
    assert exact["exact"] is True and (exact["added"], exact["removed"]) == (2, 2)
    monkeypatch.setattr(rendering, "DIFF_BUDGET", 10)
    diff = diff_versions(old, new, "v1", "v2")
    assert diff["exact"] is False and (diff["added"], diff["removed"]) == (6, 6)
    assert diff["unified"].splitlines() == [
        "--- v1", "+++ v2", "@@ -1,8 +1,8 @@", " title", " ",
        "-intro", "-keep 1", "-keep 2", "-keep 3", "-keep 4", "-end",
        "+INTRO", "+keep 1", "+keep 2", "+keep 3", "+keep 4", "+END",
    ]  # fmt: skip


def test_render_artifact_shows_json_nested_beyond_the_limit_as_text():
    # Only rows stored before the limit can be this deep; reading them must still work.
    deep = "[" * 10_000 + "]" * 10_000
    rendered = render_artifact("json", deep)
    assert rendered.startswith("<pre><code>[[[") and "highlight" not in rendered


def test_bare_web_addresses_become_safe_links():
    html = render_markdown("Docs at https://example.com/a_b?x=1&y=2, and (see http://x.org/(v2)).")
    assert (
        '<a href="https://example.com/a_b?x=1&amp;y=2" rel="noopener noreferrer nofollow">'
        "https://example.com/a_b?x=1&amp;y=2</a>, and" in html
    )
    assert '<a href="http://x.org/(v2)" rel="noopener noreferrer nofollow">' in html
    assert "</a>)." in html


@pytest.mark.parametrize(
    "text",
    [
        "javascript:alert(1)",
        "javascript://example.com/%0Aalert(1)",
        "data:text/html;base64,PHNjcmlwdD4=",
        "ftp://example.com/file",
        "www.example.com",
        "`https://in-code.example.com`",
        "xhttps://glued.example.com",
    ],
)
def test_only_bare_http_and_https_addresses_are_linked(text):
    assert "<a " not in render_markdown(text)


def test_a_link_already_written_is_not_linked_twice():
    html = render_markdown("[the docs](https://example.com) https://example.com")
    assert html.count("<a ") == 2 and "<a <a" not in html and "</a></a>" not in html
