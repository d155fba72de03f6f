"""How fast the twin is: wall seconds of a twin launch and of production-workload benchmark runs (prints figures).

    python -m tests.benchmarks.twin_speed            # both
    python -m tests.benchmarks.twin_speed launch     # launch only
    python -m tests.benchmarks.twin_speed simulate   # benchmark simulation only

Not a test: speeds are measured here and reported, never asserted.
"""

from __future__ import annotations

import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from sandboxes.twin.engine.memory import plan_memory
from sandboxes.twin.perf.cost_model import CostModel
from sandboxes.twin.perf.serving_config import ServingConfig
from sandboxes.twin.perf.simulator import simulate
from sandboxes.twin.perf.workload import DatasetSpec, arrival_times, build_requests
from sandboxes.twin.scenario import load

READY = "The server is fired up and ready to roll!"
REPEATS = 5


def _launch_to_ready(ws: Path, port: int) -> float:
    """Wall seconds from starting ``launch_server`` (simulated time not slept) to its ready line."""
    env = {**os.environ, "TWIN_TIME_SCALE": "0"}
    argv = [sys.executable, "-m", "sandboxes.twin.launch_server", "--model-path", str(ws / "model"),
            "--tp-size", "8", "--port", str(port)]
    t0 = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            if READY in line:
                return time.perf_counter() - t0
        raise RuntimeError(f"launch_server exited {proc.wait()} before its ready line")
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def launch() -> None:
    """Launches of the default scenario as processes, to ready (the first loads the weights unless the per-user
    weight-load cache holds them; the rest find them in the workspace's)."""
    from sandboxes.twin.workspace.materialize import materialize

    with tempfile.TemporaryDirectory() as tmp:
        ws = Path(tmp) / "ws"
        materialize("glm52_mi355x", ws)
        index = ws / "model" / "model.safetensors.index.json"
        print(f"index {index.stat().st_size / 1e6:.1f} MB")
        launches = [_launch_to_ready(ws, 31000 + i) for i in range(REPEATS)]
        print(f"launch_server to ready        first {launches[0]:.3f} s  "
              f"median of the rest {statistics.median(launches[1:]):.3f} s")


def simulation() -> None:
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


def main() -> None:
    what = sys.argv[1] if len(sys.argv) > 1 else "all"
    if what in ("all", "launch"):
        launch()
    if what in ("all", "simulate"):
        simulation()


if __name__ == "__main__":
    main()
