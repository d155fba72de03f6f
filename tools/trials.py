"""Independent trials of a sweep, each in its own sandbox and server, run by the context's executor.

A trial is a configuration (flags, environment) and a measurement (one benchmark, or a knee search) on a
task workload. ``run_trial`` is a plain function of a picklable job, so the executor may run it here, one
trial after another, or as a Ray task on whichever node holds the GPUs it asks for; it returns a result model
and writes only its own logs (under ``<run>/trials/<job>``). The same jobs give the same results either way.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import socket
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field, field_validator

from tasks.spec import DockerSpec, load_task

from .base import Cost, ToolInput, ToolResult, tool
from .context import ToolContext


class TrialSpec(BaseModel):
    flags: dict[str, Any]
    env: dict[str, str] = Field(default_factory=dict)
    workload: str
    measure: Literal["benchmark", "knee"] = "knee"
    request_rate: float | None = None
    start_rate: float = 1.0
    resolution: float = 0.1
    duration_s: float | None = None  # shorter benchmark runs for screening
    num_prompts: int | None = None  # a benchmark without a rate (a burst): how many prompts

    @field_validator("env")
    @classmethod
    def _env_is_the_engines(cls, env: dict[str, str]) -> dict[str, str]:
        from .server import check_env

        return check_env(env)


class TrialJob(BaseModel):
    job_id: str
    task_path: str
    engine_name: str
    workspace: str
    run_dir: str
    spec: TrialSpec
    docker: DockerSpec | None = None  # None: local processes


class TrialOutcome(BaseModel):
    job_id: str
    spec: TrialSpec
    status: str  # up | crashed | timeout
    diagnosis: str | None = None
    value: float = 0.0  # throughput at the knee, or the benchmark's output throughput
    knee_rate: float | None = None
    knee_is_lower_bound: bool = False  # the knee search saw no rate fail above knee_rate: value is "at least"
    request_throughput: float | None = None  # a benchmark's completed requests/s (a burst's: the rate it served)
    benchmark_runs: int = 0  # how many benchmark runs the measurement made
    at_value: list[dict[str, Any]] = Field(default_factory=list, description=(
        "the benchmark runs behind the value (a knee's seeds at the knee rate; the benchmark's last run), as "
        "BenchMetrics: what one user saw there"))
    summary: str = ""
    gpus: int = 1
    cost: Cost = Cost()


def gpus_of(flags: dict[str, Any]) -> int:
    tp, dp = int(flags.get("tp-size", 1) or 1), int(flags.get("dp-size", 1) or 1)
    return tp if flags.get("enable-dp-attention") else tp * dp


def _holder() -> dict[str, Any]:
    """Who holds GPUs: this host, process (with its start time: a reused pid is not the holder) and thread."""
    from sandboxes.local import process_start_time

    return {"host": socket.gethostname(), "pid": os.getpid(), "start": process_start_time(os.getpid()),
            "thread": threading.get_ident()}  # fmt: skip


def _alive(holder: dict[str, Any]) -> bool:
    """Whether a ledger entry's process still runs (entries of other hosts are theirs to judge: kept)."""
    from sandboxes.local import process_start_time

    if holder.get("host") != socket.gethostname():
        return True
    pid = holder.get("pid")
    return isinstance(pid, int) and process_start_time(pid) is not None and process_start_time(pid) == holder.get("start")


def _read_ledger(ledger: Path) -> dict[str, dict[str, Any]]:
    """The holds of live processes (those of killed ones, and malformed entries, are dropped)."""
    try:
        held = json.loads(ledger.read_text())
    except (OSError, ValueError):
        return {}
    return {k: v for k, v in held.items() if isinstance(v, dict) and isinstance(v.get("ids"), list) and _alive(v)}


@contextlib.contextmanager
def gpu_subset(workspace: Path, count: int, total: int, timeout_s: float = 3600) -> Iterator[list[int]]:
    """Hold ``count`` GPU ids of this node, disjoint from every other trial's, for the duration.

    The executor decides how many trials share a node (by GPU count); this decides which GPUs each gets, so
    concurrent partial-node trials never land on the same devices. A lock file in the workspace arbitrates; a
    hold whose process is gone (a killed agent or Ray worker: same pid and start time no longer running) is
    dropped, so it never blocks a later trial.
    """
    ledger = workspace / ".dayzero-gpus.json"
    lock = workspace / ".dayzero-gpus.lock"
    deadline = time.monotonic() + timeout_s
    ids: list[int] = []
    key = uuid.uuid4().hex
    while not ids:
        with open(lock, "a") as fh:
            fcntl.flock(fh, fcntl.LOCK_EX)
            held = _read_ledger(ledger)
            busy = {g for h in held.values() for g in h["ids"]}
            free = [g for g in range(total) if g not in busy]
            if len(free) >= count:
                ids = free[:count]
                held[key] = {**_holder(), "ids": ids}
            ledger.write_text(json.dumps(held))
        if not ids:
            if time.monotonic() > deadline:
                raise TimeoutError(f"no {count} free GPUs on this node after {timeout_s:.0f} s")
            time.sleep(0.2)
    try:
        yield ids
    finally:
        with open(lock, "a") as fh:
            fcntl.flock(fh, fcntl.LOCK_EX)
            held = _read_ledger(ledger)
            held.pop(key, None)
            ledger.write_text(json.dumps(held))


def run_trial(job: TrialJob) -> TrialOutcome:
    """Launch, measure, stop: one trial in a sandbox of its own (the workspace is shared, read-only), on a GPU
    subset of its own when it needs less than the node."""
    task = load_task(job.task_path)
    count = min(gpus_of(job.spec.flags), task.hardware.gpus)
    if count >= task.hardware.gpus:
        return _run_trial(job, task, None)
    with gpu_subset(Path(job.workspace), count, task.hardware.gpus) as ids:
        return _run_trial(job, task, ids)


def _run_trial(job: TrialJob, task, gpu_ids: list[int] | None) -> TrialOutcome:
    from sandboxes.local import LocalSandbox

    from .bench import BenchInput, KneeInput, find_knee, run_benchmark
    from .server import LaunchInput, launch_server

    engine = getattr(task.engines, job.engine_name)
    run_dir = Path(job.run_dir) / "trials" / job.job_id
    run_dir.mkdir(parents=True, exist_ok=True)
    env = dict(job.spec.env)
    if job.docker is not None:
        from sandboxes.docker import DockerSandbox

        docker_spec = job.docker.model_copy(update={"gpus": gpu_ids}) if gpu_ids is not None else job.docker
        sandbox = DockerSandbox(Path(job.workspace), docker_spec, run_id=job.job_id)
    else:
        sandbox = LocalSandbox(Path(job.workspace), run_id=job.job_id)
        if gpu_ids is not None:
            env["HIP_VISIBLE_DEVICES"] = ",".join(map(str, gpu_ids))
    ctx = ToolContext(task=task, engine_name=job.engine_name, engine=engine, sandbox=sandbox, run_id=job.job_id,
                      run_dir=run_dir)  # fmt: skip
    spec = job.spec
    try:
        launched = launch_server(ctx, LaunchInput(flags=spec.flags, env=env))
        cost = launched.cost
        if launched.status != "up":
            return TrialOutcome(job_id=job.job_id, spec=spec, status=launched.status or "crashed", gpus=gpus_of(spec.flags),
                                diagnosis=launched.diagnosis.summary if launched.diagnosis else None,
                                summary=launched.summary, cost=cost)  # fmt: skip
        served = None
        if spec.measure == "knee":
            m = find_knee(ctx, KneeInput(workload=spec.workload, start_rate=spec.start_rate, resolution=spec.resolution,
                                         duration_s=spec.duration_s))  # fmt: skip
            value, rate = (m.throughput_at_knee if m.ok else 0.0), m.knee_rate
            floor = m.ok and m.knee_is_lower_bound
            at_value = [r for r in m.runs if m.ok and r.request_rate == m.knee_rate]
        else:
            m = run_benchmark(ctx, BenchInput(workload=spec.workload, request_rate=spec.request_rate,
                                              duration_s=spec.duration_s, num_prompts=spec.num_prompts))  # fmt: skip
            last = m.runs[-1] if m.ok and m.runs else None
            value, rate, floor = (last.output_throughput if last else 0.0), spec.request_rate, False
            served = last.request_throughput if last else None
            at_value = [last] if last else []
        cost = Cost(wall_seconds=cost.wall_seconds + m.cost.wall_seconds,
                    simulated_seconds=(cost.simulated_seconds or 0.0) + (m.cost.simulated_seconds or 0.0),
                    node_hours=cost.node_hours + m.cost.node_hours)  # fmt: skip
        lost = m.diagnosis if not m.ok and m.diagnosis else None  # it came up, then failed under the load
        return TrialOutcome(job_id=job.job_id, spec=spec, status="up", value=value, knee_rate=rate,
                            knee_is_lower_bound=floor, summary=m.summary,
                            request_throughput=served, benchmark_runs=len(m.runs), gpus=gpus_of(spec.flags),
                            at_value=[r.model_dump() for r in at_value],
                            diagnosis=lost.summary if lost else None, cost=cost)  # fmt: skip
    finally:
        sandbox.close()


class RunTrialsInput(ToolInput):
    trials: list[TrialSpec] = Field(min_length=1, description="independent configurations to launch and measure")


class RunTrialsResult(ToolResult):
    executor: str = "inline"
    outcomes: list[TrialOutcome] = []
    best: int | None = Field(None, description="index of the trial with the highest value")


@tool
def run_trials(ctx: ToolContext, args: RunTrialsInput) -> RunTrialsResult:
    """Launch and measure several independent configurations, each in its own sandbox, concurrently where the
    executor allows (one trial per node or GPU subset). Returns each trial's outcome and the best."""
    if ctx.server is not None:
        ctx.sandbox.stop_server(ctx.server.handle)
        ctx.server = None
    base = ctx.next_id()
    jobs = [TrialJob(job_id=f"{ctx.run_id}-t{base:03d}-{i}", task_path=str(Path(ctx.task_path).resolve()),
                     engine_name=ctx.engine_name, workspace=str(ctx.sandbox.root), run_dir=str(ctx.run_dir), spec=s,
                     docker=getattr(ctx.sandbox, "spec", None))
            for i, s in enumerate(args.trials)]  # fmt: skip
    gpus = [min(gpus_of(s.flags), ctx.task.hardware.gpus) for s in args.trials]
    outcomes = ctx.executor.map(run_trial, jobs, gpus)
    up = [i for i, o in enumerate(outcomes) if o.status == "up"]
    best = max(up, key=lambda i: outcomes[i].value) if up else None
    cost = Cost(wall_seconds=sum(o.cost.wall_seconds for o in outcomes),
                simulated_seconds=sum(o.cost.simulated_seconds or 0.0 for o in outcomes),
                node_hours=sum(o.cost.node_hours for o in outcomes))  # fmt: skip
    summary = f"{len(outcomes)} trial(s) on {ctx.executor.name}: " + (
        f"best #{best} {outcomes[best].value:.0f} ({outcomes[best].summary})" if best is not None else "none came up")
    return RunTrialsResult(executor=ctx.executor.name, outcomes=outcomes, best=best, cost=cost, summary=summary)
