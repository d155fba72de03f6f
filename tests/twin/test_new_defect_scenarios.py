"""Two defect variants as scenarios, each end to end on the twin.

lyra_mi355x: the checkpoint keeps its whole MTP layer bf16, routed experts included, by exact names. The draft
crashes loading the first routed expert; the engine's own names fix it, at the engine's granularity: one entry
per linear (shards of a fused one) and ONE entry for the FusedMoE module, never one per expert.

corvus_mi300x: two CUDA headers of one file (the JIT kernels' shared sgl_kernel/utils.cuh) are out of their
USE_ROCM guard. The compiler stops at the first missing header, so the build fails on cuda_bf16.h, then, once
that one is guarded, on cuda_fp8.h, and builds once both are.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from sandboxes.twin.engine.loading.loader import WeightLoadError, load_weights
from sandboxes.twin.scenario import load
from sandboxes.twin.workspace.materialize import materialize
from tasks.spec import load_task
from tests.twin.conftest import LaunchFailed, running, start_server

REPO = Path(__file__).resolve().parents[2]
NEW = ("lyra_mi355x", "corvus_mi300x")
OLD = ("glm52_mi355x", "orion_mi300x", "vega_mi355x")
UTILS = "python/sglang/jit_kernel/include/sgl_kernel/utils.cuh"
D = "model.decoder"
# the draft's own names of the MTP layer's linears: shards of the fused modules, as should_ignore_layer asks
LYRA_LINEARS = [f"{D}.self_attn.q_a_proj", f"{D}.self_attn.kv_a_proj_with_mqa", f"{D}.self_attn.q_b_proj",
                f"{D}.self_attn.kv_b_proj", f"{D}.self_attn.o_proj", f"{D}.mlp.shared_experts.gate_proj",
                f"{D}.mlp.shared_experts.up_proj", f"{D}.mlp.shared_experts.down_proj"]  # fmt: skip
EXPERTS = f"{D}.mlp.experts"  # the FusedMoE module's prefix: what Quark's get_quant_method asks about
EH_PROJ = "model.eh_proj"  # the draft's top-level ReplicatedLinear (a Quark linear in real 0.5.12)


def spec_flags(steps: int, topk: int = 1) -> list[str]:
    return ["--speculative-algorithm", "EAGLE", "--speculative-num-steps", str(steps), "--speculative-eagle-topk",
            str(topk), "--speculative-num-draft-tokens", str(steps * topk + 1)]  # fmt: skip


def _add_excludes(ws: Path, entries: list[str]) -> None:
    path = ws / "model" / "config.json"
    cfg = json.loads(path.read_text())
    cfg["quantization_config"]["exclude"] += entries
    path.write_text(json.dumps(cfg, indent=2))


def _last_line(log: str) -> str:
    return [ln for ln in log.splitlines() if ln.strip() and not ln.startswith("[")][-1]


@pytest.fixture(scope="module")
def lyra(tmp_path_factory: pytest.TempPathFactory) -> Path:
    ws = tmp_path_factory.mktemp("lyra") / "ws"
    materialize("lyra_mi355x", ws)
    return ws


@pytest.fixture(scope="module")
def corvus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    ws = tmp_path_factory.mktemp("corvus") / "ws"
    materialize("corvus_mi300x", ws)
    return ws


# --- the scenarios -------------------------------------------------------------------------------------------


def test_new_scenarios_are_their_own() -> None:
    old = [load(n) for n in OLD]
    lyra, corvus = load("lyra_mi355x"), load("corvus_mi300x")
    for sc in (lyra, corvus):
        m = sc.model
        for o in [*old, *(x for x in (lyra, corvus) if x is not sc)]:
            assert m.served_name != o.model.served_name  # model_type: a type transformers knows (deepseek_v3)
            assert m.hidden_size != o.model.hidden_size and m.num_hidden_layers != o.model.num_hidden_layers
            assert m.mtp.layer_index != o.model.mtp.layer_index
            assert (m.moe.num_experts, m.moe.top_k, m.moe.intermediate_size) != (
                o.model.moe.num_experts, o.model.moe.top_k, o.model.moe.intermediate_size)
            assert sc.quantization.exclude != o.quantization.exclude
        assert not re.search(r"glm|orion|vega", f"{m.served_name} {m.architecture} {m.model_type}", re.I)
        assert m.mtp.layer_index == m.num_hidden_layers != 61  # where the release's mapper does not look
    assert (lyra.engine.version, lyra.hardware.gfx_arch) == ("0.5.12", "gfx950")
    assert (corvus.engine.version, corvus.hardware.gfx_arch, corvus.hardware.memory_gb) == ("0.5.13", "gfx942", 192)
    # lyra: Quark's exact-name style, one entry per module of the MTP layer, routed experts included
    entries = lyra.exclude_entries()
    assert not any(e.startswith("re:") for e in entries)
    mtp = f"model.layers.{lyra.model.mtp.layer_index}."
    assert sum(e.startswith(mtp + "mlp.experts.") for e in entries) == 3 * lyra.model.moe.num_experts
    # corvus: two headers of one file
    files = {d.file for d in corvus.defects.unguarded_includes}
    assert files == {UTILS} and [d.header for d in corvus.defects.unguarded_includes] == ["cuda_bf16.h", "cuda_fp8.h"]


@pytest.mark.parametrize("name", NEW)
def test_task_file_loads(name: str) -> None:
    task = load_task(REPO / "tasks" / f"{name}.yaml")
    sc = load(name)
    assert task.workspace.twin.scenario == name
    assert task.model.name == sc.model.served_name and task.model.architecture == sc.model.architecture
    assert task.model.quantization == sc.quantization.weight_format
    assert task.hardware.accelerator == sc.hardware.name and task.hardware.gpu_memory_gb == sc.hardware.memory_gb
    assert isinstance(task.accuracy.baseline, float) and (REPO / task.evals[task.accuracy.suite].dataset).is_file()
    assert {t.metric for t in task.targets} == {"throughput_at_knee", "decode_tok_s", "accuracy_delta"}
    assert all(t.min > 0 for t in task.targets if t.metric != "accuracy_delta")
    assert task.workloads["throughput"].ttft_limit_ms and task.workloads["single_stream"].max_concurrency == 1
    assert task.engines.twin is not None and "sandboxes.twin.launch_server" in task.engines.twin.launch


# --- lyra: a fully bf16 MTP layer ----------------------------------------------------------------------------


def test_lyra_checkpoint_keeps_the_whole_mtp_layer_bf16(lyra: Path) -> None:
    wm = json.loads((lyra / "model" / "model.safetensors.index.json").read_text())["weight_map"]
    mtp = {k: v for k, v in wm.items() if k.startswith("model.layers.40.")}
    assert mtp and not any(k.endswith("weight_scale") for k in mtp)
    assert all(v["dtype"] in ("BF16", "F32") for v in mtp.values())
    assert mtp["model.layers.40.mlp.experts.95.gate_proj.weight"] == {"dtype": "BF16", "shape": [1024, 3072]}
    assert wm["model.layers.39.mlp.experts.95.gate_proj.weight"]["dtype"] == "U8"  # the target's are MXFP4
    assert wm["model.layers.39.self_attn.kv_b_proj.weight"]["dtype"] == "BF16"
    cfg = json.loads((lyra / "model" / "config.json").read_text())
    assert "model.layers.40.mlp.experts.0.down_proj" in cfg["quantization_config"]["exclude"]  # expanded


def _draft(ws: Path, tmp: Path, extra: list[str]):
    """Load lyra's checkpoint with the draft and ``extra`` exclude entries (a private copy of config.json)."""
    model = tmp / "model"
    model.mkdir(parents=True)
    cfg = json.loads((ws / "model" / "config.json").read_text())
    cfg["quantization_config"]["exclude"] += extra
    (model / "config.json").write_text(json.dumps(cfg))
    (model / "model.safetensors.index.json").symlink_to(ws / "model" / "model.safetensors.index.json")
    return load_weights(model, ws / "sglang", with_draft=True, tp_size=8)


def test_lyra_draft_takes_one_entry_for_the_routed_experts(lyra: Path, tmp_path: Path) -> None:
    # as released: the draft builds layer 40 as MXFP4; its first weight, the bf16 eh_proj (a Quark
    # ReplicatedLinear named model.eh_proj), does not fit
    with pytest.raises(WeightLoadError) as info:
        _draft(lyra, tmp_path / "a0", [])
    assert info.value.param == f"{EH_PROJ}.weight"
    # with it named: the first routed expert's bf16 gate_proj does not fit w13
    with pytest.raises(WeightLoadError) as info:
        _draft(lyra, tmp_path / "a", [EH_PROJ])
    err = info.value
    assert err.draft and err.param == f"{EXPERTS}.w13_weight"
    assert err.checkpoint_param == "model.layers.40.mlp.experts.0.gate_proj.weight"
    assert _last_line(err.log) == ("RuntimeError: The size of tensor a (1536) must match the size of tensor b (3072) "
                                   "at non-singleton dimension 1")  # packed MXFP4 columns vs bf16 columns
    assert "fused_moe_triton/layer.py" in err.log and "deepseek_nextn.py" in err.log

    # the engine's names of every expert do not help: FusedMoE asks about its own prefix only
    per_expert = [f"{EXPERTS}.{e}.{p}" for e in range(96) for p in ("gate_proj", "up_proj", "down_proj")]
    with pytest.raises(WeightLoadError) as info:
        _draft(lyra, tmp_path / "b", [EH_PROJ, *LYRA_LINEARS, *per_expert])
    assert info.value.param == f"{EXPERTS}.w13_weight"

    # the experts' one entry alone: the next bf16 module, the shared expert's fused gate_up_proj, fails next
    with pytest.raises(WeightLoadError) as info:
        _draft(lyra, tmp_path / "c", [EH_PROJ, EXPERTS])
    assert info.value.param == f"{D}.mlp.shared_experts.gate_up_proj.weight"
    assert _last_line(info.value.log) == "AssertionError"

    # every linear by the draft's name, and the FusedMoE once: the whole layer loads, in bf16
    report = _draft(lyra, tmp_path / "d", [EH_PROJ, *LYRA_LINEARS, EXPERTS])
    assert EXPERTS in report.unquantized_modules and not report.not_loaded
    assert {f"{D}.mlp.shared_experts.gate_up_proj", f"{D}.self_attn.fused_qkv_a_proj_with_mqa"} <= set(
        report.unquantized_modules)
    assert report.draft_bytes_by_category["routed_experts"] == 96 * 3 * 1024 * 3072 * 2  # bf16, every expert


def test_lyra_draft_eh_proj_is_a_quark_linear(lyra: Path, tmp_path: Path) -> None:
    with pytest.raises(WeightLoadError) as info:
        _draft(lyra, tmp_path / "m", [*LYRA_LINEARS, EXPERTS])
    assert info.value.param == f"{EH_PROJ}.weight"
    assert "torch.uint8" in _last_line(info.value.log) and "torch.bfloat16" in _last_line(info.value.log)


def test_lyra_mtp_crashes_then_serves_with_the_engines_names(lyra: Path, tmp_path: Path) -> None:
    with pytest.raises(LaunchFailed) as info:
        start_server(lyra, tmp_path / "mtp.log", ["--tp-size", "8", *spec_flags(3)])
    log = info.value.log
    assert _last_line(log).startswith("AssertionError: param.shape=torch.Size([3072, 3072]) param.dtype=torch.uint8")
    assert "deepseek_nextn.py" in log and "Scheduler hit an exception: Traceback" in log

    _add_excludes(lyra, [EH_PROJ, *LYRA_LINEARS, EXPERTS])
    with running(lyra, tmp_path / "fixed.log", ["--tp-size", "8", *spec_flags(3)]) as server:
        rec = server.bench(tmp_path, "--dataset-name", "random-ids", "--random-input-len", "500",
                           "--random-output-len", "50", "--random-range-ratio", "1", "--num-prompts", "2",
                           "--max-concurrency", "1")  # fmt: skip
    assert rec["completed"] == 2 and rec["simulated"] and rec["accept_length"] > 2


# --- corvus: two unguarded headers in one file ---------------------------------------------------------------


def _guard(path: Path, header: str, hip: str) -> None:
    text = path.read_text()
    assert f"\n#include <{header}>\n" in text
    path.write_text(text.replace(f"\n#include <{header}>\n",
                                 f"\n#ifndef USE_ROCM\n#include <{header}>\n#else\n#include <{hip}>\n#endif\n", 1))


def _fatal(log: str) -> list[str]:
    return re.findall(r"fatal error: '([^']+)' file not found", log)


def test_corvus_headers_fail_one_at_a_time(corvus: Path, tmp_path: Path) -> None:
    utils = corvus / "sglang" / UTILS
    # the ordinary MTP defect, in the draft's fused q_a/kv_a projection: fix it first (engine names, regex style)
    with pytest.raises(LaunchFailed) as info:
        start_server(corvus, tmp_path / "mtp.log", ["--tp-size", "8", *spec_flags(1)])
    assert re.fullmatch(r"AssertionError: param\.shape=torch\.Size\(\[2112, 2304\]\) param\.dtype=torch\.uint8 "
                        r".*bfloat16", _last_line(info.value.log))  # fmt: skip
    _add_excludes(corvus, [r"re:model\.decoder\.self_attn\.(q_a_proj|kv_a_proj_with_mqa)$"])
    with running(corvus, tmp_path / "quiet.log", ["--tp-size", "8", *spec_flags(2)]):
        pass
    assert "[JIT]" not in (tmp_path / "quiet.log").read_text()  # two steps: the kernel is not built

    deep = ["--tp-size", "8", *spec_flags(3, topk=2)]
    with pytest.raises(LaunchFailed) as info:
        start_server(corvus, tmp_path / "jit1.log", deep)
    log = info.value.log
    assert _fatal(log) == ["cuda_bf16.h"]  # the compiler stops at the first one
    assert f"{utils}:" in log and "clamp_position.cuh" in log and "gfx942" in log

    _guard(utils, "cuda_bf16.h", "hip/hip_bf16.h")
    with pytest.raises(LaunchFailed) as info:
        start_server(corvus, tmp_path / "jit2.log", deep)
    assert _fatal(info.value.log) == ["cuda_fp8.h"]

    _guard(utils, "cuda_fp8.h", "hip/hip_fp8.h")
    with running(corvus, tmp_path / "fixed.log", deep) as server:
        rec = server.bench(tmp_path, "--dataset-name", "random-ids", "--random-input-len", "500",
                           "--random-output-len", "50", "--random-range-ratio", "1", "--num-prompts", "2",
                           "--max-concurrency", "1")  # fmt: skip
    assert rec["server_info"]["twin"]["jit_kernels"] == ["clamp_position"] and rec["accept_length"] > 2


def test_two_headers_of_one_guard_leave_it_in_the_files_order(tmp_path: Path) -> None:
    """Materialize moves each listed include out of its guard in the file's order, whatever the list's order."""
    import yaml

    from sandboxes.twin.scenario import SCENARIO_DIR

    data = yaml.safe_load((SCENARIO_DIR / "corvus_mi300x.yaml").read_text())
    data["defects"]["unguarded_includes"].reverse()
    reversed_path = tmp_path / "corvus_reversed.yaml"
    reversed_path.write_text(yaml.safe_dump(data, sort_keys=False))
    texts = {}
    for label, scenario in (("listed", "corvus_mi300x"), ("reversed", reversed_path)):
        result = materialize(scenario, tmp_path / label)
        texts[label] = (result.sglang_root / UTILS).read_text()
        assert [e.split("> ")[1] for e in result.defect_edits] == ["moved out of its USE_ROCM guard"] * 2
    assert texts["listed"] == texts["reversed"]
    lines = texts["listed"].splitlines()
    guard = lines.index("#ifndef USE_ROCM")
    assert lines[guard - 2:guard] == ["#include <cuda_bf16.h>", "#include <cuda_fp8.h>"]
    assert lines[guard + 1:guard + 4] == ["#include <cuda_fp16.h>", "#include <cuda_runtime.h>", "#else"]
