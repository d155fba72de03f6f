"""``agent ui``: the web view of runs, driven in a real headless browser (Debian's chromium through Playwright)
and over plain HTTP for what a browser would normalise away (``..`` in a path).

The browser tests skip when chromium (or Playwright) is missing, except in CI (CI set), where they must run.
"""

from __future__ import annotations

import http.client
import json
import os
import shutil
import socket
import subprocess
import sys
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from agent.inspector.ui import SIMULATED_LABEL, UiServer, serve
from agent.trace import TraceWriter
from tests.agent.conftest import FINISHED_RUN_ID


def _start(runs_dir: Path) -> UiServer:
    server = serve(runs_dir, host="127.0.0.1", port=0)
    server.start_background()
    return server


def _stop(server: UiServer) -> None:
    server.shutdown()
    server.server_close()


def _get(server: UiServer, path: str) -> tuple[int, str, str]:
    """(status, content type, body) of a GET of ``path`` sent as is: no client-side normalisation of ``..``."""
    conn = http.client.HTTPConnection(*server.server_address[:2], timeout=30)
    try:
        conn.request("GET", path)
        resp = conn.getresponse()
        return resp.status, resp.getheader("Content-Type", ""), resp.read().decode(errors="replace")
    finally:
        conn.close()


# ------------------------------------------------------------------------------------------ a synthetic runs folder


SECRET = "this-file-is-outside-the-runs-folder"


def _write_run(runs: Path, run_id: str, task: str, finish_reason: str | None) -> Path:
    run_dir = runs / run_id
    run_dir.mkdir(parents=True)
    (run_dir / "run.json").write_text(json.dumps({"run_id": run_id, "task_path": f"tasks/{task}.yaml",
                                                  "created": "2026-01-01T00:00:00+00:00"}))  # fmt: skip
    w = TraceWriter(run_dir / "trace.jsonl", run_id=run_id)
    w.emit("run_started", task=task, task_path=f"tasks/{task}.yaml", task_sha256="0" * 64, policy="playbook",
           sandbox="local", engine="twin")  # fmt: skip
    w.emit("decision", step=1, policy="playbook", stage="bringup", rationale="launch <b>bold</b> & see")
    w.emit("tool_call", call_id="s1c0", tool="launch_server", input={}, ok=True, wall_seconds=0.5, node_hours=0.01,
           result={"summary": "up after 100 s (simulated)"})  # fmt: skip
    if finish_reason is not None:
        w.emit("run_finished", status=finish_reason)
        summary = {"run_id": run_id, "task": task, "engine": "twin", "simulated": True,
                   "finish_reason": finish_reason,
                   "targets": {"tput": {"metric": "throughput_at_knee", "target": 100.0, "achieved": 120.0,
                                        "met": True, "trial": 1, "flags": {}},
                               "lat": {"metric": "decode_tok_s", "target": 50.0, "achieved": 40.0, "met": False,
                                       "trial": 1, "flags": {}}},
                   "trials": [{"id": 1, "flags": {"tp-size": 8}, "env": {}, "status": "up", "metrics": {"tput": 120.0},
                               "step": 1}],
                   "commits": [], "branch": f"dayzero/{run_id}", "simulated_node_hours": 0.01}  # fmt: skip
        (run_dir / "summary.json").write_text(json.dumps(summary))
    w.close()
    return run_dir


@pytest.fixture(scope="module")
def synthetic_site(tmp_path_factory) -> Iterator[UiServer]:
    """A server over a small runs folder: a finished run whose strings hold HTML, and an unfinished run; a
    secret file sits beside the runs folder."""
    root = tmp_path_factory.mktemp("ui")
    (root / "secret.txt").write_text(SECRET)
    runs = root / "runs"
    _write_run(runs, "hostile", task="<script>alert(1)</script>", finish_reason="budget <i>exhausted</i>")
    _write_run(runs, "halfway", task="plain", finish_reason=None)
    (runs / "not-a-run").mkdir()  # no run.json: not listed, not served
    server = _start(runs)
    yield server
    _stop(server)


def test_the_list_shows_every_run_escaped(synthetic_site):
    status, ctype, body = _get(synthetic_site, "/")
    assert status == 200 and ctype.startswith("text/html")
    assert 'href="/runs/hostile"' in body and 'href="/runs/halfway"' in body and "not-a-run" not in body
    assert "<script>alert(1)</script>" not in body and "&lt;script&gt;alert(1)&lt;/script&gt;" in body
    assert "budget &lt;i&gt;exhausted&lt;/i&gt;" in body
    assert "not finished (agent resume halfway)" in body  # the unfinished run, from run.json and its trace
    assert "1/2" in body  # targets met of the finished run
    assert body.count(">simulated<") == 2  # both runs' trace says the engine was the twin


def test_a_run_page_shows_targets_trials_and_timeline_escaped(synthetic_site):
    status, _, body = _get(synthetic_site, "/runs/hostile")
    assert status == 200
    assert SIMULATED_LABEL in body and 'id="simulated-banner"' in body
    assert "launch &lt;b&gt;bold&lt;/b&gt; &amp; see" in body and "<b>bold</b>" not in body
    assert "up after 100 s (simulated)" in body and "--tp-size 8" in body
    assert "120.000" in body and "40.000" in body  # achieved against the goals
    # no workspace and no task file: the page still comes, saying why it has no patches and no plots
    assert "no patches:" in body and "no plots:" in body
    unfinished = _get(synthetic_site, "/runs/halfway/")  # trailing slash is the same page
    assert unfinished[0] == 200 and "no summary.json" in unfinished[2] and "launch_server" in unfinished[2]


def test_unknown_runs_and_plots_are_404_pages(synthetic_site):
    for path, says in (("/runs/nope", "no run &#39;nope&#39;"), ("/runs/not-a-run", "no run"),
                       ("/runs/hostile/plots/nope.png", "no plot"), ("/elsewhere", "nothing at /elsewhere"),
                       ("/runs", "nothing at")):  # fmt: skip
        status, ctype, body = _get(synthetic_site, path)
        assert (status, ctype.split(";")[0]) == (404, "text/html"), path
        assert says in body, path
    with pytest.raises(urllib.error.HTTPError) as err:  # what a plain client sees
        urllib.request.urlopen(synthetic_site.url + "runs/nope", timeout=30)
    assert err.value.code == 404


@pytest.mark.parametrize("path", [
    "/runs/../secret.txt", "/runs/%2e%2e/secret.txt", "/runs/..%2fsecret.txt", "/runs/hostile/../../secret.txt",
    "/runs/hostile%2f..%2f..%2fsecret.txt", "/runs/hostile/plots/..%2f..%2f..%2fsecret.txt",
    "/runs/%2e%2e", "/runs/..\\secret.txt", "/runs/.hidden", "/runs/hostile/plots/%2e%2e",
])  # fmt: skip
def test_path_traversal_is_refused(synthetic_site, path):
    status, _, body = _get(synthetic_site, path)
    assert status == 400, (path, status)
    assert SECRET not in body and "refused" in body


def test_a_run_folder_symlinked_out_of_the_runs_folder_is_refused(tmp_path):
    runs = tmp_path / "runs"
    outside = _write_run(tmp_path / "elsewhere", "real", task="t", finish_reason="done")
    runs.mkdir()
    (runs / "link").symlink_to(outside, target_is_directory=True)
    server = _start(runs)
    try:
        assert _get(server, "/runs/link")[0] == 400
    finally:
        _stop(server)


def test_a_page_that_fails_is_a_500_page_not_a_dropped_connection(tmp_path, monkeypatch):
    server = _start(tmp_path)

    def broken(raw_path: str):
        raise RuntimeError("<broken> page")

    monkeypatch.setattr(server.site, "respond", broken)
    try:
        status, _, body = _get(server, "/")
    finally:
        _stop(server)
    assert status == 500 and "RuntimeError: &lt;broken&gt; page" in body


def test_pages_say_they_load_nothing_from_elsewhere(synthetic_site):
    with urllib.request.urlopen(synthetic_site.url + "runs/hostile", timeout=30) as resp:
        csp = resp.headers["Content-Security-Policy"]
        body = resp.read().decode()
    assert "default-src 'none'" in csp and "img-src 'self'" in csp
    assert "http://" not in body and "https://" not in body and "//" not in body.replace("://", "")


# ------------------------------------------------------------------------------------------ the command


def test_agent_ui_serves_until_stopped_and_refuses_a_missing_runs_folder(finished_run_root, tmp_path):
    proc = subprocess.Popen([sys.executable, "-c", "from agent.cli import app; app()", "ui", "--port", "0"],
                            cwd=finished_run_root, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "COLUMNS": "200"})  # fmt: skip
    try:
        line = proc.stdout.readline()
        url = next(word for word in line.split() if word.startswith("http://127.0.0.1:"))
        with urllib.request.urlopen(url, timeout=30) as resp:
            assert f'href="/runs/{FINISHED_RUN_ID}"' in resp.read().decode()
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    missing = subprocess.run([sys.executable, "-c", "from agent.cli import app; app()", "ui", "--runs",
                              str(tmp_path / "none")], capture_output=True, text=True, timeout=60)  # fmt: skip
    assert missing.returncode == 2 and missing.stdout.count("\n") == 1 and "no runs folder" in missing.stdout
    assert "Traceback" not in missing.stdout + missing.stderr
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        busy = subprocess.run([sys.executable, "-c", "from agent.cli import app; app()", "ui", "--port",
                               str(taken.getsockname()[1])], cwd=finished_run_root, capture_output=True, text=True,
                              timeout=60, env={**os.environ, "COLUMNS": "80"})  # fmt: skip
    assert busy.returncode == 2 and busy.stdout.count("\n") == 1, busy.stdout + busy.stderr
    assert "cannot serve on 127.0.0.1:" in busy.stdout
    assert "Traceback" not in busy.stdout + busy.stderr


# ------------------------------------------------------------------------------------------ in a real browser


@pytest.fixture(scope="module")
def chromium() -> Iterator[object]:
    """Debian's chromium driven by Playwright (no browser download)."""
    executable = shutil.which("chromium")
    why = None if executable else "no chromium on PATH (apt-get install chromium)"
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        why = "the playwright package is not installed (pip install -e '.[dev]')"
    if why:
        if os.environ.get("CI"):
            pytest.fail(f"CI must run the browser tests: {why}")
        pytest.skip(f"browser tests skipped: {why}")
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=executable, headless=True, args=["--no-sandbox"])
        yield browser
        browser.close()


@pytest.fixture(scope="module")
def finished_site(finished_run_root) -> Iterator[UiServer]:
    server = _start(finished_run_root / "runs")
    yield server
    _stop(server)


def _words(text: str) -> str:
    """``text`` with its whitespace as HTML shows it: runs of spaces and newlines as one space."""
    return " ".join(text.split())


def test_in_a_browser_list_run_patch_evidence_and_plot(chromium, finished_site, finished_run_root):
    from agent.inspector.review import collect_patches

    patches = collect_patches(finished_run_root / "runs" / FINISHED_RUN_ID)
    assert patches, "the default run commits patches"
    page = chromium.new_page()
    requested: list[str] = []
    page.on("request", lambda request: requested.append(request.url))
    try:
        page.goto(finished_site.url)
        page.click(f"a[href='/runs/{FINISHED_RUN_ID}']")
        page.wait_for_url(f"**/runs/{FINISHED_RUN_ID}")
        assert SIMULATED_LABEL in page.inner_text("#simulated-banner")
        summary = json.loads((finished_run_root / "runs" / FINISHED_RUN_ID / "summary.json").read_text())
        assert page.inner_text("#outcome") == summary["finish_reason"]

        first = page.locator("details.patch").first
        assert page.locator("details.patch").count() == len(patches)
        evidence = first.locator("ul.evidence")
        assert not evidence.is_visible()  # collapsed until opened
        first.locator("summary").click()
        assert evidence.is_visible()
        shown = _words(evidence.inner_text())
        assert _words(f"before: {patches[0].evidence.before}") in shown
        assert _words(f"after: {patches[0].evidence.after}") in shown
        assert patches[0].evidence.simulated and SIMULATED_LABEL in first.inner_text()
        assert patches[0].title in first.locator("summary").inner_text()
        assert first.locator("pre.diff .add").count() >= 1  # the diff, with its added lines marked

        images = page.locator(".plots img")
        assert images.count() >= 1
        page.wait_for_function("() => [...document.querySelectorAll('.plots img')].every(i => i.complete)")
        widths = images.evaluate_all("imgs => imgs.map(i => [i.getAttribute('src'), i.naturalWidth])")
        assert all(width > 0 for _, width in widths), widths
        assert any(src.endswith("throughput_vs_rate.png") for src, _ in widths), widths
    finally:
        page.close()
    hosts = {urllib.parse.urlsplit(url).hostname for url in requested}
    assert hosts == {"127.0.0.1"}, requested
    assert any("/plots/" in url for url in requested)
