"""``agent show RUN``: the timeline a trace records, printed without running anything."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from agent.inspector.timeline import read_timeline
from agent.trace import TraceWriter
from tests.shared_runs import run_agent


def _write_run(root: Path, run_id: str = "r1") -> Path:
    trace = root / "runs" / run_id / "trace.jsonl"
    w = TraceWriter(trace, run_id=run_id)
    w.emit("run_started", task="t", task_path="tasks/t.yaml", task_sha256="0" * 64, policy="playbook",
           sandbox="local", engine="twin")  # fmt: skip
    w.emit("decision", step=1, policy="playbook", stage="bringup", rationale="try bring-up at TP8",
           proposed_calls=[{"tool": "launch_server", "input": {"flags": {"tp-size": 8}}}])  # fmt: skip
    w.emit("tool_call", call_id="s1c0", tool="launch_server", input={}, ok=True, wall_seconds=0.8, node_hours=0.03,
           result={"summary": "up after 114 s (simulated)"})  # fmt: skip
    w.emit("note", level="warning", message="the draft needs a fix")
    w.emit("decision", step=2, policy="playbook", stage="single", rationale="try speculative decoding 3/1/4")
    w.emit("tool_call", call_id="s2c0", tool="launch_server", input={}, ok=False, wall_seconds=2.5,
           error="crashed (exit 1): weight loading failed", result={})  # fmt: skip
    w.emit("run_finished", status="budget exhausted")
    w.close()
    return trace


def test_the_timeline_pairs_decisions_with_their_calls(tmp_path):
    tl = read_timeline(_write_run(tmp_path))
    assert (tl.run_id, tl.task, tl.policy, tl.simulated, tl.finished) == ("r1", "t", "playbook", True,
                                                                          "budget exhausted")  # fmt: skip
    assert [(s.step, s.stage, [c.tool for c in s.calls]) for s in tl.steps] == [
        (1, "bringup", ["launch_server"]), (2, "single", ["launch_server"])]
    assert tl.steps[0].notes == ["warning: the draft needs a fix"]
    assert tl.steps[1].calls[0].ok is False and tl.steps[1].calls[0].result.startswith("error: crashed")
    assert round(tl.wall_seconds, 3) == 3.3 and round(tl.node_hours, 3) == 0.03


def _agent(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    return run_agent(cwd, *args, timeout=120, env={**os.environ, "COLUMNS": "200"})


def test_agent_show_prints_it_and_refuses_what_is_not_a_run(tmp_path):
    _write_run(tmp_path)
    out = _agent(tmp_path, "show", "r1")
    assert out.returncode == 0, out.stdout + out.stderr
    for text in ("try bring-up at TP8", "up after 114 s", "error: crashed", "warning: the draft needs a fix",
                 "budget exhausted", "simulated: dayzero digital twin"):  # fmt: skip
        assert text in out.stdout, text
    stages = [line.split("│")[2].strip() for line in out.stdout.splitlines() if "│ stage: " in line]
    assert stages == ["stage: bring-up", "stage: single-stream decode"], stages  # names, not the trace's keys
    missing = _agent(tmp_path, "show", "nope")
    assert missing.returncode == 2 and missing.stdout.count("\n") == 1 and "no run 'nope'" in missing.stdout
    (tmp_path / "runs" / "bad").mkdir()
    (tmp_path / "runs" / "bad" / "trace.jsonl").write_text("{}\n")
    bad = _agent(tmp_path, "show", "bad")
    assert bad.returncode == 2 and "Traceback" not in bad.stdout + bad.stderr


def _write_long_run(root: Path, steps: int = 60) -> None:
    """A run of ``steps`` decisions whose rationales quote a configuration as a Python dict (as the playbook's do)
    and whose calls return long results."""
    w = TraceWriter(root / "runs" / "long" / "trace.jsonl", run_id="long")
    w.emit("run_started", task="t", task_path="tasks/t.yaml", task_sha256="0" * 64, policy="playbook",
           sandbox="local", engine="twin")  # fmt: skip
    flags = {"tp-size": 4, "dp-size": 2, "enable-dp-attention": True}
    for step in range(1, steps + 1):
        w.emit("decision", step=step, policy="playbook", stage="layout", rationale=f"try layout {flags!r} at length")
        w.emit("tool_call", call_id=f"s{step}", tool="launch_server", input={"flags": flags, "env": {"X_TUNED": "1"}},
               ok=True, wall_seconds=0.5, node_hours=0.03,
               result={"summary": "up after 114 s (simulated); " + "a long account of what the log said " * 8})  # fmt: skip
        w.emit("tool_call", call_id=f"s{step}b", tool="run_benchmark", input={"workload": "throughput"}, ok=True,
               wall_seconds=0.1, node_hours=0.01, result={"summary": f"throughput: {1000 + step} tok/s"})  # fmt: skip
    w.emit("run_finished", status="all targets met")
    w.close()


def test_agent_show_is_one_line_a_step_with_flags_and_full_shows_every_call(tmp_path):
    _write_long_run(tmp_path)
    env = {**os.environ, "COLUMNS": "120"}
    out = run_agent(tmp_path, "show", "long", timeout=120, env=env)
    assert out.returncode == 0, out.stdout + out.stderr
    lines = out.stdout.splitlines()
    assert len(lines) <= 60 + 10, len(lines)  # 60 steps, one line each, with the table's frame and totals
    assert all(len(line) <= 120 for line in lines)  # within the terminal, long cells cut with an ellipsis
    assert "{" not in out.stdout and "try layout --tp-size 4 --dp-size 2" in out.stdout
    assert "launch_server +1" in out.stdout and "--full" in out.stdout
    full = run_agent(tmp_path, "show", "long", "--full", timeout=120, env={**env, "COLUMNS": "2000"})  # no wrapping
    assert full.returncode == 0, full.stdout + full.stderr
    text = " ".join(full.stdout.replace("│", " ").split())
    assert "{" not in full.stdout and "X_TUNED=1 --tp-size 4 --dp-size 2 --enable-dp-attention" in text
    assert "throughput: 1060 tok/s" in text and "workload=throughput" in text
    assert text.count("a long account of what the log said") == 60 * 8  # the whole result, every time
