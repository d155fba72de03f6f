"""The two extra twin scenarios (orion_mi300x, vega_mi355x) and their tasks: same defect kinds as GLM-5.2 on
MI355X, in other names, shapes, files and hardware. Each scenario materialises, serves its baseline, crashes
MTP at weight loading (in another layer class for orion), fails its own real JIT kernel on its own header when
its own trigger fires, and runs its own MoE shape on the fallback path; each task file loads."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

import pytest

from sandboxes.twin.scenario import load
from sandboxes.twin.workspace.materialize import materialize
from tasks.spec import load_task
from tests.twin.conftest import LaunchFailed, running, start_server

REPO = Path(__file__).resolve().parents[2]


def spec_flags(steps: int) -> list[str]:
    return ["--speculative-algorithm", "EAGLE", "--speculative-num-steps", str(steps), "--speculative-eagle-topk", "1",
            "--speculative-num-draft-tokens", str(steps + 1)]  # fmt: skip


@dataclass(frozen=True)
class Case:
    name: str
    checkpoint_prefix: str  # the MTP layer in the checkpoint (the release's draft model maps only layer 61)
    first_failure: str  # the last line of the draft model's weight-loading traceback, as a regex
    engine_excludes: str  # the exclude entry that names the MTP layer's bf16 modules the way the engine does
    kernel: str
    header: str
    trigger: list[str]  # flags that switch the kernel on (and, with MTP, the draft model)
    quiet: list[str]  # the same feature just below the trigger: the kernel is not built
    moe_key: str  # the shape as aiter's fallback line prints it (cu_num, token, model_dim, inter_dim, E, topk)
    weight_format: str
    gfx: str


CASES = [
    Case("orion_mi300x", "model.layers.60",
         r"AssertionError: param\.shape=torch\.Size\(\[\d+, \d+\]\) param\.dtype=torch\.uint8 .*bfloat16",
         r"re:model\.decoder\.self_attn\.indexer\..*",
         "python/sglang/jit_kernel/csrc/elementwise/concat_mla.cuh", "cuda_bf16.h",
         ["--enable-aiter-allreduce-fusion"], [], "(304, 1, 5120, 3072, 160, 6,", "mxfp4", "gfx942"),
    Case("vega_mi355x", "model.layers.48", r"AssertionError",
         r"re:model\.decoder\.(mlp\.shared_experts|self_attn\.kv_b_proj)",
         "python/sglang/jit_kernel/csrc/elementwise/qknorm.cuh", "cuda_bf16.h",
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
    seen = {base.model.served_name, base.model.mtp.checkpoint_prefix, base.defects.unguarded_includes[0].file}
    for case in CASES:
        sc = load(case.name)
        m, d = sc.model, sc.defects
        assert m.architecture != base.model.architecture and m.model_type != base.model.model_type
        assert m.hidden_size != base.model.hidden_size and m.num_hidden_layers != base.model.num_hidden_layers
        assert (m.moe.num_experts, m.moe.top_k, m.moe.intermediate_size) != (
            base.model.moe.num_experts, base.model.moe.top_k, base.model.moe.intermediate_size)
        assert m.mtp.layer_index != base.model.mtp.layer_index
        assert sc.quantization.exclude != base.quantization.exclude
        for value in (m.served_name, m.mtp.checkpoint_prefix, d.unguarded_includes[0].file):
            assert value not in seen
            seen.add(value)
        assert (d.unguarded_includes[0].file, d.unguarded_includes[0].header) == (case.kernel, case.header)
        assert sc.quantization.weight_format == case.weight_format and sc.hardware.gfx_arch == case.gfx
    assert load("orion_mi300x").hardware.memory_gb == 192


def _written_by_the_twin(ws: Path) -> list[Path]:
    written = [p for d in ("model", "aiter", ".twin") for p in (ws / d).rglob("*") if p.is_file()]
    return [p for p in written if p.name != "scenario.yaml"]  # the scenario itself is the user's text


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_scenario_defects_end_to_end(case: Case, tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    materialize(case.name, ws)
    cfg = json.loads((ws / "model" / "config.json").read_text())
    sc = load(case.name)
    assert cfg["architectures"] == [sc.model.architecture] and cfg["hidden_size"] == sc.model.hidden_size
    index = json.loads((ws / "model" / "model.safetensors.index.json").read_text())["weight_map"]
    assert not any(name.startswith("model.decoder.") for name in index)
    assert any(name.startswith(case.checkpoint_prefix + ".") for name in index)
    assert f"#include <{case.header}>\n" in (ws / "sglang" / case.kernel).read_text()
    if sc.hardware.name != "MI355X":  # hardware names come from the scenario, everywhere
        for path in _written_by_the_twin(ws):
            assert "MI355X" not in path.read_text(errors="replace"), path

    # the baseline serves, on the untuned MoE path for this model's shape
    with running(ws, tmp_path / "base.log", ["--tp-size", "8"]) as server:
        rec = server.bench(tmp_path, "--dataset-name", "random-ids", "--random-input-len", "500",
                           "--random-output-len", "50", "--random-range-ratio", "1", "--num-prompts", "2")  # fmt: skip
    assert rec["completed"] == 2 and rec["simulated"]
    assert rec["server_info"]["twin"]["moe_kernels"] == "fallback"
    log = (tmp_path / "base.log").read_text()
    assert f"using 2stage default for {case.moe_key}" in log
    assert sc.hardware.name in log
    if sc.hardware.name != "MI355X":
        assert "MI355X" not in log

    # MTP: the release's draft model names the MTP layer model.decoder and maps only layer 61's exclude entries
    # there; this checkpoint's MTP layer is another, so a bf16 weight meets a quantized parameter
    with pytest.raises(LaunchFailed) as info:
        start_server(ws, tmp_path / "mtp.log", ["--tp-size", "8", *spec_flags(1)])
    text = info.value.log
    last = [ln for ln in text.splitlines() if ln and not ln.startswith("[")][-1]
    assert re.fullmatch(case.first_failure, last), last
    assert "deepseek_nextn.py" in text and "Scheduler hit an exception: Traceback" in text
    _exclude(ws, case.engine_excludes)

    # the JIT kernel: built (and failing on the unguarded header) only when this scenario's trigger fires
    with running(ws, tmp_path / "quiet.log", ["--tp-size", "8", *case.quiet]):
        pass
    assert "[JIT]" not in (tmp_path / "quiet.log").read_text()
    with pytest.raises(LaunchFailed) as info:
        start_server(ws, tmp_path / "jit.log", ["--tp-size", "8", *case.trigger])
    assert f"fatal error: '{case.header}' file not found" in info.value.log
    assert case.gfx in info.value.log

    kernel = ws / "sglang" / case.kernel
    for header in ("cuda_fp16.h", "cuda_bf16.h", "cuda_runtime.h"):  # guard every CUDA header the file has
        hip = {"cuda_fp16.h": "hip/hip_fp16.h", "cuda_bf16.h": "hip/hip_bf16.h", "cuda_runtime.h": "hip/hip_runtime.h"}
        guarded = f"#ifndef USE_ROCM\n#include <{header}>\n#else\n#include <{hip[header]}>\n#endif"
        kernel.write_text(kernel.read_text().replace(f"\n#include <{header}>\n", f"\n{guarded}\n", 1))
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
