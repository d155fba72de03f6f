"""Benchmarking the live server with the engine's own benchmark (``bench_serving``), and finding the knee."""

from __future__ import annotations

import hashlib
import json
import math
import urllib.error
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, Field

from tasks.spec import TaskSpec, Workload

from .base import Cost, ToolInput, ToolResult, tool
from .context import ToolContext
from .diagnose import Diagnosis, classify, workspace_relative


class BenchMetrics(BaseModel):
    """One benchmark run, from the JSON line ``bench_serving`` appends."""

    workload: str
    request_rate: float | None
    max_concurrency: int | None = None
    concurrency: float | None = Field(None, description=(
        "requests in flight on average over the run (bench_serving's 'concurrency': the sum of end-to-end "
        "latencies over the duration)"))
    completed: int
    num_prompts: int
    success_rate: float
    output_throughput: float
    request_throughput: float
    median_ttft_ms: float
    p99_ttft_ms: float
    median_tpot_ms: float
    p99_tpot_ms: float
    median_itl_ms: float
    p99_itl_ms: float
    median_e2e_latency_ms: float
    decode_tok_s: float = Field(description="one stream's decode speed: 1000 / median TPOT")
    accept_length: float | None = None
    duration_s: float
    simulated: bool = False
    bottleneck: str | None = None
    gpu_time_share: dict[str, float] | None = None
    seed: int | None = Field(None, description="the benchmark's --seed (None: bench_serving's default)")
    command: list[str] = Field(default_factory=list, description="the benchmark command that measured this, argv")
    first_error: str | None = Field(None, description="what the first failed request reported (when some failed)")


def bench_argv(ctx: ToolContext, workload: Workload, rate: float | None, output_file: str,
               duration_s: float | None = None, seed: int | None = None,
               num_prompts: int | None = None) -> tuple[list[str], int]:  # fmt: skip
    """The benchmark command for ``workload`` at ``rate``; returns it with the number of prompts sent
    (``workload_flags``)."""
    argv = ctx.render(ctx.engine.benchmark, base_url=ctx.server.handle.base_url, output_file=output_file)
    flags, prompts = workload_flags(workload, rate, duration_s, seed, num_prompts)
    return argv + flags, prompts


def workload_flags(workload: Workload, rate: float | None, duration_s: float | None = None,
                   seed: int | None = None, num_prompts: int | None = None) -> tuple[list[str], int]:  # fmt: skip
    """``bench_serving``'s flags for ``workload`` at ``rate``, with the number of prompts they send.
    ``duration_s`` shortens (or lengthens) a rate run, e.g. for a cheap screening pass; ``seed`` draws another
    sample of the same workload (prompts and arrival times); ``num_prompts`` sizes a run that has no rate and
    duration to derive it from (a burst: every prompt at once)."""
    if duration_s and workload.duration_s:
        workload = workload.model_copy(update={"duration_s": duration_s})
    argv = ["--dataset-name", workload.dataset]
    params = dict(workload.params)
    rate = rate if rate is not None else workload.request_rate
    if workload.dataset == "generated-shared-prefix":  # a fixed set of prefixes; the run length sets their size
        groups = int(params.pop("gsp-num-groups", 0) or 0) or workload.prefix_groups
        per_group = int(params.pop("gsp-prompts-per-group", 0) or 0)
        if workload.duration_s and rate:
            per_group = max(1, math.ceil(rate * workload.duration_s / groups))
        elif num_prompts:
            per_group = max(1, math.ceil(num_prompts / groups))
        per_group = per_group or 16
        params.update({"gsp-num-groups": groups, "gsp-prompts-per-group": per_group})
        prompts = groups * per_group
    else:
        prompts = int(params.pop("num-prompts", 0) or 0)
        if workload.duration_s and rate:
            prompts = max(20, math.ceil(rate * workload.duration_s))
        elif num_prompts:
            prompts = num_prompts
        prompts = prompts or 100
        params["num-prompts"] = prompts
    for k, v in params.items():
        argv += [f"--{k}", str(v)]
    if rate is not None:
        argv += ["--request-rate", str(rate)]
    if workload.max_concurrency:
        argv += ["--max-concurrency", str(workload.max_concurrency)]
    if seed is not None:
        argv += ["--seed", str(seed)]
    return argv, prompts


def parse_record(name: str, record: dict[str, Any], prompts: int, seed: int | None = None) -> BenchMetrics:
    completed = int(record.get("completed", 0))
    tpot = float(record.get("median_tpot_ms") or 0.0)
    share = (record.get("gpu_time_breakdown") or {}).get("share")
    return BenchMetrics(
        workload=name, request_rate=None if record.get("request_rate") in (None, float("inf")) else record["request_rate"],
        max_concurrency=record.get("max_concurrency"),
        concurrency=float(record["concurrency"]) if isinstance(record.get("concurrency"), int | float) else None,
        completed=completed, num_prompts=prompts,
        success_rate=completed / prompts if prompts else 0.0,
        output_throughput=float(record["output_throughput"]), request_throughput=float(record["request_throughput"]),
        median_ttft_ms=float(record["median_ttft_ms"]), p99_ttft_ms=float(record["p99_ttft_ms"]),
        median_tpot_ms=tpot, p99_tpot_ms=float(record.get("p99_tpot_ms") or 0.0),
        median_itl_ms=float(record.get("median_itl_ms") or 0.0), p99_itl_ms=float(record.get("p99_itl_ms") or 0.0),
        median_e2e_latency_ms=float(record.get("median_e2e_latency_ms") or 0.0),
        decode_tok_s=1000.0 / tpot if tpot > 0 else 0.0, accept_length=record.get("accept_length"),
        duration_s=float(record["duration"]), simulated=bool(record.get("simulated")),
        bottleneck=record.get("bottleneck"), gpu_time_share=share, seed=seed,
        first_error=next((str(e) for e in record.get("errors") or [] if e), None),
    )  # fmt: skip


def run_one(ctx: ToolContext, name: str, rate: float | None, duration_s: float | None = None,
            seed: int | None = None, num_prompts: int | None = None,
            ) -> tuple[BenchMetrics | None, str, Cost, Diagnosis | None]:  # fmt: skip
    """One benchmark run; returns (metrics or None, error text, cost, what the server's log says when it was lost)."""
    workload = ctx.task.workloads[name]
    n = ctx.next_id()
    rel = f".bench/{ctx.run_id}-{n:03d}-{name}.jsonl"  # in the workspace: visible to the engine wherever it runs
    produced = ctx.sandbox.resolve(rel)
    produced.parent.mkdir(parents=True, exist_ok=True)
    argv, prompts = bench_argv(ctx, workload, rate, ctx.sandbox.command_path(rel), duration_s, seed, num_prompts)
    result = ctx.sandbox.run(argv, env=ctx.engine_env(ctx.server.env), timeout_s=ctx.engine.benchmark_timeout_s)
    out = ctx.run_dir / "bench" / f"{n:03d}-{name}.jsonl"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".log").write_text(ctx.redactor.text(result.stdout + result.stderr))
    if produced.exists():
        out.write_text(ctx.redactor.text(produced.read_text()))
    if result.timed_out:
        diag = _lost(ctx, name, rate, timed_out=True)
        return None, (f"the benchmark did not finish within {ctx.engine.benchmark_timeout_s:g} s; the server is "
                      f"stopped too (launch it again to measure): {diag.summary}"), \
            Cost(wall_seconds=result.wall_seconds), diag  # fmt: skip
    if result.exit_code != 0 or not out.exists():
        err = (result.stderr or result.stdout).strip().splitlines()[-1:] or ["no output"]
        if not _answers(ctx.server.handle.base_url):  # e.g. its warm-up found no server: it died before
            diag = _lost(ctx, name, rate)
            return None, f"{SERVER_LOST}: {err[0]}; the server's log: {diag.summary}", \
                Cost(wall_seconds=result.wall_seconds), diag  # fmt: skip
        return None, f"benchmark failed (exit {result.exit_code}): {err[0]}", Cost(wall_seconds=result.wall_seconds), None
    record = json.loads(out.read_text().strip().splitlines()[-1])
    metrics = parse_record(name, record, prompts, seed).model_copy(update={"command": argv})
    cost = Cost(wall_seconds=result.wall_seconds,
                simulated_seconds=metrics.duration_s if metrics.simulated else None,
                node_hours=metrics.duration_s / 3600 * ctx.node_fraction())  # fmt: skip
    if metrics.completed < prompts and not _answers(ctx.server.handle.base_url):
        # the server died under the benchmark: its figures are not the configuration's, and nothing is up now
        failed = prompts - metrics.completed
        diag = _lost(ctx, name, rate)
        return None, (f"{SERVER_LOST}: {failed} of {prompts} requests failed"
                      + (f" ({metrics.first_error})" if metrics.first_error else "")
                      + f"; the server's log: {diag.summary}"), cost, diag  # fmt: skip
    return metrics, "", cost, None


SERVER_LOST = "the server stopped answering during the benchmark"


def _lost(ctx: ToolContext, workload: str, rate: float | None, timed_out: bool = False) -> Diagnosis:
    """A server that died (or hung) under the benchmark: why, from its own log, before it is reaped; the failure is
    remembered against the configuration it served (``serving_failures``), and the server forgotten."""
    path = ctx.server.handle.log_path
    text = path.read_text(errors="replace") if path.exists() else ""
    diag = workspace_relative(ctx, classify(text))
    if diag.category == "unknown" and timed_out:  # silent: a scheduler that stopped and nothing noticed
        diag = Diagnosis(category="hang_timeout", evidence=text.splitlines()[-3:],
                         summary="the server stopped answering under the benchmark and printed nothing")
    if ctx.server.info:
        remember_failure(ctx, ctx.server.info, ctx.server.env, f"{diag.category}: {diag.summary}", workload, rate)
    _forget_server(ctx)
    return diag


FAILURES_FILE = "serving_failures.json"


def serving_key(info: dict[str, Any], env: dict[str, str]) -> str:
    """What a server runs as its /server_info reports it (flags the engine resolved or rescaled included), with the
    environment it was given: two launches with the same key serve the same way."""
    from .server import serving_config  # server imports this module's neighbours; imported late

    return json.dumps([serving_config(info), dict(sorted(env.items()))], sort_keys=True, default=str)


def remember_failure(ctx: ToolContext, info: dict[str, Any], env: dict[str, str], why: str, workload: str,
                     rate: float | None) -> None:  # fmt: skip
    """Record that this serving configuration failed under a workload (in the run's folder, so a resumed run knows)."""
    path = ctx.run_dir / FAILURES_FILE
    known = json.loads(path.read_text()) if path.exists() else {}
    known[_failure_key(ctx, info, env)] = ctx.redactor({"why": why, "workload": workload, "rate": rate})
    path.write_text(json.dumps(known, indent=1))  # keyed by digests, valued by redacted reasons


def known_failure(ctx: ToolContext, info: dict[str, Any], env: dict[str, str]) -> dict[str, Any] | None:
    """How this serving configuration failed under load before, if it did."""
    path = ctx.run_dir / FAILURES_FILE
    if not path.exists():
        return None
    return json.loads(path.read_text()).get(_failure_key(ctx, info, env))


def _failure_key(ctx: ToolContext, info: dict[str, Any], env: dict[str, str]) -> str:
    """:func:`serving_key` as serving_failures.json stores it: the digest of the key with the run's secrets masked
    (on both the writing and the looking-up side). A digest, not the key itself: the key holds every field the
    server reports (``ssl_keyfile_password`` among them), and a JSON object key naming a secret word has its
    whole value masked by the redaction every file goes through."""
    masked = ctx.redactor.text(serving_key(ctx.redactor(info), ctx.redactor(env)))
    return hashlib.sha256(masked.encode()).hexdigest()


def _forget_server(ctx: ToolContext) -> None:
    """A server that no longer answers: reap what is left of it; the next measurement needs a new launch."""
    ctx.sandbox.stop_server(ctx.server.handle, grace_s=1.0)
    ctx.server = None


def _answers(base_url: str, timeout_s: float = 5.0) -> bool:
    """Whether the server still answers its health check (any HTTP status counts: a process is there)."""
    try:
        with urllib.request.urlopen(f"{base_url}/health", timeout=timeout_s):
            return True
    except urllib.error.HTTPError:
        return True
    except OSError:
        return False


def _add(a: Cost, b: Cost) -> Cost:
    sim = None if a.simulated_seconds is None and b.simulated_seconds is None else \
        (a.simulated_seconds or 0.0) + (b.simulated_seconds or 0.0)  # fmt: skip
    return Cost(wall_seconds=a.wall_seconds + b.wall_seconds, simulated_seconds=sim,
                node_hours=a.node_hours + b.node_hours)  # fmt: skip


class BenchInput(ToolInput):
    workload: str = Field(description="a workload name from the task")
    request_rate: float | None = Field(None, gt=0, description="requests/s; default: the workload's")
    rates: list[float] | None = Field(None, description="a sweep of request rates instead of one rate")
    duration_s: float | None = Field(None, gt=0, description="arrivals for this long instead of the workload's")
    num_prompts: int | None = Field(None, gt=0, description=(
        "prompts to send when the run has no rate and duration to size it (a burst); default: the workload's"))


class BenchResult(ToolResult):
    runs: list[BenchMetrics] = []
    server_lost: bool = Field(False, description=(
        "the server died or hung during a run and is gone: launch it again to measure"))
    diagnosis: Diagnosis | None = Field(None, description=(
        "when the server was lost: why, from its own log (out of memory while serving, a collective error or hang, "
        "a crashed worker, ...)"))


def _need_server(ctx: ToolContext, workload: str) -> str | None:
    if ctx.server is None:
        return "no server is up: launch_server first"
    if workload not in ctx.task.workloads:
        return f"unknown workload {workload!r} (known: {', '.join(ctx.task.workloads)})"
    return None


@tool
def run_benchmark(ctx: ToolContext, args: BenchInput) -> BenchResult:
    """Benchmark the live server on a task workload at one request rate or a sweep of rates."""
    if err := _need_server(ctx, args.workload):
        return BenchResult(ok=False, summary=err)
    runs, cost = [], Cost()
    for rate in args.rates or [args.request_rate]:
        metrics, err, c, diag = run_one(ctx, args.workload, rate, args.duration_s, num_prompts=args.num_prompts)
        cost = _add(cost, c)
        if metrics is None:
            return BenchResult(ok=False, runs=runs, summary=err, cost=cost, server_lost=ctx.server is None,
                               diagnosis=diag)  # fmt: skip
        runs.append(metrics)
    last = runs[-1]
    return BenchResult(runs=runs, cost=cost, summary=(
        f"{args.workload}: {last.output_throughput:.0f} tok/s, TTFT p50 {last.median_ttft_ms:.0f} ms, "
        f"decode {last.decode_tok_s:.1f} tok/s/stream" + (f", bottleneck: {last.bottleneck}" if last.bottleneck else "")))


# A configuration still sustaining max_rate is climbed on, at the same growth, up to this multiple of it (of the
# first rate, when that is higher): a knee is reported only with a failing rate above it, and a climb that reaches
# this cap without one reports a lower bound.
RATE_CAP_FACTOR = 4.0


def rate_cap(args: KneeInput) -> float:
    """The highest rate a knee search climbs to: RATE_CAP_FACTOR x max_rate, or x its first rate when that is
    higher (a search asked to start above max_rate runs its first rate)."""
    return RATE_CAP_FACTOR * max(args.max_rate, args.start_rate, args.min_rate or 0.0)


class KneeInput(ToolInput):
    workload: str
    ttft_limit_ms: float | None = Field(None, gt=0, description="default: the workload's ttft_limit_ms")
    max_tpot_ms: float | None = Field(None, gt=0, description=(
        "interactivity bound: a rate counts as sustained only when its median TPOT is at most this too; default: "
        "the strictest bound (min_tok_s_per_user, max_tpot_ms) of the task's knee targets on this workload"))
    start_rate: float = Field(1.0, gt=0)
    max_rate: float = Field(16.0, gt=0, description=(
        f"where the climb is expected to have failed: a configuration that still sustains it is climbed on (same "
        f"growth) up to {RATE_CAP_FACTOR:g} x max_rate (x the first rate, when higher), so that the knee has a "
        f"failing rate above it; one that "
        f"never fails within that cap (or within max_node_hours) is reported as a lower bound (knee_is_lower_bound)"))
    resolution: float = Field(0.1, ge=0.01, description=(
        "stop when the bracket is this narrow (requests/s); rates are kept to 3 decimals, so no finer than 0.01"))
    growth: float = Field(1.5, gt=1, description=(
        "the rate grows by this factor until it fails; small when start_rate is already a good estimate"))
    duration_s: float | None = Field(None, gt=0, description="shorter runs for a cheap, coarser search")
    min_rate: float | None = Field(None, gt=0, description=(
        "only a knee at or above this rate is wanted (a configuration that must beat a known knee): when the first "
        "seed does not sustain start_rate, stop there instead of searching lower rates"))
    seeds: list[int] | None = Field(None, min_length=1, description=(
        "benchmark seeds every sustained rate must pass with (default: the workload's knee_seeds); a screening "
        "pass may use one"))
    max_node_hours: float | None = Field(None, gt=0, description=(
        "node-hours this search may spend: it stops before a run that would pass them (estimated from the "
        "workload's length, then from the last run) and reports the best rate every seed sustained so far; "
        "default: no limit"))


class KneeResult(ToolResult):
    knee_rate: float | None = None
    throughput_at_knee: float = Field(0.0, description="the lowest output throughput of the seeds at the knee")
    ttft_p50_ms: float | None = Field(None, description="at the knee, the highest of the seeds' TTFT p50")
    ttft_p99_ms: float | None = Field(None, description="at the knee, the highest of the seeds' TTFT p99")
    tpot_p50_ms: float | None = Field(None, description="at the knee, the highest of the seeds' TPOT p50")
    max_tpot_ms: float | None = Field(None, description="the interactivity bound the search held (None: none)")
    seeds: list[int] = []
    first_failing_rate: float | None = Field(None, description=(
        "the lowest rate seen failing above the knee (or, with no knee, the lowest seen failing)"))
    knee_is_lower_bound: bool = Field(False, description=(
        "no rate was seen failing above the knee (the climb reached its cap, or the allowance ran out first): the "
        "configuration sustains at least knee_rate and throughput_at_knee, its knee may lie higher; the summary says "
        "'at least'. Always a knee with no first_failing_rate (knee_is_lower_bound() reads a recorded result so)"))
    server_lost: bool = Field(False, description=(
        "the server died or hung during a run and is gone: launch it again to measure"))
    diagnosis: Diagnosis | None = Field(None, description="when the server was lost: why, from its own log")
    stopped_by_budget: bool = Field(False, description="max_node_hours ran out before the bracket closed")
    runs: list[BenchMetrics] = []


class _OutOfBudget(Exception):
    """The next benchmark run would pass the search's node-hour allowance."""


@tool
def find_knee(ctx: ToolContext, args: KneeInput) -> KneeResult:
    """Find the highest request rate whose TTFT p50 stays within the limit for every benchmark seed: grow the
    rate until it fails (past max_rate too, up to ``rate_cap``), then bisect the bracket to the
    resolution. Reports the output throughput at that rate (the lowest of the seeds') with TTFT p50 and p99; a
    search that saw no rate fail above it (the cap, or the allowance, reached first) reports it as a lower bound,
    "at least", never as a knee. An interactivity bound (``max_tpot_ms``, by default the
    task's) makes a rate whose median TPOT passes it unsustained as well: the knee is then the highest rate both
    hold, the load at which the users still get the decode speed asked for. With ``max_node_hours`` it stops
    before the run that would pass the allowance and reports the best rate every seed sustained so far."""
    if err := _need_server(ctx, args.workload):
        return KneeResult(ok=False, summary=err)
    workload = ctx.task.workloads[args.workload]
    ttft = args.ttft_limit_ms or workload.ttft_limit_ms
    if ttft is None:
        return KneeResult(ok=False, summary="no TTFT limit: pass ttft_limit_ms or set it in the workload")
    limit = _Limit(ttft, args.max_tpot_ms or task_tpot_limit(ctx.task, args.workload))
    seeds = list(args.seeds or workload.knee_seeds)
    results: dict[tuple[float, int], BenchMetrics] = {}
    errors: list[str] = []
    lost: list[Diagnosis] = []
    cost = Cost()
    # what the next run will cost: the workload's length on the server's share of the node, then the last run's
    last_run_hours = (args.duration_s or workload.duration_s or 0.0) / 3600 * ctx.node_fraction()

    def ok(rate: float, with_seeds: list[int]) -> bool:
        """Whether every one of ``with_seeds`` sustains ``rate`` (a failed run raises _RunFailed); stops at the
        first seed that does not."""
        nonlocal cost, last_run_hours
        rate = round(rate, 3)
        for seed in with_seeds:
            if (rate, seed) not in results:
                if args.max_node_hours is not None and cost.node_hours + last_run_hours > args.max_node_hours:
                    raise _OutOfBudget
                metrics, err, c, diag = run_one(ctx, args.workload, rate, args.duration_s, seed)
                cost = _add(cost, c)
                if metrics is None:
                    errors.append(err)
                    lost.extend([diag] if diag else [])
                    raise _RunFailed
                results[(rate, seed)] = metrics
                last_run_hours = c.node_hours
            if not _sustains(results[(rate, seed)], limit):
                return False
        return True

    def failed() -> KneeResult:
        why = errors[-1] if errors else "a benchmark run failed"
        return KneeResult(ok=False, runs=list(results.values()), cost=cost, seeds=seeds, summary=why,
                          server_lost=ctx.server is None, diagnosis=lost[-1] if lost else None)  # fmt: skip

    try:
        lo, hi = _search(args, seeds, ok, lambda: sorted(r for (r, s) in results if s == seeds[0]))
    except _RunFailed:
        return failed()
    except _OutOfBudget:
        return _budget_limited(seeds, results, cost, limit)
    return _knee_result(lo, hi, seeds, results, cost, limit, cap=rate_cap(args))


def knee_is_lower_bound(result: Mapping[str, Any]) -> bool:
    """Whether a ``find_knee`` result, as a trace recorded it, reports a lower bound rather than a knee: a knee
    with no failing rate above it. Read from ``first_failing_rate`` (which ``knee_is_lower_bound`` always follows),
    so that a result recorded before that field existed is read the same way."""
    return result.get("knee_rate") is not None and result.get("first_failing_rate") is None


class _RunFailed(Exception):
    """A benchmark run failed (no figures)."""


@dataclass(frozen=True)
class _Limit:
    """What a sustained rate holds: TTFT p50 within ``ttft_ms`` and, with an interactivity bound, TPOT p50 within
    ``tpot_ms``."""

    ttft_ms: float
    tpot_ms: float | None = None


def task_tpot_limit(task: TaskSpec, workload: str) -> float | None:
    """The strictest interactivity bound (as a median TPOT) of the task's knee targets on ``workload``."""
    limits = [x for t in task.targets if t.metric == "throughput_at_knee" and t.workload == workload
              if (x := t.tpot_limit_ms()) is not None]  # fmt: skip
    return min(limits) if limits else None


def _sustains(m: BenchMetrics, limit: _Limit) -> bool:
    """Whether one benchmark run sustained its rate: TTFT p50 within the limit, (nearly) every request served,
    and TPOT p50 within the interactivity bound when there is one."""
    tpot_ok = limit.tpot_ms is None or 0 < m.median_tpot_ms <= limit.tpot_ms
    return m.median_ttft_ms <= limit.ttft_ms and m.success_rate >= 0.99 and tpot_ok


def _search(args: KneeInput, seeds: list[int], check, tried) -> tuple[float | None, float | None]:
    """Bracket and bisect with the first seed; then the other seeds confirm the knee, which steps down (and the
    bisection resumes with every seed) while one of them does not sustain it. Returns (knee or None, the lowest
    rate seen failing; None when the climb reached its cap without one: the knee is then a lower bound).
    ``check(rate, seeds)`` says whether those seeds sustain a rate; ``tried()`` lists the
    rates the first seed has run."""
    # with an allowance, the first rate sustained and the bracket's low end are confirmed by every seed before
    # going on, so that a search stopped half-way still has a rate to report
    early = args.max_node_hours is not None
    lo, hi = None, None
    rate = max(args.start_rate, args.min_rate or 0.0)
    # past max_rate the climb goes on (RATE_CAP_FACTOR): only a failing rate closes the bracket
    while rate <= rate_cap(args):
        if not check(rate, seeds[:1]) or (early and lo is None and not check(rate, seeds)):
            hi = rate
            break
        lo, rate = rate, rate * args.growth
    if lo is None and hi is not None and args.min_rate is not None and hi <= args.min_rate:
        return None, hi  # below the rate asked for: nothing to search
    if lo is None and hi is not None:  # even the first rate fails: search downwards
        rate = hi / 2
        while rate >= args.resolution:
            if check(rate, seeds[:1]):
                lo = rate
                break
            hi, rate = rate, rate / 2
    confirmed, bisect_with = False, seeds[:1]
    while lo is not None and not confirmed:
        confirm_first = early and hi is not None and hi - lo > args.resolution
        if not confirm_first or check(lo, seeds):
            while hi is not None and hi - lo > args.resolution:
                mid = round((lo + hi) / 2, 3)
                lo, hi = (mid, hi) if check(mid, bisect_with) else (lo, mid)
            confirmed = check(lo, seeds)
        if not confirmed:  # a seed does not sustain it: the knee is below, and every seed now bisects
            hi, bisect_with = lo, seeds
            lower = [r for r in tried() if r < lo and check(r, seeds[:1])]
            lo = max(lower) if lower else None
    return lo, hi


def _sustained(results: dict[tuple[float, int], BenchMetrics], seeds: list[int], limit: _Limit) -> list[float]:
    """Rates every seed has run and sustained."""
    rates = {r for r, _ in results}
    return sorted(r for r in rates if all((r, s) in results and _sustains(results[(r, s)], limit) for s in seeds))


def _knee_result(lo: float | None, hi: float | None, seeds: list[int], results: dict, cost: Cost, limit: _Limit,
                 stopped_by_budget: bool = False, cap: float | None = None) -> KneeResult:
    """The result for a knee ``lo`` and the lowest rate seen failing above it ``hi``: with no ``hi``, a lower bound
    (``knee_is_lower_bound``), worded "at least"; ``cap`` is where the climb stopped looking for a failing rate.
    Rates are reported as they were run (3 decimals), so that the runs at the knee are found by its rate."""
    lo, hi = (None if x is None else round(x, 3) for x in (lo, hi))
    runs = [results[k] for k in sorted(results)]
    bound = f" or TPOT p50 exceeds {limit.tpot_ms:.1f} ms" if limit.tpot_ms else ""
    if lo is None:
        why = (f"the node-hour allowance ran out before any rate was sustained by every seed ({len(runs)} runs)"
               if stopped_by_budget else f"TTFT p50 exceeds {limit.ttft_ms:.0f} ms{bound} even at {hi} req/s")
        return KneeResult(ok=False, first_failing_rate=hi, runs=runs, cost=cost, seeds=seeds,
                          stopped_by_budget=stopped_by_budget, summary=why, max_tpot_ms=limit.tpot_ms)  # fmt: skip
    at_knee = [results[(lo, s)] for s in seeds]
    worst = min(at_knee, key=lambda m: m.output_throughput)
    p50, p99 = max(m.median_ttft_ms for m in at_knee), max(m.p99_ttft_ms for m in at_knee)
    tpot = max(m.median_tpot_ms for m in at_knee)
    held = f" within the bound of {limit.tpot_ms:.1f} ms" if limit.tpot_ms else ""
    per_user = f", TPOT p50 {tpot:.1f} ms{held} ({1000 / tpot:.1f} tok/s per user)" if tpot > 0 else ""
    figures = f"TTFT p50 {p50:.0f} ms, p99 {p99:.0f} ms{per_user} ({len(runs)} runs)"
    if hi is None:  # nothing failed above it: a floor, never a knee
        top = max(r for r, _ in results)
        why = ("the node-hour allowance ran out first" if stopped_by_budget
               else f"the climb's cap ({RATE_CAP_FACTOR:g} x max_rate" + (f", {cap:g} req/s)" if cap else ")"))
        summary = (f"at least {worst.output_throughput:.0f} tok/s ({lo:g} req/s sustained by every one of "
                   f"{len(seeds)} seed(s); no failing rate was seen up to {top:g} req/s, {why}: the knee may lie "
                   f"higher): {figures}")  # fmt: skip
    else:
        limited = " (stopped by its node-hour allowance: the knee may lie higher)" if stopped_by_budget else ""
        summary = (f"knee at {lo:g} req/s (every one of {len(seeds)} seed(s); {hi:g} req/s fails): "
                   f"{worst.output_throughput:.0f} tok/s, {figures}{limited}")  # fmt: skip
    return KneeResult(knee_rate=lo, throughput_at_knee=worst.output_throughput, ttft_p50_ms=p50, ttft_p99_ms=p99,
                      tpot_p50_ms=tpot or None, max_tpot_ms=limit.tpot_ms, seeds=seeds, first_failing_rate=hi,
                      knee_is_lower_bound=hi is None, runs=runs, cost=cost, stopped_by_budget=stopped_by_budget,
                      summary=summary)  # fmt: skip


def _budget_limited(seeds: list[int], results: dict, cost: Cost, limit: _Limit) -> KneeResult:
    """What a search stopped by its allowance can still claim: the highest rate every seed sustained, below the
    lowest rate a seed ran and did not sustain (a rate only some seeds ran and held has not failed: with none
    failing above it, the claim is a lower bound)."""
    sustained = _sustained(results, seeds, limit)
    failing = sorted({r for (r, s), m in results.items() if not _sustains(m, limit)})
    lo = sustained[-1] if sustained else None
    hi = next((r for r in failing if lo is None or r > lo), None)
    return _knee_result(lo, hi, seeds, results, cost, limit, stopped_by_budget=True)
