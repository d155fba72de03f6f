"""A scenario from a model's real config.json (issues 25, 39): ``python -m sandboxes.twin scenario``, the checkpoint
it materialises (names from the release's own loaders, spelled as the real listing spells them, stored in the
vendor's quantization style), and the pinned release loading it.

For every real config in ``scenarios/configs`` with a full config.json the scenario is generated with the folder's
real tensor listing as its index, materialised, its index compared with the real tensor names, shapes and dtypes,
and loaded with the release's own model classes, target and (where the model has an MTP head) draft: every engine
parameter filled, nothing raised. Each model is generated, materialised and loaded once (module-scoped results).
"""

from __future__ import annotations

import json
import os
import re
import time
from pathlib import Path
from typing import NamedTuple

import pytest

from sandboxes.twin.__main__ import main as cli_main
from sandboxes.twin.engine.loading.loader import WeightLoadError, load_weights
from sandboxes.twin.models.quantization import Matcher, Scheme
from sandboxes.twin.scenario import SCENARIO_DIR, ScenarioError, load
from sandboxes.twin.scenario.generate import GenerateError, generate
from sandboxes.twin.workspace import release
from sandboxes.twin.workspace.materialize import materialize

C = SCENARIO_DIR / "configs"
# id: (config, the real tensor listing the naming facts are read from, a published quantization_config or None,
#      whether the listing is this very checkpoint's: names, shapes and dtypes must then all agree)
MODELS: dict[str, tuple[str, str, str | None, bool]] = {
    "DeepSeek-R1": ("deepseek-ai--DeepSeek-R1/config.json", "deepseek-ai--DeepSeek-R1/tensor_names.txt", None, True),
    "DeepSeek-V3.2": ("deepseek-ai--DeepSeek-V3.2/config.json", "deepseek-ai--DeepSeek-V3.2/tensor_names.txt", None, True),
    # GLM-5.1's listings: the same architecture and dimensions (SOURCE.md)
    "GLM-5": ("zai-org--GLM-5/config.json", "zai-org--GLM-5/tensor_names.GLM-5.1-same-architecture.txt", None, True),
    "GLM-5-FP8": ("zai-org--GLM-5/config.json", "zai-org--GLM-5/tensor_names.GLM-5.1-FP8-same-architecture.txt",
                  "zai-org--GLM-5/quantization_config.zai-org--GLM-5-FP8.json", True),
    # GLM-4.5-FP8's listing: the same Glm4MoeForCausalLM layout (a per-channel FP8 export: names agree, dtypes not)
    "GLM-4.7": ("zai-org--GLM-4.7/config.json", "zai-org--GLM-4.5-FP8/tensor_names.txt", None, False),
    "Qwen3-235B": ("Qwen--Qwen3-235B-A22B/config.json",
                   "Qwen--Qwen3-235B-A22B-Instruct-2507/tensor_names.Qwen3-235B-A22B-Instruct-2507-FP8.txt", None, False),
    "Qwen3-235B-FP8": ("Qwen--Qwen3-235B-A22B/config.json",
                       "Qwen--Qwen3-235B-A22B-Instruct-2507/tensor_names.Qwen3-235B-A22B-Instruct-2507-FP8.txt",
                       "Qwen--Qwen3-235B-A22B/quantization_config.Qwen--Qwen3-235B-A22B-FP8.json", True),
    "Qwen3-Next": ("Qwen--Qwen3-Next-80B-A3B-Instruct/config.json", "Qwen--Qwen3-Next-80B-A3B-Instruct/tensor_names.txt",
                   None, True),
    "Qwen3-Next-FP8": ("Qwen--Qwen3-Next-80B-A3B-Instruct/config.json",
                       "Qwen--Qwen3-Next-80B-A3B-Instruct/tensor_names.txt",
                       "Qwen--Qwen3-Next-80B-A3B-Instruct/quantization_config.Qwen--Qwen3-Next-80B-A3B-Instruct-FP8.json",
                       False),
    # the 35B-A3B sibling's partial listing: the naming scheme, not the 397B's shapes
    "Qwen3.5-397B": ("Qwen--Qwen3.5-397B-A17B/config.json",
                     "Qwen--Qwen3.5-397B-A17B/tensor_names.Qwen3.5-35B-A3B-sibling-partial.txt", None, False),
    "gpt-oss-120b": ("openai--gpt-oss-120b/config.json", "openai--gpt-oss-120b/tensor_names.txt", None, False),
    "gpt-oss-20b": ("openai--gpt-oss-20b/config.json", "openai--gpt-oss-20b/tensor_names.txt", None, True),
    "Kimi-K2": ("moonshotai--Kimi-K2-Instruct/config.json", "moonshotai--Kimi-K2-Instruct/tensor_names.txt", None, True),
    "MiniMax-M2.7": ("MiniMaxAI--MiniMax-M2.7/config.json", "MiniMaxAI--MiniMax-M2.7/tensor_names.txt", None, True),
}
# what neither the release nor a listing of patterns gives: Kimi-K2 stores a 56-entry rotary inv_freq buffer per
# layer, which no loader of the release reads (its rotary embedding computes its own); a listing of one name per
# pattern (another checkpoint's, as far as the twin knows) gives no shape it may take, so the name is left out
NOT_FROM_CONFIG = {"Kimi-K2": {"model.layers.0.self_attn.rotary_emb.inv_freq"}}
_DT = {"bfloat16": "BF16", "float32": "F32", "float8_e4m3fn": "F8_E4M3", "uint8": "U8"}


@pytest.fixture(scope="module")
def pinned_release() -> None:
    tree = release.release_tree("0.5.12")
    if not isinstance(tree, release.ReleaseTree):
        pytest.skip(f"release not available: {tree.reason}")


_RESULTS: dict[str, dict] = {}


def _model(model_id: str, tmp_path_factory: pytest.TempPathFactory) -> dict:
    """Generate, materialise and load ``model_id`` once for the module."""
    if model_id in _RESULTS:
        return _RESULTS[model_id]
    config, listing, qc, _ = MODELS[model_id]
    folder = tmp_path_factory.mktemp(re.sub(r"\W", "_", model_id))
    out = folder / "scenario.yaml"
    gen = generate(C / config, out, index_path=C / listing, quantization_path=C / qc if qc else None,
                   hardware="mi355x", release="0.5.12", index_partial=True)  # fmt: skip
    t = time.perf_counter()
    ws = materialize(out, folder / "ws")
    seconds = time.perf_counter() - t
    sc = load(out)
    report = error = None
    try:
        report = load_weights(ws.model_dir, ws.sglang_root, with_draft=sc.model.mtp is not None)
    except WeightLoadError as exc:
        error = exc
    _RESULTS[model_id] = {"gen": gen, "scenario": sc, "ws": ws, "report": report, "error": error,
                          "materialize_s": seconds}  # fmt: skip
    return _RESULTS[model_id]


@pytest.mark.parametrize("model_id", list(MODELS))
def test_generated_scenario_materialises_the_vendors_checkpoint_and_loads(
        model_id: str, pinned_release: None, tmp_path_factory: pytest.TempPathFactory) -> None:  # fmt: skip
    """One test per model (so that, with xdist, each model is generated, materialised and loaded once)."""
    r = _model(model_id, tmp_path_factory)
    gen, sc = r["gen"], r["scenario"]
    assert gen.questions == [], gen.questions
    head = gen.path.read_text().split("\nname:")[0]
    # the header cites the config and the listing as the file names them: relative to its own folder
    for source in MODELS[model_id][:2]:
        cited = os.path.relpath((C / source).resolve(), gen.path.parent.resolve())
        assert cited in head and (gen.path.parent / cited).resolve() == (C / source).resolve()
    # the index: every tensor of the real listing, with its shape and dtype where the listing is this checkpoint's
    _, listing, _, same = MODELS[model_id]
    index = json.loads((r["ws"].model_dir / "model.safetensors.index.json").read_text())["weight_map"]
    for line in (C / listing).read_text().splitlines():
        parts = line.split("\t")
        if not same and parts[0].endswith(("weight_scale", "weight_scale_inv")):
            continue  # another export's quantization (GLM-4.5-FP8's listing for a bf16 GLM-4.7): names of weights only
        if parts[0] in NOT_FROM_CONFIG.get(model_id, ()):
            continue
        assert parts[0] in index, f"{parts[0]} of the real checkpoint is not in the twin's index"
        if same and len(parts) > 2 and parts[0] not in NOT_FROM_CONFIG.get(model_id, ()):
            got = index[parts[0]]
            assert (got["shape"], got["dtype"]) == (json.loads(parts[1]), _DT[parts[2]]), parts[0]
    # the release's own classes load it: every engine parameter filled, target and draft
    assert r["error"] is None, r["error"] and r["error"].log[-3000:]
    report = r["report"]
    assert report.not_loaded == []
    assert report.target_class == gen.target_class
    if sc.model.mtp is not None:
        assert report.draft_class == gen.draft_class and gen.draft_class
    else:
        assert not gen.draft_class
    EXTRA.get(model_id, lambda r, index: None)(r, index)


def _deepseek_r1(r: dict, index: dict) -> None:
    """DeepSeek's FP8 config lists no module, yet its checkpoint keeps lm_head and the MTP layer's eh_proj and
    shared_head.head in bf16 (no scale beside them): the listing says so, and the index stores them so.
    The tensor count is the published checkpoint's (SOURCE.md: 91,991)."""
    assert index["model.layers.61.eh_proj.weight"]["dtype"] == "BF16"
    assert "model.layers.61.eh_proj.weight_scale_inv" not in index
    assert index["model.layers.61.self_attn.o_proj.weight"]["dtype"] == "F8_E4M3"
    assert r["ws"].num_params == 91991


def _glm5_fp8(r: dict, index: dict) -> None:
    """The published modules_to_not_convert is kept as is (``self_attn.indexers_proj``, a name no tensor has);
    what it really matches is stored unquantized, and the indexer's weights_proj (a plain linear) is bf16."""
    cfg = json.loads((r["ws"].model_dir / "config.json").read_text())
    assert "model.layers.0.self_attn.indexers_proj" in cfg["quantization_config"]["modules_to_not_convert"]
    assert "model.layers.0.self_attn.indexers_proj.weight" not in index
    assert index["model.layers.0.self_attn.indexer.weights_proj.weight"]["dtype"] == "BF16"
    assert index["model.layers.78.eh_proj.weight"]["dtype"] == "BF16"  # listed
    assert index["model.layers.0.self_attn.indexer.wk.weight_scale_inv"] == {"dtype": "F32", "shape": [1, 48]}
    assert r["ws"].num_params == 119028  # the biggest index here: materialised in r["materialize_s"] seconds


def _qwen_fp8(r: dict, index: dict) -> None:
    assert index["model.layers.0.self_attn.q_proj.weight_scale_inv"]["dtype"] == "BF16"  # Qwen's block scales
    assert index["model.layers.0.mlp.gate.weight"]["dtype"] == "BF16"  # listed per layer


def _deepseek_v32(r: dict, index: dict) -> None:
    assert r["ws"].num_params == 92425  # the published checkpoint's count (SOURCE.md)
    assert index["model.layers.61.self_attn.indexer.k_norm.bias"]["dtype"] == "F32"  # V3.2 stores norms in F32


EXTRA = {"DeepSeek-R1": _deepseek_r1, "DeepSeek-V3.2": _deepseek_v32, "GLM-5-FP8": _glm5_fp8,
         "Qwen3-235B-FP8": _qwen_fp8}


# --- how each vendor stores a quantized module ------------------------------------------------------------


class Module(NamedTuple):  # what Scheme.tensors reads of a module: its shape ([o, i], or [E, o, i] fused)
    name: str
    shape: tuple[int, ...]


def test_each_vendors_quantization_style() -> None:
    lin = Module("model.layers.0.mlp.down_proj", (7168, 18432))
    fp8 = Scheme({"quant_method": "fp8", "weight_block_size": [128, 128], "activation_scheme": "dynamic"})
    assert fp8.tensors(lin, True) == [(".weight", "F8_E4M3", (7168, 18432)), (".weight_scale_inv", "F32", (56, 144))]
    qwen = Scheme({"quant_method": "fp8", "weight_block_size": [128, 128]}, scale_dtype="BF16")
    assert qwen.tensors(lin, True)[1] == (".weight_scale_inv", "BF16", (56, 144))
    quark = Scheme({"quant_method": "quark", "global_quant_config": {"weight": {"dtype": "fp4"}},
                    "exclude": ["lm_head", r"re:model\.layers\.\d+\.self_attn\..*", "model.layers.61"]})  # fmt: skip
    assert quark.tensors(lin, True) == [(".weight", "U8", (7168, 9216)), (".weight_scale", "U8", (7168, 576))]
    assert not quark.quantizes("model.layers.61.mlp.experts.0.up_proj", "routed_experts")  # a whole-layer prefix
    assert not quark.quantizes("model.layers.3.self_attn.o_proj", "attention")
    assert quark.quantizes("model.layers.3.mlp.experts.0.up_proj", "routed_experts")
    experts = Module("model.layers.0.mlp.experts.gate_up_proj", (32, 5760, 2880))
    oss = Scheme({"quant_method": "mxfp4", "modules_to_not_convert": ["model.layers.*.self_attn", "lm_head"]})
    assert oss.tensors(experts, True) == [("_blocks", "U8", (32, 5760, 90, 16)), ("_scales", "U8", (32, 5760, 90))]
    assert not oss.quantizes("model.layers.0.self_attn.q_proj", "attention")
    assert oss.tensors(experts, False) == [("", "BF16", (32, 5760, 2880))]  # Qwen3.5's bf16 fused experts
    # transformers' rule for modules_to_not_convert: regex from the start, a dotted prefix, or a suffix
    m = Matcher(["gate", "e_score_correction_bias", "model.layers.*.self_attn", "lm_head"], "transformers")
    assert m("model.layers.4.block_sparse_moe.gate") and m("model.layers.9.self_attn.o_proj") and m("lm_head")
    assert not m("model.layers.4.block_sparse_moe.experts.0.w1")


# --- questions and refusals -----------------------------------------------------------------------------------


def test_a_missing_fact_is_asked_in_one_line(pinned_release: None, tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    """Qwen3-Next's config.json says nothing of its MTP head (the checkpoint has one under mtp.): without the index
    that stays open, named on one line. How its Gated DeltaNet projections are named is the release's loader's to
    say, so nothing else is asked."""
    out = tmp_path / "next.yaml"
    rc = cli_main(["scenario", "--config", str(C / "Qwen--Qwen3-Next-80B-A3B-Instruct/config.json"),
                   "--hardware", "mi355x", "-o", str(out)])  # fmt: skip
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 3
    assert [line.split(":")[1].strip() for line in err if line.startswith("question:")] == ["model.facts.mtp.num_layers"]
    text = out.read_text()
    assert "# QUESTION mtp.num_layers" in text and "Qwen3NextForCausalLMMTP" in text
    with pytest.raises(ScenarioError) as info:
        load(out)
    assert "\n" not in str(info.value) and "model.facts.mtp.num_layers" in str(info.value)


def test_a_config_scenario_without_an_index_takes_the_release_loaders_names(pinned_release: None,
                                                                            tmp_path: Path) -> None:  # fmt: skip
    """No listing at hand: every tensor name is one the release's MiniMax loader accepts (its per-expert w1/w3/w2
    under block_sparse_moe, as the real checkpoint has them), and the release loads the checkpoint whole."""
    scenario = tmp_path / "mm.yaml"
    base = (SCENARIO_DIR / "glm52_mi355x.yaml").read_text()
    cfg = (C / "MiniMaxAI--MiniMax-M2.7/config.json").resolve()
    model = f"model:\n  served_name: mm\n  config: {cfg}\n  facts: {{mtp.num_layers: 0}}\n\nquantization: {{}}\n\n"
    body = re.sub(r"(?ms)^model:.*?^(?=hardware:)", model, base).replace("name: glm52_mi355x", "name: mm")
    scenario.write_text(body)
    ws = materialize(scenario, tmp_path / "ws")
    index = json.loads((ws.model_dir / "model.safetensors.index.json").read_text())["weight_map"]
    real = {line.split("\t")[0] for line in (C / "MiniMaxAI--MiniMax-M2.7/tensor_names.txt").read_text().splitlines()}
    assert real <= set(index), sorted(real - set(index))[:5]
    assert load_weights(ws.model_dir, ws.sglang_root, with_draft=False).not_loaded == []


def test_refuses_an_architecture_the_release_does_not_register(pinned_release: None, tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    cfg = json.loads((C / "openai--gpt-oss-20b/config.json").read_text())
    cfg["architectures"] = ["NoSuchMoeForCausalLM"]
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    rc = cli_main(["scenario", "--config", str(tmp_path / "config.json"), "--hardware", "mi300x",
                   "-o", str(tmp_path / "x.yaml")])  # fmt: skip
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1
    # the release's registry resolves an architecture it does not list to its Transformers fallback
    assert "cannot serve NoSuchMoeForCausalLM" in err[0] and "Transformers fallback" in err[0]
    assert not (tmp_path / "x.yaml").exists()
    with pytest.raises(GenerateError, match="unknown hardware"):
        generate(tmp_path / "config.json", tmp_path / "y.yaml", hardware="h100")


# --- the defect class the zoo plants -----------------------------------------------------------------------------


def test_an_exclusion_under_checkpoint_names_fails_the_draft_as_the_release_does(pinned_release: None,
                                                                                 tmp_path: Path) -> None:  # fmt: skip
    """A Quark MXFP4 export of GLM-5 that keeps its whole MTP layer bf16 and says so under the checkpoint's names
    (``re:model\\.layers\\.78\\..*``): the target loads; the draft builds that layer as ``model.decoder``, which the
    list does not name (0.5.12's mapper maps only layer 61), so it is quantized and the bf16 tensors fail in the
    layer's weight_loader, as the release fails. On MI300X (gfx942), whose peak table gives MXFP4 the FP8 rate."""
    qc = json.loads((SCENARIO_DIR / "configs/deepseek-ai--DeepSeek-V3.2/"
                     "quantization_config.AMD-quark-MXFP4-script-for-DeepSeek-V3.2-Exp.json").read_text())
    qc["exclude"] = ["lm_head", r"re:.*mlp.gate$", r"re:model\.layers\.78\..*"]
    (tmp_path / "quark.json").write_text(json.dumps(qc))
    out = tmp_path / "glm5_quark.yaml"
    gen = generate(C / "zai-org--GLM-5/config.json", out, index_path=C / "zai-org--GLM-5/tensor_names.GLM-5.1-same-architecture.txt",
                   quantization_path=tmp_path / "quark.json", hardware="mi300x", index_partial=True)  # fmt: skip
    assert gen.questions == []
    sc = load(out)
    assert (sc.hardware.gfx_arch, sc.hardware.memory_gb, sc.hardware.memory_bandwidth_tbs) == ("gfx942", 192, 5.3)
    assert sc.hardware.peak_tflops["mxfp4"] == sc.hardware.peak_tflops["fp8"]
    assert "no MXFP4 matrix cores" in out.read_text()
    ws = materialize(out, tmp_path / "ws")
    index = json.loads((ws.model_dir / "model.safetensors.index.json").read_text())["weight_map"]
    assert index["model.layers.78.self_attn.q_b_proj.weight"]["dtype"] == "BF16"
    assert index["model.layers.77.self_attn.q_b_proj.weight"]["dtype"] == "U8"
    report = load_weights(ws.model_dir, ws.sglang_root, with_draft=False)
    assert report.not_loaded == []
    with pytest.raises(WeightLoadError) as info:
        load_weights(ws.model_dir, ws.sglang_root, with_draft=True)
    err = info.value
    assert err.draft and err.checkpoint_param and err.checkpoint_param.startswith("model.layers.78.")
    assert err.log.startswith("Traceback (most recent call last):")
    assert "deepseek_weight_loader.py" in err.log and "weight_loader" in err.log


# --- a separate draft checkpoint -----------------------------------------------------------------------------------

QWEN_EAGLE3 = C / "sgl-project--SpecForge-eagle3-templates/qwen3-235B-A22B-eagle3.json"


def test_a_separate_eagle3_draft_is_generated_materialised_and_loaded_by_its_own_class(
        pinned_release: None, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    """Qwen3-235B has no MTP layer (as its own EAGLE draft it fails: test_zoo_mechanisms); with an EAGLE3 head given
    by its config (``--draft-config``) the scenario holds it, the workspace stores it as ``draft/`` in the EAGLE3
    checkpoint layout, and the release loads it with ``LlamaForCausalLMEagle3`` (its legacy ``midlayer`` names
    renamed by its own load_weights), every draft parameter filled, after the target's class was asked to capture
    the draft's aux hidden states."""
    out = tmp_path / "qwen_eagle3.yaml"
    rc = cli_main(["scenario", "--config", str(C / "Qwen--Qwen3-235B-A22B/config.json"), "--index",
                   str(C / "Qwen--Qwen3-235B-A22B-Instruct-2507/tensor_names.Qwen3-235B-A22B-Instruct-2507-FP8.txt"),
                   "--draft-config", str(QWEN_EAGLE3), "--hardware", "mi300x", "-o", str(out)])  # fmt: skip
    assert rc == 0, capsys.readouterr().err
    assert "draft python/sglang/srt/models/llama_eagle3.py:LlamaForCausalLMEagle3" in capsys.readouterr().out
    sc = load(out)
    assert sc.model.draft is not None and sc.model.draft.hf_config["draft_vocab_size"] == 32000
    ws = materialize(out, tmp_path / "ws")
    draft_dir = ws.dest / "draft"
    index = json.loads((draft_dir / "model.safetensors.index.json").read_text())
    assert index["weight_map"]["fc.weight"]["shape"] == [4096, 3 * 4096]  # three aux states of the target's width
    assert index["weight_map"]["midlayer.self_attn.q_proj.weight"]["shape"] == [64 * 128, 2 * 4096]
    assert json.loads((draft_dir / "config.json").read_text())["architectures"] == ["LlamaForCausalLMEagle3"]
    report = load_weights(ws.model_dir, ws.sglang_root, with_draft=True, draft_dir=draft_dir, eagle3=True)
    assert report.draft_class == "python/sglang/srt/models/llama_eagle3.py:LlamaForCausalLMEagle3"
    assert report.draft_layers == 1 and report.not_loaded == []
    # every weight is on the GPU; the vocabulary maps are read by load_weights, not stored as parameters
    maps = 8 * 32000 + 151936  # d2t (int64 per draft token), t2d (bool per target token)
    assert report.draft_bytes == index["metadata"]["total_size"] - maps
    assert report.target_class.endswith(":Qwen3MoeForCausalLM")
    # the workspace's copy of the scenario loads on its own (the draft's config copied beside it)
    assert load(ws.dest / ".twin" / "scenario.yaml").model.draft == sc.model.draft


def test_a_draft_the_release_or_the_twin_cannot_hold_is_refused_in_one_line(
        pinned_release: None, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    draft = json.loads(QWEN_EAGLE3.read_text())
    for arch, problem in (("NoSuchEagle3", "registers no model class 'NoSuchEagle3' for the draft"),
                          ("LlamaForCausalLMEagle", "EAGLE3 layout only")):  # registered: EAGLE-2's layout differs
        cfg = {**draft, "architectures": [arch]}
        cfg.pop("eagle_config")
        (tmp_path / "draft.json").write_text(json.dumps(cfg))
        rc = cli_main(["scenario", "--config", str(C / "Qwen--Qwen3-235B-A22B/config.json"), "--draft-config",
                       str(tmp_path / "draft.json"), "--hardware", "mi300x", "-o", str(tmp_path / "x.yaml")])  # fmt: skip
        err = capsys.readouterr().err.strip().splitlines()
        assert rc == 2 and len(err) == 1 and problem in err[0], err
        assert not (tmp_path / "x.yaml").exists()
