"""Auditing a recorded run without running anything: ``agent replay RUN`` (the default).

The audit re-reads ``runs/<id>/`` and checks that its records agree with each other: the trace parses and is
numbered without gaps; every decision's proposed calls were made, in order, with the inputs it proposed; the
trials, patches and bests re-derived from the recorded tool results (with the graph's own pure function,
:func:`agent.outcomes.apply_observations`) match the final checkpointed state; each best's value is the one
its trial's recorded benchmark measured; committed patches' commits exist on the run's branch with the files
the trace says; ``summary.json`` agrees with the final state and with the ``run_finished`` event; and the task
file is still the one the run was started with. Each disagreement is a :class:`Finding`."""

from __future__ import annotations

import hashlib
import json
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, computed_field
from rich.console import Group
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from tasks.spec import TaskSpec, load_task

from ..outcomes import apply_observations
from ..state import AgentState, Observation
from ..trace import (
    DecisionEvent,
    RunFinishedEvent,
    RunStartedEvent,
    ToolCallEvent,
    TraceError,
    TraceEvent,
    read_trace,
)

Severity = Literal["error", "warning", "info"]
REL_EXACT = 1e-9  # figures re-derived from the same recorded numbers agree to rounding
# ids the graph gives calls: the i-th call of a step's decision (unless the policy named it, as an LLM does),
# and the graph's own calls: the accuracy check, a patch's commit, stopping the server at the end, and a
# candidate's configuration launched again for its accuracy check (a resumed run)
ACT_CALL = re.compile(r"^s(?P<step>\d+)c(?P<index>\d+)$")
# figures a benchmark run reports as bench_serving recorded them (the trace's decode_tok_s is derived)
BENCH_FIGURES = (
    "output_throughput",
    "request_throughput",
    "median_ttft_ms",
    "p99_ttft_ms",
    "median_tpot_ms",
    "completed",
)
GRAPH_CALL = re.compile(r"^s(?P<step>\d+)(?P<what>eval|commit(?P<patch>\d+)|stop|relaunch)(?P<trial>(?<=relaunch)\d+)?$")
# a launch made again after a resume, because the recorded one's server went with the killed process
RESUMED_LAUNCH = "-resumed"


class Finding(BaseModel):
    """One disagreement in a run's records (or a check that could not be made)."""

    severity: Severity
    step: int | None = None
    check: str  # which check found it: trace, calls, state, bests, commits, summary, task
    message: str


class AuditReport(BaseModel):
    """What the audit of one run checked and found."""

    run_id: str
    run_dir: str
    checks: list[str] = []  # the checks that ran, in order
    findings: list[Finding] = []

    @computed_field
    @property
    def ok(self) -> bool:
        """No finding of severity error."""
        return not any(f.severity == "error" for f in self.findings)

    def errors(self) -> list[Finding]:
        return [f for f in self.findings if f.severity == "error"]


class StepCall(BaseModel):
    """A recorded tool call and the decision (step) it was recorded under."""

    event: ToolCallEvent
    step: int  # the step of the decision before it in the trace (0 before any)
    proposed: int | None  # its index among the decision's calls; None for the graph's own calls
    graph: str | None = None  # the graph's own call: "eval", "commit", "stop" or "relaunch"
    patch: int | None = None  # the patch a graph commit call commits
    id_step: int | None = None  # the step its id names, if it names one


def step_calls(events: list[TraceEvent]) -> list[StepCall]:
    """The trace's tool calls with the step each belongs to: a decision's calls are recorded after it and
    before the next decision, in its order, whatever ids the policy gave them."""
    out: list[StepCall] = []
    step, index = 0, 0
    for e in events:
        if isinstance(e, DecisionEvent):
            step, index = e.step or 0, 0
        elif isinstance(e, ToolCallEvent):
            if e.call_id.endswith(RESUMED_LAUNCH):
                out.append(StepCall(event=e, step=step, proposed=None, graph="relaunch"))
                continue
            if m := GRAPH_CALL.match(e.call_id):
                what = "commit" if m["patch"] is not None else m["what"]
                patch = int(m["patch"]) if m["patch"] is not None else None
                out.append(
                    StepCall(
                        event=e, step=step, proposed=None, graph=what, patch=patch, id_step=int(m["step"])
                    )
                )
                continue
            m = ACT_CALL.match(e.call_id)
            if m and (int(m["step"]), int(m["index"])) != (step, index):
                out.append(StepCall(event=e, step=step, proposed=int(m["index"]), id_step=int(m["step"])))
            else:
                out.append(
                    StepCall(event=e, step=step, proposed=index, id_step=int(m["step"]) if m else None)
                )
            index += 1
    return out


@dataclass
class _TaskOnly:
    """What :func:`apply_observations` reads of a run: only its task."""

    task: TaskSpec


class _Auditor:
    def __init__(self, run_dir: Path, task_path: Path | None):
        self.run_dir = run_dir
        self.task_path = task_path
        self.report = AuditReport(run_id=run_dir.name, run_dir=str(run_dir))
        self.eval_deltas: dict[int, float] = {}  # trial id -> accuracy delta its recorded eval measured
        self.measured_at: dict[tuple[int, str], int] = {}  # (trial id, target) -> step of its measurement

    def find(self, severity: Severity, check: str, message: str, step: int | None = None) -> None:
        self.report.findings.append(Finding(severity=severity, step=step, check=check, message=message))

    def ran(self, check: str) -> None:
        self.report.checks.append(check)

    # --- the trace ------------------------------------------------------------------------------------

    def trace(self) -> list[TraceEvent] | None:
        self.ran("trace parses")
        path = self.run_dir / "trace.jsonl"
        if not path.exists():
            self.find("error", "trace", f"{path} does not exist")
            return None
        try:
            events = read_trace(path)
        except (TraceError, OSError) as exc:
            self.find("error", "trace", str(exc))
            return None
        self.ran("trace numbered 1..n, one run_started first, at most one run_finished last")
        for i, e in enumerate(events, start=1):
            if e.seq != i:
                self.find(
                    "error", "trace", f"event {i} has seq {e.seq}: a line is missing or out of place", e.step
                )
                break
        started = [e for e in events if isinstance(e, RunStartedEvent)]
        if len(started) != 1 or not events or not isinstance(events[0], RunStartedEvent):
            self.find(
                "error", "trace", f"{len(started)} run_started event(s); a trace opens with exactly one"
            )
        finished = [i for i, e in enumerate(events) if isinstance(e, RunFinishedEvent)]
        if len(finished) > 1:
            self.find("error", "trace", f"{len(finished)} run_finished events; a run finishes once")
        elif finished and any(
            isinstance(e, DecisionEvent | ToolCallEvent) for e in events[finished[0] + 1 :]
        ):
            self.find("error", "trace", "decisions or tool calls recorded after run_finished")
        run_ids = {e.run_id for e in events}
        if len(run_ids) > 1:
            self.find("error", "trace", f"events of several runs in one trace: {', '.join(sorted(run_ids))}")
        elif run_ids and run_ids != {self.run_dir.name}:
            self.find(
                "warning", "trace", f"the trace is run {run_ids.pop()!r}'s, in folder {self.run_dir.name!r}"
            )
        return events

    # --- decisions and their calls ----------------------------------------------------------------------

    def calls(self, events: list[TraceEvent]) -> None:
        """Every proposed call has its tool_call, recorded after its decision and before the next, in the
        decision's order, with the proposed tool and input; no call that was not proposed; the graph's own
        calls (``s{step}eval``, ``s{step}commit{patch}``, ``s{step}stop``) under their step."""
        self.ran("every proposed call made, in order, with its proposed input")
        finished = any(isinstance(e, RunFinishedEvent) for e in events)
        decisions = [e for e in events if isinstance(e, DecisionEvent)]
        made: dict[int, list[StepCall]] = {}
        for c in step_calls(events):
            e = c.event
            if "ok" in e.result and bool(e.result["ok"]) != e.ok:
                self.find(
                    "error",
                    "calls",
                    f"{e.call_id} ({e.tool}): recorded ok={e.ok} but its result says ok={e.result['ok']}",
                    c.step,
                )
            if c.id_step is not None and c.id_step != c.step:
                self.find("error", "calls", f"{e.call_id} ({e.tool}) recorded under step {c.step}", c.id_step)
            if c.proposed is not None:
                made.setdefault(c.step, []).append(c)
        last_step = 0
        for d in decisions:
            step = d.step or 0
            if step == last_step:
                self.find("warning", "calls", f"step {step} decided again (a resumed run)", step)
            elif step != last_step + 1:
                self.find("error", "calls", f"decision for step {step} follows step {last_step}", step)
            last_step = step or last_step
        for d in {d.step or 0: d for d in decisions}.values():  # the last decision of a step decided again
            step, got = d.step or 0, made.pop(d.step or 0, [])
            for i, p in enumerate(d.proposed_calls):
                rec = next((c.event for c in got if c.proposed == i), None)
                if rec is None:
                    interrupted = not finished and d is decisions[-1]
                    self.find(
                        "warning" if interrupted else "error",
                        "calls",
                        f"proposed call {i} of step {step} ({p.tool}) was not made"
                        + (" (the run stopped here)" if interrupted else ""),
                        step,
                    )
                elif rec.tool != p.tool:
                    self.find(
                        "error",
                        "calls",
                        f"{rec.call_id}: tool {rec.tool!r}, the decision proposed {p.tool!r}",
                        step,
                    )
                elif "__raw_arguments__" not in p.input and rec.input != p.input:
                    self.find(
                        "error",
                        "calls",
                        f"{rec.call_id} ({rec.tool}): input differs from the proposed one "
                        f"({_first_difference(p.input, rec.input)})",
                        step,
                    )
            for c in got:
                if c.proposed >= len(d.proposed_calls):
                    self.find(
                        "error",
                        "calls",
                        f"{c.event.call_id} ({c.event.tool}) was not proposed by the decision",
                        step,
                    )
        for step, extra in made.items():
            self.find(
                "error",
                "calls",
                f"{extra[0].event.call_id} ({extra[0].event.tool}) recorded with no decision",
                step or None,
            )

    # --- the state the trace implies ---------------------------------------------------------------------

    def rederive(self, events: list[TraceEvent], task: TaskSpec) -> AgentState:
        """Trials, patches and candidates from the recorded results, step by step, as the graph's assess node
        derives them; trial accuracies from the recorded evals; commits from the recorded commit calls."""
        started = next(e for e in events if isinstance(e, RunStartedEvent))
        state = AgentState(run_id=started.run_id, task_path=started.task_path)
        holder = _TaskOnly(task)
        by_step: dict[int, list[StepCall]] = {}
        for c in step_calls(events):
            by_step.setdefault(c.step, []).append(c)
        for d in {d.step or 0: d for d in events if isinstance(d, DecisionEvent)}.values():
            step = d.step or 0
            calls = by_step.get(step, [])
            obs = [
                Observation(
                    call_id=c.event.call_id,
                    tool=c.event.tool,
                    args=c.event.input,
                    ok=c.event.ok,
                    error=c.event.error,
                    result=c.event.result,
                    step=step,
                )
                for c in calls
                if c.proposed is not None
            ]
            state = state.model_copy(
                update={
                    "step": step,
                    "rationale": d.rationale,
                    "stage": d.stage or "",
                    "annotations": d.annotations,
                    "observations": obs,
                }
            )
            before = {t.id: dict(t.metrics) for t in state.trials}
            state = state.model_copy(update=apply_observations(state, holder))  # type: ignore[arg-type]
            for t in state.trials:
                for name, value in t.metrics.items():
                    if before.get(t.id, {}).get(name) != value:
                        self.measured_at[(t.id, name)] = step
            for c in calls:
                e = c.event
                if c.graph == "eval" and state.trials:
                    if e.result.get("delta") is not None:
                        self.eval_deltas[state.trials[-1].id] = float(e.result["delta"])
                    state.trials[-1].accuracy = e.result.get("accuracy")
                    state.trials[-1].accuracy_ok = bool(e.ok and e.result.get("within_tolerance"))
                elif c.patch is not None and e.ok:
                    for p in state.patches:
                        if p.id == c.patch:
                            p.status, p.commits = "committed", [r["sha"] for r in e.result.get("commits", [])]
        return state

    def state(self, events: list[TraceEvent], task: TaskSpec | None, final: AgentState | None) -> None:
        if final is None:
            return
        self.ran("checkpointed trials and patches re-derived from the recorded results")
        if task is None:
            self.find("warning", "state", "no task to re-derive trials with; trials and bests not re-checked")
            return
        derived = self.rederive(events, task)
        if len(derived.trials) != len(final.trials):
            self.find(
                "error",
                "state",
                f"the checkpoint holds {len(final.trials)} trial(s), the recorded results "
                f"imply {len(derived.trials)}",
            )
        for mine, theirs in zip(derived.trials, final.trials, strict=False):
            for field in ("id", "flags", "status", "diagnosis", "accuracy"):
                if getattr(mine, field) != getattr(theirs, field):
                    self.find(
                        "error",
                        "state",
                        f"trial {theirs.id}: {field} is {getattr(theirs, field)!r} in the "
                        f"checkpoint, {getattr(mine, field)!r} in the recorded results",
                        theirs.step,
                    )
            for name in set(mine.metrics) | set(theirs.metrics):
                a, b = mine.metrics.get(name), theirs.metrics.get(name)
                if a is None or b is None or not _close(a, b, REL_EXACT):
                    self.find(
                        "error",
                        "state",
                        f"trial {theirs.id}: {name} is {b} in the checkpoint, {a} in the recorded results",
                        self.measured_at.get((theirs.id, name), theirs.step),
                    )
        if [(p.id, sorted(p.files), p.title) for p in derived.patches] != [
            (p.id, sorted(p.files), p.title) for p in final.patches
        ]:
            self.find(
                "error",
                "state",
                f"patches {[(p.id, p.title) for p in final.patches]} in the checkpoint, "
                f"{[(p.id, p.title) for p in derived.patches]} from the recorded edits",
            )
        for mine, theirs in zip(derived.patches, final.patches, strict=False):
            if theirs.status == "committed" and mine.commits != theirs.commits:
                self.find(
                    "error",
                    "state",
                    f"patch {theirs.id}: commits {theirs.commits} in the checkpoint, "
                    f"{mine.commits} in the recorded commit call",
                    theirs.step_applied,
                )
        self.bests(derived, final)

    def bests(self, derived: AgentState, final: AgentState) -> None:
        """Each best's value is what its trial's recorded benchmark (or eval, for an accuracy target)
        measured."""
        self.ran("each best's value is its trial's recorded measurement")
        trials = {t.id: t for t in derived.trials}
        deltas = self.eval_deltas
        for name, best in final.bests.items():
            trial = trials.get(best.trial)
            if trial is None:
                self.find(
                    "error", "bests", f"best {name} names trial {best.trial}, which the trace never launched"
                )
                continue
            measured = trial.metrics.get(name, deltas.get(best.trial))
            if measured is None or not _close(measured, best.value, REL_EXACT):
                self.find(
                    "error",
                    "bests",
                    f"best {name} = {best.value:g} (trial {best.trial}), but the trial's "
                    f"recorded result is {measured if measured is None else format(measured, 'g')}",
                    self.measured_at.get((trial.id, name), trial.step),
                )
            if best.flags != trial.flags:
                self.find(
                    "error",
                    "bests",
                    f"best {name}: flags {best.flags} differ from trial {trial.id}'s {trial.flags}",
                    trial.step,
                )

    # --- benchmark records ----------------------------------------------------------------------------------

    def bench(self, events: list[TraceEvent]) -> None:
        """Every benchmark run a tool result reports agrees with the record the benchmark itself wrote
        (``bench/NNN-<workload>.jsonl``, named by the run's ``--output-file``)."""
        self.ran("benchmark figures in the trace agree with bench/*.jsonl")
        for c in step_calls(events):
            for run in _benchmark_runs(c.event.result):
                name = _output_file(run)
                if name is None:
                    continue
                path = self.run_dir / "bench" / name
                try:
                    record = json.loads(path.read_text().strip().splitlines()[-1])
                except (OSError, ValueError, IndexError):
                    self.find("warning", "bench", f"{c.event.call_id}: no readable record {path}", c.step)
                    continue
                for key in BENCH_FIGURES:
                    a, b = run.get(key), record.get(key)
                    if (
                        isinstance(a, int | float)
                        and isinstance(b, int | float)
                        and not _close(a, b, REL_EXACT)
                    ):
                        self.find(
                            "error",
                            "bench",
                            f"{c.event.call_id} ({c.event.tool}): {key} is {a:g} in the "
                            f"trace, {b:g} in bench/{name}",
                            c.step,
                        )
                        break

    # --- commits --------------------------------------------------------------------------------------------

    def commits(self, events: list[TraceEvent], final: AgentState | None) -> None:
        self.ran("recorded commits exist on the run branch with their files")
        recorded: set[str] = set()
        steps = {c.event.call_id: c.step for c in step_calls(events)}
        for e in events:
            if not isinstance(e, ToolCallEvent) or e.tool != "commit" or not e.ok:
                continue
            for rec in e.result.get("commits", []):
                recorded.add(rec["sha"])
                repo = self.run_dir / "workspace" / rec["source"]
                if not (repo / ".git").exists():
                    self.find(
                        "warning",
                        "commits",
                        f"{e.call_id}: no repository {repo} to check {rec['sha'][:10]} in",
                        steps.get(e.call_id),
                    )
                    continue
                if _git(repo, "cat-file", "-e", f"{rec['sha']}^{{commit}}") is None:
                    self.find(
                        "error",
                        "commits",
                        f"{e.call_id}: commit {rec['sha'][:10]} is not in {repo}",
                        steps.get(e.call_id),
                    )
                    continue
                if _git(repo, "merge-base", "--is-ancestor", rec["sha"], rec["branch"]) is None:
                    self.find(
                        "error",
                        "commits",
                        f"{e.call_id}: commit {rec['sha'][:10]} is not on branch "
                        f"{rec['branch']} of {repo.name}",
                        steps.get(e.call_id),
                    )
                files = _git(repo, "diff-tree", "--no-commit-id", "--name-only", "-r", "--root", rec["sha"])
                if files is not None and sorted(files.split()) != sorted(rec.get("files", [])):
                    self.find(
                        "error",
                        "commits",
                        f"{e.call_id}: commit {rec['sha'][:10]} changes {sorted(files.split())}"
                        f", the trace says {sorted(rec.get('files', []))}",
                        steps.get(e.call_id),
                    )
        for p in final.patches if final else []:
            for sha in p.commits:
                if sha not in recorded:
                    self.find(
                        "error",
                        "commits",
                        f"patch {p.id} ({p.title}): commit {sha[:10]} in the checkpoint "
                        "was never recorded by a commit call",
                    )

    # --- summary.json ---------------------------------------------------------------------------------------

    def summary(self, events: list[TraceEvent], final: AgentState | None) -> None:
        finished = next((e for e in events if isinstance(e, RunFinishedEvent)), None)
        path = self.run_dir / "summary.json"
        if finished is None:
            self.find(
                "info", "summary", "the run has not finished (no run_finished event): summary not checked"
            )
            return
        self.ran("summary.json agrees with run_finished and the final state")
        try:
            summary: dict[str, Any] = json.loads(path.read_text())
        except (OSError, ValueError) as exc:
            self.find("error", "summary", f"{path}: not readable ({exc})")
            return
        if summary != finished.summary:
            key = _first_difference(finished.summary, summary)
            self.find(
                "error", "summary", f"summary.json differs from the run_finished event's summary ({key})"
            )
        if final is None:
            return
        if summary.get("finish_reason") != final.finish_reason:
            self.find(
                "error",
                "summary",
                f"finish_reason {summary.get('finish_reason')!r} in summary.json, "
                f"{final.finish_reason!r} in the final state",
            )
        for name, t in (summary.get("targets") or {}).items():
            best = final.bests.get(name)
            achieved, trial = (best.value, best.trial) if best else (None, None)
            if t.get("achieved") != achieved or t.get("trial") != trial:
                self.find(
                    "error",
                    "summary",
                    f"target {name}: summary.json says {t.get('achieved')} (trial "
                    f"{t.get('trial')}), the final state {achieved} (trial {trial})",
                )
        if summary.get("trials") != [t.model_dump(mode="json") for t in final.trials]:
            self.find("error", "summary", "summary.json's trials differ from the final state's")
        committed = [
            {"patch": p.id, "title": p.title, "commits": p.commits, "files": p.files}
            for p in final.patches
            if p.status == "committed"
        ]
        if summary.get("commits") != committed:
            self.find(
                "error", "summary", "summary.json's commits differ from the final state's committed patches"
            )

    # --- the task -------------------------------------------------------------------------------------------

    def task(self, events: list[TraceEvent]) -> TaskSpec | None:
        self.ran("the task file is the one the run started with")
        started = next(e for e in events if isinstance(e, RunStartedEvent))
        path = self.task_path or Path(started.task_path)
        if not path.exists():
            self.find(
                "warning", "task", f"task file {path} not found: the results are not re-derived against it"
            )
            return None
        sha = hashlib.sha256(path.read_bytes()).hexdigest()
        if sha != started.task_sha256:
            self.find(
                "warning",
                "task",
                f"task file {path} changed since the run (sha256 {sha[:12]}, recorded "
                f"{started.task_sha256[:12]}): re-derived figures use it as it is now",
            )
        try:
            return load_task(path)
        except Exception as exc:  # noqa: BLE001 - a task that no longer loads is a finding, not a crash
            self.find("warning", "task", f"task file {path} does not load now: {exc}")
            return None

    def final_state(self, events: list[TraceEvent]) -> AgentState | None:
        from ..graph import saved_state

        self.ran("final checkpointed state read")
        run_id = next(e for e in events if isinstance(e, RunStartedEvent)).run_id
        try:
            state = saved_state(self.run_dir, run_id)
        except Exception as exc:  # noqa: BLE001 - a damaged database is a finding
            self.find("error", "state", f"checkpoints.sqlite not readable: {exc}")
            return None
        if state is None:
            self.find(
                "error", "state", f"no checkpoint of run {run_id} in {self.run_dir / 'checkpoints.sqlite'}"
            )
        return state


def audit_run(run_dir: Path, task_path: Path | None = None) -> AuditReport:
    """Audit the run in ``run_dir`` (against ``task_path``, default the task file the run recorded). Reads
    files only: no sandbox, no tool, no server."""
    auditor = _Auditor(Path(run_dir), task_path)
    events = auditor.trace()
    if events is None or not any(isinstance(e, RunStartedEvent) for e in events):
        return auditor.report
    auditor.calls(events)
    task = auditor.task(events)
    final = auditor.final_state(events)
    auditor.state(events, task, final)
    auditor.bench(events)
    auditor.commits(events, final)
    auditor.summary(events, final)
    return auditor.report


# --- helpers ------------------------------------------------------------------------------------------------


def _close(a: float, b: float, rel: float) -> bool:
    return abs(a - b) <= rel * max(abs(a), abs(b), 1e-12)


def _first_difference(a: Any, b: Any, path: str = "") -> str:
    """Where two JSON values first differ, as a dotted path (``runs[0].decode_tok_s``)."""
    if isinstance(a, dict) and isinstance(b, dict):
        for k in list(a) + [k for k in b if k not in a]:
            if k not in a or k not in b:
                return f"{path}.{k}".lstrip(".") + (" missing" if k not in b else " added")
            if a[k] != b[k]:
                return _first_difference(a[k], b[k], f"{path}.{k}")
        return path.lstrip(".") or "(same)"
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            if x != y:
                return _first_difference(x, y, f"{path}[{i}]")
    return path.lstrip(".") or "(value)"


def _benchmark_runs(value: Any) -> list[dict[str, Any]]:
    """The benchmark runs anywhere in a tool result: dicts with a command and an output_throughput."""
    if isinstance(value, dict):
        if "command" in value and "output_throughput" in value:
            return [value]
        return [r for v in value.values() for r in _benchmark_runs(v)]
    if isinstance(value, list):
        return [r for v in value for r in _benchmark_runs(v)]
    return []


def _output_file(run: dict[str, Any]) -> str | None:
    """A benchmark run's record under ``bench/``: ``NNN-<workload>.jsonl``, from its command's
    ``--output-file .../<run-id>-NNN-<workload>.jsonl``."""
    command, workload = run.get("command") or [], run.get("workload")
    if "--output-file" not in command[:-1] or not workload:
        return None
    name = Path(command[command.index("--output-file") + 1]).name
    m = re.search(rf"(?<=-)(\d{{3,}}-{re.escape(workload)}\.jsonl)$", name)
    return m.group(1) if m else None


def _git(repo: Path, *args: str) -> str | None:
    """``git args`` in ``repo``: its output, None when git says no."""
    proc = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True)
    return proc.stdout if proc.returncode == 0 else None


def render_audit(report: AuditReport) -> Group:
    """The audit's findings as a table (when there are any) and a verdict line, for rich."""
    parts: list[Any] = []
    if report.findings:
        table = Table(title=f"audit of {escape(report.run_id)}: findings")
        for col in ("severity", "step", "check", "finding"):
            table.add_column(col, overflow="fold")
        style = {"error": "red", "warning": "yellow", "info": "dim"}
        for f in report.findings:
            table.add_row(
                f"[{style[f.severity]}]{f.severity}[/]",
                "" if f.step is None else str(f.step),
                f.check,
                escape(f.message),
            )
        parts.append(table)
    errors, warnings = len(report.errors()), sum(f.severity == "warning" for f in report.findings)
    verdict = "[green]clean[/]" if report.ok else f"[red]{errors} error(s)[/]"
    parts.append(
        Text.from_markup(
            f"audit of {escape(report.run_id)}: {verdict}"
            + (f", {warnings} warning(s)" if warnings else "")
            + f" ({len(report.checks)} checks, nothing executed)"
        )
    )
    return Group(*parts)
