"""Where a run stands, from its own files: running (its process holds the run lock), stopped (killed or
interrupted: ``agent resume`` continues it), finished (and why), or never started; and, while it has no summary
yet, its trials so far as its trace records them.

Liveness is the workspace's run lock (:func:`sandboxes.base.run_lock_holder`): the lock ``agent resume`` is
refused by while the run's process lives, dropped by the kernel when it dies, so a killed run never reads as
running and a live one is never offered a resume. Finished is what ``agent resume`` calls finished: a
``summary.json`` and a trace whose last event is ``run_finished`` (written last of all).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from sandboxes.base import run_lock_holder

from ..interactivity import of_runs, per_user_text
from .timeline import Timeline

WORKSPACE = "workspace"  # the run folder's workspace, whose run lock the run's process holds
_CHUNK = 1 << 16


class RunState(BaseModel):
    """What a run is doing now."""

    state: Literal["running", "stopped", "finished", "never started"]
    pid: int | None = None  # running: the process holding the run lock (0: it has not written its pid yet)
    finish_reason: str | None = None  # finished: the summary's finish reason
    resume_command: str | None = None  # stopped: the command that continues it

    @property
    def words(self) -> str:
        """The state in a few words, as the pages show it."""
        if self.state == "running":
            return f"running (pid {self.pid})" if self.pid else "running"
        if self.state == "stopped":
            return f"stopped (killed or interrupted): continue with {self.resume_command}"
        if self.state == "never started":
            return "never started (it failed while being set up)"
        return self.finish_reason or "finished"


def _first_event(trace: Path) -> dict[str, Any]:
    try:
        with trace.open("rb") as f:
            event = json.loads(f.readline() or b"{}")
    except (OSError, ValueError):
        return {}
    return event if isinstance(event, dict) else {}


def _last_event(trace: Path) -> dict[str, Any]:
    """The trace's last complete line, read from its end (an event of any length; a torn last line is skipped,
    as the trace's readers skip it)."""
    tail = b""
    try:
        with trace.open("rb") as f:
            pos = f.seek(0, os.SEEK_END)
            while pos > 0:
                start = max(0, pos - _CHUNK)
                f.seek(start)
                tail = f.read(pos - start) + tail
                pos = start
                last = tail.rfind(b"\n")
                if last > 0 and b"\n" in tail[:last]:  # the line before the last newline is whole in ``tail``
                    break
    except OSError:
        return {}
    last = tail.rfind(b"\n")
    if last < 0:
        return {}
    try:
        event = json.loads(tail[:last].rsplit(b"\n", 1)[-1])
    except ValueError:
        return {}
    return event if isinstance(event, dict) else {}


def run_state(run_dir: Path) -> RunState:
    """Where the run in ``run_dir`` stands now."""
    pid = run_lock_holder(run_dir / WORKSPACE)
    if pid is not None:
        return RunState(state="running", pid=pid)
    trace = run_dir / "trace.jsonl"
    if _first_event(trace).get("kind") != "run_started":
        return RunState(state="never started")
    summary = run_dir / "summary.json"
    if summary.is_file() and _last_event(trace).get("kind") == "run_finished":
        try:
            reason = json.loads(summary.read_text()).get("finish_reason")
        except (OSError, ValueError, AttributeError):
            reason = None
        return RunState(state="finished", finish_reason=str(reason or "finished"))
    return RunState(state="stopped", resume_command=f"agent resume {run_dir.name}")


# ------------------------------------------------------------------------------------------ trials so far


class TrialSoFar(BaseModel):
    """A trial as the trace records it while the run has no summary: the launch (or the ``run_trials`` job), its
    outcome, and what its benchmarks and evals said."""

    model_config = ConfigDict(extra="ignore")

    id: int
    flags: dict[str, Any] = {}
    status: str
    diagnosis: str | None = None
    measured: list[str] = []  # the summaries of its benchmarks, knee searches and evals
    per_user: list[str] = []  # what one user saw in each of its benchmarks and knees (tok/s/user, TPOT p50/p99)
    step: int | None = None


def _diagnosis(result: dict[str, Any]) -> str | None:
    d = result.get("diagnosis")
    if isinstance(d, dict):
        return str(d.get("summary") or d.get("category") or "") or None
    return str(d) if d else None


def _per_user(tool: str, result: dict[str, Any], runs: list[dict[str, Any]] | None = None) -> str | None:
    """What one user saw in a benchmark result, as the benchmark's records say (``bench_serving``'s TPOT):
    a knee's seeds at the knee rate, a benchmark's last run, a ``run_trials`` job's runs behind its value."""
    if runs is None:
        all_runs = [r for r in result.get("runs") or [] if isinstance(r, dict)]
        if tool == "find_knee":
            runs = [r for r in all_runs if result.get("knee_rate") and r.get("request_rate") == result["knee_rate"]]
        else:
            runs = all_runs[-1:]
    inter = of_runs(runs)
    if inter is None:
        return None
    where = f"{inter.workload}: " if inter.workload else ""
    return where + per_user_text(inter, short=True)


def trials_so_far(timeline: Timeline) -> list[TrialSoFar]:
    """The trials the trace's tool calls made, numbered as the run numbers them: each ``launch_server`` that
    reached a status (a launch made again after a resume, ``...-resumed``, is the same trial) and each job of a
    ``run_trials``; the benchmarks, knee searches and evals that followed a launch, on it."""
    trials: list[TrialSoFar] = []
    current: TrialSoFar | None = None
    for step in timeline.steps:
        for c in step.calls:
            r = c.output
            if c.tool == "launch_server" and r.get("status") and not c.call_id.endswith("-resumed"):
                current = TrialSoFar(id=len(trials) + 1, flags=c.input.get("flags") or {}, status=str(r["status"]),
                                     diagnosis=None if r["status"] == "up" else _diagnosis(r) or c.result,
                                     step=step.step)  # fmt: skip
                trials.append(current)
                if current.status != "up":
                    current = None
            elif c.tool == "run_trials" and c.ok:
                for o in r.get("outcomes") or []:
                    spec = o.get("spec") or {}
                    trials.append(TrialSoFar(id=len(trials) + 1, flags=spec.get("flags") or {},
                                             status=str(o.get("status", "?")), diagnosis=_diagnosis(o),
                                             measured=[str(o["summary"])] if o.get("summary") else [],
                                             per_user=[u] if (u := _per_user(c.tool, o, o.get("at_value") or []))
                                             else [], step=step.step))  # fmt: skip
                current = None
            elif c.tool == "stop_server" and c.ok:
                current = None
            elif c.tool in ("run_benchmark", "find_knee", "run_eval") and current is not None and c.result:
                current.measured.append(c.result if c.ok else f"{c.tool}: {c.result}")
                if c.tool != "run_eval" and (user := _per_user(c.tool, r)):
                    current.per_user.append(user)
    return trials
