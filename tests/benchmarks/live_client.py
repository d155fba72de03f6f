"""The release's own ``bench_serving`` against the live twin, beside the twin's virtual-time benchmark (prints figures).

    python -m tests.benchmarks.live_client                      # 5 configurations x concurrency 1..256
    python -m tests.benchmarks.live_client --scale 0.5 --concurrencies 1,16,128 --output-len 256
    python -m tests.benchmarks.live_client --task tasks/glm52_mi355x.yaml --configs tp8,tp8-mtp3   # its workloads

For each configuration a twin server is launched serving at ``--scale`` wall seconds per simulated second (its
start-up not slept); at each fixed concurrency the workspace's ``bench_serving.py`` runs through
``sandboxes.twin.release_bench`` (real HTTP, wall clock, the record converted to simulated time, the radix cache
flushed first), then the twin's own benchmark runs on the same server in virtual time with the same flags and
seed. The table gives both, their ratio and whether the configurations rank the same way. The ranking test
(``tests/twin/test_release_client.py``) uses ``compare``.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

READY = "The server is fired up and ready to roll!"
METRICS = ("output_throughput", "median_ttft_ms", "median_tpot_ms")
# GLM-5.2's layouts and MTP, which rank differently with load (MTP wins one stream, DP attention a crowd)
CONFIGS: dict[str, list[str]] = {
    "tp8": ["--tp-size", "8"],
    "tp8-dpa8": ["--tp-size", "8", "--dp-size", "8", "--enable-dp-attention"],
    "tp8-mtp3": ["--tp-size", "8", "--speculative-algorithm", "EAGLE", "--speculative-num-steps", "3",
                 "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "4"],
    "tp4-dp2": ["--tp-size", "4", "--dp-size", "2"],
    "tp2-dp4": ["--tp-size", "2", "--dp-size", "4"],
}  # fmt: skip


@dataclass
class Point:
    config: str
    concurrency: int
    live: dict[str, float]
    virtual: dict[str, float]
    host_lag_ms: float

    @classmethod
    def of(cls, config: str, concurrency: int, live: dict, virtual: dict) -> Point:
        """From the two records (the live one's ``host_lag_ms``)."""
        return cls(config, concurrency, {m: float(live[m]) for m in METRICS},
                   {m: float(virtual[m]) for m in METRICS}, float(live["host_lag_ms"]))  # fmt: skip

    def ratio(self, metric: str) -> float:
        return self.live[metric] / self.virtual[metric] if self.virtual[metric] else float("nan")


class Launched:
    def __init__(self, ws: Path, flags: list[str], scale: float, log: Path, port: int) -> None:
        env = {**os.environ, "TWIN_TIME_SCALE": str(scale), "TWIN_STARTUP_TIME_SCALE": "0"}
        self.url = f"http://127.0.0.1:{port}"
        self.log = log
        with open(log, "w") as f:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "sandboxes.twin.launch_server", "--model-path", str(ws / "model"),
                 "--sglang-root", str(ws / "sglang"), "--host", "127.0.0.1", "--port", str(port), *flags],
                stdout=f, stderr=subprocess.STDOUT, env=env)  # fmt: skip
        deadline = time.monotonic() + 120
        while READY not in log.read_text():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.close()
                raise RuntimeError(f"the twin did not start ({flags}):\n{log.read_text()[-2000:]}")
            time.sleep(0.1)

    def close(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()


@dataclass(frozen=True)
class Workload:
    """``random-ids`` prompts at fixed concurrencies. Lengths vary (``range_ratio`` < 1), as real prompts do: with
    every request the same length, the virtual client (no time between a request's end and the next one's
    send) keeps the requests of a queued crowd in lockstep waves, whose decode steps never meet a new prefill;
    any wall-clock client spreads them (measured: TPOT 15.3 ms virtual against 20.1 ms live at ratio 1, 25.7
    against 27.1 at 0.8, for MTP at 256 in flight with 48 running)."""

    input_len: int = 1024
    output_len: int = 128
    range_ratio: float = 0.8
    waves: int = 2  # prompts per run = waves x concurrency (``single`` at concurrency 1)
    single: int = 4
    seed: int = 1

    def flags(self, concurrency: int) -> list[str]:
        prompts = self.single if concurrency == 1 else self.waves * concurrency
        return ["--dataset-name", "random-ids", "--random-input-len", str(self.input_len),
                "--random-output-len", str(self.output_len), "--random-range-ratio", str(self.range_ratio),
                "--num-prompts", str(prompts), "--max-concurrency", str(concurrency), "--seed", str(self.seed)]  # fmt: skip


def _record(path: Path) -> dict:
    return json.loads(path.read_text().strip().splitlines()[-1])


def measure(ws: Path, url: str, workload_flags: list[str], tmp: Path, tag: str) -> tuple[dict, dict]:
    """(the release client's record in simulated time, the twin's virtual-time record) of one workload."""
    flags = ["--backend", "sglang", *workload_flags, "--base-url", url]
    live_out, virtual_out = tmp / f"live-{tag}.jsonl", tmp / f"virtual-{tag}.jsonl"
    for out in (live_out, virtual_out):
        out.unlink(missing_ok=True)
    live = subprocess.run([sys.executable, "-m", "sandboxes.twin.release_bench", "--sglang-root", str(ws / "sglang"),
                           *flags, "--flush-cache", "--disable-tqdm", "--output-file", str(live_out)],
                          capture_output=True, text=True, timeout=600)  # fmt: skip
    if live.returncode != 0 or not live_out.exists():
        raise RuntimeError(f"the release's bench_serving failed (exit {live.returncode}):\n{live.stderr[-3000:]}")
    from sandboxes.twin import (
        bench_serving,  # in this process: it only reads the server's plan, then simulates
    )

    with contextlib.redirect_stdout(io.StringIO()):
        bench_serving.run(bench_serving.build_parser().parse_args([*flags, "--output-file", str(virtual_out)]))
    return _record(live_out), _record(virtual_out)


def compare(ws: Path, configs: dict[str, list[str]], concurrencies: list[int], scale: float, workload: Workload,
            tmp: Path, port: int, progress=print) -> list[Point]:  # fmt: skip
    points = []
    for name, flags in configs.items():
        server = Launched(ws, flags, scale, tmp / f"server-{name}.log", port)
        try:
            for c in concurrencies:
                live, virtual = measure(ws, server.url, workload.flags(c), tmp, f"{name}-{c}")
                point = Point.of(name, c, live, virtual)
                points.append(point)
                progress(_row(point))
        finally:
            server.close()
    return points


def task_workloads(ws: Path, task: Path, configs: dict[str, list[str]], scale: float, rate: float,
                   duration_s: float, tmp: Path, port: int, progress=print) -> list[tuple[str, str, dict, dict]]:  # fmt: skip
    """Both clients on a task's own workloads (``tools.bench.workload_flags``, as the agent sends them; a rate
    workload at ``rate`` for ``duration_s`` simulated seconds): (config, workload, live record, virtual record)."""
    from tasks.spec import load_task
    from tools.bench import workload_flags

    spec = load_task(task)
    out = []
    for name, flags in configs.items():
        server = Launched(ws, flags, scale, tmp / f"server-{name}.log", port)
        try:
            for wname, w in spec.workloads.items():
                argv, _ = workload_flags(w, rate if w.duration_s else None, duration_s, seed=1)
                live, virtual = measure(ws, server.url, [*argv, "--flush-cache"], tmp, f"{name}-{wname}")
                out.append((name, wname, live, virtual))
                point = Point.of(name, 0, live, virtual)
                progress(_row(point, f"{name:<10} {wname:<14}"))
        finally:
            server.close()
    return out


def ranking(points: list[Point], side: str, concurrency: int, metric: str = "output_throughput") -> list[str]:
    """The configurations at one concurrency, best first by ``metric`` (``side``: live or virtual)."""
    at = [p for p in points if p.concurrency == concurrency]
    return [p.config for p in sorted(at, key=lambda p: -getattr(p, side)[metric])]


def _row(p: Point, label: str | None = None) -> str:
    cells = [label or f"{p.config:<10} c={p.concurrency:<4}"]
    for m in METRICS:
        cells.append(f"{m.replace('median_', '')}: {p.live[m]:9.1f} / {p.virtual[m]:9.1f} ({p.ratio(m):5.2f}x)")
    cells.append(f"lag {p.host_lag_ms:6.2f} ms")
    return "  ".join(cells)


def main() -> None:
    from sandboxes.twin.workspace.materialize import materialize
    from tests.twin.conftest import MTP_ENGINE_NAMES, free_port

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scale", type=float, default=0.5, help="TWIN_TIME_SCALE of the live servers")
    ap.add_argument("--concurrencies", default="1,8,64,256")
    ap.add_argument("--configs", default=",".join(CONFIGS))
    ap.add_argument("--input-len", type=int, default=1024)
    ap.add_argument("--output-len", type=int, default=128)
    ap.add_argument("--range-ratio", type=float, default=0.8)
    ap.add_argument("--waves", type=int, default=2)
    ap.add_argument("--task", default=None, help="instead of the sweep: this task's own workloads (e.g. "
                    "tasks/glm52_mi355x.yaml), a rate workload at --rate for --duration simulated seconds")
    ap.add_argument("--rate", type=float, default=2.0)
    ap.add_argument("--duration", type=float, default=120.0)
    a = ap.parse_args()
    workload = Workload(a.input_len, a.output_len, a.range_ratio, a.waves)
    concurrencies = [int(c) for c in a.concurrencies.split(",")]
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        ws = tmp / "ws"
        materialize("glm52_mi355x", ws)  # GLM-5.2 with both published fixes (its MTP served)
        cfg_path = ws / "model" / "config.json"
        cfg = json.loads(cfg_path.read_text())
        cfg["quantization_config"]["exclude"] += MTP_ENGINE_NAMES
        cfg_path.write_text(json.dumps(cfg))
        kernel = ws / "sglang/python/sglang/jit_kernel/csrc/elementwise/fused_metadata_copy.cuh"
        kernel.write_text(kernel.read_text().replace("#include <cuda_runtime.h>",
                                                     "#ifndef USE_ROCM\n#include <cuda_runtime.h>\n#endif", 1))  # fmt: skip
        configs = {k: CONFIGS[k] for k in a.configs.split(",")}
        if a.task:
            print(f"release bench_serving (live, time scale {a.scale:g}) / twin's virtual bench_serving; "
                  f"{a.task}'s workloads (rate {a.rate:g} req/s for {a.duration:g} s)")
            task_workloads(ws, Path(a.task), configs, a.scale, a.rate, a.duration, tmp, free_port())
            return
        print(f"release bench_serving (live, time scale {a.scale:g}) / twin's virtual bench_serving; "
              f"{workload}")
        points = compare(ws, configs, concurrencies, a.scale, workload, tmp, free_port())
    print()
    for c in concurrencies:
        live, virtual = ranking(points, "live", c), ranking(points, "virtual", c)
        print(f"c={c:<4} ranking live {' > '.join(live)}; virtual {' > '.join(virtual)}"
              f"{'' if live == virtual else '  DIFFERENT'}")
    for m in METRICS:
        ratios = [p.ratio(m) for p in points]
        print(f"{m}: live/virtual from {min(ratios):.3f} to {max(ratios):.3f}")


if __name__ == "__main__":
    main()
