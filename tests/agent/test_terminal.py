"""What the terminal shows: the end summary's account of what each change bought, the list of runs."""

from __future__ import annotations

import datetime as dt
import io
import json
import os
from pathlib import Path

from rich.console import Console

from agent import cli
from sandboxes.local import LocalSandbox
from tests.shared_runs import run_agent


def _summary(run_dir: Path) -> None:
    """A finished run's summary.json whose throughput gain (1000 -> 3000) came from three changes that interact:
    each measured alone (the best without it) is worth more than a third of the gain."""
    changes = [{"name": name, "before": "(unset)", "after": after, "effect": effect,
                "measured_between": [3000 - effect, 3000], "without": {"flags": {}, "env": {}}}
               for name, after, effect in (("layout", "tp-size=4, dp-size=2", 1100.0),
                                           ("kv-cache-dtype", "fp8_e4m3", 900.0),
                                           ("env AITER_TUNED", "on", 2000.0))]  # fmt: skip
    changes.append({"name": "chunked-prefill-size", "before": "(unset)", "after": "4096", "effect": None,
                    "measured_between": None, "without": {"flags": {}, "env": {}}})  # fmt: skip
    run_dir.mkdir(parents=True)
    (run_dir / "summary.json").write_text(json.dumps({
        "run_id": "r", "task": "t", "simulated": True, "finish_reason": "all targets met", "branch": "dayzero/r",
        "targets": {"throughput": {"target": 2500, "achieved": 3000.0, "met": True}}, "commits": [],
        "simulated_node_hours": 1.5, "best_config": {"throughput": {}},
        "explain": {"throughput": {"bring_up": 1000.0, "best": 3000.0, "changes": changes}},
        "outcome": {"kind": "targets_met", "exit_code": 0, "words": "every target met"},
    }))  # fmt: skip


def test_the_summary_says_one_at_a_time_effects_do_not_add_up(tmp_path, monkeypatch):
    _summary(tmp_path / "r")
    out = io.StringIO()
    monkeypatch.setattr(cli, "console", Console(file=out, width=120, color_system=None))
    assert cli._print_summary(tmp_path / "r") == 0
    text = " ".join(out.getvalue().split())
    assert "throughput: 1000.0 at bring-up -> 3000.0 (+2000.0)" in text
    assert "each change measured alone" in text and "do not add up" in text
    assert "the effects sum to +4000.0 against a gain of +2000.0" in text
    assert "layout: (unset) -> tp-size=4, dp-size=2: +1100.0 (the best without it: 1900.0)" in text
    assert "chunked-prefill-size: (unset) -> 4096: not isolated by a measurement" in text


def test_a_figure_no_failing_rate_was_seen_above_is_printed_as_at_least(tmp_path, monkeypatch):
    """A knee whose search saw no rate fail above it is a floor: the summary never prints it as a plain figure."""
    _summary(tmp_path / "r")
    path = tmp_path / "r" / "summary.json"
    summary = json.loads(path.read_text())
    summary["targets"]["throughput"]["lower_bound"] = True
    path.write_text(json.dumps(summary))
    out = io.StringIO()
    monkeypatch.setattr(cli, "console", Console(file=out, width=120, color_system=None))
    cli._print_summary(tmp_path / "r")
    text = " ".join(out.getvalue().split())
    assert "at least 3000.000" in text and "no failing rate seen" in text
    assert "throughput: 1000.0 at bring-up -> at least 3000.0 (at least +2000.0)" in text


def test_the_runs_list_writes_a_floor_as_one():
    from agent.inspector.run_list import Figure, figure_text

    assert figure_text(Figure(target="throughput", achieved=3260.0, goal=2626, met=True)) == "throughput 3260/2626"
    floor = Figure(target="throughput", achieved=3260.0, goal=2626, met=True, lower_bound=True)
    assert figure_text(floor) == "throughput >=3260/2626"


def _run_folder(runs: Path, run_id: str, created: str, minutes: float | None, summary: dict | None = None,
                checkpoint: bool = True) -> None:  # fmt: skip
    d = runs / run_id
    d.mkdir(parents=True)
    (d / "run.json").write_text(json.dumps({"run_id": run_id, "task_path": "/x/tasks/glm.yaml", "created": created}))
    if minutes is not None:
        start = dt.datetime.fromisoformat(created)
        ts = [(start + dt.timedelta(minutes=m)).isoformat().replace("+00:00", "Z") for m in (0, minutes / 2, minutes)]
        kinds = ("run_started", "note", "run_finished" if summary is not None else "note")  # a finished run's last
        (d / "trace.jsonl").write_text("".join(json.dumps({"kind": k, "ts": t, "engine": "twin"}) + "\n"
                                               for k, t in zip(kinds, ts, strict=True)))  # fmt: skip
    if checkpoint:
        (d / "checkpoints.sqlite").write_bytes(b"")
    if summary is not None:
        (d / "summary.json").write_text(json.dumps(summary))


def test_agent_runs_lists_newest_first_with_date_duration_figures_and_node_hours(tmp_path):
    runs = tmp_path / "runs"
    met = {"task": "glm", "simulated": True, "finish_reason": "all targets met", "simulated_node_hours": 5.2771,
           "outcome": {"exit_code": 0}, "targets": {"throughput": {"target": 2626, "achieved": 3260.36, "met": True},
                                                    "single_stream": {"target": 213, "achieved": 230.8, "met": True}}}
    missed = {**met, "finish_reason": "trial budget spent (1 of 1)", "simulated_node_hours": 0.0316,
              "outcome": {"exit_code": 4}, "targets": {"throughput": {"target": 2626, "achieved": None, "met": False}}}
    _run_folder(runs, "a-old", "2026-11-01T09:00:00+00:00", 42, met)
    _run_folder(runs, "z-new", "2026-12-03T14:57:00+00:00", 150, missed)
    _run_folder(runs, "m-live", "2026-12-02T10:00:00+00:00", 3)
    _run_folder(runs, "b-never", "2026-11-20T10:00:00+00:00", None, checkpoint=False)
    _run_folder(runs, "n-running", "2026-12-02T11:00:00+00:00", 5)
    sandbox = LocalSandbox(runs / "n-running" / "workspace")
    sandbox.claim()  # this process is n-running's: it holds the run lock, as a live run's process does
    try:
        proc = run_agent(tmp_path, "runs", timeout=60, env={**os.environ, "COLUMNS": "200"})
    finally:
        sandbox.release()
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    starts = [i for i, line in enumerate(lines) if line.startswith("│ ") and line[2:3].strip()
              and line.split("│")[2].strip()[:4].isdigit()]  # a row's first line: its run id and start date
    rows = [" ".join(lines[a:b]) for a, b in zip(starts, starts[1:] + [len(lines)], strict=True)]
    assert [r.split("│")[1].strip() for r in rows] == ["z-new", "n-running", "m-live", "b-never", "a-old"]
    new, running, stopped, never, old = rows  # newest first
    assert "2026-12-03" in new and "14:57 UTC" in new and "took 2.5 h" in new and "trial budget spent" in new
    assert "throughput -/2626" in new and "0.03" in new
    assert "2026-11-01" in old and "took 42 min" in old and "all targets met" in old and "5.28" in old
    assert "throughput 3260/2626" in old and "single_stream 230.8/213" in old
    # where each unfinished run stands, from its run lock: a live one is never offered a resume
    assert f"running (pid {os.getpid()})" in running and "agent resume" not in running
    assert "stopped (killed or interrupted): continue with agent resume m-live" in " ".join(
        stopped.replace("│", " ").split()) and "took 3 min" in stopped  # fmt: skip
    assert "never started (nothing to resume)" in never
    assert "node-hours simulated on the digital twin" in proc.stdout


def _states() -> list:
    """A run's states as the graph reports them: a bring-up measured, a crash, its fix applied then committed, a
    new best, and a redraw with nothing new."""
    from agent.state import AgentState, Best, Patch, Trial

    s = AgentState(run_id="r", task_path="t", stage="bringup", step=2, rationale="measure bring-up at TP8")
    up = Trial(id=1, flags={"tp-size": 8}, status="up", metrics={"single_stream": 58.4}, accuracy=0.97)
    s.trials = [up]
    s.bests = {"single_stream": Best(target="single_stream", value=58.4, trial=1, flags={"tp-size": 8},
                                    verified=True)}  # fmt: skip
    states = [s.model_copy(deep=True)]
    crash = Trial(id=2, flags={"tp-size": 8, "speculative-algorithm": "EAGLE"}, status="crashed",
                  diagnosis="weight loading failed for the draft model")  # fmt: skip
    s.trials.append(crash)
    s.stage, s.step = "single", 4
    states.append(s.model_copy(deep=True))
    s.patches = [Patch(id=1, files=["model/config.json"], diff="", reason="r", title="Exclude 2 modules",
                       crash_trial=2)]  # fmt: skip
    states.append(s.model_copy(deep=True))
    s.patches[0].status, s.patches[0].commits = "committed", ["41f715fec5aa"]
    fixed = Trial(id=3, flags={"tp-size": 8, "speculative-algorithm": "EAGLE"}, env={"AITER_TUNED": "/t.csv"},
                  status="up", metrics={"single_stream": 162.7})  # fmt: skip
    s.trials.append(fixed)
    s.bests["single_stream"] = Best(target="single_stream", value=162.7, trial=3, flags=fixed.flags, env=fixed.env)
    s.rationale = "try layout {'tp-size': 4, 'dp-size': 2}"
    states.append(s.model_copy(deep=True))
    states.append(s.model_copy(deep=True))  # a redraw: nothing new
    return states


def test_the_live_view_tells_crashes_fixes_and_new_bests_once_each():
    from agent.live_panel import LiveView
    from tasks.spec import load_task
    from tests.shared_runs import DEFAULT_TASK

    view = LiveView(load_task(DEFAULT_TASK), trials_budget=60)
    told = [[line.plain for line in view.events(s)] for s in _states()]
    assert told[0] == ["★ new best single_stream 58.4 (goal 213), trial 1 (--tp-size 8)"]
    assert len(told[1]) == 1 and told[1][0].startswith("✗ trial 2 crashed: weight loading failed for the draft")
    assert "--speculative-algorithm EAGLE" in told[1][0]
    assert told[2] == ["⚒ fix applied (trial 2's crash): Exclude 2 modules [model/config.json]"]
    assert told[3] == ["⚒ fix verified and committed 41f715fec5 (trial 2's crash): Exclude 2 modules "
                       "[model/config.json]",
                       "★ new best single_stream 162.7 (goal 213), trial 3, accuracy not checked yet "
                       "(--tp-size 8 --speculative-algorithm EAGLE with AITER_TUNED=/t.csv)"]  # fmt: skip
    assert told[4] == []


def test_the_live_panel_fills_the_terminal_and_shows_the_last_figure_measured():
    from agent.live_panel import LiveView
    from tasks.spec import load_task
    from tests.shared_runs import DEFAULT_TASK

    state, task = _states()[-1], load_task(DEFAULT_TASK)
    for width in (120, 200):
        out = io.StringIO()
        Console(file=out, width=width, color_system=None).print(LiveView(task).panel(state, 42))
        lines = out.getvalue().splitlines()
        table = [line for line in lines if line[:1] in "┏┃┡│└"]
        assert table and all(len(line) == width for line in table), (width, [len(line) for line in table])
        text = out.getvalue()
        assert "162.700 unchecked" in text and "162.700 (trial 3)" in text and "accuracy 0.970 (trial 1)" in text
        assert "--tp-size 8 --speculative-algorithm EAGLE" in text
        assert f"trials 0/{task.budgets.trials} (1 crashed) | fixes: 1 committed" in text
        assert "now: try layout --tp-size 4 --dp-size 2" in text and "{" not in text
        assert "stage single-stream decode - step" in text and "stage single " not in text  # its name, not its key
