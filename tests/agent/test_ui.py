"""``agent ui``: the web view of runs, driven in a real headless browser (Debian's chromium through Playwright)
and over plain HTTP for what a browser would normalise away (``..`` in a path).

The browser tests skip when chromium (or Playwright) is missing, except in CI (CI set), where they must run.
"""

from __future__ import annotations

import http.client
import json
import os
import re
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
from tests.agent.conftest import FINISHED_RUN_ID, REPO, other_run_without_the_best
from tests.agent_process import run_cli


def _start(runs_dir: Path, poll_ms: int = 3000) -> UiServer:
    server = serve(runs_dir, host="127.0.0.1", port=0, poll_ms=poll_ms)
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
    # the unfinished run: nothing holds its run lock, so it was stopped, and the list says how it continues
    assert "resumable with <code>agent resume halfway</code>" in body and 'data-state="running"' not in body
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


USER = {"workload": "throughput", "request_rate": 2.0, "tpot_p50_ms": 40.0, "tpot_p99_ms": 90.5, "itl_p50_ms": 30.0,
        "itl_p99_ms": 200.0, "tok_s_per_user": 25.0}  # what one user saw behind a figure, as summary.json keeps it


def _glossary_links_resolve(server: UiServer, *bodies: str) -> set[str]:
    """The glossary anchors ``bodies`` link to, each checked to be a heading of the served glossary."""
    linked = {a for body in bodies for a in re.findall(r'href="/glossary#([^"]+)"', body)}
    glossary = _get(server, "/glossary")[2]
    assert linked <= set(re.findall(r'<section class="entry" id="([^"]+)"', glossary)), linked
    return linked


def test_a_run_page_shows_stage_names_and_what_one_user_saw_and_links_the_glossary(tmp_path):
    runs = tmp_path / "runs"
    done = _write_run(runs, "done", task="plain", finish_reason="all targets met")
    summary = json.loads((done / "summary.json").read_text())
    # its best a floor too: the knee search saw no rate fail above the knee
    summary["targets"]["tput"] |= {"interactivity": USER, "bound": "at least 20 tok/s per user", "lower_bound": True}
    summary["trials"][0]["interactivity"] = {"tput": USER}
    (done / "summary.json").write_text(json.dumps(summary))
    live = _write_run(runs, "live", task="plain", finish_reason=None)
    _launch(live, 2, {"tp-size": 4})
    with TraceWriter(live / "trace.jsonl", run_id="live") as w:  # a knee search on it: its seeds at the knee
        w.emit("tool_call", call_id="s2c1", tool="find_knee", input={"workload": "throughput"}, ok=True,
               wall_seconds=0.1, result={"summary": "knee 3 req/s", "knee_rate": 3.0, "runs": [
                   {"workload": "throughput", "request_rate": 1.0, "median_tpot_ms": 20.0, "p99_tpot_ms": 30.0},
                   {"workload": "throughput", "request_rate": 3.0, "median_tpot_ms": 50.0, "p99_tpot_ms": 120.0},
                   {"workload": "throughput", "request_rate": 3.0, "median_tpot_ms": 40.0, "p99_tpot_ms": 99.0}]})
    server = _start(runs)
    try:
        page, live_page = _get(server, "/runs/done")[2], _get(server, "/runs/live")[2]
        targets = re.search(r'<table id="targets">.*?</table>', page, re.S).group(0)
        assert "25 tok/s/user, TPOT p50/p99 40.0/90.5 ms" in targets and "at least 20 tok/s per user" in targets
        assert f'<td class="num">at least {summary["targets"]["tput"]["achieved"]:.3f}</td>' in targets
        trials = re.search(r'<table id="trial-table".*?</table>', page, re.S).group(0)
        assert "tput: 25 tok/s/user, TPOT p50/p99 40.0/90.5 ms" in trials
        assert '<td class="stage">bring-up</td>' in trials  # its step's stage by name, not the trace's key
        assert re.search(r'<span class="stage" title="bringup in the trace">bring-up</span>', page)
        so_far = re.search(r'<table id="trial-table".*?</table>', live_page, re.S).group(0)
        # the slowest seed at the knee rate, as the benchmark records say
        assert "throughput: 20 tok/s/user, TPOT p50/p99 50.0/120.0 ms" in so_far, so_far
        assert '<td class="stage">kernel tuning</td>' in so_far and ">tune<" not in so_far
        assert {"knee", "toks-per-user", "tpot", "stage", "pareto-frontier"} <= _glossary_links_resolve(
            server, page, live_page)  # fmt: skip
    finally:
        _stop(server)


def test_compare_takes_two_runs_by_id_and_refuses_what_the_other_routes_refuse(tmp_path):
    runs = tmp_path / "runs"
    for run_id in ("one", "two"):
        _write_run(runs, run_id, task="plain", finish_reason="done")
    _write_run(runs, "halfway", task="plain", finish_reason=None)
    server = _start(runs)
    try:
        listing = _get(server, "/")[2]
        form = re.search(r'<form id="compare-form" method="get" action="/compare">.*?</form>', listing, re.S).group(0)
        assert re.findall(r'<option value="([^"]+)"', form) == ["two", "one"] * 2  # finished runs only, twice
        for path, code, says in (("/compare?a=one", 400, "compare two runs"), ("/compare?a=..&b=one", 400, "refused"),
                                 ("/compare?a=one%2f..%2f..&b=two", 400, "refused"),
                                 ("/compare/frontiers.png?a=.hidden&b=one", 400, "refused"),
                                 ("/compare?a=nope&b=one", 404, "no run &#39;nope&#39;"),
                                 ("/compare/frontiers.png?a=one&b=nope", 404, "no run &#39;nope&#39;"),
                                 ("/compare/elsewhere?a=one&b=two", 404, "nothing at")):  # fmt: skip
            status, ctype, body = _get(server, path)
            assert (status, ctype.split(";")[0]) == (code, "text/html") and says in body, (path, status)
        # runs the report cannot read (no task file here): the page says why; the overlay is not there
        status, _, body = _get(server, "/compare?a=one&b=halfway")
        assert status == 200 and 'id="compare-note"' in body and "no comparison:" in body and "<img" not in body
        assert _get(server, "/compare/frontiers.png?a=one&b=halfway")[0] == 404
    finally:
        _stop(server)


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
    "/runs/hostile/files/../../secret.txt", "/runs/hostile/files/%2e%2e/%2e%2e/secret.txt",
    "/runs/hostile/files/..%2f..%2fsecret.txt", "/runs/hostile/files//etc/passwd",
    "/runs/hostile/files/workspace/.dayzero-run.lock", "/runs/hostile/files/workspace/.twin/scenario.yaml",
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
    assert "form-action 'self'" in csp  # the runs list's compare form goes to this server, nowhere else
    assert "http://" not in body and "https://" not in body and "//" not in body.replace("://", "")


# ------------------------------------------------------------------------------------------ live runs


def _hold_lock(workspace: Path) -> subprocess.Popen:
    """Another process holding the run's workspace as a live run's process does (the run lock), until killed."""
    script = ("import sys, time; from pathlib import Path; from sandboxes.local import LocalSandbox; "
              f"LocalSandbox(Path({str(workspace)!r})).claim(); print('held', flush=True); time.sleep(120)")  # fmt: skip
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "held"
    return proc


def _launch(run_dir: Path, step: int, flags: dict, status: str = "up", **result) -> None:
    """Append a decision and the launch it made to a run's trace, as a live run's process appends them."""
    with TraceWriter(run_dir / "trace.jsonl", run_id=run_dir.name) as w:
        w.emit("decision", step=step, policy="playbook", stage="tune", rationale=f"try {flags}")
        w.emit("tool_call", call_id=f"s{step}c0", tool="launch_server", input={"flags": flags}, ok=True,
               wall_seconds=0.2, node_hours=0.02, result={"summary": f"{status} with {flags}", "status": status,
                                                          **result})  # fmt: skip


def test_a_run_is_running_while_its_process_holds_the_lock_then_stopped_and_resumable(tmp_path):
    runs = tmp_path / "runs"
    run_dir = _write_run(runs, "live", task="plain", finish_reason=None)
    _write_run(runs, "done", task="plain", finish_reason="all targets met")
    holder = _hold_lock(run_dir / "workspace")
    server = _start(runs)
    try:
        listing, page = _get(server, "/")[2], _get(server, "/runs/live")[2]
        for body in (listing, page):  # running, by the pid of the process that holds it; nothing invites a resume
            assert f"running (pid {holder.pid})" in body and "agent resume" not in body
        assert "<script>" in page and '<meta http-equiv="refresh"' in page  # it follows the run
        holder.kill()  # SIGKILL: the kernel drops the lock; the file still names the dead pid
        holder.wait()
        assert (run_dir / "workspace" / ".dayzero-run.lock").read_text().strip() == str(holder.pid)
        listing, page = _get(server, "/")[2], _get(server, "/runs/live")[2]
        for body in (listing, page):
            assert re.search(r"resumable with <code[^>]*>agent resume live</code>", body), body
            assert f"pid {holder.pid}" not in body
        assert "<script>" not in page and 'http-equiv="refresh"' not in page  # nothing to follow
        done = _get(server, "/runs/done")[2]
        assert 'finished: <b id="outcome">all targets met</b>' in done and "agent resume" not in done
        assert "<script>" not in done
    finally:
        holder.kill()
        _stop(server)


def test_a_running_page_lists_a_trial_that_lands_between_two_gets(tmp_path):
    from sandboxes.local import LocalSandbox

    run_dir = _write_run(tmp_path / "runs", "live", task="plain", finish_reason=None)
    sandbox = LocalSandbox(run_dir / "workspace")
    sandbox.claim()  # this process is the run's
    server = _start(tmp_path / "runs")
    try:
        before = _get(server, "/runs/live/live")[2]
        assert "--tp-size 4" not in before and f"running (pid {os.getpid()})" in before
        _launch(run_dir, 2, {"tp-size": 4})
        after = _get(server, "/runs/live/live")[2]
        assert 'id="trial-table"' in after and "--tp-size 4" in after and "up with" in after
        page = _get(server, "/runs/live")[2]  # the whole page has it too, and the trial is trial 1 of the trace
        assert "--tp-size 4" in page and 'data-state="running"' in page
    finally:
        sandbox.release()
        _stop(server)


def test_a_viewers_probe_does_not_keep_a_resume_out(tmp_path, monkeypatch):
    """``run_lock_holder`` takes the lock for one try; a ``claim`` that meets it there pauses and tries again
    instead of calling the run live (the probe ends within the pause: here, exactly at it)."""
    import fcntl

    from sandboxes import base
    from sandboxes.local import LocalSandbox

    assert base.run_lock_holder(tmp_path) is None  # never claimed
    (tmp_path / base.RUN_LOCK).write_text("")
    fd = os.open(tmp_path / base.RUN_LOCK, os.O_RDONLY)
    fcntl.flock(fd, fcntl.LOCK_SH)  # a probe, caught in the middle
    pauses: list[float] = []

    def probe_ends(seconds: float) -> None:
        pauses.append(seconds)
        if len(pauses) == 1:
            os.close(fd)  # closing drops the probe's lock

    monkeypatch.setattr(base.time, "sleep", probe_ends)
    sandbox = LocalSandbox(tmp_path)
    sandbox.claim()
    assert len(pauses) == 1 and base.run_lock_holder(tmp_path) == os.getpid()
    sandbox.release()
    assert base.run_lock_holder(tmp_path) is None


def _run_with_files(runs: Path, run_id: str, moved_from: str) -> Path:
    """A run whose calls name a server log (relative), a benchmark's output file (absolute, under the folder
    the run was in when it ran: ``moved_from``) and a run_trials job's folder; one file holds HTML."""
    run_dir = _write_run(runs, run_id, task="plain", finish_reason=None)
    (run_dir / "logs").mkdir()
    (run_dir / "logs" / "server-001.log").write_text("<script>alert('log')</script> ready\n")
    (run_dir / "bench").mkdir()
    (run_dir / "bench" / "002-throughput.jsonl").write_text('{"output_throughput": 1.0}\n')
    (run_dir / "bench" / "002-throughput.log").write_text("benchmark_args=...\n")
    (run_dir / "workspace" / ".bench").mkdir(parents=True)
    (run_dir / "workspace" / ".bench" / f"{run_id}-002-throughput.jsonl").write_text("{}\n")
    (run_dir / "trials" / "job-0" / "logs").mkdir(parents=True)
    (run_dir / "trials" / "job-0" / "logs" / "server-001.log").write_text("job log\n")
    output_file = f"{moved_from}/{run_id}/workspace/.bench/{run_id}-002-throughput.jsonl"
    with TraceWriter(run_dir / "trace.jsonl", run_id=run_id) as w:
        w.emit("decision", step=2, policy="playbook", stage="measure", rationale="measure it")
        w.emit("tool_call", call_id="s2c0", tool="launch_server", input={"flags": {"tp-size": 8}}, ok=True,
               wall_seconds=0.1, result={"summary": "up", "status": "up", "log_path": "logs/server-001.log"})
        w.emit("tool_call", call_id="s2c1", tool="run_benchmark", input={"workload": "throughput"}, ok=True,
               wall_seconds=0.1, result={"summary": "throughput: 1 tok/s", "runs": [
                   {"workload": "throughput", "command": ["python", "--output-file", output_file]}]})
        w.emit("tool_call", call_id="s2c2", tool="run_trials", input={}, ok=True, wall_seconds=0.1,
               result={"summary": "1 trial(s)", "outcomes": [{"job_id": "job-0", "spec": {"flags": {}},
                                                              "status": "crashed"}]})  # fmt: skip
    return run_dir


def test_steps_link_the_files_their_calls_name_and_the_route_serves_them_as_text(tmp_path):
    runs = tmp_path / "runs"
    run_dir = _run_with_files(runs, "files", moved_from="/elsewhere/runs")
    (run_dir / "workspace" / "out").symlink_to(tmp_path)  # a link out of the run folder
    (tmp_path / "secret.txt").write_text(SECRET)
    server = _start(runs)
    try:
        page = _get(server, "/runs/files")[2]
        links = set(re.findall(r'href="(/runs/files/files/[^"]+)"', page))
        assert links == {"/runs/files/files/logs/server-001.log", "/runs/files/files/bench/002-throughput.jsonl",
                         "/runs/files/files/bench/002-throughput.log",
                         "/runs/files/files/trials/job-0/logs/server-001.log"}, links  # fmt: skip
        assert '<details class="step"' in page and "--output-file" in page  # the whole input and output
        for link in links:
            status, ctype, body = _get(server, link)
            assert status == 200 and ctype == "text/plain; charset=utf-8", link
            assert body == (run_dir / link.removeprefix("/runs/files/files/")).read_text()
        # the trace-derived trials: the launch, then the run_trials job
        assert re.search(r"<td class=\"num\">2</td>.*crashed", page, re.S)
        assert _get(server, "/runs/files/files/logs/nope.log")[0] == 404
        assert _get(server, "/runs/files/files/logs")[0] == 404  # a folder is not a file
        for refused in ("/runs/files/files/workspace/out/secret.txt", "/runs/files/files/workspace/.dayzero-x"):
            status, _, body = _get(server, refused)
            assert status == 400 and SECRET not in body, refused
    finally:
        _stop(server)


def test_the_glossary_is_served_from_the_docs_when_it_is_there(tmp_path, monkeypatch):
    from agent.inspector import ui

    server = _start(tmp_path)
    try:
        assert 'href="/glossary"' in _get(server, "/")[2]
        monkeypatch.setattr(ui, "GLOSSARY", tmp_path / "glossary.md")
        status, _, body = _get(server, "/glossary")
        assert status == 404 and "no glossary" in body
        (tmp_path / "glossary.md").write_text("# Glossary\n\n**knee** <the rate> where latency turns\n")
        status, _, body = _get(server, "/glossary")
        assert status == 200 and "**knee** &lt;the rate&gt; where latency turns" in body
    finally:
        _stop(server)


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
    missing = run_cli(["ui", "--runs", str(tmp_path / "none")], timeout=60)
    assert missing.returncode == 2 and missing.stdout.count("\n") == 1 and "no runs folder" in missing.stdout
    assert "Traceback" not in missing.stdout + missing.stderr
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        busy = run_cli(["ui", "--port", str(taken.getsockname()[1])], cwd=finished_run_root, timeout=60,
                       env={**os.environ, "COLUMNS": "80"})  # fmt: skip
    assert busy.returncode == 2 and busy.stdout.count("\n") == 1, busy.stdout + busy.stderr
    assert "cannot serve on 127.0.0.1:" in busy.stdout
    assert "Traceback" not in busy.stdout + busy.stderr


# ------------------------------------------------------------------------------------------ in a real browser



@pytest.fixture(scope="module")
def finished_site(finished_run_root) -> Iterator[UiServer]:
    server = _start(finished_run_root / "runs")
    yield server
    _stop(server)


def _words(text: str) -> str:
    """``text`` with its whitespace as HTML shows it: runs of spaces and newlines as one space."""
    return " ".join(text.split())


def test_in_a_browser_list_run_patch_evidence_plot_and_step_files(chromium, finished_site, finished_run_root,
                                                                   tmp_path):  # fmt: skip
    from agent.inspector.review import collect_patches

    patches = collect_patches(finished_run_root / "runs" / FINISHED_RUN_ID)
    assert patches, "the default run commits patches"
    page = chromium.new_page()
    watch = _Watch(page)
    requested: list[str] = []
    page.on("request", lambda request: requested.append(request.url))
    try:
        page.goto(finished_site.url)
        _fits(page)
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

        # the timeline: a step opens onto its calls, whose server log and benchmark records it links
        assert page.locator("#timeline-part script, script").count() == 0  # a finished run is not followed
        step = page.locator("details.step:has(a.file[href*='/bench/'])").first
        step.locator("summary").click()
        files = step.locator("a.file").evaluate_all("links => links.map(a => a.getAttribute('href'))")
        assert any("/files/logs/server-" in f for f in files) or any("/files/bench/" in f for f in files), files
        _fits(page)
        _screenshot(page, tmp_path, "ui-finished")
        record = next(f for f in files if f.endswith(".jsonl"))
        page.goto(finished_site.url.rstrip("/") + record)
        on_disk = (finished_run_root / "runs" / FINISHED_RUN_ID / record.split("/files/", 1)[1]).read_text()
        assert _words(page.inner_text("body")) == _words(on_disk)
    finally:
        page.close()
    assert watch.problems == []
    hosts = {urllib.parse.urlsplit(url).hostname for url in requested}
    assert hosts == {"127.0.0.1"}, requested
    assert any("/plots/" in url for url in requested)


class _Watch:
    """What went wrong in a page: console errors (a CSP refusal among them), uncaught errors, failed requests."""

    def __init__(self, page) -> None:  # noqa: ANN001
        self.problems: list[str] = []
        page.on("console", lambda m: self.problems.append(f"console: {m.text}") if m.type == "error" else None)
        page.on("pageerror", lambda e: self.problems.append(f"error: {e}"))
        page.on("requestfailed", lambda r: self.problems.append(f"failed: {r.url} {r.failure}"))
        page.on("response", lambda r: self.problems.append(f"{r.status}: {r.url}") if r.status >= 400 else None)


def _fits(page) -> None:  # noqa: ANN001
    """No horizontal overflow: the document is no wider than the window."""
    width, inner = page.evaluate("() => [document.documentElement.scrollWidth, window.innerWidth]")
    assert width <= inner, (page.url, width, inner)


def _screenshot(page, tmp_path: Path, name: str) -> None:  # noqa: ANN001
    """A full-page screenshot into the test's folder, copied to runs/screenshots/ (git-ignored) to look at."""
    shot = tmp_path / f"{name}.png"
    page.screenshot(path=str(shot), full_page=True)
    keep = REPO / "runs" / "screenshots"
    keep.mkdir(parents=True, exist_ok=True)
    shutil.copy(shot, keep / shot.name)


LONG = "x" * 400  # one unbreakable word longer than any window


def test_in_a_browser_a_running_run_follows_itself_then_finishes_and_a_failed_run_shows_why(chromium, tmp_path):
    from sandboxes.local import LocalSandbox

    runs = tmp_path / "runs"
    live = _write_run(runs, "live", task="plain", finish_reason=None)
    failed = _write_run(runs, "failed", task="plain", finish_reason=None)
    _launch(failed, 2, {"tp-size": 8, "model-path": f"/{LONG}"}, status="crashed",
            diagnosis={"category": "weight_shape_mismatch", "summary": f"weight loading failed {LONG}"})  # fmt: skip
    with TraceWriter(failed / "trace.jsonl", run_id="failed") as w:
        w.emit("tool_call", call_id="s2c1", tool="run_benchmark", input={}, ok=False, wall_seconds=0.1,
               error="no server is up", result={})  # fmt: skip
        w.emit("run_finished", status="infrastructure failure: the engine could not start")
    crashed = {"id": 1, "flags": {"tp-size": 8}, "status": "crashed", "step": 2,
               "diagnosis": f"weight loading failed {LONG}"}  # fmt: skip
    (failed / "summary.json").write_text(json.dumps({"task": "plain", "simulated": True, "trials": [crashed],
                                                     "finish_reason": "infrastructure failure: the engine could not start",
                                                     "targets": {"tput": {"metric": "throughput", "target": 100.0,
                                                                          "achieved": None, "met": False}}}))  # fmt: skip
    sandbox = LocalSandbox(live / "workspace")
    sandbox.claim()  # this process is the live run's
    server = _start(runs, poll_ms=300)
    page = chromium.new_page(viewport={"width": 1000, "height": 800})
    watch = _Watch(page)
    try:
        page.goto(server.url)
        assert page.inner_text("td.state[data-state='running']") == f"running (pid {os.getpid()})"
        assert "infrastructure failure" in page.inner_text("td.state[data-state='finished']")
        _fits(page)
        _screenshot(page, tmp_path, "ui-runs")

        page.click("a[href='/runs/live']")
        page.wait_for_url("**/runs/live")
        assert page.inner_text("#outcome") == f"running (pid {os.getpid()})"
        assert "agent resume" not in page.inner_text("body")
        page.click("#step-1 > summary")  # open: it stays open while the page follows the run
        page.evaluate("() => { window.notReloaded = true; }")
        _launch(live, 2, {"tp-size": 4, "served-model-name": LONG})
        page.wait_for_selector("#trial-table >> text=--tp-size 4", timeout=15000)
        assert page.evaluate("() => window.notReloaded === true")  # swapped in place, not reloaded
        assert page.locator("#step-1").get_attribute("open") is not None
        assert page.locator("details.step").count() == 2
        _fits(page)
        _screenshot(page, tmp_path, "ui-running")

        with page.expect_navigation(timeout=15000):  # once it finished, the page loads whole again, by itself
            with TraceWriter(live / "trace.jsonl", run_id="live") as w:  # the run finishes, lets go of its lock
                w.emit("run_finished", status="all targets met")
            (live / "summary.json").write_text(json.dumps({"task": "plain", "finish_reason": "all targets met",
                                                           "trials": [{"id": 1, "flags": {"tp-size": 4}, "status": "up",
                                                                       "metrics": {"tput": 120.0}, "step": 2}]}))  # fmt: skip
            sandbox.release()
        assert page.inner_text("#outcome") == "all targets met"
        assert "tput 120.0" in page.inner_text("#trial-table")

        page.goto(server.url + "runs/failed")
        assert page.inner_text("#outcome") == "infrastructure failure: the engine could not start"
        step = page.locator("details.step").last
        assert not step.locator(".call.failed").is_visible()
        step.locator("summary").click()
        assert "no server is up" in step.locator(".call.failed").inner_text()
        assert "crashed" in page.inner_text("#trial-table") and "weight loading failed" in page.inner_text("body")
        _fits(page)
        _screenshot(page, tmp_path, "ui-failed")
    finally:
        page.close()
        sandbox.release()
        _stop(server)
    assert watch.problems == []


def test_in_a_browser_two_runs_frontiers_are_compared_from_the_runs_list(chromium, copy_of_finished_run, tmp_path):
    runs = copy_of_finished_run / "runs"
    top = other_run_without_the_best(runs)
    server = _start(runs)
    page = chromium.new_page(viewport={"width": 1100, "height": 900})
    watch = _Watch(page)
    requested: list[str] = []
    page.on("request", lambda request: requested.append(request.url))
    try:
        page.goto(server.url)
        page.select_option("#compare-a", FINISHED_RUN_ID)
        page.select_option("#compare-b", "other")
        page.click("#compare-button")
        page.wait_for_url(f"**/compare?a={FINISHED_RUN_ID}&b=other")
        page.wait_for_function("() => document.getElementById('overlay').complete")
        assert page.evaluate("() => document.getElementById('overlay').naturalWidth") > 0
        assert SIMULATED_LABEL in page.inner_text("#simulated-banner")
        cells = page.locator("#compare-points tr[data-role='max throughput'] td.point").all_inner_texts()
        ours, theirs = (float(re.search(r"([\d,.]+) tok/s per GPU", c).group(1).replace(",", "")) for c in cells)
        assert ours == pytest.approx(top.throughput_per_gpu, abs=0.05) and theirs < ours
        assert f"trial {top.trial} at {top.load}" in cells[0]
        _fits(page)
        _screenshot(page, tmp_path, "ui-compare")
        page.click("a[href='/glossary#pareto-frontier']")  # the term, at its entry of the glossary
        page.wait_for_url("**/glossary#pareto-frontier")
        assert page.locator("section.entry:target h2").inner_text() == "Pareto frontier"
    finally:
        page.close()
        _stop(server)
    assert watch.problems == []
    assert {urllib.parse.urlsplit(url).hostname for url in requested} == {"127.0.0.1"}, requested
    assert any("/compare/frontiers.png?" in url for url in requested)
