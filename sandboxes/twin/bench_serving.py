"""``python -m sandboxes.twin.bench_serving``: the twin's stand-in for ``python3 -m sglang.bench_serving``.

It takes SGLang's flags, checks that the server is up (``/v1/models``), sends a real warm-up request, reads
the live configuration from ``/server_info`` and then runs the benchmark in virtual time with the twin's
discrete-event simulation (``simulator.py``). It prints SGLang's result table and appends one JSON line with
SGLang's keys to ``--output-file``, plus what only a simulation can tell: ``simulated``, the wall time the
simulation took, and where the simulated GPU time went (``gpu_time_breakdown``, ``bottleneck``). It also
reports two figures SGLang's client does not print, in their own section of the table marked as the twin's
addition and in the record: total (input + output) token throughput per GPU the server uses
(``total_throughput_per_gpu``, over ``gpus_used`` = tp x dp, or tp under DP attention) and per-user decode
speed (``tokens_per_s_per_user`` = 1000 / median TPOT), the metrics public per-GPU comparisons (InferenceX) use.
Same flags and seed, same result.
"""

from __future__ import annotations

import argparse
import bisect
import contextlib
import http.client
import json
import math
import os
import random
import signal
import sys
import time
import urllib.error
import urllib.request
from datetime import datetime
from typing import Any

from .engine import faults, serving_faults
from .perf.cost_model import CostModel
from .perf.serving_config import ServingConfig
from .perf.simulator import REFUSED, SimulationResult, simulate
from .perf.workload import DatasetSpec, arrival_times, build_requests, prompt_content
from .scenario import load

DATASETS = ["sharegpt", "custom", "openai", "random", "random-ids", "generated-shared-prefix", "mmmu", "image",
            "mooncake", "longbench_v2"]  # fmt: skip
SIMULATABLE = {"random", "random-ids", "generated-shared-prefix"}
BACKENDS = ["sglang", "sglang-native", "sglang-oai", "sglang-oai-chat", "vllm", "vllm-chat", "lmdeploy",
            "lmdeploy-chat", "trt", "gserver", "truss"]  # fmt: skip


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python3 -m sglang.bench_serving",
                                description="Benchmark the online serving throughput (simulated twin).")
    a = p.add_argument
    a("--backend", type=str, default="sglang", choices=BACKENDS)
    a("--base-url", type=str, default=None)
    a("--host", type=str, default="0.0.0.0")
    a("--port", type=int, default=None)
    a("--ready-check-timeout-sec", type=int, default=60)
    a("--dataset-name", type=str, default="sharegpt", choices=DATASETS)
    a("--dataset-path", type=str, default="")
    a("--model", type=str, default=None)
    a("--tokenizer", type=str, default=None)
    a("--num-prompts", type=int, default=1000)
    a("--random-input-len", type=int, default=1024)
    a("--random-output-len", type=int, default=1024)
    a("--random-range-ratio", type=float, default=0.0)
    a("--gsp-num-groups", type=int, default=64)
    a("--gsp-prompts-per-group", type=int, default=16)
    a("--gsp-system-prompt-len", type=int, default=2048)
    a("--gsp-question-len", type=int, default=128)
    a("--gsp-output-len", type=int, default=256)
    a("--gsp-range-ratio", type=float, default=1.0)  # 1.0, unlike the random dataset's 0.0, as in the release
    a("--request-rate", type=float, default=float("inf"))
    a("--max-concurrency", type=int, default=None)
    a("--output-file", type=str, default=None)
    a("--output-details", action="store_true")
    a("--disable-tqdm", action="store_true")
    a("--disable-stream", action="store_true")
    a("--disable-ignore-eos", action="store_true")
    a("--flush-cache", action="store_true")
    a("--seed", type=int, default=1)
    a("--warmup-requests", type=int, default=1)
    a("--extra-request-body", type=str, default=None)
    a("--tag", type=str, default=None)
    return p


class BenchError(RuntimeError):
    pass


# --- talking to the live server ------------------------------------------------------------------------------


def _get(url: str, timeout: float = 10.0) -> Any:
    with urllib.request.urlopen(url, timeout=timeout) as resp:
        return json.loads(resp.read() or b"null")


def _post(url: str, body: dict, timeout: float = 60.0) -> Any:
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as resp:
        return json.loads(resp.read() or b"null")


def wait_ready(base_url: str, timeout_s: int) -> None:
    url = f"{base_url}/v1/models"
    if timeout_s <= 0:
        return
    print(f"Waiting up to {timeout_s}s for {url} to become ready...")
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            _get(url, timeout=5)
            return
        except (urllib.error.URLError, OSError, ValueError):
            if time.monotonic() > deadline:
                print(f"Server did not become ready within {timeout_s}s timeout.")
                raise BenchError(f"Server at {base_url} is not ready. Exiting.") from None
            time.sleep(0.2)


# --- metrics, as bench_serving computes them -----------------------------------------------------------------


def percentile(values: list[float], q: float) -> float:
    """numpy.percentile with linear interpolation."""
    if not values:
        return 0.0
    s = sorted(values)
    pos = (len(s) - 1) * q / 100
    lo = math.floor(pos)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


def weighted_percentile(pairs: list[tuple[float, float]], q: float) -> float:
    """Percentile of a multiset given as (value, count) pairs, with numpy's linear interpolation."""
    pairs = sorted(p for p in pairs if p[1] > 0)
    total = sum(w for _, w in pairs)
    if total <= 0:
        return 0.0
    pos = (total - 1) * q / 100
    seen, cums = 0.0, []
    for _, w in pairs:
        seen += w
        cums.append(seen)

    def at(rank: float) -> float:  # the first value whose running count passes rank
        i = bisect.bisect_right(cums, rank)
        return pairs[i][0] if i < len(pairs) else pairs[-1][0]

    lo = math.floor(pos)
    return at(lo) + (at(lo + 1) - at(lo)) * (pos - lo)


def _mean_std(values: list[float]) -> tuple[float, float]:
    if not values:
        return 0.0, 0.0
    m = sum(values) / len(values)
    return m, math.sqrt(sum((v - m) ** 2 for v in values) / len(values))


def metrics(result: SimulationResult) -> dict[str, Any]:
    ok = [t for t in result.traces if not t.error and t.done is not None]
    dur = max(result.duration, 1e-9)
    ttfts = [t.first_token - t.send for t in ok]
    e2e = [t.done - t.send for t in ok]
    tpots = [(t.done - t.first_token) / (t.req.output_len - 1) for t in ok if t.req.output_len > 1]
    acc = result.accept_length
    itl = [(gap / acc, w * acc) for gap, w in result.itl] if acc > 1 else list(result.itl)
    itl_total = sum(w for _, w in itl) or 1.0
    itl_mean = sum(v * w for v, w in itl) / itl_total
    itl_std = math.sqrt(sum(w * (v - itl_mean) ** 2 for v, w in itl) / itl_total)
    total_in = sum(t.req.input_len for t in result.traces)
    total_out = sum(t.req.output_len for t in ok)
    ms = 1000.0
    mt, st = _mean_std(ttfts)
    mp, sp = _mean_std(tpots)
    me, se = _mean_std(e2e)
    return {
        "completed": len(ok),
        "total_input_tokens": total_in,
        "total_input_text_tokens": total_in,
        "total_input_vision_tokens": 0,
        "total_output_tokens": total_out,
        "total_output_tokens_retokenized": total_out,
        "request_throughput": len(ok) / dur,
        "input_throughput": total_in / dur,
        "output_throughput": total_out / dur,
        "total_throughput": (total_in + total_out) / dur,
        "mean_e2e_latency_ms": me * ms,
        "median_e2e_latency_ms": percentile(e2e, 50) * ms,
        "std_e2e_latency_ms": se * ms,
        "p90_e2e_latency_ms": percentile(e2e, 90) * ms,
        "p99_e2e_latency_ms": percentile(e2e, 99) * ms,
        "mean_ttft_ms": mt * ms,
        "median_ttft_ms": percentile(ttfts, 50) * ms,
        "std_ttft_ms": st * ms,
        "p99_ttft_ms": percentile(ttfts, 99) * ms,
        "p95_ttft_ms": percentile(ttfts, 95) * ms,
        "mean_tpot_ms": mp * ms,
        "median_tpot_ms": percentile(tpots, 50) * ms,
        "std_tpot_ms": sp * ms,
        "p99_tpot_ms": percentile(tpots, 99) * ms,
        "mean_itl_ms": itl_mean * ms,
        "median_itl_ms": weighted_percentile(itl, 50) * ms,
        "std_itl_ms": itl_std * ms,
        "p95_itl_ms": weighted_percentile(itl, 95) * ms,
        "p99_itl_ms": weighted_percentile(itl, 99) * ms,
        "max_itl_ms": max((v for v, _ in itl), default=0.0) * ms,
        "concurrency": sum(e2e) / dur,
        "max_concurrent_requests": _peak_concurrency(ok),
        "max_output_tokens_per_s": _peak_output_rate(ok),
        "failed": len(result.traces) - len(ok),
        "errors": sorted({t.error for t in result.traces if t.error}),
    }


def _peak_concurrency(ok: list) -> int:
    events = sorted([(t.send, 1) for t in ok] + [(t.done, -1) for t in ok])
    peak = cur = 0
    for _, d in events:
        cur += d
        peak = max(peak, cur)
    return peak


def _peak_output_rate(ok: list) -> float:
    """Highest output tokens in any 1-s bucket, each request's tokens spread over its decode time. A request adds
    its rate to every whole second it decodes through (a running sum of where each rate starts and stops), and a
    share of it to the seconds where it starts and ends."""
    if not ok:
        return 0.0
    end = int(max(t.done for t in ok)) + 2
    buckets = [0.0] * end
    steps = [0.0] * (end + 1)  # rate changes at whole seconds
    for t in ok:
        start, stop = t.first_token, max(t.done, t.first_token + 1e-9)
        rate = t.req.output_len / (stop - start)
        first, last = int(start), int(stop)
        if first == last:
            buckets[first] += rate * (stop - start)
            continue
        buckets[first] += rate * (first + 1 - start)
        buckets[last] += rate * (stop - last)
        steps[first + 1] += rate
        steps[last] -= rate
    running = 0.0
    for s in range(end):
        running += steps[s]
        buckets[s] += running
    return max(buckets)


BREAKDOWN_NAMES = {
    "prefill_attention": "prefill attention",
    "prefill_moe": "prefill MoE",
    "prefill_dense": "prefill dense layers",
    "decode": "decode (weights and KV reads)",
    "communication": "TP communication",
    "overhead": "kernel launch and scheduling",
    "idle": "idle",
}


def breakdown(result: SimulationResult) -> tuple[dict[str, Any], str]:
    total = sum(result.breakdown.values()) or 1.0
    share = {k: round(result.breakdown.get(k, 0.0) / total, 4) for k in BREAKDOWN_NAMES}
    seconds = {k: round(result.breakdown.get(k, 0.0), 3) for k in BREAKDOWN_NAMES}
    busy = {k: v for k, v in share.items() if k != "idle"}
    top = max(busy, key=busy.get) if busy else "idle"
    return {"share": share, "rank_seconds": seconds}, BREAKDOWN_NAMES[top]


# --- the run ---------------------------------------------------------------------------------------------------


def _server_dies_halfway(result: SimulationResult, twin: dict, base_url: str) -> None:
    """The injected ``crash_mid_benchmark``: the server is killed halfway through the run; requests in flight then
    fail as aiohttp reports a dropped connection, later ones as a refused one (SGLang's bench_serving records
    both as failed requests and still reports the run)."""
    print(f"{faults.SIMULATED}: crash_mid_benchmark", flush=True)
    t_crash = result.duration / 2
    host = base_url.split("://", 1)[-1]
    for tr in result.traces:
        if tr.error or tr.done is None or tr.done <= t_crash:
            continue
        if tr.send < t_crash:
            tr.error = "aiohttp.client_exceptions.ServerDisconnectedError: Server disconnected"
        else:
            tr.error = f"aiohttp.client_exceptions.ClientConnectorError: Cannot connect to host {host} ssl:default"
    if pid := twin.get("pid"):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(int(pid), signal.SIGKILL)


def fault_watch(scenario: Any, cfg: ServingConfig, twin: dict, server_args: dict | None = None) -> serving_faults.FaultWatch:
    """What can fail while this server serves: the node's defects, and the memory its plan left (a server that does
    not publish its plan, from an older twin, is checked against the defects only)."""
    memory = twin.get("memory")
    # a server from an older twin publishes no plan, or one without its activations per token
    step_memory = serving_faults.StepMemory.from_twin(memory, scenario.model.vocab_size) \
        if memory and "activation_per_token" in memory else None  # fmt: skip
    return serving_faults.FaultWatch(scenario, cfg, step_memory, server_args)


SERVER_GONE_WAIT_S = 30.0  # how long the client waits, in wall seconds, for a failing server to be gone


def _server_fails(result: SimulationResult, twin: dict, base_url: str) -> None:
    """The simulation reached a step the engine cannot run: hand the failure to the server, which prints what SGLang
    prints and dies (or stops answering), and wait for that as the real client would: its requests in flight end
    when the server goes. A server that never goes leaves them waiting forever, as aiohttp's 6-hour timeout would."""
    f = result.fault
    host = base_url.split("://", 1)[-1]
    for tr in result.traces:
        if tr.error == REFUSED:
            tr.error = REFUSED.format(host=host)
    gone = "never" if result.death is None else f"{result.death:.1f} s"
    print(f"dayzero digital twin (simulated): the server failed at {f.at:.1f} s of the benchmark ({f.kind}); "
          f"gone at {gone}", flush=True)
    try:
        _post(f"{base_url}/_twin/serving_fault", f.to_dict(), timeout=10)
    except (urllib.error.URLError, OSError, ValueError, http.client.HTTPException):
        return  # it is gone already
    if result.death is None:
        while True:
            time.sleep(3600)
    deadline = time.monotonic() + (f.death_after or 0.0) * float(twin.get("time_scale") or 0.0) + SERVER_GONE_WAIT_S
    while time.monotonic() < deadline:
        try:
            _get(f"{base_url}/v1/models", timeout=2)
        except (urllib.error.URLError, OSError, ValueError, http.client.HTTPException):  # gone, or going mid-answer
            return
        time.sleep(0.05)


def run(args: argparse.Namespace) -> dict[str, Any]:
    if args.dataset_name not in SIMULATABLE:
        raise BenchError(
            f"dataset {args.dataset_name!r} needs a dataset file or hub access; the twin simulates "
            f"{', '.join(sorted(SIMULATABLE))}"
        )
    port = args.port or 30000
    base_url = args.base_url.rstrip("/") if args.base_url else f"http://{args.host}:{port}"
    spec = DatasetSpec(
        name=args.dataset_name, num_prompts=args.num_prompts, random_input_len=args.random_input_len,
        random_output_len=args.random_output_len, random_range_ratio=args.random_range_ratio,
        gsp_num_groups=args.gsp_num_groups, gsp_prompts_per_group=args.gsp_prompts_per_group,
        gsp_system_prompt_len=args.gsp_system_prompt_len, gsp_question_len=args.gsp_question_len,
        gsp_output_len=args.gsp_output_len, gsp_range_ratio=args.gsp_range_ratio,
    )  # fmt: skip
    rng = random.Random(args.seed)
    requests = build_requests(spec, rng)
    if args.dataset_name in ("random", "random-ids"):  # sample_random_requests prints these as it samples
        print(f"#Input tokens: {sum(r.input_len for r in requests)}")
        print(f"#Output tokens: {sum(r.output_len for r in requests)}")
    wait_ready(base_url, args.ready_check_timeout_sec)
    print(f"Starting warmup with {args.warmup_requests} sequences...")
    try:
        for _ in range(max(args.warmup_requests, 0)):
            _post(f"{base_url}/generate", {"text": "Warm-up request.", "sampling_params": {"max_new_tokens": 8}})
    except (urllib.error.URLError, OSError) as exc:
        raise BenchError(f"Warmup failed - Please make sure benchmark arguments are correctly specified. Error: {exc}") from None
    print(f"Warmup completed with {args.warmup_requests} sequences. Starting main benchmark run...")
    if args.flush_cache:
        urllib.request.urlopen(urllib.request.Request(f"{base_url}/flush_cache", data=b"", method="POST"), timeout=10)
    info = _get(f"{base_url}/server_info")
    twin = info.get("twin") if isinstance(info, dict) else None
    if not twin or not twin.get("simulated"):
        raise BenchError("the server is not a dayzero twin: use SGLang's own bench_serving against a real engine")
    try:
        fault = faults.due("benchmark", twin["scenario_path"])
    except faults.FaultSpecError as exc:
        raise BenchError(str(exc)) from None
    if fault == "bench_hang":
        print(f"{faults.SIMULATED}: bench_hang", flush=True)
        while True:
            time.sleep(3600)
    scenario = load(twin["scenario_path"])
    cfg = ServingConfig.from_dict(twin["serving_config"])
    model = CostModel(scenario, cfg, twin.get("weight_bytes"), twin.get("draft_weight_bytes"))
    if twin.get("max_total_num_tokens"):
        kv_capacity, mamba_slots = int(twin["max_total_num_tokens"]), twin.get("max_mamba_cache_size")
    else:  # a server from an older twin publishes no plan
        from .engine.memory import plan_memory

        plan = plan_memory(model)
        kv_capacity, mamba_slots = plan.max_total_num_tokens, plan.max_mamba_cache_size
    arrivals = arrival_times(len(requests), args.request_rate, rng)
    wall = time.perf_counter()
    content = prompt_content(args.dataset_name, args.backend)
    result = simulate(model, requests, arrivals, kv_capacity, args.max_concurrency, content, mamba_slots,
                      watch=fault_watch(scenario, cfg, twin, info))
    if fault == "crash_mid_benchmark":
        _server_dies_halfway(result, twin, base_url)
    if result.fault is not None:
        _server_fails(result, twin, base_url)
    wall = time.perf_counter() - wall
    m = metrics(result)
    gpu_time, bottleneck = breakdown(result)
    # the accept length these prompts got (the server's own figure is for natural text)
    accept = round(result.accept_length, 3) if cfg.speculative else None
    record: dict[str, Any] = {
        "tag": args.tag,
        "backend": args.backend,
        "dataset_name": args.dataset_name,
        "request_rate": args.request_rate,
        "max_concurrency": args.max_concurrency,
        "sharegpt_output_len": None,
        "random_input_len": args.random_input_len,
        "random_output_len": args.random_output_len,
        "random_range_ratio": args.random_range_ratio,
        # the configuration, not the live schedulers' counters at the moment it was read (same flags, same record)
        "server_info": {**info, "twin": {k: v for k, v in twin.items() if k != "live_scheduler"}},
        "duration": result.duration,
    }
    record.update({k: v for k, v in m.items() if k not in ("failed", "errors", "p95_ttft_ms", "max_itl_ms")})
    record["accept_length"] = accept
    record.update({
        "simulated": True,
        "simulated_duration_s": result.duration,
        "wall_duration_s": round(wall, 3),
        "p95_ttft_ms": m["p95_ttft_ms"],
        "max_itl_ms": m["max_itl_ms"],
        "failed": m["failed"],
        "errors": m["errors"],
        "gpu_time_breakdown": gpu_time,
        "bottleneck": bottleneck,
        "twin_scenario": twin.get("scenario"),
        "prompt_content": content,
        "seed": args.seed,
        "num_prompts": len(requests),
        # the twin's additions for per-GPU comparisons (InferenceX's metrics): SGLang prints neither
        "gpus_used": cfg.gpus_used,
        "total_throughput_per_gpu": m["total_throughput"] / cfg.gpus_used,
        "output_throughput_per_gpu": m["output_throughput"] / cfg.gpus_used,
        "tokens_per_s_per_user": 1000.0 / m["median_tpot_ms"] if m["median_tpot_ms"] > 0 else 0.0,
        # what SGLang logs as "KV cache pool is full. Retract requests." (the scheduler's warning), summed
        "retracted_requests": result.retracted,
    })  # fmt: skip
    if result.fault is not None:  # the twin's addition: when and how the server failed under this load
        record["serving_failure"] = {"kind": result.fault.kind, "at_s": round(result.fault.at, 3),
                                     "server_gone_s": None if result.death is None else round(result.death, 3),
                                     "allreduce_path": result.fault.path}  # fmt: skip
    print_table(args, record)
    out = args.output_file or f"{args.backend}_{datetime.now().strftime('%m%d')}_{args.num_prompts}_sim.jsonl"
    with open(out, "a") as f:
        f.write(json.dumps(record) + "\n")
    return record


def print_table(args: argparse.Namespace, r: dict[str, Any]) -> None:
    row = "{:<40} {:<10}".format
    rowf = "{:<40} {:<10.2f}".format
    print("\n{s:{c}^{n}}".format(s=" Serving Benchmark Result ", n=50, c="="))
    print(row("Backend:", args.backend))
    print(row("Traffic request rate:", args.request_rate))
    print(row("Max request concurrency:", args.max_concurrency if args.max_concurrency else "not set"))
    print(row("Successful requests:", r["completed"]))
    print(rowf("Benchmark duration (s):", r["duration"]))
    print(row("Total input tokens:", r["total_input_tokens"]))
    print(row("Total input text tokens:", r["total_input_text_tokens"]))
    print(row("Total generated tokens:", r["total_output_tokens"]))
    print(row("Total generated tokens (retokenized):", r["total_output_tokens_retokenized"]))
    print(rowf("Request throughput (req/s):", r["request_throughput"]))
    print(rowf("Input token throughput (tok/s):", r["input_throughput"]))
    print(rowf("Output token throughput (tok/s):", r["output_throughput"]))
    print(rowf("Peak output token throughput (tok/s):", r["max_output_tokens_per_s"]))
    print(row("Peak concurrent requests:", r["max_concurrent_requests"]))
    print(rowf("Total token throughput (tok/s):", r["total_throughput"]))
    print(rowf("Concurrency:", r["concurrency"]))
    if r.get("accept_length"):
        print(rowf("Accept length:", r["accept_length"]))
    for title, rows in (
        ("End-to-End Latency", [("Mean E2E Latency (ms):", "mean_e2e_latency_ms"),
                                ("Median E2E Latency (ms):", "median_e2e_latency_ms"),
                                ("P90 E2E Latency (ms):", "p90_e2e_latency_ms"),
                                ("P99 E2E Latency (ms):", "p99_e2e_latency_ms")]),
        ("Time to First Token", [("Mean TTFT (ms):", "mean_ttft_ms"), ("Median TTFT (ms):", "median_ttft_ms"),
                                 ("P99 TTFT (ms):", "p99_ttft_ms")]),
        ("Time per Output Token (excl. 1st token)", [("Mean TPOT (ms):", "mean_tpot_ms"),
                                                      ("Median TPOT (ms):", "median_tpot_ms"),
                                                      ("P99 TPOT (ms):", "p99_tpot_ms")]),
        ("Inter-Token Latency", [("Mean ITL (ms):", "mean_itl_ms"), ("Median ITL (ms):", "median_itl_ms"),
                                 ("P95 ITL (ms):", "p95_itl_ms"), ("P99 ITL (ms):", "p99_itl_ms"),
                                 ("Max ITL (ms):", "max_itl_ms")]),
    ):  # fmt: skip
        print("{s:{c}^{n}}".format(s=title, n=50, c="-"))
        for label, key in rows:
            print(rowf(label, r[key]))
    print("{s:{c}^{n}}".format(s="Simulated GPU time (twin)", n=50, c="-"))
    for key, share in r["gpu_time_breakdown"]["share"].items():
        print(row(f"{BREAKDOWN_NAMES[key]}:", f"{share * 100:.1f} %"))
    print(row("Bottleneck:", r["bottleneck"]))
    print(rowf("Simulation wall time (s):", r["wall_duration_s"]))
    print("{s:{c}^{n}}".format(s="Per GPU and per user (twin addition)", n=50, c="-"))
    print(row("GPUs used by the server:", r["gpus_used"]))
    print(rowf("Total token throughput per GPU (tok/s):", r["total_throughput_per_gpu"]))
    print(rowf("Output tok/s per user (1000/med TPOT):", r["tokens_per_s_per_user"]))
    print("=" * 50)
    hardware = ((r.get("server_info") or {}).get("twin") or {}).get("hardware") or "a GPU node"
    print(f"SIMULATED: dayzero digital twin of {hardware}, virtual time; not a measurement of real hardware.")


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    print(f"benchmark_args={args}")
    try:
        run(args)
    except BenchError as exc:
        print(str(exc), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
