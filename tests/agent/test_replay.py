"""``agent replay RUN``: the audit flags what was tampered with and passes a clean run; ``--execute`` re-runs
a run on the twin without divergence and finds a tampered figure; ``--from-step`` forks a run that finishes.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from agent.inspector.audit import audit_run
from agent.inspector.replay import compare_traces
from agent.trace import read_trace
from tests.agent.conftest import FINISHED_RUN_ID, SHORT_RUN_ID
from tests.agent_process import run_cli

REPO = Path(__file__).resolve().parents[2]


def _agent(cwd: Path, *args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    return run_cli(args, cwd=cwd, timeout=timeout, env={**os.environ, "COLUMNS": "200"})


@pytest.fixture
def records_copy(finished_run_root, tmp_path) -> Path:
    """A writable copy of the finished run's records (trace, summary, checkpoints, ...) with its workspace
    linked, not copied: the audit only reads the workspace, and copying it is most of a copy's cost."""
    src = finished_run_root / "runs" / FINISHED_RUN_ID
    dest = tmp_path / "records"
    shutil.copytree(src, dest / "runs" / FINISHED_RUN_ID, ignore=shutil.ignore_patterns("workspace"))
    (dest / "runs" / FINISHED_RUN_ID / "workspace").symlink_to(src / "workspace")
    return dest


@pytest.fixture
def short_copy(short_run_root, tmp_path) -> Path:
    """A writable copy of the run stopped at its targets (records copied, workspace linked): the runs these
    tests make again are half the length of the full run."""
    src = short_run_root / "runs" / SHORT_RUN_ID
    dest = tmp_path / "short"
    shutil.copytree(src, dest / "runs" / SHORT_RUN_ID, ignore=shutil.ignore_patterns("workspace"))
    (dest / "runs" / SHORT_RUN_ID / "workspace").symlink_to(src / "workspace")
    return dest


def _lines(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "trace.jsonl").read_text().splitlines()]


def _write(run_dir: Path, events: list[dict]) -> None:
    (run_dir / "trace.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))


def _errors(run_dir: Path) -> list[str]:
    return [f"{f.check}@{f.step}: {f.message}" for f in audit_run(run_dir).errors()]


def _best_benchmark(events: list[dict], summary: dict) -> tuple[int, dict]:
    """The index and event of the run_benchmark call that measured a best (its last run holds a target's
    achieved value), else of the last successful run_benchmark call."""
    achieved = [t["achieved"] for t in summary["targets"].values() if t["achieved"] is not None]
    calls = [
        i
        for i, e in enumerate(events)
        if e["kind"] == "tool_call" and e["tool"] == "run_benchmark" and e["ok"]
    ]
    for i in calls:
        run = events[i]["result"]["runs"][-1]
        if any(
            abs(run.get(k, 0) - v) <= 1e-9 * abs(v)
            for k in ("decode_tok_s", "output_throughput")
            for v in achieved
        ):
            return i, events[i]
    return calls[-1], events[calls[-1]]


def _step(call_id: str) -> int:
    return int(call_id[1:].split("c")[0])


# --- the audit ----------------------------------------------------------------------------------------------


def test_a_finished_run_audits_clean_and_prints_its_timeline(records_copy):
    run_dir = records_copy / "runs" / FINISHED_RUN_ID
    report = audit_run(run_dir)
    assert report.ok and not report.errors(), report.findings
    assert len(report.checks) >= 8
    proc = _agent(records_copy, "replay", FINISHED_RUN_ID)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    first = next(e for e in _lines(run_dir) if e["kind"] == "decision")
    assert first["rationale"] in proc.stdout  # the timeline, as agent show prints it
    assert "simulated: dayzero digital twin" in proc.stdout
    assert f"audit of {FINISHED_RUN_ID}: clean" in proc.stdout
    assert sorted(p.name for p in (records_copy / "runs").iterdir()) == [FINISHED_RUN_ID]  # ran nothing


def test_an_edited_tool_result_is_flagged_at_its_step(records_copy):
    run_dir = records_copy / "runs" / FINISHED_RUN_ID
    events = _lines(run_dir)
    summary = json.loads((run_dir / "summary.json").read_text())
    i, bench = _best_benchmark(events, summary)
    measured_a_best = any(
        abs(bench["result"]["runs"][-1]["decode_tok_s"] - t["achieved"]) <= 1e-6
        for t in summary["targets"].values()
        if t["achieved"] is not None
    )
    bench["result"]["runs"][-1]["decode_tok_s"] *= 1.1
    bench["result"]["runs"][-1]["output_throughput"] *= 1.1
    _write(run_dir, events)
    report = audit_run(run_dir)
    assert not report.ok
    flagged = {(f.check, f.step) for f in report.errors()}
    # the figure no longer matches what the benchmark wrote (bench/NNN-<workload>.jsonl) ...
    assert ("bench", _step(bench["call_id"])) in flagged, report.findings
    if measured_a_best:  # ... nor the trial's figure in the checkpoint, nor the best it became
        assert ("state", _step(bench["call_id"])) in flagged and any(c == "bests" for c, _ in flagged), (
            flagged
        )
    proc = _agent(records_copy, "replay", FINISHED_RUN_ID)
    assert proc.returncode == 1 and "error(s)" in proc.stdout, proc.stdout[-2000:]


def test_a_dropped_line_is_flagged(records_copy):
    run_dir = records_copy / "runs" / FINISHED_RUN_ID
    events = _lines(run_dir)
    i = next(i for i, e in enumerate(events) if e["kind"] == "tool_call" and e["tool"] == "launch_server")
    dropped = events.pop(i)
    _write(run_dir, events)
    errors = _errors(run_dir)
    assert any(e.startswith("trace@") and "seq" in e for e in errors), errors
    assert any(
        e.startswith(f"calls@{_step(dropped['call_id'])}") and "(launch_server) was not made" in e
        for e in errors
    ), errors


def test_a_proposed_call_made_with_other_input_is_flagged(records_copy):
    run_dir = records_copy / "runs" / FINISHED_RUN_ID
    events = _lines(run_dir)
    call = next(e for e in events if e["kind"] == "tool_call" and e["tool"] == "launch_server")
    call["input"] = {**call["input"], "flags": {**call["input"].get("flags", {}), "tp-size": 1}}
    _write(run_dir, events)
    errors = _errors(run_dir)
    assert any(e.startswith(f"calls@{_step(call['call_id'])}") and "input differs" in e for e in errors), (
        errors
    )


def test_a_changed_best_is_flagged(records_copy):
    run_dir = records_copy / "runs" / FINISHED_RUN_ID
    summary = json.loads((run_dir / "summary.json").read_text())
    name, target = next((n, t) for n, t in summary["targets"].items() if t["achieved"] is not None)
    target["achieved"] *= 1.05
    (run_dir / "summary.json").write_text(json.dumps(summary, indent=2))
    errors = _errors(run_dir)
    assert any(e.startswith("summary@") and f"target {name}" in e for e in errors), errors
    assert any("run_finished" in e for e in errors), errors


def test_a_deleted_commit_is_flagged(copy_of_finished_run):
    run_dir = copy_of_finished_run / "runs" / FINISHED_RUN_ID
    commit = [e for e in _lines(run_dir) if e["kind"] == "tool_call" and e["tool"] == "commit" and e["ok"]][
        -1
    ]
    record = commit["result"]["commits"][-1]
    repo = run_dir / "workspace" / record["source"]
    git = ["git", "-C", str(repo)]
    assert (
        subprocess.run([*git, "rev-parse", record["branch"]], capture_output=True, text=True).stdout.strip()
        == record["sha"]
    )
    subprocess.run([*git, "update-ref", f"refs/heads/{record['branch']}", f"{record['sha']}~1"], check=True)
    errors = _errors(run_dir)
    assert any(
        e.startswith(f"commits@{_step(commit['call_id'])}")
        and record["sha"][:10] in e
        and "not on branch" in e
        for e in errors
    ), errors


def test_a_changed_task_is_a_finding_and_another_task_is_refused(records_copy, tmp_path):
    run_dir = records_copy / "runs" / FINISHED_RUN_ID
    options = json.loads((run_dir / "run.json").read_text())
    changed = tmp_path / "task.yaml"
    changed.write_text(Path(options["task_path"]).read_text() + "\n# edited since the run\n")
    report = audit_run(run_dir, changed)
    assert any(f.check == "task" and "changed since the run" in f.message for f in report.findings)
    other = REPO / "tasks" / "corvus_mi300x.yaml"
    for mode in (["--execute"], ["--from-step", "1", "--policy", "playbook"]):
        proc = _agent(records_copy, "replay", FINISHED_RUN_ID, *mode, "--task", str(other), "--run-id", "r")
        assert proc.returncode == 2, proc.stdout[-2000:] + proc.stderr[-2000:]
        out = proc.stdout.strip()
        assert len(out.splitlines()) == 1 and "was recorded for task" in out and "--force" in out, out
        assert not (records_copy / "runs" / "r").exists()


def test_bad_input_is_one_line_and_exit_2(records_copy):
    last = max(e["step"] for e in _lines(records_copy / "runs" / FINISHED_RUN_ID) if e["kind"] == "decision")
    for args, text in (
        (["nope"], "no run 'nope'"),
        ([FINISHED_RUN_ID, "--from-step", str(last + 1), "--policy", "playbook"], f"steps 1..{last}"),
        ([FINISHED_RUN_ID, "--from-step", "2"], "--policy"),
        ([FINISHED_RUN_ID, "--from-step", "2", "--policy", "replay"], "playbook or llm"),
        ([FINISHED_RUN_ID, "--execute", "--tolerance", "-1"], "tolerance"),
    ):
        proc = _agent(records_copy, "replay", *args)
        assert proc.returncode == 2, (args, proc.stdout[-2000:], proc.stderr[-2000:])
        assert proc.stdout.count("\n") == 1 and text in proc.stdout, (args, proc.stdout)
        assert "Traceback" not in proc.stdout + proc.stderr
    assert sorted(p.name for p in (records_copy / "runs").iterdir()) == [FINISHED_RUN_ID]


# --- --execute and --from-step (one twin run each) ----------------------------------------------------------


def test_execute_replays_the_twin_exactly_and_finds_a_tampered_figure(short_copy, short_run_root):
    proc = _agent(short_copy, "replay", SHORT_RUN_ID, "--execute", "--run-id", "again")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "no divergence beyond 2.0%" in proc.stdout
    again = short_copy / "runs" / "again"
    options = json.loads((again / "run.json").read_text())
    assert options["replay_of"] == SHORT_RUN_ID and options["policy"] == "replay"
    assert any(
        e.kind == "note" and f"re-execution of run {SHORT_RUN_ID}" in e.message
        for e in read_trace(again / "trace.jsonl")
    )
    # exactly, not merely within the tolerance: the twin is deterministic
    recorded = short_run_root / "runs" / SHORT_RUN_ID / "trace.jsonl"
    compared, divergence = compare_traces(recorded, again / "trace.jsonl", tolerance=0.0)
    assert divergence is None and compared == sum(e.kind == "tool_call" for e in read_trace(recorded))

    # a recorded figure 10 % off is found at its step; within a 20 % tolerance it is noise
    run_dir = short_copy / "runs" / SHORT_RUN_ID
    events = _lines(run_dir)
    i, bench = _best_benchmark(events, json.loads((run_dir / "summary.json").read_text()))
    bench["result"]["runs"][-1]["output_throughput"] *= 1.1
    _write(run_dir, events)
    compared, divergence = compare_traces(run_dir / "trace.jsonl", again / "trace.jsonl", tolerance=0.02)
    assert divergence is not None and divergence.kind == "metric", divergence
    assert (divergence.call_id, divergence.step) == (bench["call_id"], _step(bench["call_id"]))
    assert divergence.where.endswith("output_throughput")
    assert "9.1% apart" in divergence.describe(0.02)
    assert compare_traces(run_dir / "trace.jsonl", again / "trace.jsonl", tolerance=0.2)[1] is None
    # a call the re-execution did not make
    shutil.copy(again / "trace.jsonl", again / "short.jsonl")
    short = _lines(again)
    short = [e for e in short if not (e["kind"] == "tool_call" and e["tool"] == "stop_server")]
    (again / "short.jsonl").write_text("".join(json.dumps(e) + "\n" for e in short))
    missing = compare_traces(recorded, again / "short.jsonl", tolerance=0.02)[1]
    assert missing is not None and missing.kind == "missing call" and missing.tool == "stop_server"


def test_a_fork_from_an_early_step_finishes_with_the_same_commits(short_copy):
    run_dir = short_copy / "runs" / SHORT_RUN_ID
    recorded = read_trace(run_dir / "trace.jsonl")
    first_commit = next(e for e in recorded if e.kind == "tool_call" and e.tool == "commit")
    step = _step(
        first_commit.call_id
    )  # after the first commit: the fork must rebuild the committed workspace
    proc = _agent(
        short_copy,
        "replay",
        SHORT_RUN_ID,
        "--from-step",
        str(step),
        "--policy",
        "playbook",
        "--run-id",
        "fork",
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    fork = short_copy / "runs" / "fork"
    options = json.loads((fork / "run.json").read_text())
    assert (options["parent"]["run_id"], options["parent"]["step"], options["policy"]) == (
        SHORT_RUN_ID,
        step,
        "playbook",
    )
    events = read_trace(fork / "trace.jsonl")
    assert events[0].kind == "run_started" and events[0].policy == "playbook"
    notes = [e.message for e in events if e.kind == "note"]
    assert any(f"forked from run {SHORT_RUN_ID} at step {step}" in n for n in notes), notes
    assert any("replayed state matches the recorded one" in n for n in notes), notes
    policies = [(e.step, e.policy) for e in events if e.kind == "decision"]
    assert all(p == "replay" for s, p in policies if s <= step) and all(
        p == "playbook" for s, p in policies if s > step
    )
    assert events[-1].kind == "run_finished"
    parent_summary = json.loads((run_dir / "summary.json").read_text())
    summary = json.loads((fork / "summary.json").read_text())
    assert all(t["met"] for t in summary["targets"].values()), summary["targets"]
    assert [c["title"] for c in summary["commits"]] == [c["title"] for c in parent_summary["commits"]]
    for c in summary["commits"]:  # the fork's own commits, on its own branch
        assert not set(c["commits"]) & {s for p in parent_summary["commits"] for s in p["commits"]}
    assert audit_run(fork).ok, audit_run(fork).findings


@pytest.mark.parametrize("bad", ["not json\n", ""])
def test_an_unreadable_trace_is_an_audit_error_not_a_crash(tmp_path, bad):
    run_dir = tmp_path / "runs" / "r"
    run_dir.mkdir(parents=True)
    (run_dir / "trace.jsonl").write_text(bad)
    report = audit_run(run_dir)
    assert not report.ok and report.errors()[0].check == "trace", report
    proc = _agent(tmp_path, "replay", "r")
    assert proc.returncode in (1, 2) and "Traceback" not in proc.stdout + proc.stderr, (
        proc.stdout + proc.stderr
    )


def test_a_fork_hands_over_to_an_llm(records_copy):
    from tests.agent.llm_server import ScriptedLLM

    run_dir = records_copy / "runs" / FINISHED_RUN_ID
    first_commit = next(e for e in read_trace(run_dir / "trace.jsonl") if e.kind == "tool_call" and e.tool == "commit")
    step = _step(first_commit.call_id)
    env = {**os.environ, "OPENAI_API_KEY": "sk-test-fork-0123456789", "PYTHONPATH": str(REPO)}
    env.pop("OPENAI_BASE_URL", None)
    with ScriptedLLM([{"tool_calls": [("run_benchmark", {"workload": "single_stream"})]}]) as llm:
        proc = subprocess.run([sys.executable, "-c", "from agent.cli import app; app()", "replay", FINISHED_RUN_ID,
                               "--from-step", str(step), "--policy", "llm", "--llm-model", "scripted",
                               "--llm-base-url", llm.base_url, "--run-id", "llm-fork"],
                              cwd=records_copy, env=env, capture_output=True, text=True, timeout=600)  # fmt: skip
        requests = list(llm.requests)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "sk-test-fork" not in proc.stdout + proc.stderr
    fork = records_copy / "runs" / "llm-fork"
    options = json.loads((fork / "run.json").read_text())
    assert (options["parent"]["run_id"], options["parent"]["step"], options["policy"]) == (FINISHED_RUN_ID, step, "llm")
    events = read_trace(fork / "trace.jsonl")
    decisions = [(e.step, e.policy) for e in events if e.kind == "decision"]
    assert all(p == "replay" for s, p in decisions if s <= step) and all(p == "llm" for s, p in decisions if s > step)
    # the model was asked after the fork point, and its call ran in the forked run
    assert len(requests) >= 2 and all(r["model"] == "scripted" for r in requests)
    first_llm = next(i for i, e in enumerate(events) if e.kind == "decision" and e.policy == "llm")
    llm_calls = [e for e in events[first_llm:] if e.kind == "tool_call" and e.tool == "run_benchmark"]
    assert llm_calls, [(e.tool, e.call_id) for e in events if e.kind == "tool_call"]
    assert events[-1].kind == "run_finished"
