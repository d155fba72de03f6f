"""The written ``report.html`` of the shared finished default run, read in a real headless browser (Debian's
chromium through Playwright), served over HTTP so that every request the page makes (a favicon included) is seen:
no table column narrower than the longest word in it, a page of bounded height, no console error, no failed
request, the Pareto frontier plot drawn. Screenshots go to the test's folder and to ``runs/screenshots/``
(git-ignored) for a person to look at.

The browser test skips when chromium (or Playwright) is missing, except in CI (CI set), where it must run.
"""

from __future__ import annotations

import functools
import http.server
import shutil
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from agent.inspector.report import write_report
from tests.agent.conftest import FINISHED_RUN_ID, REPO

# measured on the default run at 1280 px wide: 32,573 px before the report was made readable (the trial table alone
# 27,075 px, its flags column 55 px wide); after, 8,200 px as opened and 11,700 px with every folded table open.
# The bounds leave about a third more for a longer run.
MAX_PAGE_HEIGHT_PX = 11_000
MAX_UNFOLDED_HEIGHT_PX = 16_000

# Each table cell whose inner width (its width less its padding) is narrower than the widest single word it holds
# (a word: text between white space, and in prose also up to a hyphen, measured on one line in the font it is
# drawn in, with the padding of the inline element around it, e.g. a <code> chip): such a cell breaks its words
# in the middle or spills them.
NARROW_CELLS_JS = """() => {
  const probe = document.createElement('span');
  probe.style.cssText = 'position:absolute; visibility:hidden; white-space:nowrap; left:-9999px; top:0';
  document.body.appendChild(probe);
  const narrow = [];
  for (const cell of document.querySelectorAll('td, th')) {
    if (!cell.getClientRects().length) continue;  // inside a closed <details>: not laid out
    const style = getComputedStyle(cell);
    const inner = cell.clientWidth - parseFloat(style.paddingLeft) - parseFloat(style.paddingRight);
    const walker = document.createTreeWalker(cell, NodeFilter.SHOW_TEXT);
    let widest = 0, word = '';
    while (walker.nextNode()) {
      const parent = walker.currentNode.parentElement;
      const ps = getComputedStyle(parent);
      for (const k of ['fontFamily', 'fontSize', 'fontWeight', 'fontStyle', 'fontVariantNumeric',
                       'fontFeatureSettings', 'letterSpacing']) probe.style[k] = ps[k];
      // a word: text between white space; in prose (not code) a line may also break after a hyphen
      const code = parent.closest('code, pre') !== null;
      const pad = parent === cell ? 0 : parseFloat(ps.paddingLeft) + parseFloat(ps.paddingRight)
                                         + parseFloat(ps.borderLeftWidth) + parseFloat(ps.borderRightWidth);
      for (const w of walker.currentNode.textContent.split(code ? /\\s+/ : /\\s+|(?<=-)/)) {
        if (!w) continue;
        probe.textContent = w;
        const width = probe.getBoundingClientRect().width + pad;
        if (width > widest) { widest = width; word = w; }
      }
    }
    if (widest > inner + 1 || cell.scrollWidth > cell.clientWidth + 1) {
      const table = cell.closest('table');
      narrow.push({table: table.id || table.caption?.textContent || '?', inner: Math.round(inner),
                   word: word.slice(0, 60), word_px: Math.round(widest)});
    }
  }
  probe.remove();
  return narrow;
}"""



class _Recording(http.server.SimpleHTTPRequestHandler):
    """Serves the report's folder and records every request with its status: the browser asks for
    ``/favicon.ico`` itself, unseen by the page's own request events, unless the page names an icon."""

    answered: list[tuple[int, str]]

    def log_request(self, code: int | str = "-", size: int | str = "-") -> None:
        try:
            status = int(code)  # an HTTPStatus, or "-"
        except ValueError:
            status = 0
        self.answered.append((status, self.path))

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture(scope="module")
def served_report(finished_run_root, tmp_path_factory) -> Iterator[tuple[str, list[tuple[int, str]]]]:
    """The URL of the finished run's report.html (written by write_report, served from its folder), and the
    requests the server answered, with their status."""
    out = tmp_path_factory.mktemp("report-html")
    write_report(finished_run_root / "runs" / FINISHED_RUN_ID, out)
    answered: list[tuple[int, str]] = []
    handler = type("Handler", (_Recording,), {"answered": answered})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(handler, directory=str(out)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/report.html", answered
    server.shutdown()
    server.server_close()


def _screenshot(page, tmp_path: Path, name: str) -> None:  # noqa: ANN001 - a Playwright page
    """A full-page screenshot in the test's folder, copied to runs/screenshots/ for review."""
    shot = tmp_path / name
    page.screenshot(path=str(shot), full_page=True)
    keep = REPO / "runs" / "screenshots"
    keep.mkdir(parents=True, exist_ok=True)
    shutil.copy(shot, keep / name)


def test_report_reads_in_a_browser(chromium, served_report, tmp_path):
    page = chromium.new_page(viewport={"width": 1280, "height": 900})
    errors: list[str] = []
    failed: list[str] = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.on("requestfailed", lambda r: failed.append(r.url))
    page.on("response", lambda r: failed.append(f"{r.status} {r.url}") if r.status >= 400 else None)
    try:
        url, answered = served_report
        page.goto(url, wait_until="load")
        page.wait_for_function("() => [...document.images].every(i => i.complete)")
        _screenshot(page, tmp_path, "report-as-opened.png")
        height = page.evaluate("() => document.documentElement.scrollHeight")
        assert height < MAX_PAGE_HEIGHT_PX, f"the page is {height} px high as opened"
        # every collapsible table open: the page at its longest, every cell laid out
        page.evaluate("() => document.querySelectorAll('details').forEach(d => d.open = true)")
        narrow = page.evaluate(NARROW_CELLS_JS)
        assert not narrow, f"{len(narrow)} cell(s) narrower than their longest word, e.g. {narrow[:5]}"
        height = page.evaluate("() => document.documentElement.scrollHeight")
        assert height < MAX_UNFOLDED_HEIGHT_PX, f"the page is {height} px high with every table open"
        pareto = page.locator("img#pareto")
        assert pareto.count() == 1, "no Pareto frontier plot"
        assert pareto.evaluate("i => i.naturalWidth") > 0
        _screenshot(page, tmp_path, "report-every-table-open.png")
        # a sortable table sorts by the column clicked, numerically
        table = page.locator("table.sortable").first
        header = table.locator("th[data-sort='num']").first
        column = header.evaluate("th => th.cellIndex")
        header.click()
        cells = table.evaluate(f"t => [...t.tBodies[0].rows].map(r => r.cells[{column}].dataset.v ?? r.cells[{column}].textContent)")
        values = [float(v) for v in cells if _number(v) is not None]
        assert values == sorted(values), cells
    finally:
        page.close()
    page.context.close()  # whatever the browser still had to ask for, it has asked
    assert not errors, errors
    assert not failed, failed
    assert answered and all(status < 400 for status, _ in answered), answered


def _number(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None
