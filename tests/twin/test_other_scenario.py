"""A scenario nobody calibrated (other model, names, MTP prefix, header, hardware) runs end to end."""

from __future__ import annotations

import json

import pytest

from sandboxes.twin.workspace.materialize import materialize
from tests.twin.conftest import LaunchFailed, running, start_server
from tests.twin.test_workspace import _other_scenario

SPEC = ["--speculative-algorithm", "EAGLE", "--speculative-num-steps", "3", "--speculative-eagle-topk", "1",
        "--speculative-num-draft-tokens", "4"]  # fmt: skip


def test_unseen_scenario_crashes_patches_and_benchmarks(tmp_path):
    path = _other_scenario(tmp_path)
    text = path.read_text().replace("name: MI355X", "name: MI300X-like").replace("memory_gb: 288", "memory_gb: 192")
    path.write_text(text)
    ws = tmp_path / "ws"
    materialize(path, ws)

    with running(ws, tmp_path / "base.log", ["--tp-size", "2", "--dp-size", "4"]) as server:
        rec = server.bench(tmp_path, "--dataset-name", "generated-shared-prefix", "--gsp-num-groups", "4",
                           "--gsp-prompts-per-group", "25", "--gsp-system-prompt-len", "4000",
                           "--gsp-question-len", "2000", "--gsp-output-len", "500", "--request-rate", "4")  # fmt: skip
    assert rec["completed"] == 100 and rec["simulated"]
    assert 0 < rec["output_throughput"] <= 4 * 500 * 1.05
    log = (tmp_path / "base.log").read_text()
    assert "using 2stage default for (256, 1, 4096, 1024, 64, 4" in log
    assert "MI300X-like" in log

    with pytest.raises(LaunchFailed) as info:
        start_server(ws, tmp_path / "mtp.log", ["--tp-size", "8", *SPEC])
    assert "deepseek_nextn.py" in info.value.log and "\nAssertionError\n" in info.value.log

    cfg_path = ws / "model" / "config.json"
    cfg = json.loads(cfg_path.read_text())
    cfg["quantization_config"]["exclude"].append(r"re:model\.decoder\.(mlp\.shared_experts|self_attn\.indexer)\..*")
    cfg_path.write_text(json.dumps(cfg))
    with pytest.raises(LaunchFailed) as info:  # three draft steps already compile this scenario's kernel
        start_server(ws, tmp_path / "mtp.log", ["--tp-size", "8", *SPEC])
    assert "fatal error: 'cuda_runtime.h' file not found" in info.value.log

    kernel = ws / "sglang/python/sglang/jit_kernel/csrc/diffusion/timestep_embedding.cuh"
    kernel.write_text(kernel.read_text().replace(
        "#include <cuda_runtime.h>", "#ifndef USE_ROCM\n#include <cuda_runtime.h>\n#else\n#include <hip/hip_runtime.h>\n#endif", 1))
    with running(ws, tmp_path / "mtp.log", ["--tp-size", "8", *SPEC]) as server:
        rec = server.bench(tmp_path, "--dataset-name", "random-ids", "--random-input-len", "2000",
                           "--random-output-len", "300", "--random-range-ratio", "1", "--num-prompts", "3",
                           "--max-concurrency", "1")  # fmt: skip
    assert rec["accept_length"] > 1.5


def _gqa_scenario(tmp_path) -> object:
    """A Qwen-style MoE: grouped-query attention with QK norm, no MTP, no shared expert, no sparse indexer."""
    import yaml

    from sandboxes.twin.scenario import SCENARIO_DIR

    data = yaml.safe_load((SCENARIO_DIR / "vega_mi355x.yaml").read_text())
    data["name"] = "gqa_moe_test"
    model = data["model"]
    model.update(served_name="acme/GQA-MoE", architecture="Qwen3MoeForCausalLM", model_type="qwen3_moe",
                 first_k_dense_replace=0)
    model["attention"] = {"kind": "gqa", "num_heads": 32, "num_kv_heads": 4, "head_dim": 128, "qk_norm": True}
    model["moe"]["num_shared_experts"] = 0
    del model["mtp"]
    data["quantization"]["exclude"] = ["lm_head", r"re:model\.layers\.\d+\.mlp\.gate$"]
    data["engine"]["jit_kernels"] = []
    data["defects"]["unguarded_includes"] = []
    path = tmp_path / "gqa_moe_test.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def test_gqa_model_is_a_scenario(tmp_path):
    ws = tmp_path / "ws"
    materialize(_gqa_scenario(tmp_path), ws)
    cfg = json.loads((ws / "model" / "config.json").read_text())
    assert cfg["num_key_value_heads"] == 4 and cfg["head_dim"] == 128 and "kv_lora_rank" not in cfg
    index = json.loads((ws / "model" / "model.safetensors.index.json").read_text())["weight_map"]
    assert index["model.layers.0.self_attn.k_proj.weight"]["shape"] == [4 * 128, 4096 // 2]  # mxfp4: packed
    assert "model.layers.0.self_attn.q_norm.weight" in index
    sizes = {}
    for tp in ("8", "2"):  # KV heads are split over the attention group: fewer GPUs, more KV bytes per token
        with running(ws, tmp_path / f"tp{tp}.log", ["--tp-size", tp, "--dp-size", str(8 // int(tp))]) as server:
            rec = server.bench(tmp_path, "--dataset-name", "random-ids", "--random-input-len", "2000",
                               "--random-output-len", "100", "--random-range-ratio", "1", "--num-prompts", "4")  # fmt: skip
        assert rec["completed"] == 4 and rec["simulated"]
        sizes[tp] = rec["server_info"]["twin"]["max_total_num_tokens"]
        log = (tmp_path / f"tp{tp}.log").read_text()
        assert "qkv_proj" not in log or "AssertionError" not in log
    assert sizes["8"] > sizes["2"]
