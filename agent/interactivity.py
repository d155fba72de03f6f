"""What one user sees at the load a figure was measured at, and whether it counts for its target.

Serving results are read as throughput per GPU against interactivity (tokens per second per user, 1000 / median
TPOT): a throughput won by batching every user down to a few tokens per second is not a win. Every benchmark
record ``bench_serving`` writes carries the per-user figures (``median_tpot_ms``, ``p99_tpot_ms``,
``median_itl_ms``, ``p99_itl_ms``, ``concurrency``, ``max_concurrency``); :func:`of_runs` keeps them with the
trial that served them, :func:`measured` decides what a tool result measured for a target and whether the
target's interactivity bound (``Target.min_tok_s_per_user``, ``Target.max_tpot_ms``) lets it count, and
:func:`per_user_text` is the one way they are written for a reader (terminal, live panel, PR, report, web view).
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from tasks.spec import Target
from tools.bench import knee_is_lower_bound

from .state import Interactivity, Observation

__all__ = ["Counted", "Interactivity", "bound_text", "from_summary", "measured", "of_runs", "per_user_text"]


def of_runs(runs: list[dict[str, Any]]) -> Interactivity | None:
    """The per-user figures of benchmark runs at one load (a knee's seeds): the slowest run's, the one with the
    highest TPOT p50 (a bound holds only when every seed holds it). None when no run measured a TPOT."""
    timed = [r for r in runs if (r.get("median_tpot_ms") or 0) > 0]
    if not timed:
        return None
    r = max(timed, key=lambda x: x["median_tpot_ms"])
    tpot = float(r["median_tpot_ms"])
    return Interactivity(workload=str(r.get("workload") or ""), request_rate=r.get("request_rate"),
                         tpot_p50_ms=tpot, tpot_p99_ms=float(r.get("p99_tpot_ms") or 0.0),
                         itl_p50_ms=float(r.get("median_itl_ms") or 0.0), itl_p99_ms=float(r.get("p99_itl_ms") or 0.0),
                         tok_s_per_user=1000.0 / tpot, concurrency=r.get("concurrency"),
                         max_concurrency=r.get("max_concurrency"), seeds=len(runs))  # fmt: skip


class Counted(BaseModel):
    """What one tool result measured for one target."""

    value: float
    run: dict[str, Any] = Field(default_factory=dict, description="the benchmark run the value comes from")
    interactivity: Interactivity | None = None
    miss: str | None = Field(None, description="why the value does not count: the target's bound it misses")
    lower_bound: bool = Field(False, description=(
        "the value is a floor: its knee search saw no rate fail above the knee (worded 'at least')"))


def measured(target: Target, obs: Observation) -> Counted | None:
    """What ``obs`` (a ``run_benchmark`` or ``find_knee`` result) measured for ``target``, or None. A run that
    misses the target's interactivity bound is passed over for one that meets it (a rate sweep); when none does,
    the best figure comes back with ``miss`` saying why it does not count."""
    r = obs.result
    if obs.tool == "run_benchmark" and r.get("runs") and r["runs"][-1]["workload"] == target.workload:
        key = {"decode_tok_s": "decode_tok_s", "output_throughput": "output_throughput"}.get(target.metric)
        if key is None:
            return None
        pool = [x for x in r["runs"] if key == "decode_tok_s" or x["success_rate"] >= 0.99]
        if not pool:
            return Counted(value=0.0)
        meeting = [x for x in pool if target.interactivity_miss(x.get("median_tpot_ms")) is None]
        run = max(meeting or pool, key=lambda x: x[key])
        return Counted(value=float(run[key]), run=run, interactivity=of_runs([run]),
                       miss=None if meeting else target.interactivity_miss(run.get("median_tpot_ms")))  # fmt: skip
    if (obs.tool == "find_knee" and target.metric == "throughput_at_knee" and obs.args.get("workload") == target.workload
            and r.get("knee_rate")):  # fmt: skip
        at_knee = [x for x in r.get("runs", []) if x.get("request_rate") == r["knee_rate"]]
        # the seed whose figure is reported (the lowest): its command reproduces the figure
        run = min(at_knee, key=lambda x: abs(x["output_throughput"] - r["throughput_at_knee"]), default={})
        inter = of_runs(at_knee)
        return Counted(value=float(r["throughput_at_knee"]), run=run, interactivity=inter,
                       miss=target.interactivity_miss(inter.tpot_p50_ms if inter else None),
                       lower_bound=knee_is_lower_bound(r))  # fmt: skip
    return None


def per_user_text(i: Interactivity | None, short: bool = False) -> str:
    """``3.85 tok/s/user, TPOT p50/p99 260/461 ms, ITL p50/p99 44/2865 ms`` (``short``: the first two); '-' when
    nothing was measured."""
    if i is None:
        return "-"
    text = f"{i.tok_s_per_user:.3g} tok/s/user, TPOT p50/p99 {i.tpot_p50_ms:.1f}/{i.tpot_p99_ms:.1f} ms"
    return text if short else text + f", ITL p50/p99 {i.itl_p50_ms:.1f}/{i.itl_p99_ms:.1f} ms"


def bound_text(target: Target) -> str:
    """The target's interactivity bound in words ('' when it has none)."""
    parts = ([f"at least {target.min_tok_s_per_user:g} tok/s per user"] if target.min_tok_s_per_user else []) + \
        ([f"TPOT p50 at most {target.max_tpot_ms:g} ms"] if target.max_tpot_ms else [])  # fmt: skip
    return " and ".join(parts)


def from_summary(target: dict[str, Any]) -> Interactivity | None:
    """The per-user figures behind a target's best, from its entry in ``summary.json`` (``targets.<name>``); None
    for a run from before they were recorded, or a target no benchmark measures."""
    raw = target.get("interactivity")
    return Interactivity.model_validate(raw) if isinstance(raw, dict) else None
