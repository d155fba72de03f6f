"""Print the twin beside InferenceX's public GLM-5 FP8 on MI355X measurements (issue 10's calibration points).

    python -m tests.benchmarks.inferencex_calibration            # these points, then the published case
    python -m tests.benchmarks.inferencex_calibration --only-inferencex

For each point of the published table it launches a real twin server on the calibration scenario
``glm5_fp8_mi355x`` (GLM-5 FP8, 8x MI355X, SGLang 0.5.12; TP4 runs see 4 of the node's 8 GPUs through
``HIP_VISIBLE_DEVICES``, as a 4-GPU job on the node does) with the server flags of InferenceX's scripts
(``server_flags``), and runs the twin's ``bench_serving`` the way InferenceX's client does (``workload``): prompts of
consecutive token ids, input and output lengths uniform in 0.8-1.0x of 8192 / 1024 (``--random-range-ratio 0.8``),
``--max-concurrency C`` with ``10 x C`` prompts, the chat template on the MTP runs. Figures: tok/s/GPU = (input + output) tok/s / GPUs used, tok/s/user = 1000 / median
TPOT. The "decode step" columns split one decode (verify) step of the running batch at that point into the
performance model's terms (``CostModel.decode_terms``) and name the largest; "run" is where the whole run's
simulated GPU time went (prefill included), as ``bench_serving`` reports it.

``tests/twin/test_public_calibration.py`` asserts every point within +-15 % and the orderings. Then it prints the
published GLM-5.2 case (``python -m tests.benchmarks.twin_calibration --only-published``);
``python -m tests.benchmarks.twin_calibration`` prints every calibration point, the published case first.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from sandboxes.twin.perf.cost_model import CostModel
from sandboxes.twin.perf.serving_config import ServingConfig
from sandboxes.twin.scenario import load
from sandboxes.twin.workspace.materialize import materialize
from tests.twin.conftest import running

SCENARIO = "glm5_fp8_mi355x"
EAGLE_314 = ["--speculative-algorithm", "EAGLE", "--speculative-num-steps", "3", "--speculative-eagle-topk", "1",
             "--speculative-num-draft-tokens", "4"]  # fmt: skip
FP8_KV = ["--kv-cache-dtype", "fp8_e4m3"]


@dataclass(frozen=True)
class Published:
    """One published point: tok/s/GPU and the per-user figure as the source gives it (one of the two)."""

    concurrency: int
    tok_s_gpu: float
    tok_s_user: float | None = None
    tpot_ms: float | None = None
    note: str = ""

    @property
    def user(self) -> float:
        return self.tok_s_user if self.tok_s_user is not None else 1000.0 / self.tpot_ms


@dataclass(frozen=True)
class Config:
    name: str
    flags: list[str]
    visible_gpus: str  # HIP_VISIBLE_DEVICES of the server
    points: list[Published] = field(default_factory=list)
    chat_template: bool = False  # the client wraps each prompt in the model's chat template (MTP runs)


# --- the published figures: the only place they are written ----------------------------------------------------
# Source: InferenceX (SemiAnalysis), GLM-5 FP8 on AMD Instinct MI355X, SGLang v0.5.12 ROCm, May 2026, as quoted in
# issue 10 ("Twin physics held against public measurements beyond the published case"). Workload: random token
# prompts, 8192 in / 1024 out nominal, lengths uniform in 0.8-1.0x, 10 x concurrency prompts per run, prefix
# caching off; tok/s/GPU = (input + output tokens) / s / GPUs used; tok/s/user = 1000 / TPOT.
# How InferenceX ran them (its benchmarks/single_node/glm5_fp8_mi355x{,_mtp}.sh, May 2026): the server with
# --mem-fraction-static 0.85, --kv-cache-dtype fp8_e4m3, --disable-radix-cache (MTP script; prefix caching is
# off in both per the source), --context-length ISL + OSL + 32 and --cuda-graph-max-bs CONC in the MTP script
# (one script for TP4 and TP8, so TP8 has the fp8 KV cache too); its client's random prompts are runs of
# consecutive token ids (SGLang's ``random-ids``), and the MTP runs add --use-chat-template.
SOURCE = "InferenceX (SemiAnalysis), GLM-5 FP8, MI355X, SGLang v0.5.12 ROCm, May 2026"
PUBLISHED = [
    Config("TP4 EAGLE 3/1/4 fp8 KV", ["--tp-size", "4", *FP8_KV, *EAGLE_314], "0,1,2,3", [
        Published(4, 625.5, tok_s_user=76.8),
        Published(32, 1707.4, tok_s_user=24.8),
        Published(64, 1895.0, tok_s_user=18.19, note="source's full table"),
        Published(128, 1911.7, tok_s_user=18.1),
    ], chat_template=True),
    Config("TP4 fp8 KV", ["--tp-size", "4", *FP8_KV], "0,1,2,3", [
        Published(4, 358.8, tpot_ms=23.8),
        Published(64, 1660.1, tpot_ms=84.6),
        Published(256, 2189.4, tpot_ms=149.5),
    ]),
    Config("TP8 EAGLE 3/1/4 fp8 KV", ["--tp-size", "8", *FP8_KV, *EAGLE_314], "0,1,2,3,4,5,6,7", [
        Published(4, 373.4, tpot_ms=11.1),
        Published(8, 534.2, tpot_ms=15.4),
    ], chat_template=True),
]  # fmt: skip
INPUT_LEN, OUTPUT_LEN = 8192, 1024


def server_flags(config: Config, concurrency: int) -> list[str]:
    """The InferenceX scripts' server flags for one point (the MTP script sizes the CUDA graphs to CONC)."""
    flags = [*config.flags, "--mem-fraction-static", "0.85", "--context-length", str(INPUT_LEN + OUTPUT_LEN + 32),
             "--disable-radix-cache"]  # fmt: skip
    if config.chat_template:
        flags += ["--cuda-graph-max-bs", str(concurrency)]
    return flags


def workload(concurrency: int, chat_template: bool = False) -> list[str]:
    """InferenceX's client, in SGLang's bench_serving flags: consecutive-token-id prompts (``random-ids``) with
    SGLang's range-ratio lengths; a chat template is what a chat backend's server applies to each prompt
    (InferenceX applies it client-side and sends the text to /v1/completions: the same tokens reach the model)."""
    return ["--backend", "vllm-chat" if chat_template else "vllm", "--dataset-name", "random-ids",
            "--random-input-len", str(INPUT_LEN), "--random-output-len", str(OUTPUT_LEN), "--random-range-ratio",
            "0.8", "--max-concurrency", str(concurrency), "--num-prompts", str(10 * concurrency)]  # fmt: skip


TERMS = ("memory", "compute", "communication", "kernel_launch", "scheduler", "draft")


def decode_step(rec: dict, concurrency: int) -> dict[str, float]:
    """The terms of one decode (verify) step of the running batch at this point, in seconds.

    The batch is what one scheduler runs in steady state: the client's concurrency, capped by the server's
    running-request limit (SGLang's 48 under speculative decoding) and by the KV pool (the twin's scheduler
    reserves a request's prompt and full output when it admits it); the context is a request's mean prompt plus
    half its mean output. ``memory`` (weight, KV and recurrent-state reads) and ``compute`` overlap: the step pays
    the larger."""
    twin = rec["server_info"]["twin"]
    scenario = load(twin["scenario_path"])
    cfg = ServingConfig.from_dict(twin["serving_config"])
    model = CostModel(scenario, cfg, twin.get("weight_bytes"))
    context_len = cfg.context_length or scenario.model.max_position_embeddings
    capacity = int(twin["max_total_num_tokens"])
    n = rec["num_prompts"]
    mean_in, mean_out = rec["total_input_tokens"] / n, rec["total_output_tokens"] / n
    limit = min(cfg.max_running_per_rank(capacity, context_len, twin.get("max_mamba_cache_size")),
                int(capacity // (mean_in + mean_out)))
    batch = max(1, min(-(-concurrency // cfg.num_ranks), limit))
    context = mean_in + mean_out / 2
    t = model.decode_terms(batch, batch * context, model.tokens_per_verify())
    terms = {"memory": t["weight_reads"] + t["kv_reads"] + t["state_reads"], **{k: t[k] for k in TERMS[1:]}}
    paid = max(terms["memory"], terms["compute"])
    gpu = paid + sum(terms[k] for k in TERMS[2:] if k != "scheduler")
    terms["scheduler"] = model.cpu_exposed(gpu, terms["scheduler"])  # what the overlap scheduler leaves of it
    step = gpu + terms["scheduler"]
    return {**terms, "step": step, "batch": batch, "paid": paid}


def largest(step: dict[str, float]) -> tuple[str, float]:
    counted = {k: step[k] for k in TERMS[2:]}
    top_overlap = "memory" if step["memory"] >= step["compute"] else "compute"
    counted[top_overlap] = step[top_overlap]
    name = max(counted, key=counted.get)
    return name, counted[name] / step["step"]


def measure(tmp: Path) -> list[tuple[Config, Published, dict, dict]]:
    ws = tmp / "ws"
    materialize(SCENARIO, ws)
    rows = []
    for i, config in enumerate(PUBLISHED):
        env = {"HIP_VISIBLE_DEVICES": config.visible_gpus}
        for point in config.points:
            log = tmp / f"server{i}-c{point.concurrency}.log"
            with running(ws, log, server_flags(config, point.concurrency), env) as server:
                rec = server.bench(tmp, *workload(point.concurrency, config.chat_template))
            rows.append((config, point, rec, decode_step(rec, point.concurrency)))
    return rows


def print_table(rows: list[tuple[Config, Published, dict, dict]]) -> None:
    print(f"Twin ({SCENARIO}) vs {SOURCE}")
    print("ratio = twin / published; tok/s/user = 1000 / median TPOT; run = where the run's GPU time went")
    head = (f"{'config':<24} {'conc':>4}  {'tok/s/GPU':>9} {'pub':>7} {'ratio':>5}  {'tok/s/user':>10} {'pub':>6} "
            f"{'ratio':>5}  {'TPOT ms':>7} {'pub':>6}  {'decode step: largest term':<28} run")  # fmt: skip
    print(head)
    print("-" * len(head))
    for config, p, rec, step in rows:
        gpu, user = rec["total_throughput_per_gpu"], rec["tokens_per_s_per_user"]
        name, share = largest(step)
        mark = "*" if p.note else " "
        print(f"{config.name:<24} {p.concurrency:>4}{mark} {gpu:>9.1f} {p.tok_s_gpu:>7.1f} {gpu / p.tok_s_gpu:>5.2f}  "
              f"{user:>10.1f} {p.user:>6.1f} {user / p.user:>5.2f}  {rec['median_tpot_ms']:>7.1f} "
              f"{1000 / p.user:>6.1f}  {f'{name} {share:.0%}':<28} {rec['bottleneck']}")  # fmt: skip
    print("* from the source's full table (not in the issue's main table)")
    print()
    print("Decode (verify) step of the running batch, ms per term (memory and compute overlap: the step pays the larger)")
    head = f"{'config':<24} {'conc':>4} {'batch':>5} {'accept':>6} {'step':>6}  " + " ".join(f"{t:>13}" for t in TERMS)
    print(head)
    print("-" * len(head))
    for config, p, rec, step in rows:
        print(f"{config.name:<24} {p.concurrency:>4} {step['batch']:>5} {rec.get('accept_length') or 1.0:>6.2f} "
              f"{step['step'] * 1e3:>6.2f}  " + " ".join(f"{step[t] * 1e3:>13.2f}" for t in TERMS))
    ratios = [rec["total_throughput_per_gpu"] / p.tok_s_gpu for _, p, rec, _ in rows]
    ratios += [rec["tokens_per_s_per_user"] / p.user for _, p, rec, _ in rows]
    within = sum(abs(r - 1) <= 0.15 for r in ratios)
    print(f"\n{within} of {len(ratios)} figures within +-15 % of the published ones")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only-inferencex", action="store_true", help="skip the published GLM-5.2 case")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        print_table(measure(Path(tmp)))
    if not args.only_inferencex:
        print()
        sys.stdout.flush()
        from tests.benchmarks import twin_calibration

        twin_calibration.main(["--only-published"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
