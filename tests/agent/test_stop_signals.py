"""SIGTERM and SIGHUP stop a run as Ctrl-C does (issue 26): the engine's servers reaped, the trace and checkpoints
left readable, exit 143 / 129 with one line saying how to continue, and ``agent resume`` finishes the run.

The signal goes to the agent's process only (as ``kill PID`` or a scheduler sends it); the twin's servers run in
their own sessions, so nothing but the agent can stop them."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
import yaml

from agent.trace import read_trace
from tests.agent.test_agent_run import _server_pids, agent
from tests.shared_runs import NO_PACING

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(("sig", "code"), [(signal.SIGTERM, 143), (signal.SIGHUP, 129)])
def test_a_stop_signal_reaps_the_servers_and_the_run_resumes(tmp_path: Path, sig: int, code: int) -> None:
    task = tmp_path / "quick.yaml"  # the bring-up meets its only target: a run of a few launches
    task.write_text(yaml.safe_dump({
        "extends": str(REPO / "tasks" / "glm52_mi355x.yaml"),
        "targets": [{"name": "single_stream", "metric": "decode_tok_s", "workload": "single_stream", "min": 1}],
        "budgets": {"after_targets": {"node_hours": 0}}, **yaml.safe_load(NO_PACING)}))  # fmt: skip
    proc = subprocess.Popen([sys.executable, "-c", "from agent.cli import app; app()", "run", str(task), "--policy",
                             "playbook", "--run-id", "stopped"], cwd=tmp_path, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)  # fmt: skip
    workspace = tmp_path / "runs" / "stopped" / "workspace"
    deadline = time.monotonic() + 180  # a bound against hanging, not a timing
    while not _server_pids(workspace) and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    assert proc.poll() is None and _server_pids(workspace), "the run never had a server up"
    proc.send_signal(sig)
    out, _ = proc.communicate(timeout=180)
    name = signal.Signals(sig).name
    assert proc.returncode == code, out[-2000:]
    assert f"stopped by {name}; continue with: agent resume stopped" in out
    assert not _server_pids(workspace)  # reaped by the agent itself
    trace = tmp_path / "runs" / "stopped" / "trace.jsonl"
    assert Counter(e.kind for e in read_trace(trace))["run_finished"] == 0
    resumed = agent(tmp_path, "resume", "stopped")
    assert resumed.returncode == 0, resumed.stdout[-2000:] + resumed.stderr[-2000:]
    assert Counter(e.kind for e in read_trace(trace))["run_finished"] == 1
