"""The twin's workspace: materialised checkpoint metadata + SGLang excerpt, and the failures they cause.

These tests drive the mechanisms the way an agent would: edit config.json or the workspace sources, then
load weights / build JIT kernels again. Nothing in the twin knows what "the fix" is.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import re
import shutil
from pathlib import Path

import pytest
import yaml

from sandboxes.twin import scenario as scenario_mod
from sandboxes.twin.__main__ import main as cli_main
from sandboxes.twin.engine import moe_csv
from sandboxes.twin.engine.jit import ROCM_INCLUDE, JitCompileError, compile_jit_kernels
from sandboxes.twin.engine.loading.loader import WeightLoadError, load_weights
from sandboxes.twin.workspace import materialize as materialize_mod
from sandboxes.twin.workspace.materialize import (
    MaterializeError,
    materialize,
    workspace_scenario,
)

QUARK_UTILS = "python/sglang/srt/layers/quantization/quark/utils.py"

needs_cpp = pytest.mark.skipif(shutil.which("cpp") is None, reason="the twin's JIT needs cpp")


@pytest.fixture(scope="session")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> Path:
    dest = tmp_path_factory.mktemp("pristine") / "ws"
    materialize(scenario_mod.DEFAULT_SCENARIO, dest)
    return dest


@pytest.fixture
def ws(pristine: Path, tmp_path: Path) -> Path:
    dest = tmp_path / "ws"
    shutil.copytree(pristine, dest)
    return dest


def _load(ws: Path, *, with_draft: bool):
    return load_weights(ws / "model", ws / "sglang", with_draft=with_draft, tp_size=8)


def _edit_config(ws: Path, fn) -> None:
    path = ws / "model" / "config.json"
    cfg = json.loads(path.read_text())
    fn(cfg)
    path.write_text(json.dumps(cfg, indent=2))


def _add_excludes(ws: Path, entries: list[str]) -> None:
    _edit_config(ws, lambda cfg: cfg["quantization_config"]["exclude"].extend(entries))


def _engine_excludes(prefix: str) -> list[str]:
    """What an agent adds: the checkpoint's MTP-layer exclude entries again, under the engine's names."""
    esc = re.escape(prefix)
    return [f"{prefix}.mlp.shared_experts.{p}" for p in ("gate_proj", "up_proj", "down_proj")] + [
        f"re:{esc}\\.self_attn\\.indexer\\..*"
    ]


def _guard_include(source: Path, header: str) -> None:
    lines = source.read_text().splitlines()
    out: list[str] = []
    for i, line in enumerate(lines):
        if line.strip() == f"#include <{header}>" and (i == 0 or lines[i - 1].strip() != "#ifndef USE_ROCM"):
            out += ["#ifndef USE_ROCM", line, "#endif"]
        else:
            out.append(line)
    source.write_text("\n".join(out) + "\n")


def _import(path: Path):
    spec = importlib.util.spec_from_file_location(f"_ws_{abs(hash(str(path)))}", path)
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


# --- materialize ----------------------------------------------------------------------------------------------


def test_materialize_writes_the_workspace(pristine: Path) -> None:
    sc = scenario_mod.load()
    model = pristine / "model"
    cfg = json.loads((model / "config.json").read_text())
    assert cfg["architectures"] == ["GlmMoeDsaForCausalLM"]
    assert cfg["num_hidden_layers"] == 78 and cfg["num_nextn_predict_layers"] == 1
    assert cfg["dayzero_twin"] == {"simulated": True, "scenario": "glm52_mi355x"}
    qc = cfg["quantization_config"]
    assert qc["quant_method"] == "quark"
    assert qc["global_quant_config"]["weight"]["dtype"] == "fp4"
    assert qc["global_quant_config"]["weight"]["group_size"] == 32
    assert qc["global_quant_config"]["input_tensors"]["is_dynamic"] is True
    assert qc["exclude"] == sc.exclude_entries()
    assert r"re:model\.layers\.\d+\.self_attn\.indexer\..*" in qc["exclude"] and "model.layers.78.eh_proj" in qc["exclude"]

    index = json.loads((model / "model.safetensors.index.json").read_text())
    assert index["metadata"]["simulated"] is True
    wm = index["weight_map"]
    # quantized routed and shared experts (also in the MTP layer), bf16 eh_proj, indexer, lm_head and router
    assert wm["model.layers.5.mlp.experts.17.gate_proj.weight"] == {"dtype": "U8", "shape": [2048, 3072]}
    assert wm["model.layers.5.mlp.experts.17.gate_proj.weight_scale"] == {"dtype": "U8", "shape": [2048, 192]}
    assert wm["model.layers.78.mlp.experts.255.down_proj.weight"] == {"dtype": "U8", "shape": [6144, 1024]}
    assert wm["model.layers.78.mlp.shared_experts.gate_proj.weight"] == {"dtype": "U8", "shape": [2048, 3072]}
    assert wm["model.layers.78.eh_proj.weight"] == {"dtype": "BF16", "shape": [6144, 12288]}  # excluded by name
    assert wm["model.layers.10.self_attn.indexer.wq_b.weight"]["dtype"] == "BF16"
    assert wm["model.layers.10.self_attn.q_b_proj.weight"]["dtype"] == "U8"
    assert wm["lm_head.weight"] == {"dtype": "BF16", "shape": [154880, 6144]}
    assert wm["model.layers.3.mlp.gate.weight"]["dtype"] == "BF16"
    assert wm["model.layers.1.mlp.gate_proj.weight"]["shape"] == [12288, 3072]
    assert not any(k.startswith("model.layers.79.") for k in wm)
    assert index["metadata"]["total_size"] > 300 * 2**30

    for name in ("tokenizer_config.json", "generation_config.json"):
        assert "simulated" in json.loads((model / name).read_text())["_comment"]
    root = pristine / "sglang"
    for rel in (QUARK_UTILS, "python/sglang/srt/models/deepseek_nextn.py", *(k.source for k in sc.engine.jit_kernels)):
        assert (root / rel).is_file(), rel  # the real tree (or the bundled excerpt) at its real paths
    aiter = pristine / "aiter"  # what the twin writes itself says so, with the scenario's hardware
    assert "dayzero digital twin of MI355X (simulated)" in (aiter / sc.engine.moe_config_reader).read_text().splitlines()[0]
    assert (aiter / sc.engine.default_moe_config).read_text().startswith("# dayzero digital twin (simulated)")
    assert json.loads((pristine / ".twin" / "source.json").read_text())["version"] == sc.engine.version
    assert workspace_scenario(pristine).name == "glm52_mi355x"


def test_the_checkpoint_index_is_computed_once_per_scenario(tmp_path: Path, monkeypatch) -> None:
    """Every workspace of a scenario holds the same index: computed once, copied from the per-user cache after,
    and computed again when what it is computed from differs (or the cache holds no whole entry)."""
    monkeypatch.setattr(materialize_mod, "index_cache", lambda: tmp_path / "cache")
    computed = []
    real = materialize_mod.index_text
    monkeypatch.setattr(materialize_mod, "index_text", lambda sc: computed.append(sc.name) or real(sc))
    sc = scenario_mod.load()
    sc = dataclasses.replace(sc, model=dataclasses.replace(sc.model, num_hidden_layers=4))  # a small index
    first = materialize_mod.write_index(sc, tmp_path / "first.json")
    again = materialize_mod.write_index(sc, tmp_path / "again.json")
    assert computed == ["glm52_mi355x"]
    assert again == first and (tmp_path / "again.json").read_bytes() == (tmp_path / "first.json").read_bytes()
    assert ((tmp_path / "first.json").read_text(), *first) == real(sc)
    quant = dataclasses.replace(sc.quantization, exclude=(*sc.quantization.exclude, "model.layers.1.mlp.gate_proj"))
    sc = dataclasses.replace(sc, quantization=quant)  # another exclude list: another index
    other = materialize_mod.write_index(sc, tmp_path / "other.json")
    assert computed == ["glm52_mi355x"] * 2 and other[1] > first[1]
    weight_map = json.loads((tmp_path / "other.json").read_text())["weight_map"]
    assert weight_map["model.layers.1.mlp.gate_proj.weight"]["dtype"] == "BF16"
    for sizes in (tmp_path / "cache").glob("*.sizes.json"):
        sizes.write_text("{")  # cut short: not a whole entry
    assert materialize_mod.write_index(sc, tmp_path / "cut.json") == other
    assert (tmp_path / "cut.json").read_bytes() == (tmp_path / "other.json").read_bytes()
    assert computed == ["glm52_mi355x"] * 3
    for kept in (tmp_path / "cache").glob("*.json.gz"):
        kept.write_bytes(kept.read_bytes()[:100])  # a kept index cut short: computed again, never half copied
    assert materialize_mod.write_index(sc, tmp_path / "torn.json") == other
    assert (tmp_path / "torn.json").read_bytes() == (tmp_path / "other.json").read_bytes()
    assert computed == ["glm52_mi355x"] * 4


def test_materialize_refuses_non_empty_dest(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    dest = tmp_path / "ws"
    assert cli_main(["materialize", "--scenario", "glm52_mi355x", "--dest", str(dest)]) == 0
    (dest / "model" / "config.json").write_text("{}")
    with pytest.raises(MaterializeError, match="not empty"):
        materialize("glm52_mi355x", dest)
    assert cli_main(["materialize", "--dest", str(dest)]) == 2
    assert "--force" in capsys.readouterr().err
    assert cli_main(["materialize", "--dest", str(dest), "--force"]) == 0
    assert json.loads((dest / "model" / "config.json").read_text())["num_hidden_layers"] == 78


def test_cli_lists_scenarios(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli_main(["scenarios"]) == 0
    assert "glm52_mi355x" in capsys.readouterr().out


# --- JIT kernels: fix 2 -------------------------------------------------------------------------------------


@needs_cpp
def test_jit_with_deep_speculation_fails_on_unguarded_cuda_header(ws: Path) -> None:
    sc = workspace_scenario(ws)
    lines: list[str] = []
    with pytest.raises(JitCompileError) as info:
        compile_jit_kernels(sc, ws / "sglang", {"speculative_num_steps": 5}, lines.append)
    kernel = sc.engine.jit_kernels[0]
    source = (ws / "sglang" / kernel.source).resolve()
    line = source.read_text().splitlines().index("#include <cuda_runtime.h>") + 1
    log = info.value.log
    # hipcc's (clang's) report, inside the RuntimeError tvm-ffi's build step raises, at the end of the traceback
    assert log.startswith("Traceback (most recent call last):")
    assert f"{source}:{line}:10: fatal error: 'cuda_runtime.h' file not found" in log
    assert f"{line:>5} | #include <cuda_runtime.h>\n      |          ^~~~~~~~~~~~~~~~\n" in log
    assert f"1 error generated when compiling for {sc.hardware.gfx_arch}." in log
    assert "\nRuntimeError: ninja exited with status 1\nstdout:\n" in log
    assert info.value.summary == f"JIT compilation of {kernel.name} failed (exit 1): {kernel.source}"
    assert info.value.kernel == kernel.name and info.value.source == kernel.source and info.value.returncode == 1
    assert lines and kernel.name in lines[0]
    assert lines[1].startswith("[JIT] /opt/rocm/bin/hipcc ") and f"--offload-arch={sc.hardware.gfx_arch}" in lines[1]
    assert "-DUSE_ROCM -std=c++20 -O3" in lines[1]


@needs_cpp
def test_jit_guarded_include_builds(ws: Path) -> None:
    sc = workspace_scenario(ws)
    kernel = sc.engine.jit_kernels[0]
    _guard_include(ws / "sglang" / kernel.source, "cuda_runtime.h")
    assert compile_jit_kernels(sc, ws / "sglang", {"speculative_num_steps": 5}, None) == [kernel.name]


@needs_cpp
def test_jit_not_triggered_at_three_steps(ws: Path) -> None:
    sc = workspace_scenario(ws)
    assert compile_jit_kernels(sc, ws / "sglang", {"speculative_num_steps": 3}, None) == []
    assert compile_jit_kernels(sc, ws / "sglang", {"speculative_num_steps": None}, None) == []
    assert compile_jit_kernels(sc, ws / "sglang", {}, None) == []


def test_rocm_include_tree() -> None:
    headers = {p.relative_to(ROCM_INCLUDE).as_posix() for p in ROCM_INCLUDE.rglob("*") if p.is_file()}
    assert not any(Path(h).name.startswith(("cuda", "cub")) for h in headers)
    hip = {"hip/hip_runtime.h", "hip/hip_runtime_api.h", "hip/hip_fp16.h", "hip/hip_bf16.h", "hip/hip_fp8.h",
           "hip/hip_cooperative_groups.h", "hipcub/hipcub.hpp"}
    assert hip | {"stdint.h", "stddef.h"} <= headers


# --- MoE kernel selection CSV ---------------------------------------------------------------------------------


def test_tuned_fmoe_reader(ws: Path) -> None:
    sc = workspace_scenario(ws)
    reader = _import(ws / "aiter" / sc.engine.moe_config_reader)
    assert tuple(reader.FMOE_CSV_COLUMNS) == moe_csv.FMOE_CSV_COLUMNS
    csv_path = ws / "aiter" / sc.engine.default_moe_config
    rows = reader.load_tuned_fmoe(str(csv_path))
    assert len(rows) == 14 * len(sc.defects.tuned_moe_shapes)
    assert {r["cu_num"] for r in rows} == {256}
    fp8 = moe_csv.dtype_code("fp8")
    shape = dict(model_dim=6144, inter_dim=2048, expert=256, topk=8)
    assert reader.lookup_tuned_fmoe(rows, token=100, q_dtype_w=fp8, **shape)["token"] == 128
    assert reader.lookup_tuned_fmoe(rows, token=1, q_dtype_w=fp8, **shape)["token"] == 1
    assert reader.lookup_tuned_fmoe(rows, token=20000, q_dtype_w=fp8, **shape)["token"] == 8192
    fp4 = moe_csv.dtype_code("mxfp4")
    assert reader.lookup_tuned_fmoe(rows, token=100, q_dtype_w=fp4, **shape) is None

    base = next(r for r in rows if r["model_dim"] == 6144)
    tuned = [dict(base, token=t, q_dtype_a=fp4, q_dtype_w=fp4, us=10.0) for t in (64, 256)]
    moe_csv.write_rows(csv_path, [*moe_csv.read_rows(csv_path), *tuned])
    rows = reader.load_tuned_fmoe(str(csv_path))
    hit = reader.lookup_tuned_fmoe(rows, token=100, q_dtype_w=fp4, **shape)
    assert hit is not None and hit["token"] == 256 and hit["us"] == 10.0
    assert reader.tuned_fmoe_path({"AITER_CONFIG_FMOE": "/x.csv"}) == "/x.csv"
    assert reader.tuned_fmoe_path({}) == sc.engine.default_moe_config


# --- a different scenario, the same mechanisms ----------------------------------------------------------------


def _other_scenario(tmp_path: Path) -> Path:
    data = yaml.safe_load(scenario_mod.resolve(scenario_mod.DEFAULT_SCENARIO).read_text())
    data["name"] = "other_moe_test"
    model = data["model"]
    model.update(served_name="acme/Other-MoE", architecture="DeepseekV32ForCausalLM", model_type="deepseek_v32",
                 hidden_size=4096, num_hidden_layers=40, vocab_size=100000, first_k_dense_replace=1,
                 dense_intermediate_size=8192)
    model["moe"].update(num_experts=64, top_k=4, intermediate_size=1024)
    model["mtp"].update(layer_index=40, checkpoint_prefix="model.layers.40")
    data["quantization"]["exclude"] = [
        "lm_head",
        "model.layers.{1..40}.mlp.shared_experts.gate_proj",
        "model.layers.{1..40}.mlp.shared_experts.up_proj",
        "model.layers.{1..40}.mlp.shared_experts.down_proj",
        r"re:model\.layers\.\d+\.self_attn\.indexer\..*",
    ]
    source = "python/sglang/jit_kernel/csrc/diffusion/timestep_embedding.cuh"
    data["engine"]["jit_kernels"] = [{
        "name": "timestep_embedding", "source": source,
        "when": {"flag": "speculative_num_steps", "above": 2},
        "includes": ["cuda_runtime.h"],
    }]
    data["defects"]["unguarded_includes"] = [{"file": source, "header": "cuda_runtime.h"}]
    data["defects"]["tuned_moe_shapes"] = [
        {"model_dim": 4096, "inter_dim": 1024, "experts": 64, "top_k": 4, "dtype": "fp8"}]
    path = tmp_path / "other_moe_test.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


@needs_cpp
def test_other_scenario_same_mechanisms(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    materialize(_other_scenario(tmp_path), ws)
    sc = workspace_scenario(ws)
    assert sc.name == "other_moe_test"
    assert _load(ws, with_draft=False).draft_bytes == 0
    with pytest.raises(WeightLoadError) as info:
        _load(ws, with_draft=True)
    assert info.value.param.startswith("model.decoder.mlp.shared_experts.")
    assert info.value.checkpoint_param.startswith("model.layers.40.mlp.shared_experts.")
    assert "deepseek_nextn.py" in info.value.log and info.value.log.splitlines()[-1] == "AssertionError"
    _add_excludes(ws, _engine_excludes("model.decoder"))
    assert _load(ws, with_draft=True).draft_bytes > 0

    root = ws / "sglang"
    kernel = sc.engine.jit_kernels[0]
    assert compile_jit_kernels(sc, root, {"speculative_num_steps": 2}, None) == []
    with pytest.raises(JitCompileError) as jinfo:
        compile_jit_kernels(sc, root, {"speculative_num_steps": 3}, None)
    assert "fatal error: 'cuda_runtime.h' file not found" in jinfo.value.log
    _guard_include(root / kernel.source, "cuda_runtime.h")
    assert compile_jit_kernels(sc, root, {"speculative_num_steps": 3}, None) == ["timestep_embedding"]
