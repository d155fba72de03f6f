"""Replay: answer each decision with the one a recorded trace made at that step.

The graph then executes the same tool calls again, so a run can be re-executed and audited; forking from a
step (replay up to it, then hand over to another policy) builds on this.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from agent.state import AgentState, Call
from agent.trace import read_trace

from .base import Decision, PolicyContext


def check_replay_trace(trace_path: Path, task_path: Path, force: bool = False) -> str | None:
    """Refuse a trace recorded for another task: its decisions name another model's files, flags and
    numbers, and re-running them here would commit another task's patches. Returns the note a forced replay
    records, None when the trace is this task's; raises ValueError with one line otherwise."""
    try:
        started = next((e for e in read_trace(trace_path) if e.kind == "run_started"), None)
    except (OSError, ValueError) as exc:  # TraceError and a malformed event are ValueErrors
        raise ValueError(f"--replay {trace_path}: not a readable trace ({exc})") from None
    if started is None:
        raise ValueError(f"--replay {trace_path}: the trace has no run_started event (not a dayzero trace?)")
    sha = hashlib.sha256(Path(task_path).read_bytes()).hexdigest()
    if started.task_sha256 == sha:
        return None
    what = (f"--replay {trace_path} was recorded for task {started.task!r} ({started.task_path}, sha256 "
            f"{started.task_sha256[:12]}), not {task_path} (sha256 {sha[:12]})")  # fmt: skip
    if not force:
        raise ValueError(f"{what}: its decisions belong to that task (--force replays them anyway, recorded)")
    return f"forced replay: {what}"


class ReplayPolicy:
    name = "replay"

    def __init__(self, trace_path: Path):
        self.decisions = [e for e in read_trace(trace_path) if e.kind == "decision"]

    def decide(self, state: AgentState, ctx: PolicyContext) -> Decision:
        index = state.step  # decision k (0-based) is the run's step k + 1
        if index >= len(self.decisions):
            return Decision(calls=[], rationale="end of the recorded trace", stage="replay", memo=state.memo, done=True)
        d = self.decisions[index]
        calls = [Call(tool=c.tool, args=dict(c.input)) for c in d.proposed_calls]
        return Decision(calls=calls, rationale=d.rationale, stage=d.stage or "replay", memo=state.memo,
                        done=not calls, annotations=dict(d.annotations))  # fmt: skip
