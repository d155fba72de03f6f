"""The throughput-interactivity Pareto frontier of a run, as InferenceX draws the field's results: throughput per
GPU (output tok/s / the GPUs the configuration used) against tok/s per user (1000 / median TPOT: how fast one
user's answer streams), one point per measured benchmark run.

A point is on the frontier when no other point is at least as fast per user *and* serves more per GPU (or the
other way round). Three frontier points are named for deployment: the most throughput per GPU, the fastest per
user, and the balanced point between them (the frontier point farthest above the straight line joining those
two ends, with tok/s per user on a log scale as the plot draws it). Only a deployable run is a candidate: one
that kept its workload's TTFT p50 limit (a run queueing minutes before its first token streams fast per user, but
no one would deploy it) and was not a screening run (a sweep's short burst, never a best); the others are drawn,
marked, but not on the frontier. Runs that did not serve their requests are left out.

``agent/inspector/report.py`` builds the points from the run's records (:func:`frontier_of`);
``agent/inspector/plots.py`` draws them (``pareto.png``) and overlays several runs' frontiers
(``frontier_overlay``, ``agent runs --compare``).
"""

from __future__ import annotations

import math
from typing import Any, Literal

from pydantic import BaseModel, Field

Role = Literal["max throughput", "balanced", "max interactivity"]


class FrontierPoint(BaseModel):
    """One benchmark run as a point of the frontier plot, with the per-user figures of its record."""

    run_index: int  # the run's number among the run's benchmark runs (BenchRun.index)
    file: str
    trial: int
    workload: str
    flags: dict[str, Any]
    env: dict[str, str] = Field(default_factory=dict)
    request_rate: float | None = None  # None: all requests at once
    max_concurrency: int | None = None
    gpus: int
    output_throughput: float
    throughput_per_gpu: float
    tok_s_per_user: float  # 1000 / median TPOT
    tpot_p50_ms: float
    tpot_p99_ms: float | None = None
    itl_p50_ms: float | None = None
    itl_p99_ms: float | None = None
    ttft_p50_ms: float | None = None
    within_ttft_limit: bool | None = None  # against the workload's TTFT p50 limit (None: it has none)
    screening: bool = False
    on_frontier: bool = False

    @property
    def load(self) -> str:
        """Where the run was measured: ``3.2 req/s``, ``concurrency 1``, or ``all at once``."""
        if self.max_concurrency is not None:
            return f"concurrency {self.max_concurrency}"
        return f"{self.request_rate:g} req/s" if self.request_rate is not None else "all at once"


class Pick(BaseModel):
    """A frontier point named for deployment."""

    role: Role
    point: FrontierPoint
    why: str


class Frontier(BaseModel):
    points: list[FrontierPoint]  # every measured point, in run order
    picks: list[Pick] = Field(default_factory=list)
    notes: list[str] = Field(default_factory=list)  # what was left out, and why

    @property
    def frontier(self) -> list[FrontierPoint]:
        """The frontier's points, by tok/s per user (left to right on the plot)."""
        return sorted((p for p in self.points if p.on_frontier), key=lambda p: p.tok_s_per_user)


def pareto(points: list[FrontierPoint]) -> list[FrontierPoint]:
    """The points no other point dominates (at least as good on both axes, better on one), by tok/s per user."""
    best_y = -math.inf
    kept = []
    for p in sorted(points, key=lambda p: (-p.tok_s_per_user, -p.throughput_per_gpu)):
        if p.throughput_per_gpu > best_y:
            kept.append(p)
            best_y = p.throughput_per_gpu
    return sorted(kept, key=lambda p: p.tok_s_per_user)


def _balanced(front: list[FrontierPoint]) -> FrontierPoint | None:
    """The frontier's knee: the inner point farthest above the chord between its ends (x on a log scale when
    the frontier spans more than a decade of tok/s per user, as the plot draws it; both axes scaled to 0..1)."""
    if len(front) < 3:
        return None
    xs = [p.tok_s_per_user for p in front]
    log = xs[-1] / xs[0] > 10
    fx = (lambda v: math.log10(v)) if log else (lambda v: v)
    x0, x1 = fx(xs[0]), fx(xs[-1])
    y0, y1 = front[0].throughput_per_gpu, front[-1].throughput_per_gpu
    if x1 == x0 or y0 == y1:
        return None

    def above(p: FrontierPoint) -> float:
        nx = (fx(p.tok_s_per_user) - x0) / (x1 - x0)
        ny = (p.throughput_per_gpu - y1) / (y0 - y1)  # 1 at the max-throughput end, 0 at the other
        return nx + ny - 1  # above the chord from (0, 1) to (1, 0)

    best = max(front[1:-1], key=above)
    return best if above(best) > 0 else None


def frontier_of(points: list[FrontierPoint], notes: list[str] | None = None) -> Frontier:
    """Mark the frontier among ``points`` (the deployable ones are candidates) and name its three points."""
    candidates = [p for p in points if not p.screening and p.within_ttft_limit is not False]
    on = {id(p) for p in pareto(candidates)}
    points = [p.model_copy(update={"on_frontier": id(p) in on}) for p in points]
    front = sorted((p for p in points if p.on_frontier), key=lambda p: p.tok_s_per_user)
    picks: list[Pick] = []
    if front:
        top = max(front, key=lambda p: p.throughput_per_gpu)
        fast = max(front, key=lambda p: p.tok_s_per_user)
        picks.append(Pick(role="max throughput", point=top, why="the most output tok/s per GPU measured"))
        mid = _balanced(front)
        if mid is not None:
            picks.append(Pick(role="balanced", point=mid, why="the frontier's knee: the most of both at once "
                              "(farthest above the line between the two ends)"))  # fmt: skip
        if fast is not top:
            picks.append(Pick(role="max interactivity", point=fast, why="the fastest stream per user measured"))
    return Frontier(points=points, picks=picks, notes=notes or [])
