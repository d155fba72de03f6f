"""Trials per hour, sequential vs Ray with 1, 2 and 4 workers (nodes), for a sweep of twin trials.

    python -m tests.benchmarks.ray_scaling

Each trial (launch + a knee search of the production workload) is run once for real on the twin, which
reports the node time it would take on an MI355X node (simulated start-up + benchmark durations). The sweep's
node-time makespan on W nodes is then what Ray's scheduler does with those trials: each trial holds a whole
node (``mi355x_gpu: 8``), the next trial starts on the first node that frees up. That is the speed-up a
cluster gets; the wall time here (2 cores, all "nodes" on one machine) is printed beside it for honesty.
"""

from __future__ import annotations

import heapq
import tempfile
import time
from pathlib import Path

from sandboxes.executors import InlineExecutor, RayExecutor
from sandboxes.local import LocalSandbox
from sandboxes.twin.workspace.materialize import materialize
from tools.trials import TrialJob, TrialSpec, gpus_of, run_trial

TASK = Path(__file__).resolve().parents[2] / "tasks" / "glm52_mi355x.yaml"
SWEEP = [
    {"tp-size": 8}, {"tp-size": 4, "dp-size": 2}, {"tp-size": 2, "dp-size": 4},
    {"tp-size": 8, "dp-size": 2, "enable-dp-attention": True}, {"tp-size": 8, "dp-size": 4, "enable-dp-attention": True},
    {"tp-size": 4, "dp-size": 2, "kv-cache-dtype": "fp8_e4m3"}, {"tp-size": 4, "dp-size": 2, "enable-aiter-allreduce-fusion": True},
    {"tp-size": 4, "dp-size": 2, "mem-fraction-static": 0.93},
]  # fmt: skip


def makespan(durations: list[float], workers: int) -> float:
    free = [0.0] * workers
    heapq.heapify(free)
    end = 0.0
    for d in durations:
        start = heapq.heappop(free)
        heapq.heappush(free, start + d)
        end = max(end, start + d)
    return end


def main() -> None:
    root = Path(tempfile.mkdtemp())
    ws = root / "workspace"
    materialize("glm52_mi355x", ws)
    LocalSandbox(ws).prepare({"model": ws / "model", "sglang": ws / "sglang"})
    jobs = [TrialJob(job_id=f"t{i}", task_path=str(TASK), engine_name="twin", workspace=str(ws), run_dir=str(root),
                     spec=TrialSpec(flags=f, env={"TWIN_TIME_SCALE": "0"}, workload="throughput", measure="knee",
                                    start_rate=1.5, resolution=0.2))
            for i, f in enumerate(SWEEP)]  # fmt: skip
    gpus = [min(gpus_of(j.spec.flags), 8) for j in jobs]
    t0 = time.perf_counter()
    outcomes = InlineExecutor().map(run_trial, jobs, gpus)
    wall_seq = time.perf_counter() - t0
    hours = [(o.cost.simulated_seconds or 0.0) / 3600 for o in outcomes]
    print(f"{len(jobs)} trials; node-hours each: {', '.join(f'{h:.2f}' for h in hours)}")
    print(f"{'executor':<16} {'workers':>7} {'makespan (node h)':>18} {'trials/hour':>12} {'speed-up':>9} {'wall s here':>12}")
    seq = sum(hours)
    print(f"{'sequential':<16} {1:>7} {seq:>18.2f} {len(jobs) / seq:>12.2f} {1.0:>9.2f} {wall_seq:>12.1f}")
    for w in (1, 2, 4):
        ex = RayExecutor(resource="mi355x_gpu", node_gpus=8, nodes=w)
        t0 = time.perf_counter()
        remote = ex.map(run_trial, jobs, gpus)
        wall = time.perf_counter() - t0
        ex.close()
        same = [round(o.value, 6) for o in remote] == [round(o.value, 6) for o in outcomes]
        span = makespan(hours, w)
        print(f"{'ray':<16} {w:>7} {span:>18.2f} {len(jobs) / span:>12.2f} {seq / span:>9.2f} {wall:>12.1f}"
              + ("" if same else "  RESULTS DIFFER"))
    print(f"scaling stops at {len(jobs)} workers (one trial each); the longest trial bounds the makespan at "
          f"{max(hours):.2f} node h ({len(jobs) / max(hours):.1f} trials/hour at most for this sweep)")


if __name__ == "__main__":
    main()
