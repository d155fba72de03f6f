"""The runs under a runs folder as ``agent runs`` lists them: when each started, how long it took, where it stands
(running with its pid, stopped with the command that continues it, finished and why: :func:`run_state`, the one
liveness test the web view uses too), the figures it reached against its goals and the node-hours it spent;
newest first.

Everything comes from the run's own files, read cheaply (``run.json``, ``summary.json``, the trace's first and
last lines), so a folder of many runs lists at once; a file that cannot be read leaves its cells empty.
"""

from __future__ import annotations

import datetime as dt
import json
import os
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from .run_state import RunState, run_state

TAIL_BYTES = 1 << 16  # the trace's last line is within this much of its end (an event is a few KB at most)


class Figure(BaseModel):
    """One target of a finished run: what it reached against its goal."""

    target: str
    achieved: float | None
    goal: float | None
    met: bool
    lower_bound: bool = False  # achieved is a floor: its knee search saw no rate fail above the knee


class RunRow(BaseModel):
    run_id: str
    task: str
    state: RunState  # running (pid), stopped (the resume command), finished (why) or never started
    started: dt.datetime | None = None
    seconds: float | None = None  # from the first record of the trace to its last
    finish_reason: str = ""
    exit_code: int | None = None
    figures: list[Figure] = []
    node_hours: float | None = None
    simulated: bool = False


def _json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _when(text: Any) -> dt.datetime | None:
    try:
        when = dt.datetime.fromisoformat(str(text).replace("Z", "+00:00"))
    except ValueError:
        return None
    return when if when.tzinfo else when.replace(tzinfo=dt.UTC)


def _trace_ends(trace: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """The trace's first and last events (``{}`` where there is none)."""
    try:
        with trace.open("rb") as f:
            first = f.readline()
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - TAIL_BYTES))
            lines = [line for line in f.read().splitlines() if line.strip()]
    except OSError:
        return {}, {}

    def parse(raw: bytes) -> dict[str, Any]:
        try:
            value = json.loads(raw)
        except ValueError:
            return {}
        return value if isinstance(value, dict) else {}

    return parse(first), next((e for raw in reversed(lines) if (e := parse(raw))), {})


def read_row(run_dir: Path) -> RunRow:
    """The row of the run in ``run_dir`` (a folder holding ``run.json``)."""
    options, summary = _json(run_dir / "run.json"), _json(run_dir / "summary.json")
    first, last = _trace_ends(run_dir / "trace.jsonl")
    started = _when(options.get("created")) or _when(first.get("ts"))
    end = _when(last.get("ts"))
    begin = _when(first.get("ts")) or started
    seconds = (end - begin).total_seconds() if end and begin else None
    state = run_state(run_dir)
    if not summary:
        return RunRow(run_id=run_dir.name, task=Path(str(options.get("task_path") or "?")).stem, state=state,
                      started=started, seconds=seconds, simulated=first.get("engine") == "twin")  # fmt: skip
    figures = [Figure(target=name, achieved=t.get("achieved"), goal=t.get("target"), met=bool(t.get("met")),
                      lower_bound=bool(t.get("lower_bound")))
               for name, t in (summary.get("targets") or {}).items()]  # fmt: skip
    hours = summary.get("simulated_node_hours", summary.get("node_hours"))
    outcome = summary.get("outcome") or {}
    return RunRow(run_id=run_dir.name, task=str(summary.get("task", "?")), state=state, started=started,
                  seconds=seconds, finish_reason=str(summary.get("finish_reason") or ""),
                  exit_code=outcome.get("exit_code"), figures=figures,
                  node_hours=float(hours) if isinstance(hours, int | float) else None,
                  simulated=bool(summary.get("simulated")))  # fmt: skip


def list_rows(runs_dir: Path) -> list[RunRow]:
    """Every run under ``runs_dir`` (a folder with ``run.json``), newest first (a run with no start time last)."""
    rows = [read_row(d) for d in Path(runs_dir).glob("*") if (d / "run.json").is_file()]
    epoch = dt.datetime.min.replace(tzinfo=dt.UTC)
    return sorted(rows, key=lambda r: (r.started or epoch, r.run_id), reverse=True)


def duration_text(seconds: float | None) -> str:
    """``42 s``, ``12 min``, ``3.1 h``; ``-`` when unknown."""
    if seconds is None:
        return "-"
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 90 * 60:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def figure_text(f: Figure) -> str:
    """``throughput 3260/2626``: what the target reached against its goal (4 significant digits); a floor (no
    rate was seen failing above its knee) as ``throughput >=3260/2626``."""
    achieved = "-" if f.achieved is None else (">=" if f.lower_bound else "") + f"{f.achieved:.4g}"
    return f"{f.target} {achieved}/{'-' if f.goal is None else f'{f.goal:g}'}"


# ------------------------------------------------------------------------------- two runs' frontiers compared


class ComparedPoint(BaseModel):
    """One named frontier point of one run, as ``agent runs --compare`` prints it."""

    run_id: str
    role: str
    trial: int
    load: str
    tok_s_per_user: float
    throughput_per_gpu: float
    flags: str


class Comparison(BaseModel):
    """Runs' frontiers side by side: each run's frontier (None: nothing measured with a TPOT) and its named
    points, role by role (``max throughput``, ``balanced``, ``max interactivity``)."""

    run_ids: list[str]
    frontiers: dict[str, Any]  # run id -> agent.inspector.frontier.Frontier | None
    points: list[ComparedPoint]
    simulated: bool = False

    def role(self, role: str) -> list[ComparedPoint | None]:
        """The point each run names for ``role``, in ``run_ids`` order (None: that run names none)."""
        return [next((p for p in self.points if p.run_id == r and p.role == role), None) for r in self.run_ids]


def compare_frontiers(runs_dir: Path, run_ids: list[str]) -> Comparison:
    """The frontiers of the finished runs ``run_ids`` under ``runs_dir`` (each read as its report reads it:
    :func:`agent.inspector.report.build_report`). Raises ``ReportError`` (one line) for a run it cannot read."""
    from .report import build_report, fmt_flags

    frontiers: dict[str, Any] = {}
    points: list[ComparedPoint] = []
    simulated = False
    for run_id in run_ids:
        report = build_report(Path(runs_dir) / run_id)
        simulated |= report.simulated
        frontiers[run_id] = report.frontier
        for pick in report.frontier.picks if report.frontier else []:
            p = pick.point
            points.append(ComparedPoint(run_id=run_id, role=pick.role, trial=p.trial, load=p.load,
                                        tok_s_per_user=p.tok_s_per_user, throughput_per_gpu=p.throughput_per_gpu,
                                        flags=fmt_flags(p.flags, p.env)))  # fmt: skip
    return Comparison(run_ids=list(run_ids), frontiers=frontiers, points=points, simulated=simulated)
