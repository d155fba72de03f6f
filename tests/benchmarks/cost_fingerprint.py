"""Print the performance model's figures for the calibrated scenarios, computed in-process (no server).

    python -m tests.benchmarks.cost_fingerprint [--scenario glm52_mi355x] [--no-sim]

For a change to the performance model that must leave the calibrated scenarios where they are: run it before and
after and compare (``diff``). It calls what the server and ``bench_serving`` call (``server_args.resolve`` for the
flags, ``CostModel``, ``plan_memory``, ``simulate``) on the checkpoint's own weight bytes (the launcher uses the
engine's load report instead, so absolute figures may differ from a server's by the difference between the two),
and prints every figure with full precision, then one digest of all of them.
"""

from __future__ import annotations

import argparse
import hashlib
import random
import sys

from sandboxes.twin.engine import server_args
from sandboxes.twin.engine.memory import plan_memory
from sandboxes.twin.launch_server import config_from_args
from sandboxes.twin.perf.cost_model import TOKEN_NOISE, CostModel, single_stream_tpot
from sandboxes.twin.perf.serving_config import ServingConfig
from sandboxes.twin.perf.simulator import simulate
from sandboxes.twin.perf.workload import DatasetSpec, arrival_times, build_requests
from sandboxes.twin.scenario import load
from sandboxes.twin.workspace.materialize import build_config

SPEC_314 = ["--speculative-algorithm", "EAGLE", "--speculative-num-steps", "3", "--speculative-eagle-topk", "1",
            "--speculative-num-draft-tokens", "4"]  # fmt: skip
SPEC_516 = ["--speculative-algorithm", "EAGLE", "--speculative-num-steps", "5", "--speculative-eagle-topk", "1",
            "--speculative-num-draft-tokens", "6", "--kv-cache-dtype", "fp8_e4m3", "--enable-aiter-allreduce-fusion"]  # fmt: skip
INFERENCEX = ["--mem-fraction-static", "0.85", "--context-length", "9248", "--disable-radix-cache",
              "--kv-cache-dtype", "fp8_e4m3"]  # fmt: skip
CONFIGS: dict[str, tuple[list[str], bool]] = {  # name: (flags, MoE tuned)
    "TP4xDP2 tuned": (["--tp-size", "4", "--dp-size", "2"], True),
    "TP4xDP2 untuned": (["--tp-size", "4", "--dp-size", "2"], False),
    "TP8": (["--tp-size", "8"], False),
    "TP8 MTP 3/1/4": (["--tp-size", "8", *SPEC_314], False),
    "TP8 MTP 5/1/6 fp8 KV fusion": (["--tp-size", "8", *SPEC_516], False),
    "TP8xDP4 DP attention tuned": (["--tp-size", "8", "--dp-size", "4", "--enable-dp-attention"], True),
    "TP4 InferenceX fp8 KV": (["--tp-size", "4", *INFERENCEX], False),
    "TP4 InferenceX MTP 3/1/4": (["--tp-size", "4", *INFERENCEX, *SPEC_314, "--cuda-graph-max-bs", "64"], False),
}
SIMULATED = ("TP4xDP2 tuned", "TP4xDP2 untuned", "TP8")  # the production workload runs at 2.0 and 2.4 RPS


def serving_config(scenario, flags: list[str], tuned: bool) -> ServingConfig:
    """The configuration the launcher builds from these flags (``launch_server.config_from_args``)."""
    config = build_config(scenario)  # the config.json a workspace of this scenario has
    args = server_args.parse(["--model-path", "/nonexistent", *flags])
    model = server_args.ModelInfo.from_config(config, args.context_length)
    server_args.resolve(args, model, server_args.Platform.from_hardware(scenario.hardware), env={})
    return config_from_args(args, scenario.quantization.weight_format, config, tuned, environ={})


def figures(scenario, name: str, flags: list[str], tuned: bool, sim: bool) -> list[tuple[str, float]]:
    cfg = serving_config(scenario, flags, tuned)
    model = CostModel(scenario, cfg)
    plan = plan_memory(model)
    out: list[tuple[str, float]] = [("kv_token_bytes", model.kv_token_bytes),
                                    ("max_total_num_tokens", plan.max_total_num_tokens),
                                    ("kv_pool_bytes_per_gpu", plan.kv_pool_bytes_per_gpu)]  # fmt: skip
    tpv = model.tokens_per_verify()
    for batch, context in ((1, 11_000), (4, 9_000), (32, 20_000), (48, 20_000), (200, 20_000)):
        for term, value in model.decode_terms(batch, batch * context, tpv).items():
            out.append((f"decode b{batch} ctx{context} {term}", value))
        out.append((f"decode b{batch} ctx{context} total", model.decode(batch, batch * context, tpv).total))
    for prefix, new in ((0, 64), (0, 8_000), (12_000, 8_000), (0, 16_384)):
        step = model.prefill(new, [(prefix, new)])
        for term, value in step.__dict__.items():
            out.append((f"prefill {prefix}+{new} {term}", value))
    out.append(("accept length, token noise", model.accept_length(TOKEN_NOISE)))
    out.append(("single stream tok/s at 10k context", 1.0 / single_stream_tpot(model, 10_000)))
    if sim and name in SIMULATED:
        for rate in (2.0, 2.4):
            rng = random.Random(1)
            spec = DatasetSpec("generated-shared-prefix", gsp_num_groups=round(rate * 600 / 50), gsp_prompts_per_group=50,
                               gsp_system_prompt_len=12_000, gsp_question_len=8_000, gsp_output_len=1_000)  # fmt: skip
            reqs = build_requests(spec, rng)
            result = simulate(model, reqs, arrival_times(len(reqs), rate, rng), plan.max_total_num_tokens)
            ok = [t for t in result.traces if not t.error]
            ttfts = sorted(t.first_token - t.send for t in ok)
            out.append((f"production workload at {rate} RPS: tok/s", sum(t.req.output_len for t in ok) / result.duration))
            out.append((f"production workload at {rate} RPS: TTFT p50 s", ttfts[len(ttfts) // 2]))
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scenario", action="append", help="scenario name (default: glm52_mi355x, glm5_fp8_mi355x)")
    parser.add_argument("--no-sim", action="store_true", help="skip the simulated production-workload runs")
    args = parser.parse_args(argv)
    digest = hashlib.sha256()
    for name in args.scenario or ["glm52_mi355x", "glm5_fp8_mi355x"]:
        scenario = load(name)
        for config, (flags, tuned) in CONFIGS.items():
            for figure, value in figures(scenario, config, flags, tuned, not args.no_sim):
                line = f"{name:<16} {config:<30} {figure:<52} {value!r}"
                digest.update(line.encode())
                print(line)
    print(f"digest {digest.hexdigest()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
