"""How fast the twin's benchmark simulates: wall seconds for production-workload runs (prints figures).

    python -m tests.benchmarks.twin_speed

Not a test: speeds are measured here and reported, never asserted.
"""

from __future__ import annotations

import random
import time

from sandboxes.twin.memory import plan_memory
from sandboxes.twin.perf_model import CostModel
from sandboxes.twin.scenario import load
from sandboxes.twin.serving_config import ServingConfig
from sandboxes.twin.simulator import simulate
from sandboxes.twin.workload import DatasetSpec, arrival_times, build_requests


def main() -> None:
    sc = load("glm52_mi355x")
    print(f"{'config':<22} {'requests':>8} {'rate':>5} {'sim s':>8} {'wall s':>7} {'tok/s':>7}")
    for name, cfg in (("TP8", ServingConfig(tp_size=8)), ("TP4xDP2 tuned", ServingConfig(tp_size=4, dp_size=2, moe_tuned=True))):
        model = CostModel(sc, cfg)
        capacity = plan_memory(model).max_total_num_tokens
        for n, rate in ((1000, 2.4), (4000, 2.4), (1000, 8.0)):
            rng = random.Random(1)
            spec = DatasetSpec("generated-shared-prefix", gsp_num_groups=n // 50, gsp_prompts_per_group=50,
                               gsp_system_prompt_len=12000, gsp_question_len=8000, gsp_output_len=1000)
            reqs = build_requests(spec, rng)
            t0 = time.perf_counter()
            result = simulate(model, reqs, arrival_times(len(reqs), rate, rng), capacity)
            wall = time.perf_counter() - t0
            out = sum(t.req.output_len for t in result.traces if not t.error)
            print(f"{name:<22} {n:>8} {rate:>5} {result.duration:>8.0f} {wall:>7.2f} {out / result.duration:>7.0f}")


if __name__ == "__main__":
    main()
