"""Weight loading against the real SGLang tree: the workspace's own pure functions decide, the loaders' own
messages come out, and the traceback names the real files, functions and lines.

Driven the way an agent would: edit config.json or the workspace's sources, then load again. Nothing in the
twin knows what "the fix" is.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from sandboxes.twin.engine.loading.loader import WeightLoadError, WorkspaceImportError, load_weights
from sandboxes.twin.scenario import ScenarioError
from sandboxes.twin.workspace import release
from sandboxes.twin.workspace.materialize import materialize, workspace_scenario

NEXTN = "python/sglang/srt/models/deepseek_nextn.py"
QUARK_UTILS = "python/sglang/srt/layers/quantization/quark/utils.py"
LINEAR = "python/sglang/srt/layers/linear.py"


@pytest.fixture(scope="session")
def pristine_workspaces(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    out = {}
    for name in ("glm52_mi355x", "vega_mi355x", "orion_mi300x"):
        dest = tmp_path_factory.mktemp(name) / "ws"
        materialize(name, dest)
        out[name] = dest
    return out


def workspace(pristine_workspaces: dict[str, Path], tmp_path: Path, name: str = "glm52_mi355x") -> Path:
    dest = tmp_path / "ws"
    shutil.copytree(pristine_workspaces[name], dest, symlinks=True)
    return dest


@pytest.fixture
def ws(pristine_workspaces: dict[str, Path], tmp_path: Path) -> Path:
    return workspace(pristine_workspaces, tmp_path)


def load(ws: Path, *, draft: bool, tp: int = 8):
    return load_weights(ws / "model", ws / "sglang", with_draft=draft, tp_size=tp)


def edit_config(ws: Path, fn) -> None:
    path = ws / "model" / "config.json"
    cfg = json.loads(path.read_text())
    fn(cfg)
    path.write_text(json.dumps(cfg, indent=2))


def failure(ws: Path, **kw) -> WeightLoadError:
    with pytest.raises(WeightLoadError) as info:
        load(ws, **kw)
    return info.value


def line_of(ws: Path, frame_line: str) -> str:
    """The source line a traceback frame line points at, read from the workspace."""
    m = re.match(r'\s*File "([^"]+)", line (\d+), in (\S+)', frame_line)
    assert m, frame_line
    return Path(m.group(1)).read_text().splitlines()[int(m.group(2)) - 1].strip()


def frames(log: str) -> list[str]:
    return [ln for ln in log.splitlines() if ln.lstrip().startswith('File "')]


def test_the_workspace_is_the_real_release(ws: Path) -> None:
    source = json.loads((ws / ".twin" / "source.json").read_text())
    sc = workspace_scenario(ws)
    tree = release.release_tree(sc.engine.version)
    if not isinstance(tree, release.ReleaseTree):
        pytest.skip(f"release not available: {tree.reason}")
    assert source["sglang"].startswith(f"release: sglang=={sc.engine.version}")
    real = tree.package / "srt/models/deepseek_nextn.py"
    assert (ws / "sglang" / NEXTN).read_bytes() == real.read_bytes()
    n_files = sum(1 for p in (ws / "sglang/python/sglang").rglob("*") if p.is_file())
    assert n_files == sum(1 for p in tree.package.rglob("*") if p.is_file()) > 1000


def test_target_model_loads_through_the_class_the_release_registers(ws: Path) -> None:
    report = load(ws, draft=False)
    assert report.quant_format == "mxfp4" and report.draft_bytes == 0 and not report.not_loaded
    assert report.target_class == "python/sglang/srt/models/glm4_moe.py:GlmMoeDsaForCausalLM"
    # the DSA indexer is excluded by the checkpoint's regex, asked by the engine's own module names
    assert "model.layers.3.self_attn.indexer.wq_b" in report.unquantized_modules
    # SGLang 0.5.12 fuses the single shared expert into the routed experts' FusedMoE on gfx942 and newer
    assert not any("shared_experts" in m for m in report.unquantized_modules)
    assert report.target_bytes_by_category["routed_experts"] > report.target_bytes_by_category["shared_experts"] > 0


def test_draft_fails_where_the_release_loads_the_mtp_layers_eh_proj(ws: Path) -> None:
    err = failure(ws, draft=True)
    assert err.draft and err.param == "model.eh_proj.weight"
    assert err.checkpoint_param == "model.layers.78.eh_proj.weight"
    log = err.log
    assert log.startswith("Traceback (most recent call last):")
    # ReplicatedLinear.weight_loader's own message: shapes and dtypes, no names
    assert log.splitlines()[-1] == ("AssertionError: param.shape=torch.Size([6144, 6144]) param.dtype=torch.uint8 "
                                    "loaded_weight.shape=torch.Size([6144, 12288]) loaded_weight.dtype=torch.bfloat16")
    assert "model.decoder" not in log and "model.layers.78" not in log
    fr = frames(log)
    nextn = next(f for f in fr if str(ws / "sglang" / NEXTN) in f)
    assert nextn.endswith("in load_weights")
    assert line_of(ws, nextn) == "super().load_weights(weights, is_nextn=True)"
    for f in fr:  # every frame of the workspace's tree points at real code in the named function
        if str(ws) in f:
            assert line_of(ws, f), f
    # the weights are host tensors: the loader ran each weight_loader in its thread pool
    assert any("concurrent/futures/thread.py" in f for f in fr)
    assert str(ws / "sglang" / LINEAR) in fr[-1] and fr[-1].endswith("in weight_loader")
    source = (ws / "sglang" / LINEAR).read_text().splitlines()
    n = int(re.search(r"line (\d+)", fr[-1]).group(1))
    owner = next(ln for ln in reversed(source[:n]) if ln.startswith("class "))
    assert owner.startswith("class ReplicatedLinear")


ENGINE_NAMES = ["model.eh_proj", r"re:model\.decoder\.self_attn\.indexer\..*"]


def test_engine_names_in_the_exclude_list_fix_the_draft(ws: Path) -> None:
    edit_config(ws, lambda cfg: cfg["quantization_config"]["exclude"].extend(ENGINE_NAMES))
    report = load(ws, draft=True)
    assert report.draft_class == "python/sglang/srt/models/deepseek_nextn.py:DeepseekV3ForCausalLMNextN"
    assert report.draft_bytes_by_category["mtp"] >= 6144 * 12288 * 2  # eh_proj in bf16
    assert "model.eh_proj" in report.unquantized_modules
    assert "model.decoder.self_attn.indexer.wq_b" in report.unquantized_modules


def test_one_name_at_a_time_reveals_the_next_module(ws: Path) -> None:
    edit_config(ws, lambda cfg: cfg["quantization_config"]["exclude"].append("model.eh_proj"))
    err = failure(ws, draft=True)  # the DSA indexer's ReplicatedLinear prints shapes and dtypes
    assert err.param.startswith("model.decoder.self_attn.indexer.")
    last = err.log.splitlines()[-1]
    assert re.fullmatch(r"AssertionError: param\.shape=torch\.Size\(\[\d+, \d+\]\) param\.dtype=torch\.uint8 "
                        r"loaded_weight\.shape=torch\.Size\(\[\d+, \d+\]\) loaded_weight\.dtype=torch\.bfloat16", last)


def test_a_fix_in_the_engine_matcher_is_honoured(ws: Path) -> None:
    utils = ws / "sglang" / QUARK_UTILS
    text = utils.read_text()
    assert "def should_ignore_layer(" in text
    utils.write_text(text + '''

_checkpoint_names_only = should_ignore_layer


def should_ignore_layer(layer_name, ignore, fused_mapping=MappingProxyType({})):
    """Also ask under the checkpoint's name of the NextN layer."""
    if _checkpoint_names_only(layer_name, ignore, fused_mapping):
        return True
    if layer_name is not None and layer_name.startswith("model.decoder."):
        return _checkpoint_names_only("model.layers.78." + layer_name[14:], ignore, fused_mapping)
    if layer_name == "model.eh_proj":
        return _checkpoint_names_only("model.layers.78.eh_proj", ignore, fused_mapping)
    return False
''')
    assert load(ws, draft=True).draft_bytes > 0


def test_the_draft_models_own_mapper_is_honoured(pristine_workspaces: dict[str, Path], tmp_path: Path) -> None:
    ws = workspace(pristine_workspaces, tmp_path, "vega_mi355x")  # exact per-layer names: the mapper maps them
    failure(ws, draft=True)
    nextn = ws / "sglang" / NEXTN
    text = nextn.read_text()
    assert '"model.layers.61": "model.decoder"' in text
    nextn.write_text(text.replace('"model.layers.61": "model.decoder"', '"model.layers.48": "model.decoder"'))
    report = load(ws, draft=True)
    assert "model.decoder.self_attn.kv_b_proj" in report.unquantized_modules


def test_column_parallel_message(pristine_workspaces: dict[str, Path], tmp_path: Path) -> None:
    ws = workspace(pristine_workspaces, tmp_path, "vega_mi355x")
    edit_config(ws, lambda cfg: cfg["quantization_config"]["exclude"].extend(
        [f"model.decoder.mlp.shared_experts.{p}" for p in ("gate_proj", "up_proj", "down_proj")]))
    err = failure(ws, draft=True)
    assert err.param == "model.decoder.self_attn.kv_b_proj.weight"
    assert re.fullmatch(r"AssertionError: param_data\.shape=torch\.Size\(\[\d+, \d+\]\) != "
                        r"loaded_weight\.shape=torch\.Size\(\[\d+, \d+\]\)", err.log.splitlines()[-1])


def test_fused_moe_and_default_loader_messages(ws: Path) -> None:
    # an exclude entry for every MoE layer's routed experts: the engine builds bf16 experts for fp4 weights
    edit_config(ws, lambda cfg: cfg["quantization_config"]["exclude"].append(r"re:model\.layers\.5\.mlp\.experts"))
    err = failure(ws, draft=False)
    assert re.fullmatch(r"RuntimeError: The size of tensor a \(\d+\) must match the size of tensor b \(\d+\) at "
                        r"non-singleton dimension \d", err.log.splitlines()[-1])
    assert "_load_w13" in err.log or "_load_w2" in err.log
    edit_config(ws, lambda cfg: cfg["quantization_config"]["exclude"].pop())
    index = ws / "model" / "model.safetensors.index.json"
    data = json.loads(index.read_text())
    data["weight_map"]["model.norm.weight"]["shape"] = [1234]
    index.write_text(json.dumps(data))
    err = failure(ws, draft=False)
    assert err.log.splitlines()[-1] == ("AssertionError: Attempted to load weight (torch.Size([1234])) into "
                                        "parameter (torch.Size([6144]))")


def test_syntax_error_in_the_workspace_matcher(ws: Path) -> None:
    utils = ws / "sglang" / QUARK_UTILS
    utils.write_text(utils.read_text().replace("def check_equal_or_regex_match(", "def check_equal_or_regex_match((", 1))
    with pytest.raises(WorkspaceImportError) as info:
        load(ws, draft=False)
    assert "SyntaxError" in info.value.log and str(utils) in info.value.log


def test_without_the_release_a_model_is_refused_in_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The twin describes a model by the release's own classes: with no release to read (no registry, nothing kept
    in the cache), loading a scenario says so in one line rather than simulating a model it cannot describe."""
    monkeypatch.setenv("DAYZERO_CACHE", str(tmp_path / "empty-cache"))
    monkeypatch.setenv("DAYZERO_SGLANG_SOURCE", "bundled")
    with pytest.raises(ScenarioError) as info:
        materialize("glm52_mi355x", tmp_path / "ws")
    message = str(info.value)
    assert "\n" not in message and "release is not available" in message and "DAYZERO_SGLANG_SOURCE=bundled" in message


# --- the draft's constructor runs as written (sandboxes/twin/engine/loading/executor.py) ------------------------


def test_a_fix_in_the_draft_constructor_is_honoured(pristine_workspaces: dict[str, Path], tmp_path: Path) -> None:
    """The upstream fix the agent proposes (map the checkpoint's MTP-layer exclude entries in __init__) loads the
    draft with the checkpoint's config as released, for regex and exact-name exclude lists alike."""
    from agent.fixes.engine_modules import EngineSource, ModuleTree
    from agent.fixes.excludes import own_modules
    from agent.policies.upstream_fixes import map_draft_excludes

    for name in ("glm52_mi355x", "vega_mi355x"):
        ws = workspace(pristine_workspaces, tmp_path / name, name)
        assert failure(ws, draft=True).draft
        path = ws / "sglang" / NEXTN
        # the MTP layer's own quantized modules (eh_proj, a Quark linear), read from the draft class's source
        src = EngineSource(lambda p, ws=ws: (ws / p).read_text() if (ws / p).is_file() else None, "sglang/python")
        tree = ModuleTree(src, "sglang.srt.models.deepseek_nextn", "DeepseekV3ForCausalLMNextN", "quark")
        fixed = map_draft_excludes(path.read_text(), "DeepseekV3ForCausalLMNextN",
                                   'f"model.layers.{config.num_hidden_layers}"', "model.layers.<N>", "model.decoder",
                                   own_modules(tree, "model.decoder"))  # fmt: skip
        assert fixed is not None
        path.write_text(fixed)
        report = load(ws, draft=True)  # the config is untouched
        assert report.draft_bytes > 0 and any(m.startswith("model.decoder.") for m in report.unquantized_modules)


def test_the_constructor_decides_whole_layer_exclusion(ws: Path) -> None:
    """An exclude entry naming the draft's layer prefix makes __init__ build the whole layer unquantized (the
    release's own `should_ignore_layer(mapped_prefix, ...)` branch), with no entry for any module in it. This
    checkpoint stores that layer in MXFP4, so its scales have no parameter: the loader warns for each, until
    the fused q_a/kv_a projection looks its scale up without a check."""
    edit_config(ws, lambda cfg: cfg["quantization_config"]["exclude"].append("model.layers.78"))
    path = ws / "sglang" / NEXTN
    path.write_text(path.read_text().replace('"model.layers.61": "model.decoder"', '"model.layers.78": "model.decoder"'))
    err = failure(ws, draft=True)
    assert err.draft
    assert err.log.splitlines()[-1] == "KeyError: 'model.decoder.self_attn.fused_qkv_a_proj_with_mqa.weight_scale'"


def test_an_exception_in_the_draft_constructor_is_the_engines_crash(ws: Path) -> None:
    path = ws / "sglang" / NEXTN
    text = path.read_text()
    # a stubbed engine object answers anything; a real one (the config's exclude list) raises as it would:
    path.write_text(text.replace("        nextn_quant_config = quant_config\n",
                                 "        nextn_quant_config = quant_config.exclude_layers[10**6]\n", 1))
    err = failure(ws, draft=True)
    assert err.log.splitlines()[-1] == "IndexError: list index out of range"
    assert str(path) in err.log
