"""A target's interactivity bound (issue 29): a knee whose users get less than the task's tok/s per user is
recorded on its trial with why, and never becomes a best; one that meets it does, with its per-user figures.
Synthetic observations through ``apply_observations`` and the playbook's own pick (no engine)."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

from agent.interactivity import Interactivity, per_user_text
from agent.live_panel import LiveView
from agent.outcomes import apply_observations
from agent.policies.playbook import PlaybookPolicy
from agent.state import AgentState, Observation, Trial
from agent.trace import read_trace
from tasks.spec import load_task
from tests.shared_runs import DEFAULT_TASK, FINISHED_RUN_ID, NO_PACING, run_agent


def _task(tmp_path, bound: str):
    """The default task with an interactivity bound on its knee target (``bound``: YAML of the target's fields)."""
    task = load_task(DEFAULT_TASK)
    targets = "\n".join(
        f"  - {{name: {t.name}, metric: {t.metric}, min: {t.min}"
        + (f", workload: {t.workload}" if t.workload else "")
        + (f", {bound}" if t.metric == "throughput_at_knee" else "") + "}"
        for t in task.targets)  # fmt: skip
    path = tmp_path / "bounded.yaml"
    path.write_text(f"extends: {DEFAULT_TASK}\ntargets:\n{targets}\n")
    return load_task(path)


def _knee(rate: float, tput: float, tpots: list[float]) -> Observation:
    """A find_knee result at ``rate``: one run per seed, the seeds' TPOT p50 as given."""
    runs = [{"workload": "throughput", "request_rate": rate, "seed": s, "output_throughput": tput + s,
             "median_tpot_ms": tpot, "p99_tpot_ms": 2 * tpot, "median_itl_ms": tpot / 3, "p99_itl_ms": 10 * tpot,
             "concurrency": 100.0, "max_concurrency": None, "success_rate": 1.0, "command": ["bench", str(s)]}
            for s, tpot in enumerate(tpots)]  # fmt: skip
    return Observation(call_id="k", tool="find_knee", args={"workload": "throughput"}, ok=True,
                       result={"knee_rate": rate, "throughput_at_knee": tput, "runs": runs})  # fmt: skip


def _state(obs: Observation, trial_id: int = 1) -> AgentState:
    trials = [Trial(id=i, flags={"tp-size": 8}, status="up") for i in range(1, trial_id + 1)]
    return AgentState(run_id="r", task_path="t", trials=trials, observations=[obs])


def test_a_knee_that_misses_the_bound_is_recorded_but_never_a_best(tmp_path):
    task = _task(tmp_path, "min_tok_s_per_user: 5")  # TPOT p50 at most 200 ms
    run = SimpleNamespace(task=task)
    # the faster seed meets it, the slower (260 ms, 3.85 tok/s per user) does not: the knee does not count
    out = apply_observations(_state(_knee(3.42, 3260.0, [190.0, 260.0])), run)  # type: ignore[arg-type]
    trial = out["trials"][0]
    assert "throughput" not in out["candidates"] and "throughput" not in trial.metrics
    assert "3.85 tok/s per user" in trial.bound_missed["throughput"] and "at least 5 tok/s" in trial.bound_missed["throughput"]
    assert trial.interactivity["throughput"].tpot_p50_ms == 260.0 and trial.interactivity["throughput"].seeds == 2
    assert PlaybookPolicy._value(_knee(3.42, 3260.0, [190.0, 260.0]), task) == 0.0  # the playbook keeps nothing
    # a slower knee whose users get 9 tok/s counts, with its figures on the trial and the best
    out = apply_observations(_state(_knee(2.96, 2837.0, [108.0, 111.0])), run)  # type: ignore[arg-type]
    best, trial = out["candidates"]["throughput"], out["trials"][0]
    assert best.value == 2837.0 and trial.metrics["throughput"] == 2837.0 and not trial.bound_missed
    assert best.interactivity is not None and round(best.interactivity.tok_s_per_user, 2) == 9.01
    assert best.interactivity.itl_p99_ms == 1110.0 and best.interactivity.concurrency == 100.0
    assert PlaybookPolicy._value(_knee(2.96, 2837.0, [108.0, 111.0]), task) == 2837.0
    assert per_user_text(best.interactivity) == "9.01 tok/s/user, TPOT p50/p99 111.0/222.0 ms, ITL p50/p99 37.0/1110.0 ms"


def test_without_a_bound_the_fastest_knee_counts_and_carries_its_per_user_figures(tmp_path):
    task = load_task(DEFAULT_TASK)
    out = apply_observations(_state(_knee(3.42, 3260.0, [190.0, 260.0])), SimpleNamespace(task=task))  # type: ignore[arg-type]
    best = out["candidates"]["throughput"]
    assert best.value == 3260.0 and best.interactivity.tpot_p50_ms == 260.0  # the slowest seed's
    assert PlaybookPolicy._value(_knee(3.42, 3260.0, [190.0, 260.0]), task) == 3260.0


def test_a_knee_with_no_failing_rate_above_it_is_carried_as_a_lower_bound():
    """A knee search that saw no rate fail above its knee measured a floor: the trial and the best say so (and a
    result recorded before find_knee said it in a field of its own reads the same, from first_failing_rate)."""
    task = load_task(DEFAULT_TASK)
    run = SimpleNamespace(task=task)
    floor = _knee(3.42, 3260.0, [190.0, 260.0])  # no first_failing_rate: nothing failed above 3.42 req/s
    out = apply_observations(_state(floor), run)  # type: ignore[arg-type]
    assert out["candidates"]["throughput"].lower_bound and out["trials"][0].lower_bounds == ["throughput"]
    knee = _knee(3.42, 3260.0, [190.0, 260.0])
    knee.result["first_failing_rate"] = 3.5
    out = apply_observations(_state(knee), run)  # type: ignore[arg-type]
    assert not out["candidates"]["throughput"].lower_bound and out["trials"][0].lower_bounds == []


def test_the_stricter_bound_wins(tmp_path):
    task = _task(tmp_path, "min_tok_s_per_user: 5, max_tpot_ms: 150")
    knee = next(t for t in task.targets if t.metric == "throughput_at_knee")
    assert knee.tpot_limit_ms() == 150.0 and knee.interactivity_miss(160.0) and knee.interactivity_miss(150.0) is None
    out = apply_observations(_state(_knee(3.0, 2900.0, [160.0, 150.0])), SimpleNamespace(task=task))  # type: ignore[arg-type]
    assert "throughput" not in out["candidates"] and "TPOT p50 at most 150 ms" in out["trials"][0].bound_missed["throughput"]


# --- what a finished run shows, and a run held to a bound ----------------------------------------------------


def _knee_runs(run_dir: Path, workload: str) -> list[tuple[dict, list[dict]]]:
    """Every knee the run found on ``workload``: (its result, the benchmark runs at its knee rate)."""
    out = []
    for e in read_trace(run_dir / "trace.jsonl"):
        if e.kind == "tool_call" and e.tool == "find_knee" and e.input.get("workload") == workload \
                and e.result.get("knee_rate"):  # fmt: skip
            out.append((e.result, [r for r in e.result["runs"] if r["request_rate"] == e.result["knee_rate"]]))
    return out


def test_the_summary_table_shows_what_one_user_sees(finished_run_root):
    """The throughput winner's TPOT, ITL and tok/s per user, from its own benchmark records, in what `agent run`
    printed at its end (the summary PR: tests/agent/test_review.py)."""
    run_dir = finished_run_root / "runs" / FINISHED_RUN_ID
    summary = json.loads((run_dir / "summary.json").read_text())
    won = summary["targets"]["throughput"]
    inter = Interactivity.model_validate(won["interactivity"])
    # the records behind the figure: the slowest seed at the knee the best was measured at
    result, at_knee = next((r, a) for r, a in _knee_runs(run_dir, "throughput") if r["throughput_at_knee"] == won["achieved"])
    assert inter.tpot_p50_ms == max(r["median_tpot_ms"] for r in at_knee) and inter.request_rate == result["knee_rate"]
    assert inter.tok_s_per_user == 1000 / inter.tpot_p50_ms and inter.concurrency and inter.itl_p99_ms > 0
    stdout = (finished_run_root / "agent-run.stdout").read_text()
    table = stdout[stdout.index("┏"):stdout.index("┘")]
    assert f"{inter.tok_s_per_user:.3g} tok/s/user" in table and "TPOT" in table and "ITL" in table
    assert f"{inter.tpot_p50_ms:.1f}/{inter.tpot_p99_ms:.1f}" in table


def test_a_run_held_to_a_per_user_bound_wins_with_a_configuration_that_meets_it(finished_run_root, tmp_path):
    """The bound lies between what the default run's throughput winner gives one user and what a measured load
    that also meets the throughput goal gives (both from the finished run's records): held to it, a short run
    still meets every target, with a winner whose users get at least the bound."""
    run_dir = finished_run_root / "runs" / FINISHED_RUN_ID
    task = load_task(DEFAULT_TASK)
    knee = next(t for t in task.targets if t.metric == "throughput_at_knee")
    ttft_limit = task.workloads[knee.workload].ttft_limit_ms
    won = json.loads((run_dir / "summary.json").read_text())["targets"][knee.name]
    winner = 1000 / max(r["median_tpot_ms"] for res, at in _knee_runs(run_dir, knee.workload)
                        if res["throughput_at_knee"] == won["achieved"] for r in at)  # fmt: skip
    reachable = max(1000 / r["median_tpot_ms"] for res, _ in _knee_runs(run_dir, knee.workload) for r in res["runs"]
                    if r["median_ttft_ms"] <= ttft_limit and r["output_throughput"] >= knee.min)  # fmt: skip
    assert reachable > winner * 1.2, (winner, reachable)
    bound = round((winner + reachable) / 2, 2)
    bounded = _task(tmp_path, f"min_tok_s_per_user: {bound}")  # the same targets, and the bound
    path = tmp_path / "bounded.yaml"
    path.write_text(path.read_text() + f"budgets:\n  after_targets: {{node_hours: 0}}\n{NO_PACING}")
    proc = run_agent(tmp_path, "run", str(path), "--policy", "playbook", "--run-id", "bounded")
    assert proc.returncode == 0, proc.stdout[-3000:]
    t = json.loads((tmp_path / "runs" / "bounded" / "summary.json").read_text())["targets"][knee.name]
    assert t["met"] and t["bound"] == f"at least {bound:g} tok/s per user"
    assert t["interactivity"]["tok_s_per_user"] >= bound > winner
    assert next(x for x in bounded.targets if x.name == knee.name).interactivity_miss(1000 / winner)


def test_the_live_panel_says_what_a_new_best_gives_one_user_and_why_a_figure_does_not_count(tmp_path):
    task = _task(tmp_path, "min_tok_s_per_user: 5")
    out = apply_observations(_state(_knee(3.42, 3260.0, [190.0, 260.0]), trial_id=2), SimpleNamespace(task=task))  # type: ignore[arg-type]
    missed = out["trials"][1]  # the trial the knee was measured on (the last)
    counted = apply_observations(_state(_knee(2.96, 2837.0, [108.0, 111.0])), SimpleNamespace(task=task))  # type: ignore[arg-type]
    state = AgentState(run_id="r", task_path="t", trials=[counted["trials"][0], missed],
                       bests={"throughput": counted["candidates"]["throughput"]})  # fmt: skip
    lines = [line.plain for line in LiveView(task).events(state)]
    assert any("trial 2's throughput 3260.0: 3.85 tok/s per user" in ln and "does not count" in ln for ln in lines)
    best = next(ln for ln in lines if "new best throughput 2837" in ln)
    assert per_user_text(state.bests["throughput"].interactivity) in best


def test_a_knee_measured_as_an_independent_trial_is_held_to_the_bound_too(tmp_path):
    """run_trials' knee outcomes carry the runs behind their value: the same accounting as a knee on the server."""
    task = _task(tmp_path, "min_tok_s_per_user: 5")
    outcomes = [{"spec": {"flags": {"tp-size": 8, "dp-size": n}, "env": {}, "measure": "knee", "workload": "throughput"},
                 "status": "up", "value": tput, "at_value": _knee(3.0, tput, [tpot]).result["runs"]}
                for n, tput, tpot in ((1, 3200.0, 260.0), (2, 2800.0, 120.0))]  # fmt: skip
    obs = Observation(call_id="t", tool="run_trials", args={}, ok=True, result={"outcomes": outcomes})
    slow, fast = apply_observations(_state(obs, trial_id=0), SimpleNamespace(task=task))["trials"]  # type: ignore[arg-type]
    assert "throughput" not in slow.metrics and "3.85 tok/s per user" in slow.bound_missed["throughput"]
    assert fast.metrics == {"throughput": 2800.0} and fast.interactivity["throughput"].tpot_p50_ms == 120.0
