"""The two extra twin scenarios (orion_mi300x, vega_mi355x) and their tasks: same defect kinds as GLM-5.2 on
MI355X, in other names, shapes, files and hardware. Each scenario materialises, serves its baseline, crashes
MTP at weight loading under its own engine prefix, fails its own JIT kernel on its own header when its own
trigger fires, and runs its own MoE shape on the fallback path; each task file loads."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import pytest

from sandboxes.twin.materialize import materialize
from sandboxes.twin.scenario import load
from tasks.spec import load_task
from tests.twin.conftest import LaunchFailed, running, start_server

REPO = Path(__file__).resolve().parents[2]


def spec_flags(steps: int) -> list[str]:
    return ["--speculative-algorithm", "EAGLE", "--speculative-num-steps", str(steps), "--speculative-eagle-topk", "1",
            "--speculative-num-draft-tokens", str(steps + 1)]  # fmt: skip


@dataclass(frozen=True)
class Case:
    name: str
    engine_prefix: str
    checkpoint_prefix: str
    engine_excludes: str  # the exclude entry that names the MTP layer's bf16 modules the way the engine does
    kernel: str
    header: str
    trigger: list[str]  # flags that switch the kernel on (and, with MTP, the draft model)
    quiet: list[str]  # the same feature just below the trigger: the kernel is not built
    moe_key: str  # the shape as aiter's fallback line prints it (cu_num, token, model_dim, inter_dim, E, topk)
    weight_format: str
    gfx: str


CASES = [
    Case("orion_mi300x", "model.nextn", "model.mtp_layers.0",
         r"re:model\.nextn\.(mlp\.shared_experts|self_attn\.indexer)\..*",
         "python/sglang/jit_kernel/csrc/allreduce/fused_allreduce_rmsnorm.cuh", "cuda_bf16.h",
         ["--enable-aiter-allreduce-fusion"], [], "(304, 1, 5120, 3072, 160, 6,", "fp8", "gfx942"),
    Case("vega_mi355x", "model.draft.layer", "model.layers.48",
         r"re:model\.draft\.layer\.(mlp\.shared_experts|self_attn\.kv_b_proj)",
         "sgl-kernel/csrc/speculative/eagle_multi_step_meta.cuh", "cuda_fp16.h",
         spec_flags(2), spec_flags(1), "(256, 1, 4096, 1536, 128, 4,", "mxfp4", "gfx950"),
]  # fmt: skip
IDS = [c.name for c in CASES]


def _exclude(ws: Path, entry: str) -> None:
    path = ws / "model" / "config.json"
    cfg = json.loads(path.read_text())
    cfg["quantization_config"]["exclude"].append(entry)
    path.write_text(json.dumps(cfg))


def test_scenarios_differ_from_the_default() -> None:
    base = load("glm52_mi355x")
    seen = {base.model.served_name, base.model.mtp.engine_prefix, base.model.mtp.checkpoint_prefix}
    for case in CASES:
        sc = load(case.name)
        m, d = sc.model, sc.defects
        assert m.architecture != base.model.architecture and m.model_type != base.model.model_type
        assert m.hidden_size != base.model.hidden_size and m.num_hidden_layers != base.model.num_hidden_layers
        assert (m.moe.num_experts, m.moe.top_k, m.moe.intermediate_size) != (
            base.model.moe.num_experts, base.model.moe.top_k, base.model.moe.intermediate_size)
        assert m.mtp.layer_index != base.model.mtp.layer_index
        assert m.mtp.draft_model_file != base.model.mtp.draft_model_file
        for value in (m.served_name, m.mtp.engine_prefix, m.mtp.checkpoint_prefix):
            assert value not in seen
            seen.add(value)
        assert [(u.file, u.header) for u in d.unguarded_includes] == [(case.kernel, case.header)]
        assert sc.quantization.weight_format == case.weight_format and sc.hardware.gfx_arch == case.gfx
    assert load("orion_mi300x").hardware.memory_gb == 192


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_scenario_defects_end_to_end(case: Case, tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    materialize(case.name, ws)
    cfg = json.loads((ws / "model" / "config.json").read_text())
    sc = load(case.name)
    assert cfg["architectures"] == [sc.model.architecture] and cfg["hidden_size"] == sc.model.hidden_size
    index = json.loads((ws / "model" / "model.safetensors.index.json").read_text())["weight_map"]
    assert index[f"{case.checkpoint_prefix}.mlp.shared_experts.down_proj.weight"]["dtype"] == "BF16"
    assert not any(name.startswith(case.engine_prefix + ".") for name in index)
    draft = (ws / "sglang" / sc.model.mtp.draft_model_file).read_text()
    assert f'NEXTN_DECODER_PREFIX = "{case.engine_prefix}"' in draft
    assert f"#include <{case.header}>\n" in (ws / "sglang" / case.kernel).read_text()

    # the baseline serves, on the untuned MoE path for this model's shape
    with running(ws, tmp_path / "base.log", ["--tp-size", "8"]) as server:
        rec = server.bench(tmp_path, "--dataset-name", "random-ids", "--random-input-len", "500",
                           "--random-output-len", "50", "--random-range-ratio", "1", "--num-prompts", "2")  # fmt: skip
    assert rec["completed"] == 2 and rec["simulated"]
    assert rec["server_info"]["twin"]["moe_kernels"] == "fallback"
    log = (tmp_path / "base.log").read_text()
    assert f"using 2stage default for {case.moe_key}" in log
    assert f"dtype={case.weight_format} in" in log and sc.hardware.name in log

    # MTP: the draft model's MTP-layer modules are named under the engine prefix, the exclude list names them
    # under the checkpoint prefix, so a bf16 checkpoint weight meets a quantized parameter
    with pytest.raises(LaunchFailed) as info:
        start_server(ws, tmp_path / "mtp.log", ["--tp-size", "8", *spec_flags(1)])
    text = info.value.log
    assert f"Failed to load parameter '{case.engine_prefix}." in text
    assert f"(checkpoint: {case.checkpoint_prefix}." in text
    assert "AssertionError: Attempted to load weight" in text  # mxfp4: packed shape; fp8: same shape, dtype
    _exclude(ws, case.engine_excludes)

    # the JIT kernel: built (and failing on the unguarded header) only when this scenario's trigger fires
    with running(ws, tmp_path / "quiet.log", ["--tp-size", "8", *case.quiet]):
        pass
    assert "[JIT]" not in (tmp_path / "quiet.log").read_text()
    with pytest.raises(LaunchFailed) as info:
        start_server(ws, tmp_path / "jit.log", ["--tp-size", "8", *case.trigger])
    assert f"fatal error: {case.header}: No such file or directory" in info.value.log
    assert f"--offload-arch={case.gfx}" in info.value.log

    kernel = ws / "sglang" / case.kernel
    guarded = f"#ifndef USE_ROCM\n#include <{case.header}>\n#endif"
    kernel.write_text(kernel.read_text().replace(f"#include <{case.header}>", guarded, 1))
    with running(ws, tmp_path / "fixed.log", ["--tp-size", "8", *spec_flags(3), *case.trigger]) as server:
        rec = server.bench(tmp_path, "--dataset-name", "random-ids", "--random-input-len", "500",
                           "--random-output-len", "50", "--random-range-ratio", "1", "--num-prompts", "2",
                           "--max-concurrency", "1")  # fmt: skip
    assert rec["accept_length"] > 2 and rec["server_info"]["twin"]["jit_kernels"]


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_task_file_loads(case: Case) -> None:
    task = load_task(REPO / "tasks" / f"{case.name}.yaml")
    sc = load(case.name)
    assert task.workspace.twin.scenario == case.name
    assert task.model.name == sc.model.served_name and task.model.architecture == sc.model.architecture
    assert task.model.quantization == sc.quantization.weight_format
    assert task.hardware.gpu_memory_gb == sc.hardware.memory_gb
    assert isinstance(task.accuracy.baseline, float)
    assert (REPO / task.evals[task.accuracy.suite].dataset).is_file()
    assert {t.metric for t in task.targets} == {"throughput_at_knee", "decode_tok_s", "accuracy_delta"}
    assert task.engines.twin is not None and "sandboxes.twin.launch_server" in task.engines.twin.launch
