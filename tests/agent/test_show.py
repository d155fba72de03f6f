"""``agent show RUN``: the timeline a trace records, printed without running anything."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from agent.timeline import read_timeline
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
    missing = _agent(tmp_path, "show", "nope")
    assert missing.returncode == 2 and missing.stdout.count("\n") == 1 and "no run 'nope'" in missing.stdout
    (tmp_path / "runs" / "bad").mkdir()
    (tmp_path / "runs" / "bad" / "trace.jsonl").write_text("{}\n")
    bad = _agent(tmp_path, "show", "bad")
    assert bad.returncode == 2 and "Traceback" not in bad.stdout + bad.stderr
