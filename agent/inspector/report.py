"""The run report: a finished run's targets against its results, the path that got there, the benchmark curves
behind the figures, every trial, accuracy and cost, as ``report.md`` and a self-contained ``report.html``.

``build_report(run_dir)`` reads only the run's files (``summary.json``, ``run.json``, ``trace.jsonl``, the
``bench_serving`` records under ``bench/`` and ``trials/*/bench/``, and the task file) into a :class:`RunReport`;
``agent/inspector/plots.py`` draws its figures; :func:`write_report` renders both documents from the Jinja templates in
``agent/inspector/templates/``. Nothing here runs a tool or changes the run.

Which trial a benchmark record measured is read from the trace: a main-process benchmark's record is the file
its command's ``--output-file`` named (``bench/NNN-<workload>.jsonl``); a sweep trial's records are the files
under ``trials/<job id>/bench/``; a trial is numbered as the agent numbered it (each ``launch_server`` with a
status, then each outcome of a ``run_trials`` call, in trace order).
"""

from __future__ import annotations

import base64
import hashlib
import json
import math
import re
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field

from tasks.spec import TaskError, TaskSpec, load_task
from tools.bench import knee_is_lower_bound

from ..flag_text import dicts_as_flags
from ..secrets import Redactor, run_redactor
from ..trace import DecisionEvent, ToolCallEvent, TraceError, read_trace
from .frontier import Frontier, FrontierPoint, frontier_of
from .wording import (
    STAGES,
    TREE_KEY,
    TREE_TEXT,
    GlossaryEntry,
    accuracy_delta_words,
    accuracy_goal_words,
    glossary_entries,
    reference_words,
    stage_name,
    tree_words,
)

SIMULATED_BANNER = "simulated: dayzero digital twin, not a real node"
TEMPLATES = Path(__file__).parent / "templates"
MIN_SUCCESS_RATE = (
    0.99  # a rate run counts for the knee only if this share of its requests completed (tools/bench.py)
)
UNITS = {"throughput_at_knee": "output tok/s at the knee", "decode_tok_s": "tok/s per stream",
         "output_throughput": "output tok/s", "accuracy_delta": "accuracy vs baseline"}  # fmt: skip


class ReportError(ValueError):
    """A run the report cannot be built for; the message is one line naming the run and what is missing."""


# ------------------------------------------------------------------------------------------------ the model


class TargetResult(BaseModel):
    """One task target: the goal, what the run achieved and whether it counts as met (verified by accuracy)."""

    name: str
    metric: str
    unit: str
    workload: str | None = None
    goal: float
    achieved: float | None = None
    met: bool = False
    trial: int | None = None
    goal_words: str | None = None  # an accuracy goal as a sentence ("at most 0.02 below the reference")
    achieved_words: str | None = None
    lower_bound: bool = False  # achieved is a floor: its knee search saw no rate fail above the knee ("at least")


class PathRow(BaseModel):
    """One change that moved the run forward: a committed patch, or a configuration that improved a target."""

    step: int
    kind: Literal["patch", "screening", "first measurement", "flags", "re-measured"]
    change: str
    result: str
    trial: int | None = None
    target: str | None = None
    flags: list[str] = Field(default_factory=list)  # the change as flags ("tp-size=8", "+kv-cache-dtype=fp8"), if any
    remark: str = ""  # what the flags leave out ("screened as trial 16")


class BenchRun(BaseModel):
    """One benchmark run: one ``bench_serving`` record, and the trial (configuration) it measured."""

    index: int = Field(description="1-based order of the run among all benchmark runs of the agent run")
    file: str = Field(description="the record's file, relative to the run directory")
    trial: int | None = None  # None: no tool call of the trace names this file
    workload: str
    request_rate: float | None = None  # None: all requests at once
    output_throughput: float
    total_throughput: float | None = None
    ttft_p50_ms: float
    ttft_p99_ms: float
    decode_tok_s: float  # tok/s per user: 1000 / median TPOT
    tpot_p50_ms: float | None = None
    tpot_p99_ms: float | None = None
    itl_p50_ms: float | None = None
    itl_p99_ms: float | None = None
    max_concurrency: int | None = None  # the benchmark's --max-concurrency (None: requests by rate only)
    success_rate: float | None = None  # completed / prompts sent, where the record says how many were sent
    gpus_used: int | None = None
    seed: int | None = None  # the benchmark's --seed, where the record names it
    screening: bool = False  # a run of a sweep's trial (run_trials: the cheap first look), never a best
    simulated: bool = False
    bottleneck: str | None = None
    gpu_time_share: dict[str, float] | None = None
    gpu_rank_seconds: dict[str, float] | None = None


class RatePoint(BaseModel):
    """A configuration at one request rate: its benchmark runs there (one per seed) and the figures the knee
    search judges by - the lowest output throughput and the highest TTFT of them."""

    request_rate: float
    runs: list[BenchRun]  # in the order they ran
    output_throughput: float  # the lowest of the runs'
    total_throughput: float | None = None  # the lowest of the runs'
    ttft_p50_ms: float  # the highest of the runs'
    ttft_p99_ms: float  # the highest of the runs'
    sustained: bool | None = None  # every run within the TTFT limit with its requests served (None: no limit)

    @property
    def deciding(self) -> BenchRun:
        """The run whose throughput is the point's figure (the lowest)."""
        return min(self.runs, key=lambda r: r.output_throughput)

    @property
    def files(self) -> list[str]:
        return [r.file for r in self.runs]


class RateCurve(BaseModel):
    """A configuration's benchmark runs on the throughput workload at several request rates, and its knee."""

    role: Literal["baseline", "winner"]
    trial: int
    flags: dict[str, Any]
    env: dict[str, str] = Field(default_factory=dict)
    workload: str
    ttft_limit_ms: float | None = None
    points: list[RatePoint]  # by request rate
    knee_rate: float | None = None
    knee_throughput: float | None = None
    # no rate was seen failing above knee_rate: the configuration sustains at least that, its knee may lie higher
    knee_lower_bound: bool = False
    screening: bool = False  # the configuration is a sweep's trial (run_trials), measured as a screening

    @property
    def knee_point(self) -> RatePoint | None:
        return next(
            (p for p in self.points if self.knee_rate is not None and p.request_rate == self.knee_rate), None
        )


class BestSoFarPoint(BaseModel):
    run_index: int
    screening: bool = False  # a screening run: shown, but not counted in the best
    value: float | None  # what this run showed for the target (None: outside the target's conditions)
    best: float | None  # the highest value so far


class BestSoFarSeries(BaseModel):
    """A target's best value after each benchmark run of its workload."""

    target: str
    metric: str
    unit: str
    goal: float
    points: list[BestSoFarPoint]


class TimeBreakdown(BaseModel):
    """Where the GPUs' time went in the winner's deciding benchmark run, as the engine (the twin) accounted it."""

    trial: int
    request_rate: float | None
    file: str
    share: dict[str, float]
    rank_seconds: dict[str, float] | None = None
    bottleneck: str | None = None
    simulated: bool = False


class TrialRow(BaseModel):
    """One configuration launched, as the run recorded it."""

    id: int
    status: str
    flags: dict[str, Any]
    env: dict[str, str] = Field(default_factory=dict)
    diagnosis: str | None = None
    metrics: dict[str, float] = Field(default_factory=dict)
    accuracy: float | None = None
    accuracy_ok: bool | None = None
    bench_runs: int = 0
    knee_rate: float | None = None
    knee_lower_bound: bool = False  # its knee search saw no rate fail above knee_rate: a floor
    lower_bounds: list[str] = Field(default_factory=list)  # the targets whose figure in metrics is a floor
    screening: bool = False  # a trial of a sweep (run_trials): its figures are never a best
    measured: str | None = (
        None  # its highest output throughput per workload, e.g. "throughput 2987 tok/s at 3.2 req/s"
    )
    winner: bool = False


class AccuracyCheck(BaseModel):
    trial: int | None
    suite: str
    n: int | None = None
    accuracy: float
    ci_low: float | None = None
    ci_high: float | None = None
    baseline: float | None = None
    delta: float | None = None
    within_tolerance: bool | None = None


class AccuracyReport(BaseModel):
    suite: str
    baseline: float | str | None = None  # a figure, or "first" (the first configuration's own accuracy)
    max_drop: float | None = None
    checks: list[AccuracyCheck]
    winner: AccuracyCheck | None = None  # the last check of the winning configuration


class CostEstimate(BaseModel):
    """Cost per million output tokens of the winner: price x GPUs / (output tok/s x 3600) x 1e6."""

    gpu_hour_usd: float | None = None
    gpus: int | None = None
    output_tok_s: float | None = None
    usd_per_million_output_tokens: float | None = None
    simulated: bool = False
    note: str = ""


class WinnerFigures(BaseModel):
    """The per-user figures of the benchmark run behind a target's best (the run that gave its figure)."""

    target: str
    metric: str
    trial: int
    flags: dict[str, Any]
    env: dict[str, str] = Field(default_factory=dict)
    file: str
    load: str  # "3.2 req/s", "concurrency 1", "all at once"
    output_throughput: float
    throughput_per_gpu: float | None = None
    tok_s_per_user: float
    tpot_p50_ms: float | None = None
    tpot_p99_ms: float | None = None
    itl_p50_ms: float | None = None
    itl_p99_ms: float | None = None
    ttft_p50_ms: float


class StageRow(BaseModel):
    """One stage of the policy's plan as the trace's decisions name it, with its display name."""

    key: str  # as the policy wrote it (the playbook's memo key)
    name: str
    does: str = ""
    first_step: int | None = None
    last_step: int | None = None
    decisions: int = 0
    tried: list[str] = Field(default_factory=list)  # what its "try ..." decisions launched, in order


class CommitRow(BaseModel):
    patch: int
    title: str
    commits: list[str]
    files: list[str]
    trial: int | None = None  # the trial that verified it


class ExplainRow(BaseModel):
    """One change from the bring-up configuration to a target's best, and what it moved (``agent/ablation.py``)."""

    target: str
    change: str
    before: str
    after: str
    effect: float | None = None  # None: no measured pair isolates it
    measured_between: tuple[float, float] | None = None  # (without, with)


class RunReport(BaseModel):
    """Everything the report shows, independent of how it is rendered."""

    run_id: str
    task: str
    task_path: str
    engine: str
    simulated: bool
    banner: str | None = None  # SIMULATED_BANNER when the figures came from the twin
    policy: str | None = None
    created: str | None = None
    finish_reason: str
    branch: str | None = None
    node_hours: float | None = None
    wall_seconds_in_tools: float | None = None
    targets: list[TargetResult]
    path: list[PathRow]
    curve_workload: str | None = None
    ttft_limit_ms: float | None = None
    curves: list[RateCurve]
    curve_notes: list[str] = Field(default_factory=list)  # e.g. the baseline was never swept
    best_so_far: list[BestSoFarSeries]
    breakdown: TimeBreakdown | None = None
    winner_trial: int | None = None
    winner_target: str | None = None
    trials: list[TrialRow]
    accuracy: AccuracyReport | None = None
    cost: CostEstimate
    commits: list[CommitRow]
    # every answer at the run's approval gates (summary.json's "approvals"): what, yes or no, who, when, why
    approvals: list[dict[str, Any]] = Field(default_factory=list)
    bench_runs: list[BenchRun]
    notes: list[str] = Field(default_factory=list)  # what the report could not attribute or check
    explain: list[ExplainRow] = Field(default_factory=list)  # why the best won, per target (empty: older runs)
    hardware_gpus: int | None = None
    frontier: Frontier | None = None  # throughput per GPU against tok/s per user (agent/inspector/frontier.py)
    winners: list[WinnerFigures] = Field(default_factory=list)  # per-user figures of each target's best
    stages: list[StageRow] = Field(default_factory=list)
    tree_key: str = TREE_KEY
    glossary: list[GlossaryEntry] = []  # docs/glossary.md's entries, carried inside the report (its last section)

    def curve(self, role: str) -> RateCurve | None:
        return next((c for c in self.curves if c.role == role), None)


# ------------------------------------------------------------------------------------------- reading a run


class _TraceFacts(BaseModel):
    """What the trace says about trials: their order, the records they own, their knees, evals and commits."""

    trial_count: int = 0
    files: dict[int, list[str]] = Field(default_factory=dict)  # trial -> bench record files, in run order
    order: list[tuple[int | None, str]] = Field(
        default_factory=list
    )  # (trial, file) for every attributed run
    knees: dict[int, tuple[str, float]] = Field(default_factory=dict)  # trial -> (workload, knee rate)
    floors: set[int] = Field(default_factory=set)  # the trials whose knee (in knees) is a lower bound
    screening: set[int] = Field(default_factory=set)  # the trials of sweeps (run_trials): never a best

    evals: list[AccuracyCheck] = Field(default_factory=list)
    commits: list[dict[str, Any]] = Field(default_factory=list)  # commit inputs with the verifying trial
    policy: str | None = None
    task_sha256: str | None = None
    remeasured_of: dict[int, int] = Field(default_factory=dict)
    decisions: list[tuple[int | None, str | None, str]] = Field(default_factory=list)  # (step, stage, rationale)


def _record_file(run_dir: Path, run_id: str, command: list[str]) -> str | None:
    """The ``bench/NNN-<workload>.jsonl`` a main-process benchmark command's ``--output-file`` became."""
    if "--output-file" not in command:
        return None
    name = Path(command[command.index("--output-file") + 1]).name
    name = name.removeprefix(f"{run_id}-")
    return f"bench/{name}" if (run_dir / "bench" / name).exists() else None


class _RecordIndex:
    """The run's main-process records by what they measured, for traces whose benchmark results name no file
    (written before results carried their command): a result is matched to the first unclaimed record of its
    workload with the same request rate and output throughput."""

    def __init__(self, run_dir: Path):
        self.run_dir = run_dir
        self._records: list[tuple[str, str, float | None, float]] | None = None
        self.claimed: set[str] = set()

    def _load(self) -> list[tuple[str, str, float | None, float]]:
        if self._records is None:
            self._records = []
            for f in sorted((self.run_dir / "bench").glob("*.jsonl")):
                rec = _last_record(f)
                if rec and rec.get("output_throughput") is not None:
                    workload = f.stem.split("-", 1)[-1]
                    self._records.append((f"bench/{f.name}", workload, _finite(rec.get("request_rate")),
                                          float(rec["output_throughput"])))  # fmt: skip
        return self._records

    def match(self, run: dict[str, Any]) -> str | None:
        rate, tput = _finite(run.get("request_rate")), run.get("output_throughput")
        for rel, workload, r, t in self._load():
            if rel not in self.claimed and workload == run.get("workload") and r == rate and \
                    tput is not None and math.isclose(t, float(tput), rel_tol=1e-9):  # fmt: skip
                return rel
        return None


def _read_facts(run_dir: Path, run_id: str) -> _TraceFacts:
    facts = _TraceFacts()
    index = _RecordIndex(run_dir)
    current: int | None = None
    try:
        events = read_trace(run_dir / "trace.jsonl")
    except (OSError, TraceError) as exc:
        raise ReportError(f"{run_dir.name}: cannot read trace.jsonl ({exc})") from None
    for e in events:
        if e.kind == "run_started":
            facts.policy, facts.task_sha256 = e.policy, e.task_sha256
        if isinstance(e, DecisionEvent):
            facts.decisions.append((e.step, e.stage, e.rationale))
        if not isinstance(e, ToolCallEvent):
            continue
        r = e.result
        if e.tool == "launch_server" and r.get("status"):
            facts.trial_count += 1
            current = facts.trial_count if r["status"] == "up" else None
        elif e.tool == "run_trials" and e.ok:
            for o in r.get("outcomes", []):
                facts.trial_count += 1
                trial = facts.trial_count
                folder = run_dir / "trials" / str(o.get("job_id", "")) / "bench"
                for f in sorted(folder.glob("*.jsonl")) if o.get("job_id") else []:
                    rel = str(f.relative_to(run_dir))
                    facts.files.setdefault(trial, []).append(rel)
                    facts.order.append((trial, rel))
                if o.get("status") == "up" and o.get("knee_rate") and o["spec"].get("measure") == "knee":
                    facts.knees[trial] = (o["spec"]["workload"], float(o["knee_rate"]))
                    if o.get("knee_is_lower_bound"):
                        facts.floors.add(trial)
                facts.screening.add(trial)
            current = None
        elif e.tool == "stop_server" and e.ok:
            current = None
        elif e.tool in ("run_benchmark", "find_knee"):
            files = []
            for run in r.get("runs", []):
                rel = _record_file(run_dir, run_id, run.get("command") or []) or index.match(run)
                if rel is not None and rel not in index.claimed:
                    index.claimed.add(rel)
                    files.append(rel)
            for rel in sorted(files):  # NNN: the order they ran in (a knee search lists its runs by rate)
                if current is not None:
                    facts.files.setdefault(current, []).append(rel)
                facts.order.append((current, rel))
            if e.tool == "find_knee" and e.ok and r.get("knee_rate") and current is not None:
                facts.knees[current] = (str(e.input.get("workload")), float(r["knee_rate"]))
                if knee_is_lower_bound(r):  # from first_failing_rate: a trace from before the flag too
                    facts.floors.add(current)
                else:
                    facts.floors.discard(current)
        elif e.tool == "run_eval" and e.ok and r.get("accuracy") is not None:
            facts.evals.append(AccuracyCheck(trial=current, suite=str(r.get("suite") or e.input.get("suite", "")),
                                             n=r.get("n"), accuracy=float(r["accuracy"]), ci_low=r.get("ci_low"),
                                             ci_high=r.get("ci_high"), baseline=r.get("baseline"), delta=r.get("delta"),
                                             within_tolerance=r.get("within_tolerance")))  # fmt: skip
        elif e.tool == "commit" and e.ok:
            facts.commits.append(
                {**e.input, "trial": current, "trees": [c.get("source") for c in r.get("commits", [])]}
            )
    return facts


def _last_record(path: Path) -> dict[str, Any] | None:
    try:
        lines = path.read_text().strip().splitlines()
        return json.loads(lines[-1]) if lines else None
    except (OSError, ValueError):
        return None


def _finite(value: Any) -> float | None:
    try:
        v = float(value)
    except (TypeError, ValueError):
        return None
    return v if math.isfinite(v) else None


def _bench_run(run_dir: Path, rel: str, index: int, trial: int | None) -> BenchRun | None:
    record = _last_record(run_dir / rel)
    if record is None or record.get("output_throughput") is None:
        return None
    workload = Path(rel).stem.split("-", 1)[-1]
    tpot = _finite(record.get("median_tpot_ms")) or 0.0
    completed, sent = record.get("completed"), record.get("num_prompts")
    breakdown = record.get("gpu_time_breakdown") or {}
    return BenchRun(
        index=index, file=rel, trial=trial, workload=workload, request_rate=_finite(record.get("request_rate")),
        output_throughput=float(record["output_throughput"]), total_throughput=_finite(record.get("total_throughput")),
        ttft_p50_ms=float(record.get("median_ttft_ms") or 0.0), ttft_p99_ms=float(record.get("p99_ttft_ms") or 0.0),
        decode_tok_s=1000.0 / tpot if tpot > 0 else 0.0, tpot_p50_ms=_finite(record.get("median_tpot_ms")),
        tpot_p99_ms=_finite(record.get("p99_tpot_ms")), itl_p50_ms=_finite(record.get("median_itl_ms")),
        itl_p99_ms=_finite(record.get("p99_itl_ms")),
        max_concurrency=int(c) if isinstance(c := record.get("max_concurrency"), int | float) and c > 0 else None,
        success_rate=completed / sent if isinstance(completed, int) and isinstance(sent, int) and sent else None,
        gpus_used=record.get("gpus_used"), seed=record.get("seed"), simulated=bool(record.get("simulated")),
        bottleneck=record.get("bottleneck"),
        gpu_time_share=breakdown.get("share"), gpu_rank_seconds=breakdown.get("rank_seconds"),
    )  # fmt: skip


def _bench_runs(run_dir: Path, facts: _TraceFacts) -> tuple[list[BenchRun], list[str]]:
    """Every benchmark record in the order it was taken, with its trial; the files no tool call named."""
    runs: list[BenchRun] = []
    seen = set()
    for trial, rel in facts.order:
        if rel in seen:
            continue
        seen.add(rel)
        if (b := _bench_run(run_dir, rel, len(runs) + 1, trial)) is not None:
            runs.append(b.model_copy(update={"screening": trial in facts.screening}))
    stray = [str(p.relative_to(run_dir)) for p in sorted(run_dir.glob("bench/*.jsonl"))
             if str(p.relative_to(run_dir)) not in seen]  # fmt: skip
    for rel in stray:
        if (b := _bench_run(run_dir, rel, len(runs) + 1, None)) is not None:
            runs.append(b)
    return runs, stray


def _find_task(run_dir: Path, task_path: str) -> Path | None:
    p = Path(task_path)
    if p.is_absolute():
        return p if p.exists() else None
    for base in (Path.cwd(), run_dir.parent.parent, run_dir.parent):
        if (base / p).exists():
            return base / p
    return None


# ------------------------------------------------------------------------------------------ derived figures


def flag_items(flags: dict[str, Any], env: dict[str, str] | None = None) -> list[str]:
    """``["tp-size=8", "enable-dp-attention"]`` (true flags bare, left-out flags omitted), then the environment."""
    parts = []
    for k, v in flags.items():
        if v is None:
            continue
        parts.append(k if v is True else f"{k}={str(v).lower() if isinstance(v, bool) else v}")
    return parts + [f"{k}={v}" for k, v in (env or {}).items() if v != ""]


def fmt_flags(flags: dict[str, Any], env: dict[str, str] | None = None) -> str:
    """``tp-size=8 enable-dp-attention`` (true flags bare, left-out flags omitted), then the environment."""
    return " ".join(flag_items(flags, env)) or "(engine defaults)"


def _flag_diff(before: dict[str, Any], after: dict[str, Any]) -> list[str]:
    out = []
    for k in after:
        if k not in before or before[k] is None:
            if after[k] is not None:
                out.append("+" + fmt_flags({k: after[k]}))
        elif before[k] != after[k]:
            out.append(f"{k} {before[k]} -> {after[k]}")
    out += [f"-{k}" for k in before if k not in after and before[k] is not None]
    return out


def _fmt_value(metric: str, value: float | None, lower_bound: bool = False) -> str:
    """A target's figure; a floor (``lower_bound``: no rate was seen failing above its knee) as "at least"."""
    if value is None:
        return "-"
    return f"{value:+.3f}" if metric == "accuracy_delta" else ("at least " if lower_bound else "") + f"{value:.1f}"


def _sustained(run: BenchRun, limit: float | None) -> bool | None:
    if limit is None:
        return None
    return run.ttft_p50_ms <= limit and (run.success_rate is None or run.success_rate >= MIN_SUCCESS_RATE)


def _measured(runs: list[BenchRun], trial: int) -> str | None:
    """A trial's highest output throughput on each workload it was benchmarked on, and where."""
    parts = []
    for workload in dict.fromkeys(r.workload for r in runs if r.trial == trial):
        top = max(
            (r for r in runs if r.trial == trial and r.workload == workload),
            key=lambda r: r.output_throughput,
        )
        at = f"at {top.request_rate:g} req/s" if top.request_rate is not None else "all at once"
        parts.append(
            f"{workload} {top.output_throughput:,.0f} tok/s {at}, TTFT p50 {top.ttft_p50_ms:,.0f} ms"
        )
    return "; ".join(parts) or None


def _best_so_far(targets: list[TargetResult], runs: list[BenchRun], task: TaskSpec) -> list[BestSoFarSeries]:
    """Per target, its best after each benchmark run of its workload. A decode or throughput target takes each
    run's own figure; a knee target takes a configuration's rate once its last run there (its last seed) is in,
    and only if every run there was sustained, at the lowest throughput of them - as the knee search judges.
    Screening runs (a sweep's trials) are shown with their figure but, as in the agent's bests, not counted."""
    series = []
    for t in targets:
        if t.metric == "accuracy_delta" or t.workload is None:
            continue
        limit = task.workloads[t.workload].ttft_limit_ms
        mine = [r for r in runs if r.workload == t.workload]
        groups: dict[tuple[int | None, float | None], list[BenchRun]] = {}
        for r in mine:
            groups.setdefault((r.trial, r.request_rate), []).append(r)
        best: float | None = None
        points = []
        for run in mine:
            value: float | None = None
            served = run.success_rate is None or run.success_rate >= MIN_SUCCESS_RATE
            if t.metric == "decode_tok_s":
                value = run.decode_tok_s
            elif t.metric == "output_throughput":
                value = run.output_throughput if served else None
            elif t.metric == "throughput_at_knee":
                group = groups[(run.trial, run.request_rate)]
                if (
                    run is group[-1]
                    and run.request_rate is not None
                    and all(_sustained(r, limit) for r in group)
                ):
                    value = min(r.output_throughput for r in group)
            if value is not None and not run.screening and (best is None or value > best):
                best = value
            points.append(
                BestSoFarPoint(run_index=run.index, value=value, best=best, screening=run.screening)
            )
        series.append(
            BestSoFarSeries(target=t.name, metric=t.metric, unit=t.unit, goal=t.goal, points=points)
        )
    return series


def rate_points(runs: list[BenchRun], limit: float | None) -> list[RatePoint]:
    """One configuration's runs grouped by request rate (the seeds of a rate together), by rate."""
    by_rate: dict[float, list[BenchRun]] = {}
    for r in runs:
        if r.request_rate is not None:
            by_rate.setdefault(r.request_rate, []).append(r)
    points = []
    for rate, group in sorted(by_rate.items()):
        totals = [r.total_throughput for r in group if r.total_throughput is not None]
        points.append(RatePoint(request_rate=rate, runs=group, output_throughput=min(r.output_throughput for r in group),
                                total_throughput=min(totals) if totals else None,
                                ttft_p50_ms=max(r.ttft_p50_ms for r in group), ttft_p99_ms=max(r.ttft_p99_ms for r in group),
                                sustained=None if limit is None else all(_sustained(r, limit) for r in group)))  # fmt: skip
    return points


def _curve(role: str, trial: TrialRow, workload: str, runs: list[BenchRun], facts: _TraceFacts,
           limit: float | None) -> RateCurve:  # fmt: skip
    points = rate_points([r for r in runs if r.trial == trial.id and r.workload == workload], limit)
    knee = facts.knees.get(trial.id)
    if knee and knee[0] == workload:
        knee_rate: float | None = knee[1]
        floor = trial.id in facts.floors  # as the knee search judged it
    else:  # no knee search recorded: the highest sustained rate, a floor unless a higher rate was not sustained
        knee_rate = max((p.request_rate for p in points if p.sustained), default=None)
        floor = knee_rate is not None and not any(p.request_rate > knee_rate and p.sustained is False for p in points)
    at = next((p for p in points if p.request_rate == knee_rate), None)
    return RateCurve(role=role, trial=trial.id, flags=trial.flags, env=trial.env, workload=workload, ttft_limit_ms=limit,
                     points=points, knee_rate=knee_rate, knee_throughput=at.output_throughput if at else None,
                     knee_lower_bound=floor, screening=trial.screening)  # fmt: skip


def _curves(report_targets: list[TargetResult], winner: TrialRow | None, winner_target: str | None,
            trials: list[TrialRow], runs: list[BenchRun], facts: _TraceFacts,
            task: TaskSpec) -> tuple[str | None, float | None, list[RateCurve], list[str]]:  # fmt: skip
    """The throughput workload's curves for the baseline and the winner. The baseline is the bring-up
    configuration (the first that came up) where it was swept over rates, else the first other configuration
    swept, else the first measured on the workload (then without a curve, and the report says why)."""
    rate_metrics = ("throughput_at_knee", "output_throughput")
    target = next((t for t in report_targets if t.name == winner_target and t.metric in rate_metrics and t.workload),
                  next((t for t in report_targets if t.metric in rate_metrics and t.workload), None))  # fmt: skip
    if target is None:
        return None, None, [], ["the task has no throughput target on a workload: no rate curves"]
    workload = target.workload
    limit = task.workloads[workload].ttft_limit_ms
    notes: list[str] = []
    measured = [t for t in trials if any(r.trial == t.id and r.workload == workload for r in runs)]
    curves: list[RateCurve] = []
    if not measured:
        return (
            workload,
            limit,
            [],
            [f"no configuration was benchmarked on the {workload} workload: no rate curves"],
        )
    winner_id = winner.id if winner is not None else None
    swept = [t for t in measured if t.id != winner_id and len(_curve("baseline", t, workload, runs, facts, limit).points) >= 2]
    bringup = next((t for t in trials if t.status == "up"), None)
    alike = [t for t in swept if bringup is not None and (t.flags, t.env) == (bringup.flags, bringup.env)]
    base = (alike or swept or measured)[0]
    base_curve = _curve("baseline", base, workload, runs, facts, limit)
    if winner is not None and winner.id == base.id:
        notes.append(f"the winning configuration (trial {base.id}) is the first one measured on {workload}: "
                     "there is no separate baseline curve")  # fmt: skip
    elif len(base_curve.points) < 2:
        how = ", ".join(
            f"{r.output_throughput:,.0f} tok/s "
            + (f"at {r.request_rate:g} req/s" if r.request_rate is not None else "all at once")
            for r in runs
            if r.trial == base.id and r.workload == workload
        )
        notes.append(f"the baseline configuration (trial {base.id}: {fmt_flags(base.flags)}) was never swept over "
                     f"request rates on {workload} (measured: {how}): no baseline curve")  # fmt: skip
    else:
        curves.append(base_curve)
    if winner is None:
        notes.append("the run has no winning configuration: no winner curve")
    else:
        win_curve = _curve("winner", winner, workload, runs, facts, limit)
        if win_curve.points:
            curves.append(win_curve)
        else:
            notes.append(
                f"the winning configuration (trial {winner.id}) has no rate runs on {workload}: no winner curve"
            )
    return workload, limit, curves, notes


def _path(targets: list[TargetResult], trials: list[TrialRow], facts: _TraceFacts) -> list[PathRow]:
    """Each committed patch (before the trial that verified it), and each trial that raised a target's best."""
    rows: list[PathRow] = []
    best: dict[str, tuple[float, TrialRow]] = {}
    commits_by_trial: dict[int | None, list[dict[str, Any]]] = {}
    for c in facts.commits:
        commits_by_trial.setdefault(c["trial"], []).append(c)

    def add(**kw: Any) -> None:
        rows.append(PathRow(step=len(rows) + 1, **kw))

    def patch_rows(cs: list[dict[str, Any]]) -> None:
        for c in cs:
            trees = ", ".join(t for t in c.get("trees", []) if t) or ", ".join(c.get("files", []))
            ev = c.get("evidence") or {}
            result = "; ".join(f"{k}: {ev[k]}" for k in ("before", "after") if ev.get(k)) or \
                f"verified on trial {c['trial']}"  # fmt: skip
            add(kind="patch", change=f"({trees}) {c.get('title', '')}", result=result, trial=c["trial"])

    measured = [t for t in targets if t.metric != "accuracy_delta"]
    best_any: dict[str, tuple[float, TrialRow]] = {}  # screening and full measurements: the search's progress
    for trial in trials:
        patch_rows(commits_by_trial.pop(trial.id, []))
        for t in measured:
            value = trial.metrics.get(t.name)
            ref = (best_any if trial.screening else best).get(t.name)
            if value is None or (ref is not None and value <= ref[0]):
                continue
            figure = f"{_fmt_value(t.metric, value, t.name in trial.lower_bounds)} {t.unit}"
            met = " - goal met" if value >= t.goal and not trial.screening else ""
            screened = next((s for s in reversed(trials[: trials.index(trial)]) if s.screening
                             and s.flags == trial.flags and s.env == trial.env), None)  # fmt: skip
            seen = f" (screened as trial {screened.id})" if screened and not trial.screening else ""
            if ref is None:
                kind = "screening" if trial.screening else "first measurement"
                change = fmt_flags(trial.flags, trial.env) + seen
                items = flag_items(trial.flags, trial.env)
            else:
                items = _flag_diff(ref[1].flags, trial.flags) + _flag_diff(ref[1].env, trial.env)
                kind = "screening" if trial.screening else ("flags" if items else "re-measured")
                change = (
                    ", ".join(items) if items else f"same configuration as trial {ref[1].id}, measured again"
                ) + seen
            if ref is None or not ref[0]:
                result = f"{t.name} {figure} (goal {t.goal:g}){met}"
            else:
                result = (f"{t.name} {_fmt_value(t.metric, ref[0], t.name in ref[1].lower_bounds)} -> {figure} "
                          f"({(value / ref[0] - 1) * 100:+.1f} %){met}")  # fmt: skip
            if trial.screening:
                result += " - screening (a sweep's trial), not a best"
            add(kind=kind, change=change, result=result, trial=trial.id, target=t.name, flags=items,
                remark=seen.strip() if items else change)
            if not trial.screening:
                best[t.name] = (value, trial)
            if t.name not in best_any or value > best_any[t.name][0]:
                best_any[t.name] = (value, trial)
    for cs in commits_by_trial.values():  # commits verified on no launched trial
        patch_rows(cs)
    return rows


def _cost(price: float | None, winner: TrialRow | None, curve: RateCurve | None, runs: list[BenchRun],
          task: TaskSpec, simulated: bool) -> CostEstimate:  # fmt: skip
    from tools.trials import gpus_of

    knee = curve.knee_point if curve is not None else None
    deciding = knee.deciding if knee is not None else None
    if deciding is None and winner is not None:
        deciding = next((r for r in reversed(runs) if r.trial == winner.id), None)
    gpus = None
    if winner is not None:
        gpus = (deciding.gpus_used if deciding and deciding.gpus_used else None) or \
            min(gpus_of(winner.flags), task.hardware.gpus)  # fmt: skip
    tok_s = deciding.output_throughput if deciding else None
    est = CostEstimate(gpu_hour_usd=price, gpus=gpus, output_tok_s=tok_s, simulated=simulated)
    if price is None:
        est.note = ("no GPU-hour price: set `report: {gpu_hour_usd: <price>}` in the task to get the cost per million "
                    "output tokens")  # fmt: skip
    elif not tok_s or not gpus:
        est.note = "no winning configuration with a measured output throughput: no cost"
    else:
        est.usd_per_million_output_tokens = price * gpus / (tok_s * 3600) * 1e6
        rate = f" at {deciding.request_rate:g} req/s" if deciding and deciding.request_rate else ""
        est.note = (f"{price:g} USD/GPU-hour x {gpus} GPU(s) / ({tok_s:.1f} output tok/s{rate} x 3600) x 1e6"
                    + (" - from simulated throughput" if simulated else ""))  # fmt: skip
    return est


def _gpus(run: BenchRun, flags: dict[str, Any], task: TaskSpec) -> int:
    """The GPUs a run's configuration used: as its record says, else from its flags (tensor x data parallel,
    data-parallel attention inside the tensor group), at most the task's node."""
    from tools.trials import gpus_of

    return run.gpus_used or min(gpus_of(flags), task.hardware.gpus)


def _frontier(runs: list[BenchRun], trials: list[TrialRow], task: TaskSpec) -> Frontier | None:
    """Every benchmark run that served its requests and names its TPOT, as a point of the frontier plot."""
    by_id = {t.id: t for t in trials}
    points, unserved, untimed, stray = [], 0, 0, 0
    for r in runs:
        trial = by_id.get(r.trial) if r.trial is not None else None
        if trial is None:
            stray += 1
            continue
        if r.success_rate is not None and r.success_rate < MIN_SUCCESS_RATE:
            unserved += 1
            continue
        if not r.tpot_p50_ms:
            untimed += 1
            continue
        gpus = _gpus(r, trial.flags, task)
        limit = task.workloads[r.workload].ttft_limit_ms if r.workload in task.workloads else None
        points.append(FrontierPoint(run_index=r.index, file=r.file, trial=trial.id, workload=r.workload,
                                    flags=trial.flags, env=trial.env, request_rate=r.request_rate,
                                    max_concurrency=r.max_concurrency, gpus=gpus,
                                    output_throughput=r.output_throughput,
                                    throughput_per_gpu=r.output_throughput / gpus, tok_s_per_user=r.decode_tok_s,
                                    tpot_p50_ms=r.tpot_p50_ms, tpot_p99_ms=r.tpot_p99_ms, itl_p50_ms=r.itl_p50_ms,
                                    itl_p99_ms=r.itl_p99_ms, ttft_p50_ms=r.ttft_p50_ms,
                                    within_ttft_limit=None if limit is None else r.ttft_p50_ms <= limit,
                                    screening=r.screening))  # fmt: skip
    if not points:
        return None
    notes = [f"{n} run(s) left out: {why}" for n, why in (
        (unserved, f"fewer than {MIN_SUCCESS_RATE:.0%} of their requests completed"),
        (untimed, "their record names no median TPOT"), (stray, "no tool call names their record (no configuration)"),
    ) if n]  # fmt: skip
    return frontier_of(points, notes)


def _winners(targets: list[TargetResult], runs: list[BenchRun], trials: list[TrialRow],
             task: TaskSpec) -> list[WinnerFigures]:  # fmt: skip
    """For each measured target's best, the run behind its figure: of the best trial's runs on the target's
    workload, the one whose figure is the achieved one (the closest, for a knee judged over several seeds)."""
    figure = {"throughput_at_knee": lambda r: r.output_throughput, "output_throughput": lambda r: r.output_throughput,
              "decode_tok_s": lambda r: r.decode_tok_s}  # fmt: skip
    by_id = {t.id: t for t in trials}
    out = []
    for t in targets:
        trial = by_id.get(t.trial) if t.trial is not None else None
        if t.metric not in figure or trial is None or t.achieved is None:
            continue
        mine = [r for r in runs if r.trial == trial.id and r.workload == t.workload]
        if not mine:
            continue
        run = min(mine, key=lambda r: abs(figure[t.metric](r) - t.achieved))  # noqa: B023 - used at once
        gpus = _gpus(run, trial.flags, task)
        load = (f"concurrency {run.max_concurrency}" if run.max_concurrency is not None else
                f"{run.request_rate:g} req/s" if run.request_rate is not None else "all at once")  # fmt: skip
        out.append(WinnerFigures(target=t.name, metric=t.metric, trial=trial.id, flags=trial.flags, env=trial.env,
                                 file=run.file, load=load, output_throughput=run.output_throughput,
                                 throughput_per_gpu=run.output_throughput / gpus if gpus else None,
                                 tok_s_per_user=run.decode_tok_s, tpot_p50_ms=run.tpot_p50_ms,
                                 tpot_p99_ms=run.tpot_p99_ms, itl_p50_ms=run.itl_p50_ms, itl_p99_ms=run.itl_p99_ms,
                                 ttft_p50_ms=run.ttft_p50_ms))  # fmt: skip
    return out


def _stages(facts: _TraceFacts) -> list[StageRow]:
    """The policy's stages in the order its decisions entered them, with what each launched ("try ...")."""
    rows: list[StageRow] = []
    for step, stage, rationale in facts.decisions:
        key = stage or "-"
        if not rows or rows[-1].key != key:
            known = STAGES.get(key)
            rows.append(StageRow(key=key, name=stage_name(stage), does=known.does if known else "",
                                 first_step=step))  # fmt: skip
        row = rows[-1]
        row.decisions += 1
        row.last_step = step if step is not None else row.last_step
        if rationale.startswith("try ") or rationale.startswith("screen "):
            row.tried.append(dicts_as_flags(rationale.removeprefix("try ")))
    return rows


# ------------------------------------------------------------------------------------------------ building


def build_report(run_dir: Path, gpu_hour_usd: float | None = None) -> RunReport:
    """The report of the finished run in ``run_dir``. ``gpu_hour_usd`` overrides the task's ``report.gpu_hour_usd``.

    Raises :class:`ReportError` (one line) for a folder that is not a finished run or whose task cannot be read.
    """
    run_dir = Path(run_dir)
    if not (run_dir / "run.json").exists():
        raise ReportError(f"{run_dir}: not a run (no run.json)")
    if not (run_dir / "summary.json").exists():
        raise ReportError(
            f"{run_dir.name}: not finished, no summary.json (continue it: agent resume {run_dir.name})"
        )
    try:
        summary = json.loads((run_dir / "summary.json").read_text())
        options = json.loads((run_dir / "run.json").read_text())
    except ValueError as exc:
        raise ReportError(f"{run_dir.name}: unreadable summary.json or run.json ({exc})") from None
    run_id = summary.get("run_id", run_dir.name)
    task_file = _find_task(run_dir, options["task_path"])
    if task_file is None:
        raise ReportError(
            f"{run_id}: task file {options['task_path']} not found (the report needs its workloads)"
        )
    try:
        task = load_task(task_file)
    except TaskError as exc:
        raise ReportError(f"{run_id}: {exc}") from None
    facts = _read_facts(run_dir, run_id)
    notes: list[str] = []
    if facts.task_sha256 and hashlib.sha256(task_file.read_bytes()).hexdigest() != facts.task_sha256:
        notes.append(f"the task file {options['task_path']} changed since the run started (sha256 differs)")
    if facts.trial_count != len(summary.get("trials", [])):
        notes.append(f"the trace numbers {facts.trial_count} trial(s), the summary {len(summary.get('trials', []))}: "
                     "benchmark records may be attributed to the wrong trial")  # fmt: skip
    runs, stray = _bench_runs(run_dir, facts)
    if stray:
        notes.append(
            f"{len(stray)} benchmark record(s) no tool call names (failed runs?): " + ", ".join(stray)
        )
    simulated = bool(summary.get("simulated")) or any(r.simulated for r in runs)

    by_name = {t.name: t for t in task.targets}
    targets = []
    reference = reference_words(task.accuracy.baseline if task.accuracy else None)
    for name, t in summary.get("targets", {}).items():
        spec = by_name.get(name)
        words = t["metric"] == "accuracy_delta"
        # a summary from before it said so: the best's trial's knee as the trace judged it
        floor = t["lower_bound"] if "lower_bound" in t else \
            t["metric"] == "throughput_at_knee" and t.get("trial") in facts.floors  # fmt: skip
        targets.append(TargetResult(name=name, metric=t["metric"], unit=UNITS.get(t["metric"], ""),
                                    workload=spec.workload if spec else None, goal=t["target"], achieved=t["achieved"],
                                    met=bool(t["met"]), trial=t.get("trial"), lower_bound=bool(floor),
                                    goal_words=accuracy_goal_words(t["target"], reference) if words else None,
                                    achieved_words=accuracy_delta_words(t["achieved"]) if words else None))  # fmt: skip

    best_config = summary.get("best_config") or {}
    winner_id = best_config.get("trial")
    trials = [TrialRow(id=t["id"], status=t["status"], flags=t.get("flags", {}), env=t.get("env", {}),
                       diagnosis=t.get("diagnosis") or (f"failed under the benchmark: {t['serving_failure']}"
                                                        if t.get("serving_failure") else None),
                       metrics=t.get("metrics", {}), accuracy=t.get("accuracy"),
                       accuracy_ok=t.get("accuracy_ok"), bench_runs=sum(1 for r in runs if r.trial == t["id"]),
                       knee_rate=facts.knees[t["id"]][1] if t["id"] in facts.knees else None,
                       knee_lower_bound=t["id"] in facts.floors, lower_bounds=t.get("lower_bounds", []),
                       screening=t["id"] in facts.screening, measured=_measured(runs, t["id"]),
                       winner=t["id"] == winner_id) for t in summary.get("trials", [])]  # fmt: skip
    winner = next((t for t in trials if t.id == winner_id), None)
    workload, limit, curves, curve_notes = _curves(
        targets, winner, best_config.get("target"), trials, runs, facts, task
    )
    win_curve = next((c for c in curves if c.role == "winner"), None)
    knee_run = win_curve.knee_point.deciding if win_curve and win_curve.knee_point else None
    deciding = knee_run or (
        next((r for r in reversed(runs) if r.trial == winner_id), None) if winner_id else None
    )
    breakdown = None
    if deciding is not None and deciding.gpu_time_share:
        breakdown = TimeBreakdown(trial=deciding.trial or 0, request_rate=deciding.request_rate, file=deciding.file,
                                  share=deciding.gpu_time_share, rank_seconds=deciding.gpu_rank_seconds,
                                  bottleneck=deciding.bottleneck, simulated=deciding.simulated)  # fmt: skip

    accuracy = None
    if task.accuracy is not None or facts.evals:
        suite = task.accuracy.suite if task.accuracy else facts.evals[0].suite
        checks = [c for c in facts.evals if c.suite == suite]
        accuracy = AccuracyReport(suite=suite, baseline=task.accuracy.baseline if task.accuracy else None,
                                  max_drop=task.accuracy.max_drop if task.accuracy else None, checks=checks,
                                  winner=next((c for c in reversed(checks) if c.trial == winner_id), None))  # fmt: skip

    price = gpu_hour_usd if gpu_hour_usd is not None else task.report.gpu_hour_usd
    commit_trials = {str(c.get("title")): c["trial"] for c in facts.commits}
    commits = [CommitRow(patch=c["patch"], title=c["title"], commits=c.get("commits", []), files=c.get("files", []),
                         trial=commit_trials.get(c["title"])) for c in summary.get("commits", [])]  # fmt: skip
    return RunReport(
        run_id=run_id, task=summary.get("task", task.name), task_path=options["task_path"],
        engine=summary.get("engine", ""), simulated=simulated, banner=SIMULATED_BANNER if simulated else None,
        policy=facts.policy or options.get("policy"), created=options.get("created"),
        finish_reason=summary.get("finish_reason") or "finished", branch=summary.get("branch"),
        node_hours=summary.get("simulated_node_hours", summary.get("node_hours")),
        wall_seconds_in_tools=summary.get("wall_seconds_in_tools"), targets=targets,
        path=_path(targets, trials, facts), curve_workload=workload, ttft_limit_ms=limit, curves=curves,
        curve_notes=curve_notes, best_so_far=_best_so_far(targets, runs, task), breakdown=breakdown,
        winner_trial=winner_id, winner_target=best_config.get("target"), trials=trials, accuracy=accuracy,
        cost=_cost(price, winner, win_curve, runs, task, simulated), commits=commits, bench_runs=runs, notes=notes,
        approvals=list(summary.get("approvals") or []),
        explain=[ExplainRow(target=name, change=c["name"], before=c["before"], after=c["after"], effect=c["effect"],
                            measured_between=c.get("measured_between"))
                 for name, e in (summary.get("explain") or {}).items() for c in e["changes"]],
        hardware_gpus=task.hardware.gpus, frontier=_frontier(runs, trials, task),
        winners=_winners(targets, runs, trials, task), stages=_stages(facts),
    )  # fmt: skip


# ------------------------------------------------------------------------------------------------ rendering


def _trees_html(text: str) -> Any:
    """``text`` escaped, each draft tree ``a/b/c`` in it an ``<abbr>`` whose title spells it out."""
    import markupsafe

    escaped = str(markupsafe.escape(text))
    return markupsafe.Markup(TREE_TEXT.sub(lambda m: f'<abbr title="{tree_words(*map(int, m.groups()))}">'
                                                     f"{m.group(0)}</abbr>", escaped))  # fmt: skip


def _environment(autoescape: bool):
    import jinja2

    env = jinja2.Environment(loader=jinja2.FileSystemLoader(TEMPLATES), autoescape=autoescape,
                             undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True,
                             keep_trailing_newline=True)  # fmt: skip
    env.filters["flags"] = fmt_flags
    env.filters["flag_items"] = flag_items
    env.filters["trees"] = _trees_html if autoescape else (lambda text: text)
    env.filters["stage"] = stage_name
    env.filters["split_flags"] = lambda text: [w for w in re.split(r"[,\s]+", str(text)) if w]  # "a=1, b" -> chips
    env.filters["data_v"] = lambda v: "" if v is None else f"{v:.6g}"  # a sortable cell's value
    env.filters["num"] = lambda v, digits=1: "-" if v is None else f"{v:,.{digits}f}"
    env.filters["value"] = lambda v, metric, lower_bound=False: _fmt_value(metric, v, lower_bound)
    env.filters["pct"] = lambda v: "-" if v is None else f"{v * 100:.1f} %"
    env.filters["cell"] = lambda v: str(v).replace("|", "\\|").replace("\n", " ")  # one Markdown table cell
    return env


def render_markdown(report: RunReport, plot_files: dict[str, str]) -> str:
    """``report.md``; ``plot_files`` maps each plot to the file name the Markdown links (beside the report)."""
    return _environment(autoescape=False).get_template("report.md.j2").render(r=report, plots=plot_files)


def render_html(report: RunReport, plots: dict[str, bytes]) -> str:
    """``report.html``, self-contained: the plots inline as ``data:`` URIs, the style inline, no network."""
    uris = {
        name: "data:image/png;base64," + base64.b64encode(png).decode("ascii") for name, png in plots.items()
    }
    return _environment(autoescape=True).get_template("report.html.j2").render(r=report, plots=uris)


def write_report(run_dir: Path, out_dir: Path, redactor: Redactor | None = None) -> list[Path]:
    """Write ``report.md`` (with its plots as PNG files beside it) and a self-contained ``report.html`` into
    ``out_dir``; returns the paths written (the two reports first). The reports quote the run's records: their
    secrets are masked (``redactor``; default: the run's, :func:`~agent.secrets.run_redactor`)."""
    from .plot_cache import rendered

    redactor = redactor if redactor is not None else run_redactor(Path(run_dir))
    report = redactor(build_report(Path(run_dir)))  # and the rendered text again below (what a template adds)
    report.glossary = glossary_entries()[1]
    plots = rendered(report, with_data_only=True)  # the templates say why a figure is missing
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    written = [out_dir / "report.md", out_dir / "report.html"]
    written[0].write_text(redactor.text(render_markdown(report, {name: name for name in plots})))
    written[1].write_text(redactor.text(render_html(report, plots)))
    for name, png in plots.items():
        (out_dir / name).write_bytes(png)
        written.append(out_dir / name)
    return written
