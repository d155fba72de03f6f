"""A trace recorded for another task is not replayed on this one unless forced, and a forced replay says so."""

from __future__ import annotations

import hashlib
import os
import subprocess
from pathlib import Path

from agent.trace import TraceWriter, read_trace
from tests.agent_process import run_cli

REPO = Path(__file__).resolve().parents[2]


def _trace(path: Path, task: str) -> Path:
    task_path = REPO / "tasks" / f"{task}.yaml"
    w = TraceWriter(path, run_id="recorded")
    w.emit("run_started", task=task, task_path=str(task_path),
           task_sha256=hashlib.sha256(task_path.read_bytes()).hexdigest(), policy="playbook", sandbox="local",
           engine="twin")  # fmt: skip
    w.close()
    return path


def _agent(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    return run_cli(args, cwd=cwd, env={**os.environ, "COLUMNS": "200"})


def test_another_tasks_trace_is_refused_in_one_line(tmp_path):
    trace = _trace(tmp_path / "corvus.jsonl", "corvus_mi300x")
    proc = _agent(tmp_path, "run", str(REPO / "tasks" / "glm52_mi355x.yaml"), "--policy", "replay", "--replay",
                  str(trace), "--run-id", "r")  # fmt: skip
    assert proc.returncode == 2
    out = proc.stdout.strip()
    assert len(out.splitlines()) == 1 and "recorded for task 'corvus_mi300x'" in out and "--force" in out
    assert "Traceback" not in proc.stdout + proc.stderr
    assert not (tmp_path / "runs" / "r").exists()  # nothing started
    junk = tmp_path / "junk.jsonl"
    junk.write_text("not json\n")
    bad = _agent(tmp_path, "run", str(REPO / "tasks" / "glm52_mi355x.yaml"), "--policy", "replay", "--replay",
                 str(junk))  # fmt: skip
    assert bad.returncode == 2 and "not a readable trace" in bad.stdout and "Traceback" not in bad.stdout + bad.stderr


def test_a_forced_replay_is_recorded(tmp_path):
    trace = _trace(tmp_path / "corvus.jsonl", "corvus_mi300x")
    proc = _agent(tmp_path, "run", str(REPO / "tasks" / "glm52_mi355x.yaml"), "--policy", "replay", "--replay",
                  str(trace), "--force", "--run-id", "forced")  # fmt: skip
    assert "Traceback" not in proc.stdout + proc.stderr, proc.stdout[-2000:] + proc.stderr[-2000:]
    events = read_trace(tmp_path / "runs" / "forced" / "trace.jsonl")
    assert events[0].kind == "run_started"
    notes = [e.message for e in events if e.kind == "note"]
    assert any(n.startswith("forced replay: --replay") and "corvus_mi300x" in n for n in notes), notes


def test_the_same_tasks_trace_passes(tmp_path):
    from agent.policies.replay import check_replay_trace

    trace = _trace(tmp_path / "glm.jsonl", "glm52_mi355x")
    assert check_replay_trace(trace, REPO / "tasks" / "glm52_mi355x.yaml") is None
