"""Warm start: what earlier runs of the same task measured, for a new run's search to begin from.

``agent run TASK --prior RUN ...`` reads each earlier run's record (``summary.json``: every trial's flags,
environment and figures; ``trace.jsonl``: which task it ran). Only runs of this very task file are taken, since
another task's figures belong to another model or node. The new run's trace says what it reused.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from pydantic import BaseModel

from tasks.spec import TaskSpec

from .search import Candidate, Measured, measured_on
from .state import Trial
from .trace import read_trace


class PriorError(ValueError):
    """A prior run that cannot be used; the message is one line."""


class PriorRun(BaseModel):
    """An earlier run's measurements of the knee target, and its best configuration."""

    run_id: str
    target: str
    measured: list[Measured]
    best: Measured | None = None

    def describe(self) -> str:
        best = f"; its best {self.best.value:.1f} with {self.best.candidate.flags}" if self.best else ""
        return f"warm start: {len(self.measured)} measurement(s) of {self.target} from run {self.run_id}{best}"


def load_prior(run_dir: Path, task: TaskSpec, task_path: Path) -> PriorRun:
    """The measurements of ``run_dir``'s run for the task's knee target (raises ``PriorError``)."""
    summary_path, trace_path = run_dir / "summary.json", run_dir / "trace.jsonl"
    if not summary_path.exists() or not trace_path.exists():
        raise PriorError(f"--prior {run_dir}: not a finished run (no summary.json or trace.jsonl)")
    try:
        started = next((e for e in read_trace(trace_path) if e.kind == "run_started"), None)
        summary = json.loads(summary_path.read_text())
    except (OSError, ValueError) as exc:
        raise PriorError(f"--prior {run_dir}: unreadable ({exc})") from None
    sha = hashlib.sha256(Path(task_path).read_bytes()).hexdigest()
    if started is None or started.task_sha256 != sha:
        what = f"task {started.task!r} ({started.task_path})" if started else "no task"
        raise PriorError(f"--prior {run_dir}: recorded for {what}, not {task_path}; a prior must run the same task")
    target = next((t.name for t in task.targets if t.metric == "throughput_at_knee"), None)
    if target is None:
        raise PriorError(f"--prior {run_dir}: the task has no knee target to warm-start the search of")
    try:
        trials = [Trial.model_validate(t) for t in summary.get("trials", [])]
    except ValueError as exc:
        raise PriorError(f"--prior {run_dir}: its summary's trials do not read ({exc})") from None
    measured = measured_on(trials, target)
    won = summary.get("targets", {}).get(target) or {}
    trial = next((t for t in trials if t.id == won.get("trial")), None)
    best = None
    if trial is not None and won.get("achieved") is not None:
        best = Measured(candidate=Candidate(flags=trial.flags, env=trial.env), value=won["achieved"])
    return PriorRun(run_id=summary.get("run_id", run_dir.name), target=target, measured=measured, best=best)
