"""Warm start: what earlier runs of the same task measured, for a new run's search to begin from.

``agent run TASK --prior RUN ...`` reads each earlier run's record (``summary.json``: every trial's flags,
environment and figures; ``trace.jsonl``: which task it ran). Only runs of this very task file are taken, since
another task's figures belong to another model or node. The new run's trace says what it reused. Both files are
checked before a new run exists (``agent/run.py``: ``preflight``): regular files (never ``/dev/zero`` or a FIFO),
the summary at most ``tasks/limits.py``'s ``PRIOR_SUMMARY_BYTES``, only the trace's first line read (its
``run_started`` event, at most ``PRIOR_TRACE_LINE_BYTES``); a problem is one line that quotes neither file.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from pydantic import BaseModel, ValidationError

from sandboxes.twin.safe_input import InputFileError, read_first_line, read_text, size_words
from tasks.limits import PRIOR_SUMMARY_BYTES, PRIOR_TRACE_LINE_BYTES
from tasks.spec import TaskSpec

from .search import Candidate, Measured, measured_on
from .state import Trial
from .trace import RunStartedEvent, TraceError, parse_event


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
    where = f"--prior {run_dir}"
    if not run_dir.is_dir():  # a run id under runs/, or a run's folder
        raise PriorError(f"{where}: not a finished run ({'not a folder' if run_dir.exists() else 'no such run'})")
    summary_path, trace_path = run_dir / "summary.json", run_dir / "trace.jsonl"
    if not summary_path.exists() or not trace_path.exists():
        raise PriorError(f"{where}: not a finished run (no summary.json or trace.jsonl)")
    started = _run_started(trace_path, where)
    try:
        summary = json.loads(read_text(summary_path, PRIOR_SUMMARY_BYTES))
    except InputFileError as exc:
        raise PriorError(f"{where}: summary.json: {exc}") from None
    except (ValueError, RecursionError):
        raise PriorError(f"{where}: its summary.json is not valid JSON") from None
    if not isinstance(summary, dict):
        raise PriorError(f"{where}: its summary.json is not a JSON object (not a dayzero run's summary)")
    sha = hashlib.sha256(Path(task_path).read_bytes()).hexdigest()
    if started.task_sha256 != sha:
        raise PriorError(f"{where}: recorded for task {started.task!r} ({started.task_path}), not {task_path}; a "
                         "prior must run the same task")  # fmt: skip
    target = next((t.name for t in task.targets if t.metric == "throughput_at_knee"), None)
    if target is None:
        raise PriorError(f"{where}: the task has no knee target to warm-start the search of")
    trials_data = summary.get("trials", [])
    if not isinstance(trials_data, list):
        raise PriorError(f"{where}: its summary's trials are not a list")
    trials = []
    for i, t in enumerate(trials_data):
        try:
            trials.append(Trial.model_validate(t))
        except ValidationError as exc:  # the field and the problem, never the value
            err = exc.errors()[0]
            field = ".".join(str(p) for p in err["loc"]) or "(the trial)"
            raise PriorError(f"{where}: its summary's trials[{i}] do not read ({field}: {err['msg']})") from None
    measured = measured_on(trials, target)
    won = summary.get("targets", {}).get(target) if isinstance(summary.get("targets"), dict) else None
    won = won if isinstance(won, dict) else {}
    trial = next((t for t in trials if t.id == won.get("trial")), None)
    best = None
    achieved = won.get("achieved")
    if trial is not None and isinstance(achieved, int | float) and not isinstance(achieved, bool):
        best = Measured(candidate=Candidate(flags=trial.flags, env=trial.env), value=achieved)
    run_id = summary.get("run_id")
    return PriorRun(run_id=run_id if isinstance(run_id, str) else run_dir.name, target=target, measured=measured,
                    best=best)  # fmt: skip


def _run_started(trace_path: Path, where: str) -> RunStartedEvent:
    """The ``run_started`` event a run's trace opens with: only its first line is read, from a regular file."""
    try:
        line = read_first_line(trace_path, PRIOR_TRACE_LINE_BYTES)
    except InputFileError as exc:
        raise PriorError(f"{where}: trace.jsonl: {exc}") from None
    if len(line) > PRIOR_TRACE_LINE_BYTES:
        raise PriorError(f"{where}: its trace.jsonl opens with a line over {size_words(PRIOR_TRACE_LINE_BYTES)} "
                         "(not a dayzero trace)")  # fmt: skip
    try:
        event = parse_event(json.loads(line))
    except (ValueError, TraceError, RecursionError):  # ValidationError and JSONDecodeError are ValueErrors
        event = None
    if not isinstance(event, RunStartedEvent):
        raise PriorError(f"{where}: its trace.jsonl does not open with a run_started event (not a dayzero trace)")
    return event
