"""Re-running a recorded run: ``agent replay RUN --execute`` and ``agent replay RUN --from-step N``.

``--execute`` starts a new run whose policy answers every step with the recorded decision (a fresh sandbox and
workspace, the same tool calls), then compares each tool call's result with the recorded one and reports the
first divergence beyond a relative tolerance: a call made or not made, ok/error, a crash diagnosis, a measured
figure, a commit's files. ``--from-step N`` forks: a new run replays decisions 1..N (rebuilding the workspace
and commits in its own sandbox), then the chosen policy continues from the recorded state at step N."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel

from ..policies.replay import check_replay_trace
from ..run import ParentRef, Run, RunOptions
from ..state import AgentState
from ..trace import DecisionEvent, ToolCallEvent, read_trace
from .audit import StepCall, step_calls

DEFAULT_TOLERANCE = 0.02  # relative: the noise allowed on a measured figure before it counts as a divergence
# Fields of a result that differ between two executions of the same call by nature: timing, ports, log tails,
# one-line summaries (their content is in the structured fields), commit hashes (they hash run id and time)
VOLATILE_KEYS = frozenset(
    {"wall_seconds", "endpoint", "argv", "log_tail", "summary", "command", "output_tail", "sha"}
)
_PORT = re.compile(r"(127\.0\.0\.1|localhost|0\.0\.0\.0):\d+")
_LOG_TIME = re.compile(r"\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d(\.\d+)?")

OnStep = Callable[[AgentState, float], None]


class ReplayError(ValueError):
    """Bad input for a replay (unknown run, step beyond the trace, another task's trace): one line."""


DivergenceKind = Literal["missing call", "extra call", "ok", "diagnosis", "metric", "commit files", "result"]


class Divergence(BaseModel):
    """Where a re-execution first differed from the recorded run."""

    step: int | None
    call_id: str
    tool: str
    kind: DivergenceKind
    where: str  # the result field, e.g. runs[0].decode_tok_s
    recorded: Any = None
    replayed: Any = None

    def describe(self, tolerance: float) -> str:
        at = f"step {self.step}, {self.call_id} ({self.tool})"
        if self.kind == "missing call":
            return f"{at}: the recorded run made this call, the re-execution did not"
        if self.kind == "extra call":
            return f"{at}: the re-execution made this call, the recorded run did not"
        if self.kind == "metric":
            rel = abs(self.recorded - self.replayed) / max(abs(self.recorded), abs(self.replayed), 1e-12)
            return (
                f"{at}: {self.where} recorded {self.recorded:g}, re-executed {self.replayed:g} "
                f"({rel:.1%} apart, tolerance {tolerance:.1%})"
            )
        label = {"ok": "ok/error", "diagnosis": "crash diagnosis", "commit files": "committed files"}.get(
            self.kind
        )
        return f"{at}: {label or self.where} recorded {self.recorded!r}, re-executed {self.replayed!r}"


class ExecuteReport(BaseModel):
    """The outcome of ``agent replay RUN --execute``."""

    run_id: str  # the recorded run
    replay_run_id: str  # the run that re-executed it
    tolerance: float
    compared: int  # tool calls compared
    divergence: Divergence | None = None
    finish_reason: str = ""


class ForkReport(BaseModel):
    """The outcome of ``agent replay RUN --from-step N``."""

    parent: ParentRef
    run_id: str
    policy: str
    finish_reason: str


# --- setting up ---------------------------------------------------------------------------------------------


def recorded_options(run_dir: Path) -> RunOptions:
    """The options the recorded run was started with (its run.json)."""
    path = run_dir / "run.json"
    if not path.exists() or not (run_dir / "trace.jsonl").exists():
        raise ReplayError(f"no run {run_dir.name!r} under {run_dir.parent}/ (see: agent runs)")
    try:
        return RunOptions.model_validate_json(path.read_text())
    except ValueError as exc:
        raise ReplayError(f"{path}: not a run's options ({exc.__class__.__name__})") from None


def _task_for(run_dir: Path, recorded: RunOptions, task: Path | None, force: bool) -> tuple[Path, str | None]:
    """The task file a new run re-executing ``run_dir`` uses (``task``, default the recorded one) and the note
    a forced run records when it is not the file the run was recorded with; ReplayError when it is not and not
    ``force``."""
    path = task or Path(recorded.task_path)
    if not path.exists():
        raise ReplayError(
            f"task file {path} not found (run {run_dir.name} was started with "
            f"{recorded.task_path}; pass --task)"
        )
    try:
        note = check_replay_trace(run_dir / "trace.jsonl", path, force, subject=f"run {run_dir.name}")
    except ValueError as exc:
        raise ReplayError(str(exc)) from None
    return path, note


def _new_run_id(runs_dir: Path, run_id: str | None, parent: str, suffix: str) -> str:
    if run_id is None:
        run_id = f"{parent}-{suffix}-{time.strftime('%H%M%S', time.gmtime())}"
    if (runs_dir / run_id).exists():
        raise ReplayError(f"run {run_id} exists (choose another --run-id)")
    return run_id


def _run_to_end(run: Run, on_step: OnStep | None) -> AgentState:
    from ..graph import execute

    try:
        return execute(run, resume=False, on_step=on_step)
    finally:
        run.close()


# --- --execute ----------------------------------------------------------------------------------------------


def execute_recorded(
    run_dir: Path,
    runs_dir: Path,
    run_id: str | None = None,
    tolerance: float = DEFAULT_TOLERANCE,
    task: Path | None = None,
    force: bool = False,
    on_step: OnStep | None = None,
) -> ExecuteReport:
    """Re-execute every recorded decision of the run in ``run_dir`` as a new run under ``runs_dir`` and
    compare its tool results with the recorded ones."""
    if tolerance < 0:
        raise ReplayError(f"--tolerance {tolerance}: a relative tolerance is >= 0 (0.02 is 2 %)")
    recorded = recorded_options(run_dir)
    task_path, note = _task_for(run_dir, recorded, task, force)
    options = RunOptions(
        run_id=_new_run_id(runs_dir, run_id, run_dir.name, "replay"),
        task_path=str(task_path),
        sandbox=recorded.sandbox,
        policy="replay",
        max_trials=recorded.max_trials,
        replay_trace=str((run_dir / "trace.jsonl").resolve()),
        replay_note=note,
        replay_of=run_dir.name,
        executor=recorded.executor,
        ray_address=recorded.ray_address,
        approvals=recorded.approvals,  # its gates, answered from its trace as they were answered
    )
    run = Run.create(options, runs_dir)
    final = _run_to_end(run, on_step)
    compared, divergence = compare_traces(run_dir / "trace.jsonl", run.run_dir / "trace.jsonl", tolerance)
    return ExecuteReport(
        run_id=run_dir.name,
        replay_run_id=run.run_id,
        tolerance=tolerance,
        compared=compared,
        divergence=divergence,
        finish_reason=final.finish_reason,
    )


def compare_traces(recorded: Path, replayed: Path, tolerance: float) -> tuple[int, Divergence | None]:
    """How many tool calls the two traces share, and the first one (in the recorded order) whose results
    differ beyond ``tolerance`` (relative, on numbers; strings, flags and file lists exactly, once run ids,
    run folders, ports and log timestamps are set aside). Calls are matched by step and position
    (``s{step}c{i}``, whatever id the recording policy gave them) and the graph's own calls by id
    (``s{step}eval``, ...)."""
    old_events, new_events = read_trace(recorded), read_trace(replayed)
    old_calls = step_calls(old_events)
    new_calls = {_key(c): c for c in step_calls(new_events)}
    norm_old, norm_new = _normalizer(recorded.parent, old_events), _normalizer(replayed.parent, new_events)
    compared = 0
    for old in old_calls:
        new = new_calls.pop(_key(old), None)
        e = old.event
        if new is None:
            return compared, Divergence(
                step=old.step, call_id=_key(old), tool=e.tool, kind="missing call", where=""
            )
        compared += 1
        found = _compare_call(e, new.event, tolerance, norm_old, norm_new)
        if found is not None:
            kind, where, a, b = found
            return compared, Divergence(
                step=old.step, call_id=_key(old), tool=e.tool, kind=kind, where=where, recorded=a, replayed=b
            )
    if new_calls:
        extra = next(iter(new_calls.values()))
        return compared, Divergence(
            step=extra.step, call_id=_key(extra), tool=extra.event.tool, kind="extra call", where=""
        )
    return compared, None


def _key(call: StepCall) -> str:
    """``s{step}c{i}`` for a decision's i-th call, the id of the graph's own calls; ``stop`` for stopping the
    server at the end (the step a run ends on is not a result: a replay may end one step later)."""
    if call.graph == "stop":
        return "stop"
    return call.event.call_id if call.proposed is None else f"s{call.step}c{call.proposed}"


def _normalizer(run_dir: Path, events: list) -> Callable[[str], str]:
    """A string with what names this run (its folder, its id) and what names this execution (ports, log
    times) replaced by placeholders."""
    run_id = next((e.run_id for e in events), run_dir.name)
    folder = str(run_dir.resolve())
    own_id = re.compile(rf"(?<![A-Za-z0-9_]){re.escape(run_id)}(?![A-Za-z0-9_])")
    # the run's folder where it was recorded (a copied run's trace names the folder it ran in)
    any_folder = re.compile(rf"(?:/[\w.+-]+)*/{re.escape(run_id)}(?=/|$|[\s\"',:)])")

    def normalize(text: str) -> str:
        text = any_folder.sub("<run-dir>", text.replace(folder, "<run-dir>"))
        text = own_id.sub("<run-id>", text)
        text = _PORT.sub(r"\1:<port>", text)
        return _LOG_TIME.sub("<time>", text)

    return normalize


def _compare_call(old: ToolCallEvent, new: ToolCallEvent, tolerance: float, norm_old, norm_new):
    """(kind, where, recorded, replayed) of the first difference between two runs of one call, or None."""
    if old.tool != new.tool:
        return "result", "tool", old.tool, new.tool
    if old.ok != new.ok:
        return "ok", "ok", old.ok, new.ok
    if old.error is not None and new.error is not None and norm_old(old.error) != norm_new(new.error):
        return "ok", "error", old.error, new.error
    return _compare_values(old.tool, old.result, new.result, "", tolerance, norm_old, norm_new)


def _kind(tool: str, where: str) -> DivergenceKind:
    if "diagnosis" in where:
        return "diagnosis"
    if tool == "commit" and where.endswith("files"):
        return "commit files"
    return "result"


def _compare_values(tool: str, a: Any, b: Any, where: str, tol: float, norm_a, norm_b):
    if isinstance(a, dict) and isinstance(b, dict):
        for key in list(a) + [k for k in b if k not in a]:
            if key in VOLATILE_KEYS:
                continue
            at = f"{where}.{key}" if where else key
            if key not in a or key not in b:
                return _kind(tool, at), at, a.get(key), b.get(key)
            found = _compare_values(tool, a[key], b[key], at, tol, norm_a, norm_b)
            if found is not None:
                return found
        return None
    if isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            return _kind(tool, where), where, a, b
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            found = _compare_values(tool, x, y, f"{where}[{i}]", tol, norm_a, norm_b)
            if found is not None:
                return ("commit files", where, a, b) if found[0] == "commit files" else found
        return None
    if isinstance(a, bool) or isinstance(b, bool) or a is None or b is None:
        return None if a == b else (_kind(tool, where), where, a, b)
    if isinstance(a, int | float) and isinstance(b, int | float):
        if abs(a - b) <= tol * max(abs(a), abs(b)):
            return None
        return ("diagnosis" if "diagnosis" in where else "metric"), where, a, b
    if isinstance(a, str) and isinstance(b, str):
        return None if norm_a(a) == norm_b(b) else (_kind(tool, where), where, a, b)
    return None if a == b else (_kind(tool, where), where, a, b)


# --- --from-step --------------------------------------------------------------------------------------------


def fork_run(
    run_dir: Path,
    runs_dir: Path,
    step: int,
    policy: str,
    run_id: str | None = None,
    task: Path | None = None,
    force: bool = False,
    llm_model: str | None = None,
    llm_base_url: str | None = None,
    on_step: OnStep | None = None,
) -> ForkReport:
    """A new run that replays the recorded run's decisions 1..``step`` in its own sandbox, then continues with
    ``policy`` from the state the recorded run had after ``step``; its run.json names the parent and step."""
    from ..graph import saved_state

    recorded = recorded_options(run_dir)
    decisions = [e for e in read_trace(run_dir / "trace.jsonl") if isinstance(e, DecisionEvent)]
    last = max((d.step or 0 for d in decisions), default=0)
    if step < 0 or step > last:
        raise ReplayError(
            f"--from-step {step}: run {run_dir.name} recorded steps 1..{last}"
            + (" (none)" if not last else "")
        )
    if policy not in ("playbook", "llm"):
        raise ReplayError(f"--policy {policy!r}: a fork continues with playbook or llm")
    same_llm = recorded.policy == "llm" or (recorded.policy == "auto" and recorded.llm_model is not None)
    llm_model = llm_model or (recorded.llm_model if same_llm else None)
    llm_base_url = llm_base_url or (recorded.llm_base_url if same_llm else None)
    if policy == "llm" and not llm_model:
        raise ReplayError("--policy llm needs --llm-model (and --llm-base-url for a non-OpenAI endpoint)")
    parent_id = json.loads((run_dir / "run.json").read_text()).get("run_id", run_dir.name)
    if step and saved_state(run_dir, parent_id, step) is None:
        raise ReplayError(f"run {run_dir.name} has no checkpoint of step {step} to fork from")
    task_path, note = _task_for(run_dir, recorded, task, force)
    parent = ParentRef(
        run_id=parent_id,
        step=step,
        run_dir=str(run_dir.resolve()),
        trace=str((run_dir / "trace.jsonl").resolve()),
    )
    options = RunOptions(
        run_id=_new_run_id(runs_dir, run_id, run_dir.name, f"fork{step}"),
        task_path=str(task_path),
        sandbox=recorded.sandbox,
        policy=policy,
        llm_model=llm_model,
        llm_base_url=llm_base_url,
        max_trials=recorded.max_trials,
        replay_note=note,
        parent=parent,
        executor=recorded.executor,
        ray_address=recorded.ray_address,
        approvals=recorded.approvals,  # its gates, asked again: the fork is a new run
    )
    run = Run.create(options, runs_dir)
    final = _run_to_end(run, on_step)
    return ForkReport(parent=parent, run_id=run.run_id, policy=policy, finish_reason=final.finish_reason)


def describe_execute(report: ExecuteReport) -> str:
    """One line: the re-execution's verdict."""
    head = f"re-executed {report.run_id} as {report.replay_run_id}: {report.compared} tool call(s) compared"
    if report.divergence is None:
        return f"{head}, no divergence beyond {report.tolerance:.1%}"
    return f"{head}; first divergence at {report.divergence.describe(report.tolerance)}"
