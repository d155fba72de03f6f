"""The harness for issue 10's public calibration points (GLM-5 FP8 on MI355X, InferenceX): the scenario loads,
materialises and serves MTP on 4 of the node's 8 GPUs; bench_serving draws random lengths as SGLang's does and
reports per-GPU throughput over the GPUs the server uses. The published figures are asserted in
``test_public_calibration.py``."""

from __future__ import annotations

import json
import random
from pathlib import Path

from sandboxes.twin.bench_serving import _post
from sandboxes.twin.perf.cost_model import CostModel
from sandboxes.twin.perf.serving_config import ServingConfig
from sandboxes.twin.perf.simulator import simulate
from sandboxes.twin.perf.workload import DatasetSpec, build_requests, random_lens
from sandboxes.twin.scenario import load
from sandboxes.twin.workspace.materialize import materialize
from tests.benchmarks.inferencex_calibration import EAGLE_314, workload
from tests.twin.conftest import running


def test_range_ratio_draws_as_sglang_does() -> None:
    """compute_random_lens: uniform over the integers of [max(int(L * r), 1), L], both ends included."""
    rng = random.Random(0)
    lens = random_lens(10, 0.8, 2000, rng)
    assert set(lens) == {8, 9, 10}
    assert set(random_lens(10, 0.0, 2000, rng)) == set(range(1, 11))
    assert random_lens(10, 1.0, 5, rng) == [10] * 5
    assert random_lens(0, 0.8, 3, rng) == [0, 0, 0]
    reqs = build_requests(DatasetSpec("random", num_prompts=500, random_input_len=8192, random_output_len=1024,
                                      random_range_ratio=0.8), random.Random(1))  # fmt: skip
    assert all(6553 <= r.input_len <= 8192 and 819 <= r.output_len <= 1024 and r.prefix_len == 0 for r in reqs)
    mean_in = sum(r.input_len for r in reqs) / len(reqs)
    assert abs(mean_in - (6553 + 8192) / 2) < 100


def test_no_prefix_credit_with_the_radix_cache_disabled() -> None:
    """--disable-radix-cache: the simulated scheduler credits no shared prefix; every prompt is prefilled whole."""
    sc = load("glm5_fp8_mi355x")
    reqs = build_requests(DatasetSpec("generated-shared-prefix", gsp_num_groups=2, gsp_prompts_per_group=4,
                                      gsp_system_prompt_len=4000, gsp_question_len=200, gsp_output_len=20),
                          random.Random(1))  # fmt: skip
    runs = {}
    for off in (False, True):
        model = CostModel(sc, ServingConfig(tp_size=8, weight_format="fp8", moe_tuned=True, disable_radix_cache=off))
        runs[off] = simulate(model, reqs, [0.0] * len(reqs), kv_capacity=10**6)
    assert all(t.cached == 0 for t in runs[True].traces)
    assert any(t.cached > 0 for t in runs[False].traces)
    assert runs[True].breakdown["prefill_attention"] > runs[False].breakdown["prefill_attention"]


def test_glm5_fp8_scenario_shares_the_default_constants() -> None:
    sc, default = load("glm5_fp8_mi355x"), load("glm52_mi355x")
    assert sc.calibration == default.calibration  # one set of constants for every calibration point
    assert sc.quantization.weight_format == "fp8"
    assert sc.model.hidden_size == 6144 and sc.model.num_hidden_layers == 78 and sc.model.mtp.layer_index == 78
    assert (sc.model.moe.num_experts, sc.model.moe.top_k) == (256, 8)


def test_glm5_fp8_serves_mtp_on_four_gpus_and_reports_per_gpu(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    materialize("glm5_fp8_mi355x", ws)
    cfg = json.loads((ws / "model" / "config.json").read_text())
    assert cfg["quantization_config"]["global_quant_config"]["weight"]["dtype"] == "fp8_e4m3"
    flags = ["--tp-size", "4", "--kv-cache-dtype", "fp8_e4m3", "--disable-radix-cache", *EAGLE_314]
    with running(ws, tmp_path / "server.log", flags, {"HIP_VISIBLE_DEVICES": "0,1,2,3"}) as server:
        args = workload(2)
        args[args.index("--random-input-len") + 1] = "2000"
        args[args.index("--random-output-len") + 1] = "100"
        rec = server.bench(tmp_path, *args)
        body = {"text": "The same long prompt, twice. " * 40, "sampling_params": {"max_new_tokens": 4}}
        cached = [_post(f"{server.url}/generate", body)["meta_info"]["cached_tokens"] for _ in range(2)]
    assert cached == [0, 0]  # the HTTP API's radix-cache stand-in is off too
    assert rec["completed"] == 20 and rec["server_info"]["twin"]["moe_kernels"] == "tuned"
    assert rec["server_info"]["twin"]["serving_config"]["disable_radix_cache"] is True
    assert 20 * 1600 <= rec["total_input_tokens"] <= 20 * 2000 and 20 * 80 <= rec["total_output_tokens"] <= 20 * 100
    assert rec["gpus_used"] == 4
    assert rec["total_throughput_per_gpu"] == rec["total_throughput"] / 4
    assert rec["tokens_per_s_per_user"] == 1000 / rec["median_tpot_ms"]
