"""Print one steady-state decode step of the twin, component by component, beside its roofline (issue 28).

    python -m tests.benchmarks.step_breakdown                  # the default points (held out and GLM-5)
    python -m tests.benchmarks.step_breakdown --label "TP2 8k/1k c64"

For each point (a held-out row of ``tests/benchmarks/data/heldout_public.yaml``, or a GLM-5 FP8 calibration point
of InferenceX) the running batch is the client's concurrency capped by the server's running-request limit, at
the mean context of InferenceX's workload (0.9 x ISL + 0.9 x OSL / 2: lengths uniform in 0.8-1.0x).
``perf.breakdown.decode_components`` splits the step; "roofline" is what the component would take at the GPU's
peak (HBM bandwidth for bytes, the matrix peak of its dtype for FLOPs), so ``ms / roofline`` is the efficiency the
twin charges it at (its inverse). Memory and compute overlap (the step pays the larger sum; "per-kernel roofline"
is what each kernel class paying its own larger would cost instead); communication, launches and the draft add;
the CPU's per-step work shows only where it outlasts the GPU's.
"""

from __future__ import annotations

import argparse
import sys

from sandboxes.twin.engine.memory import plan_memory
from sandboxes.twin.perf.breakdown import MEMORY_TERMS, decode_components, paid
from sandboxes.twin.perf.cost_model import CostModel
from tests.benchmarks.heldout_models import Point, point_config, points, scenario_for

FP8_KV = ("--kv-cache-dtype", "fp8_e4m3")
# GLM-5 FP8 calibration points (tests/benchmarks/inferencex_calibration.py's PUBLISHED, its TP4 rows)
GLM5 = [
    Point("glm5_fp8_mi355x", "InferenceX GLM-5 FP8", "0.5.12", 4, 8192, 1024, 64, 1660.1, 84.6, flags=FP8_KV),
    Point("glm5_fp8_mi355x", "InferenceX GLM-5 FP8", "0.5.12", 4, 8192, 1024, 64, 1895.0, 55.0, mtp=True,
          flags=FP8_KV),
]  # fmt: skip
DEFAULT = ("TP2 8k/1k c64", "TP8 MTP 8k/1k c64", "fp8 TP4 8k/1k c64", "TP2 MTP 8k/1k c16")


def breakdown(point: Point) -> tuple[CostModel, int, float, list]:
    sc = scenario_for(point)
    cfg = point_config(point, sc)
    model = CostModel(sc, cfg)
    plan = plan_memory(model)
    limit = cfg.max_running_per_rank(plan.max_total_num_tokens, cfg.context_length, plan.max_mamba_cache_size)
    batch = max(1, min(point.concurrency, limit))
    context = 0.9 * point.isl + 0.9 * point.osl / 2
    return model, batch, context, decode_components(model, batch, context, model.tokens_per_verify())


def roofline(model: CostModel, c) -> float:
    hw = model.scenario.hardware
    if c.bytes:
        return c.bytes / (hw.memory_bandwidth_tbs * 1e12)
    if c.flops:
        return c.flops / (hw.peak_tflops[c.peak] * 1e12)
    return 0.0


def print_point(point: Point) -> None:
    model, batch, context, comps = breakdown(point)
    total = {t: sum(c.seconds for c in comps if c.term == t) for t in {c.term for c in comps}}
    memory = sum(total.get(t, 0.0) for t in MEMORY_TERMS)
    compute = total.get("compute", 0.0)
    kernels = max(memory, compute)
    gpu = kernels + sum(total.get(t, 0.0) for t in ("communication", "kernel_launch", "draft"))
    cpu = model.cpu_exposed(gpu, total.get("scheduler", 0.0))
    step = gpu + cpu
    accept = model.accept_length()
    print(f"\n{point.scenario} {point.weight_format or model.wfmt} {point.label.split(' ', 1)[1]}: batch {batch}, "
          f"context {context:.0f}, {model.tokens_per_verify()} tok/seq, accept {accept:.2f}")  # fmt: skip
    print(f"  step {step * 1e3:.2f} ms = max(memory {memory * 1e3:.2f}, compute {compute * 1e3:.2f}) + the rest "
          f"(per-kernel roofline: {paid(comps) * 1e3:.2f} for the max); "
          f"TPOT ~{step / accept * 1e3:.2f} ms (published {point.tpot_ms} ms)")  # fmt: skip
    head = f"  {'component':<66} {'term':<13} {'ms':>7} {'roofline':>8} {'x':>5}  {'kernel class':<22} detail"
    print(head)
    print("  " + "-" * (len(head) - 2))
    for c in comps:
        roof = roofline(model, c)
        x = f"{c.seconds / roof:>5.1f}" if roof else f"{'':>5}"
        print(f"  {c.name:<66} {c.term:<13} {c.seconds * 1e3:>7.3f} {roof * 1e3:>8.3f} {x}  {c.kernel:<22} {c.detail}")
    print(f"  {'CPU exposed (overlap scheduler)':<66} {'scheduler':<13} {cpu * 1e3:>7.3f}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--label", action="append", help="points whose label ends with this (default: a few)")
    args = parser.parse_args(argv)
    wanted = args.label or DEFAULT
    rows = [p for p in points() if any(p.label.endswith(w) for w in wanted)] + GLM5
    for p in rows:
        print_point(p)
    return 0


if __name__ == "__main__":
    sys.exit(main())
