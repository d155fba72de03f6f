"""A kill between any trace record and the next checkpoint (issue 42), at every such point of the default run to
its targets, not at random ones: the run is SIGKILLed right after the first record each process writes that the
trace did not hold when that process started (a new step's decision, a call not made before, an approval, the
run's end), then resumed, again and again, until it ends. Every record of the run is thus followed by a kill
before its step's checkpoint; the run must end with the same trials, figures and commits as the run never killed
(the shared short run), every call recorded once.

About a resume per record (about 70): minutes, so it is deselected by default (``pytest -m long``).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.agent.test_agent_run import stopping_at_the_targets
from tests.agent.test_kill_anywhere import check_clean, end_state, reference  # noqa: F401 - a fixture

REPO = Path(__file__).resolve().parents[2]
TASK = REPO / "tasks" / "glm52_mi355x.yaml"

# run by the agent's interpreter at start-up (``sitecustomize``)
KILL_AFTER_A_NEW_RECORD = '''
import json, os, signal
import agent.trace as trace

def identity(kind, fields):
    if kind == "decision":
        return ("decision", fields.get("step"))
    if kind == "tool_call":  # a server brought back on resume is the run's own call, made again at every resume
        return None if "resumed" in (fields.get("call_id") or "") else ("call", fields.get("call_id"))
    if kind in ("approval_requested", "approval_answered"):
        return (kind, json.dumps(fields.get("gate") or fields.get("answer"), sort_keys=True, default=str))
    return ("finished",) if kind == "run_finished" else None

emit, known = trace.TraceWriter.emit, {}

def killing_emit(self, kind, **fields):
    path = str(self.path)
    if path not in known:
        lines = open(path).read().splitlines() if os.path.exists(path) else []
        known[path] = {identity(e.get("kind"), e) for e in (json.loads(x) for x in lines if x.strip())}
    event = emit(self, kind, **fields)
    if (i := identity(kind, fields)) is not None and i not in known[path]:
        os.kill(os.getpid(), signal.SIGKILL)  # after the record, before anything else: the step is not checkpointed
    return event

trace.TraceWriter.emit = killing_emit
'''


@pytest.mark.long
def test_killed_after_every_record_ends_as_an_uninterrupted_run(reference, tmp_path):  # noqa: F811
    _, expected, _ = reference
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(KILL_AFTER_A_NEW_RECORD)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), str(REPO), os.environ.get("PYTHONPATH", "")])}
    task = stopping_at_the_targets(tmp_path, TASK)
    args = ["run", str(task), "--policy", "playbook", "--run-id", "killed"]
    kills = 0
    while True:
        proc = subprocess.run([sys.executable, "-c", "from agent.cli import app; app()", *args], cwd=tmp_path,
                              env=env, capture_output=True, text=True, timeout=600)  # fmt: skip
        if proc.returncode != -9:
            break
        kills += 1
        assert kills < 400, "no progress between kills"
        args = ["resume", "killed"]
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    run_dir = tmp_path / "runs" / "killed"
    assert end_state(run_dir) == expected, f"after {kills} kills"
    check_clean(run_dir)
