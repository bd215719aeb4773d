"""What checking and sanitising an HTML artifact costs (issue 19): the nesting count
(artifacts/html_nesting.py) on pages of up to 500 KB, the artifact limit, and the sanitiser (nh3)
on the pages the count lets through, ordinary and hostile; then the sanitiser alone on a few
deep pages the count refuses, for scale (what a write and every read cost before the limit).

    .venv/bin/python -m bench.html_pages          # best of 3 runs each

Pure functions in one process: no database, no Django.
"""

import time

from artifacts.html_nesting import MAX_HTML_DEPTH, html_nesting_depth
from artifacts.rendering import sanitize_html

SIZE = 500 * 1024


def filled(pattern: str, prefix: str = "") -> str:
    return (prefix + pattern * (SIZE // len(pattern)))[:SIZE]


ROW = (
    '<tr><td class="n">12</td><td><a href="https://example.com/a">Alpha</a></td>'
    '<td><span style="color:red">-3%</span></td></tr>\n'
)
ACCEPTED = {
    "report (a table, a list)": filled(ROW, "<main><h1>Report</h1><table><tbody>"),
    f"{MAX_HTML_DEPTH - 1} nested divs, over and over": filled(
        "<div>" * (MAX_HTML_DEPTH - 1) + "x" + "</div>" * (MAX_HTML_DEPTH - 1)
    ),
    "end tags at the deepest allowed": filled("</p>", "<div>" * (MAX_HTML_DEPTH - 1)),
    "unclosed paragraphs": filled("<p>"),
    "cells foster-parented out of a table": filled("<br> ", "<table>"),
}
REFUSED = {
    "10,000 nested divs": "<div>" * 10_000 + "x" + "</div>" * 10_000,
    "5,000 paragraphs reopening formatting": "".join(f"<p><b id={i}></p>x" for i in range(5_000)),
}


def best_ms(operation, runs: int = 3) -> float:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        operation()
        times.append((time.perf_counter() - start) * 1000)
    return min(times)


def main() -> None:
    print(f"{'page':45} {'KB':>5} {'depth':>6} {'count ms':>9} {'nh3 ms':>8}")
    for name, page in ACCEPTED.items():
        depth = html_nesting_depth(page)
        assert depth <= MAX_HTML_DEPTH, name
        count = best_ms(lambda page=page: html_nesting_depth(page))
        sanitise = best_ms(lambda page=page: sanitize_html(page))
        print(f"{name:45} {len(page) // 1024:5} {depth:6} {count:9.0f} {sanitise:8.0f}")
    for name, page in REFUSED.items():
        count = best_ms(lambda page=page: html_nesting_depth(page))
        sanitise = best_ms(lambda page=page: sanitize_html(page), runs=1)
        print(
            f"{name + ' (refused)':45} {len(page) // 1024:5} {'>256':>6} {count:9.1f} {sanitise:8.0f}"
        )


if __name__ == "__main__":
    main()
