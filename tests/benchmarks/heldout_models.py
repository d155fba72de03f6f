"""Print the twin beside public measurements of zoo models the calibration never saw (issue 28's held-out checks).

    python -m tests.benchmarks.heldout_models            # every point of tests/benchmarks/data/heldout_public.yaml
    python -m tests.benchmarks.heldout_models --scenario qwen35_397b_mxfp4_mi355x

The points (with their source URLs) are held out: nothing in the performance model is fitted to them, so the share
within +-15 % says how far the mechanisms carry beyond GLM-5. Each point runs in-process, the way
``tests.benchmarks.cost_fingerprint`` does (``server_args.resolve`` for the flags, ``CostModel``, ``plan_memory``,
``simulate``; no server): InferenceX's workload (random prompts of the nominal ISL/OSL, ``--random-range-ratio
0.8``, ``--max-concurrency C`` with ``10 x C`` prompts, the chat template on MTP runs) against the server flags of
InferenceX's scripts (``--mem-fraction-static 0.85``, ``--context-length ISL + OSL + 32``, radix cache off, CUDA
graphs up to C on MTP runs), or, for a row that names them (``flags``, ``env``), the server flags and engine
environment of the source's own launch script. Figures: tok/s/GPU = (input + output) tok/s / GPUs used; TPOT = the
median's ms.
"""

from __future__ import annotations

import argparse
import dataclasses
import random
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from sandboxes.twin.engine.memory import plan_memory
from sandboxes.twin.perf.cost_model import CostModel
from sandboxes.twin.perf.serving_config import ServingConfig, with_engine_environment
from sandboxes.twin.perf.simulator import simulate
from sandboxes.twin.perf.workload import DatasetSpec, arrival_times, build_requests, prompt_content
from sandboxes.twin.scenario import QuantSpec, Scenario, load
from tests.benchmarks.cost_fingerprint import serving_config

DATA = Path(__file__).with_name("data") / "heldout_public.yaml"
WITHIN = 0.15
EAGLE_314 = ["--speculative-algorithm", "EAGLE", "--speculative-num-steps", "3", "--speculative-eagle-topk", "1",
             "--speculative-num-draft-tokens", "4"]  # fmt: skip


@dataclass(frozen=True)
class Point:
    """One public measurement: what ran (scenario, checkpoint format, TP, MTP, workload) and what it published."""

    scenario: str
    url: str
    release: str
    tp: int
    isl: int
    osl: int
    concurrency: int
    tok_s_gpu: float
    tpot_ms: float
    mtp: bool = False
    weight_format: str = ""
    # the server flags beyond TP of the source's launch script, all of them (empty: InferenceX's GLM-5 scripts')
    flags: tuple[str, ...] = ()
    # what the script exports that changes the engine (SGLANG_USE_AITER_UNIFIED_ATTN, SGLANG_MAMBA_SSM_DTYPE, ...)
    env: tuple[tuple[str, str], ...] = ()
    # whether the public run's image shipped a tuned fused-MoE selection for this shape (the source's evidence is
    # beside the row); None: the zoo scenario's claim (``tuned_moe``)
    moe_tuned: bool | None = None

    @property
    def label(self) -> str:
        fmt = f" {self.weight_format}" if self.weight_format else ""
        return f"{self.scenario}{fmt} TP{self.tp}{' MTP' if self.mtp else ''} {self.isl // 1024}k/{self.osl // 1024}k c{self.concurrency}"


def points(path: Path = DATA) -> list[Point]:
    rows = yaml.safe_load(path.read_text())["points"]
    return [Point(**{**row, "release": str(row["release"]), "flags": tuple(str(f) for f in row.get("flags", ())),
                     "env": tuple((str(k), str(v)) for k, v in (row.get("env") or {}).items())})
            for row in rows]  # fmt: skip


def scenario_for(point: Point) -> Scenario:
    """The zoo scenario, with the checkpoint format the public run served when it is not the zoo's."""
    sc = load(point.scenario)
    if point.weight_format and point.weight_format != sc.quantization.weight_format:
        sc = dataclasses.replace(sc, quantization=QuantSpec(weight_format=point.weight_format, exclude=("lm_head",)))
    return sc


def tuned_moe(sc: Scenario) -> bool:
    """Whether the image's aiter ships a tuned fused-MoE selection for this model's shape and format (what the
    launcher's ``moe_selection`` finds in the workspace's CSV, which the scenario's ``tuned_moe_shapes`` write)."""
    m, fmt = sc.model, sc.quantization.weight_format
    return any((s.model_dim, s.inter_dim, s.experts, s.top_k, s.dtype)
               == (m.hidden_size, m.moe.intermediate_size, m.moe.num_experts, m.moe.top_k, fmt)
               for s in sc.defects.tuned_moe_shapes)  # fmt: skip


def server_flags(point: Point) -> list[str]:
    """The row's own script's flags where it names them; else InferenceX's GLM-5 scripts' (radix cache off, 0.85 of
    the memory, the workload's context, EAGLE 3/1/4 with CUDA graphs up to the concurrency on MTP runs)."""
    if point.flags:
        return ["--tp-size", str(point.tp), *point.flags]
    flags = ["--tp-size", str(point.tp), "--mem-fraction-static", "0.85", "--context-length",
             str(point.isl + point.osl + 32), "--disable-radix-cache"]  # fmt: skip
    if point.mtp:
        flags += [*EAGLE_314, "--cuda-graph-max-bs", str(point.concurrency)]
    return flags


def point_config(point: Point, sc: Scenario) -> ServingConfig:
    """The serving configuration the row's server ran: its flags through the release's argument handling, then what
    its script's environment changes."""
    tuned = tuned_moe(sc) if point.moe_tuned is None else point.moe_tuned
    return with_engine_environment(serving_config(sc, server_flags(point), tuned), dict(point.env))


def measure(point: Point, seed: int = 1) -> dict[str, Any]:
    """Run one point in the twin; the figures bench_serving would print for it."""
    sc = scenario_for(point)
    cfg = point_config(point, sc)
    model = CostModel(sc, cfg)
    plan = plan_memory(model)
    rng = random.Random(seed)
    spec = DatasetSpec("random-ids", num_prompts=10 * point.concurrency, random_input_len=point.isl,
                       random_output_len=point.osl, random_range_ratio=0.8)  # fmt: skip
    reqs = build_requests(spec, rng)
    content = prompt_content("random-ids", "vllm-chat" if point.mtp else "vllm")
    result = simulate(model, reqs, arrival_times(len(reqs), float("inf"), rng), plan.max_total_num_tokens,
                      point.concurrency, content, plan.max_mamba_cache_size)  # fmt: skip
    ok = [t for t in result.traces if not t.error and t.done is not None]
    tokens = sum(t.req.input_len + t.req.output_len for t in ok)
    tpots = sorted((t.done - t.first_token) / (t.req.output_len - 1) for t in ok if t.req.output_len > 1)
    return {"tok_s_gpu": tokens / max(result.duration, 1e-9) / cfg.gpus_used,
            "tpot_ms": 1000 * tpots[len(tpots) // 2] if tpots else float("nan"),
            "failed": len(result.traces) - len(ok), "accept": result.accept_length}  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scenario", action="append", help="only the points of this zoo scenario")
    args = parser.parse_args(argv)
    rows = [p for p in points() if not args.scenario or p.scenario in args.scenario]
    head = f"{'point':<58} {'rel':>6}  {'tok/s/GPU':>9} {'pub':>8} {'ratio':>5}  {'TPOT ms':>7} {'pub':>6} {'ratio':>5}"
    print("Twin vs public measurements held out from the calibration (ratio = twin / published)")
    print(head)
    print("-" * len(head))
    ratios: list[float] = []
    for p in rows:
        twin = measure(p)
        rg, rt = twin["tok_s_gpu"] / p.tok_s_gpu, twin["tpot_ms"] / p.tpot_ms
        ratios += [rg, rt]
        fail = f"  ({twin['failed']} failed)" if twin["failed"] else ""
        print(f"{p.label:<58} {p.release:>6}  {twin['tok_s_gpu']:>9.1f} {p.tok_s_gpu:>8.1f} {rg:>5.2f}  "
              f"{twin['tpot_ms']:>7.2f} {p.tpot_ms:>6.2f} {rt:>5.2f}{fail}")  # fmt: skip
        sys.stdout.flush()
    within = sum(abs(r - 1) <= WITHIN for r in ratios)
    print(f"\n{within} of {len(ratios)} figures within +-15 % of the published ones "
          f"(ratios {min(ratios):.2f}-{max(ratios):.2f}); sources: {DATA.relative_to(Path.cwd()) if DATA.is_relative_to(Path.cwd()) else DATA}")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
