"""The run report (agent/inspector/report.py, agent/inspector/plots.py) on the shared finished run of the default task: what
report.md and report.html hold, that the HTML needs no network, that the plots are real PNGs, that the curves
are the benchmark records themselves, and the cost with and without a GPU-hour price."""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path

import matplotlib.image
import pytest
import yaml

from agent.inspector.plots import render_plots
from agent.inspector.report import (
    SIMULATED_BANNER,
    UNITS,
    BenchRun,
    CostEstimate,
    ReportError,
    RunReport,
    TargetResult,
    TrialRow,
    _curve,
    _read_facts,
    _TraceFacts,
    build_report,
    render_html,
    render_markdown,
    write_report,
)
from agent.trace import TraceWriter, read_trace
from tasks.spec import TaskError, load_task
from tests.agent.conftest import DEFAULT_TASK, FINISHED_RUN_ID, REPO, other_run_without_the_best, run_agent

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
PLOTS = ("pareto.png", "throughput_vs_rate.png", "ttft_vs_rate.png", "best_so_far.png", "time_breakdown.png")


@pytest.fixture(scope="module")
def written(finished_run_root, tmp_path_factory) -> tuple[Path, dict, list[Path]]:
    """The finished run's folder, its summary, and the files write_report wrote (into a temporary folder)."""
    run_dir = finished_run_root / "runs" / FINISHED_RUN_ID
    out = tmp_path_factory.mktemp("report")
    return run_dir, json.loads((run_dir / "summary.json").read_text()), write_report(run_dir, out)


def _section(md: str, heading: str) -> str:
    """The Markdown between ``## heading`` and the next ``## ``."""
    start = md.index(f"## {heading}")
    end = md.find("\n## ", start + 3)
    return md[start : end if end >= 0 else len(md)]


def _record(path: Path) -> dict:
    return json.loads(path.read_text().strip().splitlines()[-1])


def _trace_trials(run_dir: Path) -> tuple[set[int], int | None]:
    """Read independently of the report from the trace: the trials of sweeps (run_trials), and the first trial
    benchmarked on the throughput workload (numbered as the agent numbers trials)."""
    sweep, first, n, up = set(), None, 0, None
    for e in read_trace(run_dir / "trace.jsonl"):
        if e.kind != "tool_call":
            continue
        if e.tool == "launch_server" and e.result.get("status"):
            n += 1
            up = n if e.result["status"] == "up" else None
        elif e.tool == "run_trials" and e.ok:
            for o in e.result["outcomes"]:
                n += 1
                sweep.add(n)
                if first is None and o["status"] == "up" and o["spec"]["workload"] == "throughput":
                    first = n
            up = None
        elif (
            e.tool in ("run_benchmark", "find_knee")
            and e.input.get("workload") == "throughput"
            and first is None
        ):
            first = up
    return sweep, first


def test_writes_both_reports_and_every_plot(written):
    _, _, paths = written
    names = [p.name for p in paths]
    assert names[:2] == ["report.md", "report.html"]
    assert set(PLOTS) <= set(names)
    assert all(p.exists() and p.stat().st_size > 0 for p in paths)


def test_markdown_holds_targets_path_and_every_trial(written):
    run_dir, summary, paths = written
    md = paths[0].read_text()
    assert SIMULATED_BANNER in md
    targets = _section(md, "Targets against results")
    for name, t in summary["targets"].items():
        row = next(line for line in targets.splitlines() if line.startswith(f"| {name} |"))
        fmt = (lambda v: f"{v:+.3f}") if t["metric"] == "accuracy_delta" else (lambda v: f"{v:.1f}")
        assert fmt(t["target"]) in row and fmt(t["achieved"]) in row, row
        assert ("| yes |" if t["met"] else "| **no** |") in row
    path = _section(md, "The path")
    path_rows = [line for line in path.splitlines() if re.match(r"\| \d+ \|", line)]
    assert summary["commits"], "the default run commits patches"
    for c in summary["commits"]:
        assert any(
            c["title"] in row and row.split("|")[2].strip().startswith("patch:") for row in path_rows
        ), c
    # the path ends at each target's achieved figure
    for name, t in summary["targets"].items():
        if t["metric"] != "accuracy_delta":
            assert any(name in row and f"{t['achieved']:.1f}" in row.split("|")[3] for row in path_rows), name
    # a sweep's trials are labelled screening (never a best), and the winner's own measurement closes the path
    screened, _ = _trace_trials(run_dir)
    assert screened, "the default run screens layouts in a sweep"
    for row in path_rows:
        trial = row.split("|")[4].strip()
        assert (trial.isdigit() and int(trial) in screened) == row.split("|")[2].strip().startswith(
            "screening:"
        ), row
    last = [row for row in path_rows if summary["best_config"]["target"] in row.split("|")[3]][-1]
    assert int(last.split("|")[4]) == summary["best_config"]["trial"]
    trials = _section(md, "Every trial")
    ids = {int(m) for m in re.findall(r"^\| (\d+)(?: \(winner\))? \|", trials, flags=re.M)}
    assert ids == {t["id"] for t in summary["trials"]}
    assert f"| {summary['best_config']['trial']} (winner) |" in trials
    for plot in PLOTS:
        assert f"]({plot})" in md  # linked as the file written beside the report


def test_html_is_self_contained_with_the_banner(written):
    _, summary, paths = written
    html = paths[1].read_text()
    assert SIMULATED_BANNER in html and 'class="banner' in html
    assert not re.search(r"""(?:src|href)\s*=\s*["']?\s*(?:https?:)?//""", html, flags=re.I)
    assert not re.search(r"<iframe\b|<script\b[^>]*\ssrc\b", html, flags=re.I)  # inline script only (sorting)
    links = re.findall(r"<link\b[^>]*>", html, flags=re.I)
    assert links and all(re.search(r'\shref="data:', link) for link in links), links  # the favicon, inline
    assert "url(" not in html and "@import" not in html and "fetch(" not in html
    sources = re.findall(r"""<img[^>]*\ssrc="([^"]*)\"""", html)
    assert len(sources) == len(PLOTS)
    assert all(s.startswith("data:image/png;base64,") for s in sources)
    for c in summary["commits"]:
        assert c["title"].replace("'", "&#39;") in html


def test_plots_are_png_images_matplotlib_drew(written):
    _, _, paths = written
    for p in paths:
        if p.suffix != ".png":
            continue
        data = p.read_bytes()
        assert data.startswith(PNG_MAGIC), p.name
        assert len(data) > 15_000, f"{p.name}: {len(data)} bytes is too small for a drawn figure"
        pixels = matplotlib.image.imread(p)
        assert pixels.shape[0] >= 300 and pixels.shape[1] >= 600, (p.name, pixels.shape)
        assert pixels.std() > 0.01, f"{p.name} is blank"


def test_plots_carry_the_simulated_label(written):
    run_dir, _, _ = written
    report = build_report(run_dir)
    assert report.simulated and report.banner == SIMULATED_BANNER
    labelled = render_plots(report)
    plain = render_plots(report.model_copy(update={"simulated": False, "banner": None}))
    assert set(labelled) == set(PLOTS)
    for name in PLOTS:
        assert labelled[name] != plain[name], f"{name}: the simulated label changes nothing"


def test_curves_are_the_bench_records(written):
    run_dir, summary, _ = written
    report = build_report(run_dir)
    winner_trial = summary["best_config"]["trial"]
    target = summary["targets"][summary["best_config"]["target"]]
    winner, baseline = report.curve("winner"), report.curve("baseline")
    assert winner is not None and winner.trial == winner_trial
    # the baseline: the bring-up configuration (the first that came up), which the run swept over rates
    bringup = next(t for t in summary["trials"] if t["status"] == "up")
    assert baseline is not None and baseline.trial != winner_trial
    assert (baseline.flags, baseline.env) == (bringup["flags"], bringup["env"])
    assert all(_record(run_dir / f)["request_rate"] for p in baseline.points for f in p.files)
    for curve in [c for c in (baseline, winner) if c is not None]:
        assert len(curve.points) >= 2
        assert [p.request_rate for p in curve.points] == sorted({p.request_rate for p in curve.points})
        for p in curve.points:
            records = [_record(run_dir / f) for f in p.files]
            assert all(rec["request_rate"] == p.request_rate for rec in records)
            for run, rec in zip(p.runs, records, strict=True):
                assert run.output_throughput == rec["output_throughput"]
                assert run.ttft_p50_ms == rec["median_ttft_ms"] and run.ttft_p99_ms == rec["p99_ttft_ms"]
            # several seeds at a rate: judged as the knee search judges, by the worst of them
            assert p.output_throughput == min(rec["output_throughput"] for rec in records)
            assert p.total_throughput == min(rec["total_throughput"] for rec in records)
            assert p.ttft_p50_ms == max(rec["median_ttft_ms"] for rec in records)
            assert p.ttft_p99_ms == max(rec["p99_ttft_ms"] for rec in records)
    if baseline is not None:
        assert not {f for p in baseline.points for f in p.files} & {f for p in winner.points for f in p.files}
    # the winner's knee is the run that gave the summary's figure, at the rate the knee search reported
    knee = winner.knee_point
    assert knee is not None and knee.output_throughput == pytest.approx(target["achieved"])
    searches = [
        e
        for e in read_trace(run_dir / "trace.jsonl")
        if e.kind == "tool_call" and e.tool == "find_knee" and e.ok
    ]
    reported = [
        e.result["knee_rate"]
        for e in searches
        if e.result["throughput_at_knee"] == pytest.approx(target["achieved"])
    ]
    assert reported and winner.knee_rate == reported[-1]
    assert knee.sustained and knee.ttft_p50_ms <= report.ttft_limit_ms
    assert all(p.sustained is False for p in winner.points if p.request_rate > knee.request_rate)
    # the time breakdown is the knee's deciding run's own (the seed whose throughput is the figure)
    rec = _record(run_dir / knee.deciding.file)
    assert rec["output_throughput"] == pytest.approx(target["achieved"])
    assert report.breakdown is not None and report.breakdown.share == rec["gpu_time_breakdown"]["share"]
    assert report.breakdown.bottleneck == rec["bottleneck"]
    # best so far ends at each target's achieved figure
    for series in report.best_so_far:
        assert series.points[-1].best == pytest.approx(summary["targets"][series.target]["achieved"])


def test_markdown_shows_the_knee_at_the_reported_rate(written):
    run_dir, _, paths = written
    winner = build_report(run_dir).curve("winner")
    md = _section(paths[0].read_text(), "Throughput and TTFT")
    knee = winner.knee_point
    assert f"| {winner.knee_rate} (knee) | {len(knee.runs)} | {winner.knee_throughput:,.1f} |" in md
    assert all(f"`{f}`" in md for f in knee.files)


def _with_price(root: Path, price: float | None) -> Path:
    """Point the copied run at a copy of its task file that sets (or leaves out) the GPU-hour price."""
    run_dir = root / "runs" / FINISHED_RUN_ID
    data = yaml.safe_load(DEFAULT_TASK.read_text())
    if price is not None:
        data["report"] = {"gpu_hour_usd": price}
    task = root / "priced_task.yaml"
    task.write_text(yaml.safe_dump(data, sort_keys=False))
    options = json.loads((run_dir / "run.json").read_text())
    options["task_path"] = str(task)
    (run_dir / "run.json").write_text(json.dumps(options))
    return run_dir


def test_cost_per_million_output_tokens_at_the_task_price(copy_of_finished_run, tmp_path):
    run_dir = _with_price(copy_of_finished_run, 2.75)
    report = build_report(run_dir)
    knee = report.curve("winner").knee_point
    gpus = _record(run_dir / knee.deciding.file)["gpus_used"]
    expected = 2.75 * gpus / (knee.output_throughput * 3600) * 1e6
    assert report.cost.gpu_hour_usd == 2.75 and report.cost.gpus == gpus
    assert report.cost.usd_per_million_output_tokens == pytest.approx(expected)
    md = write_report(run_dir, tmp_path / "out")[0].read_text()
    cost = _section(md, "Cost per million output tokens")
    assert f"{expected:.4f} USD per million output tokens" in cost and "simulated" in cost
    assert build_report(run_dir, gpu_hour_usd=1.0).cost.usd_per_million_output_tokens == pytest.approx(
        expected / 2.75
    )


def test_cost_without_a_price_says_it_needs_one(written):
    _, _, paths = written
    cost = _section(paths[0].read_text(), "Cost per million output tokens")
    assert "no GPU-hour price" in cost and "gpu_hour_usd" in cost
    assert "USD per million" not in cost


def test_baseline_never_swept_is_said_not_drawn(copy_of_finished_run, tmp_path):
    run_dir = copy_of_finished_run / "runs" / FINISHED_RUN_ID
    report = build_report(run_dir)
    winner = report.curve("winner").trial
    for trial in {r.trial for r in report.bench_runs if r.trial != winner}:  # no other configuration keeps a sweep
        runs = [r for r in report.bench_runs if r.trial == trial]
        for r in runs[1:]:
            (run_dir / r.file).unlink()
    report = build_report(run_dir)
    assert report.curve("baseline") is None and report.curve("winner") is not None
    assert any("never swept" in n for n in report.curve_notes)
    md = write_report(run_dir, tmp_path / "out")[0].read_text()
    assert "never swept" in _section(md, "Throughput and TTFT") and "**baseline:" not in md


def test_an_unfinished_run_is_one_line_error(copy_of_finished_run):
    run_dir = copy_of_finished_run / "runs" / FINISHED_RUN_ID
    (run_dir / "summary.json").unlink()
    with pytest.raises(ReportError) as exc:
        build_report(run_dir)
    assert "\n" not in str(exc.value) and "not finished" in str(exc.value)
    with pytest.raises(ReportError, match="not a run"):
        build_report(copy_of_finished_run)


def test_task_price_field_is_validated(tmp_path):
    data = yaml.safe_load(DEFAULT_TASK.read_text())
    shutil.copy(DEFAULT_TASK, tmp_path / "ok.yaml")
    assert load_task(tmp_path / "ok.yaml").report.gpu_hour_usd is None
    for report, message in (({"gpu_hour_usd": -1}, "report.gpu_hour_usd"), ({"price": 2}, "unknown field")):
        (tmp_path / "bad.yaml").write_text(yaml.safe_dump({**data, "report": report}))
        with pytest.raises(TaskError, match=re.escape(message)):
            load_task(tmp_path / "bad.yaml")
    (tmp_path / "good.yaml").write_text(yaml.safe_dump({**data, "report": {"gpu_hour_usd": 3.5}}))
    assert load_task(tmp_path / "good.yaml").report.gpu_hour_usd == 3.5


def test_a_run_that_measured_nothing_says_so(tmp_path):
    """A run stopped by its trial budget before any benchmark: every section says what is missing."""
    proc = run_agent(
        tmp_path, "run", str(DEFAULT_TASK), "--policy", "playbook", "--max-trials", "1", "--run-id", "short"
    )
    assert proc.returncode == 4, proc.stdout[-2000:] + proc.stderr[-2000:]  # stopped by its trial budget
    run_dir = tmp_path / "runs" / "short"
    report = build_report(run_dir, gpu_hour_usd=2.0)
    assert report.bench_runs == [] and report.curves == [] and report.winner_trial is None
    assert any("no configuration was benchmarked" in n for n in report.curve_notes)
    assert (
        report.cost.usd_per_million_output_tokens is None and "no winning configuration" in report.cost.note
    )
    paths = write_report(run_dir, tmp_path / "out")
    md = paths[0].read_text()
    for t in report.targets:
        assert f"| {t.name} |" in md and t.achieved is None
    assert "nothing improved a target" in _section(md, "The path")
    assert "no GPU time breakdown" in _section(md, "Where the winner's GPU time went")
    for p in paths[2:]:
        assert p.read_bytes().startswith(PNG_MAGIC) and matplotlib.image.imread(p).std() > 0.01


def test_why_the_best_won_lists_every_change_with_its_measured_effect(written):
    _, summary, paths = written
    why = _section(paths[0].read_text(), "Why the best won")
    rows = [line for line in why.splitlines() if line.startswith("| ") and not line.startswith("| target")]
    expected = [(name, c) for name, e in summary["explain"].items() for c in e["changes"]]
    assert expected and len(rows) == len(expected)
    for row, (name, c) in zip(rows, expected, strict=True):
        assert row.startswith(f"| {name} | {c['name']} |")
        assert (f"{c['effect']:+.1f}" if c["effect"] is not None else "not isolated") in row
    assert "Why the best won" in paths[1].read_text()


def _gpus_from_flags(flags: dict) -> int:
    """Read here from the flags, independently of the report: data-parallel attention runs inside the tensor
    group; plain data parallelism replicates it."""
    tp, dp = int(flags.get("tp-size") or 1), int(flags.get("dp-size") or 1)
    return tp if flags.get("enable-dp-attention") else tp * dp


def test_frontier_points_are_the_records_per_gpu_and_per_user(copy_of_finished_run):
    run_dir = copy_of_finished_run / "runs" / FINISHED_RUN_ID
    report = build_report(run_dir)
    f = report.frontier
    assert f is not None and len(f.points) >= 10
    trials = {t.id: t for t in report.trials}
    for p in f.points:
        rec = _record(run_dir / p.file)
        assert p.gpus == rec["gpus_used"] == min(_gpus_from_flags(trials[p.trial].flags), report.hardware_gpus)
        assert p.throughput_per_gpu == pytest.approx(rec["output_throughput"] / rec["gpus_used"])
        assert p.tok_s_per_user == pytest.approx(1000 / rec["median_tpot_ms"])
        assert (p.tpot_p99_ms, p.itl_p50_ms, p.itl_p99_ms) == (rec["p99_tpot_ms"], rec["median_itl_ms"], rec["p99_itl_ms"])
    candidates = [p for p in f.points if not p.screening and p.within_ttft_limit is not False]
    for p in f.frontier:  # nothing deployable beats a frontier point on both axes
        assert not any(q.tok_s_per_user >= p.tok_s_per_user and q.throughput_per_gpu > p.throughput_per_gpu
                       for q in candidates)  # fmt: skip
    picks = {k.role: k.point for k in f.picks}
    assert set(picks) == {"max throughput", "balanced", "max interactivity"}
    assert picks["max throughput"].throughput_per_gpu == max(p.throughput_per_gpu for p in candidates)
    assert picks["max interactivity"].tok_s_per_user == max(p.tok_s_per_user for p in candidates)
    # a record that does not say how many GPUs it used (real bench_serving does not): the flags say
    for p in f.points:
        rec_path = run_dir / p.file
        lines = rec_path.read_text().strip().splitlines()
        last = json.loads(lines[-1])
        last.pop("gpus_used")
        rec_path.write_text("\n".join([*lines[:-1], json.dumps(last)]) + "\n")
    again = build_report(run_dir).frontier
    assert [p.gpus for p in again.points] == [min(_gpus_from_flags(trials[p.trial].flags), report.hardware_gpus)
                                              for p in again.points]  # fmt: skip


def test_every_winner_has_its_per_user_figures(written):
    run_dir, summary, paths = written
    report = build_report(run_dir)
    measured = {n for n, t in summary["targets"].items() if t["metric"] != "accuracy_delta"}
    assert {w.target for w in report.winners} == measured
    for w in report.winners:
        rec = _record(run_dir / w.file)
        assert w.trial == summary["targets"][w.target]["trial"]
        achieved = summary["targets"][w.target]["achieved"]
        assert achieved == pytest.approx(rec["output_throughput"] if w.metric != "decode_tok_s"
                                         else 1000 / rec["median_tpot_ms"])  # fmt: skip
        assert (w.tpot_p50_ms, w.tpot_p99_ms, w.itl_p50_ms, w.itl_p99_ms) == \
            (rec["median_tpot_ms"], rec["p99_tpot_ms"], rec["median_itl_ms"], rec["p99_itl_ms"])  # fmt: skip
    md = _section(paths[0].read_text(), "Throughput per GPU against tok/s per user")
    for w in report.winners:
        assert f"| {w.target} | {w.trial} |" in md and f"{w.tpot_p50_ms:,.1f} / {w.tpot_p99_ms:,.1f}" in md


def test_html_explains_its_shorthand(written):
    _, summary, paths = written
    html = paths[1].read_text()
    # the glossary rides inside the report (a link to docs/ would be a path of this machine): every link to one of
    # its entries lands on an entry, and the entries are docs/glossary.md's own headings
    headings = re.findall(r"^## (.+)$", (REPO / "docs" / "glossary.md").read_text(), flags=re.M)
    entries = set(re.findall(r'<h3 id="glossary-([^"]+)">', html))
    assert len(entries) == len(headings) >= 10
    links = set(re.findall(r'href="#glossary-([^"]+)"', html))
    assert {"knee", "pareto-frontier"} <= links <= entries
    assert 'href="#glossary"' in html and "glossary.md" not in html
    assert "## Glossary" in paths[0].read_text()
    drop = -summary["targets"]["accuracy"]["target"]
    assert f"at most {drop:g} below the reference" in html
    assert "draft-tree search and refinement" in html and "(<code>knee</code> in the trace)" in html
    assert re.search(r'<abbr title="\d+ draft steps?, [^"]+">\d+/\d+/\d+</abbr>', html)
    assert 'id="pareto"' in html and re.search(r'<nav class="toc"', html)
    flags = re.search(r'<table [^>]*id="trials-table".*?</table>', html, flags=re.S).group(0)
    assert '<ul class="flags"><li><code>tp-size=8</code></li>' in flags  # one chip a flag, never one long string


def test_compare_two_runs_frontiers(copy_of_finished_run):
    runs = copy_of_finished_run / "runs"
    top = other_run_without_the_best(runs)
    proc = run_agent(copy_of_finished_run, "runs", "--compare", FINISHED_RUN_ID, "other", env={**os.environ,
                     "COLUMNS": "160"})  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    png = copy_of_finished_run / "runs" / "compare" / f"{FINISHED_RUN_ID}-vs-other.png"
    assert str(png.relative_to(copy_of_finished_run)) in proc.stdout and png.read_bytes().startswith(PNG_MAGIC)
    row = next(line for line in proc.stdout.splitlines() if "max throughput" in line)
    ours, theirs = (float(c.split("|")[1].replace(",", "")) for c in row.split("│")[2:4])
    assert ours == pytest.approx(top.throughput_per_gpu, abs=0.05) and theirs < ours
    bad = run_agent(copy_of_finished_run, "runs", "--compare", FINISHED_RUN_ID, "nope")
    assert bad.returncode == 2 and "no run 'nope'" in bad.stdout


def test_plot_labels_and_legends_do_not_collide(written, monkeypatch):
    """Every figure drawn as a matplotlib Figure: no legend over any axes' plotting area, no two labels (knee
    marks, frontier marks A/B/C, notes, legends) overlapping."""
    import agent.inspector.plots as plots

    figures = {}
    monkeypatch.setattr(plots, "_png", lambda fig: fig)
    report = build_report(written[0])
    for name, draw in plots.PLOTS.items():
        figures[name] = draw(report)
    for name, fig in figures.items():
        fig.canvas.draw()
        renderer = fig.canvas.get_renderer()
        areas = [ax.get_window_extent(renderer) for ax in fig.axes if ax.axison]
        labels = []
        for ax in fig.axes:
            if (legend := ax.get_legend()) is not None:
                box = legend.get_window_extent(renderer)
                assert not any(box.overlaps(a) for a in areas), f"{name}: a legend over a plotting area"
                labels.append(("legend", box))
            labels += [(t.get_text(), t.get_window_extent(renderer)) for t in ax.texts if t.get_text().strip()]
        for i, (text, box) in enumerate(labels):
            for other, obox in labels[i + 1 :]:
                assert not box.overlaps(obox), f"{name}: {text!r} collides with {other!r}"


# --- a knee no failing rate was seen above (issue 40): a lower bound, never shown as a knee ---------------------


def _bench_run(index: int, rate: float, ttft_ms: float) -> BenchRun:
    return BenchRun(index=index, file=f"bench/{index:03d}-throughput.jsonl", trial=1, workload="throughput",
                    request_rate=rate, output_throughput=1000.0 * rate, ttft_p50_ms=ttft_ms, ttft_p99_ms=2 * ttft_ms,
                    decode_tok_s=50.0, success_rate=1.0)  # fmt: skip


def test_a_knee_with_no_failing_rate_above_it_is_reported_as_at_least(tmp_path):
    run_dir = tmp_path / "r"
    run_dir.mkdir()
    knee = {"summary": "...", "knee_rate": 2.0, "throughput_at_knee": 2000.0, "runs": []}
    with TraceWriter(run_dir / "trace.jsonl", "r") as trace:
        for trial in (1, 2):
            trace.emit("tool_call", call_id=f"l{trial}", tool="launch_server", ok=True, wall_seconds=0.1,
                       input={"flags": {}}, result={"status": "up"})  # fmt: skip
            # trial 1: a search from before knee_is_lower_bound, with nothing failing above 2 req/s; trial 2: a knee
            result = knee if trial == 1 else {**knee, "first_failing_rate": 2.2, "knee_is_lower_bound": False}
            trace.emit("tool_call", call_id=f"k{trial}", tool="find_knee", ok=True, wall_seconds=0.1,
                       input={"workload": "throughput"}, result=result)  # fmt: skip
    facts = _read_facts(run_dir, "r")
    assert facts.knees == {1: ("throughput", 2.0), 2: ("throughput", 2.0)} and facts.floors == {1}
    row = TrialRow(id=1, status="up", flags={}, knee_rate=2.0, knee_lower_bound=True, lower_bounds=["throughput"],
                   metrics={"throughput": 2000.0})  # fmt: skip
    runs = [_bench_run(1, 1.0, 500.0), _bench_run(2, 2.0, 900.0)]
    curve = _curve("winner", row, "throughput", runs, facts, 1000.0)
    assert curve.knee_rate == 2.0 and curve.knee_lower_bound
    # no knee search recorded: the highest sustained rate is a floor unless a higher rate was not sustained
    none = _TraceFacts()
    assert _curve("winner", row, "throughput", runs, none, 1000.0).knee_lower_bound
    failing = [*runs, _bench_run(3, 2.5, 4000.0)]
    assert not _curve("winner", row, "throughput", failing, none, 1000.0).knee_lower_bound

    target = TargetResult(name="throughput", metric="throughput_at_knee", unit=UNITS["throughput_at_knee"],
                          workload="throughput", goal=1500, achieved=2000.0, met=True, trial=1, lower_bound=True)
    report = RunReport(run_id="r", task="t", task_path="t.yaml", engine="twin", simulated=True,
                       finish_reason="all targets met", targets=[target], path=[], curve_workload="throughput",
                       ttft_limit_ms=1000.0, curves=[curve], best_so_far=[], winner_trial=1, trials=[row],
                       cost=CostEstimate(), commits=[], bench_runs=runs)  # fmt: skip
    md = render_markdown(report, {})
    assert "| 1500.0 | at least 2000.0 | yes |" in md
    assert "at least 2,000.0 output tok/s: 2.0 req/s sustained and no rate seen failing above it" in md
    assert "knee at 2.0" not in md and "| 2.0 (at least) |" in md and "(knee)" not in md
    assert "throughput at least 2,000.0" in md and "| at least 2 |" in md  # the trial's figure and its rate
    html = render_html(report, {})
    assert "at least 2000.0" in html and "no rate seen failing above it" in html
    assert 'The <a href="#glossary-knee">knee</a> at' not in html and "2.0 (at least)" in html
    report.targets[0].lower_bound = report.curves[0].knee_lower_bound = False
    assert "| 1500.0 | 2000.0 | yes |" in render_markdown(report, {})
    assert "knee at 2.0 req/s: 2,000.0 output tok/s" in render_markdown(report, {})
