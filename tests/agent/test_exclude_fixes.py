"""The exclude fixes for a draft's MTP layer, as a maintainer reads them (issue 27), on the twin's scenarios.

For every scenario whose draft crashes on an exclude list that names its MTP layer otherwise than the draft builds
it: the config fix adds only modules the draft builds quantized (no norm, no name the draft never builds), in the
list's own style (one whole-layer ``re:`` entry where the list keeps the whole layer by a pattern), and the draft
then loads. The engine fix goes into the draft file the crash's traceback names (``deepseek_nextn.py``,
``glm4_moe_nextn.py``), covers the MTP layer's own modules (``eh_proj``) and a whole-layer pattern, and comes with a
unit test in SGLang's ``test/srt/models`` style that fails on the release's file and passes on the fixed one (run
with the twin's executor: the workspace's real model and quantization code, torch stubbed).
"""

from __future__ import annotations

import ast
import builtins
import io
import json
import shutil
import subprocess
import unittest
from pathlib import Path
from types import SimpleNamespace

import pytest

from agent.fixes.engine_modules import EngineSource, ModuleTree
from agent.fixes.excludes import excluded
from agent.policies.playbook import PlaybookPolicy, _draft_tree, _quantized_in_draft
from agent.policies.upstream_fixes import _init_of, map_draft_excludes
from sandboxes.twin.engine.loading.executor import Executor
from sandboxes.twin.engine.loading.loader import WeightLoadError, load_weights
from sandboxes.twin.workspace import release
from sandboxes.twin.workspace.materialize import materialize
from tests.workspace_dir import DirWorkspace
from tools.diagnose import Diagnosis, classify
from tools.weight_suspects import suspects_in_workspace

# every scenario whose draft crashes on an exclude list naming its MTP layer under other names than the draft's,
# fixed in the checkpoint's config (qwen3_next_80b_mxfp4's draft shares the target's names: an engine-only fix)
EXCLUDE_DEFECTS = ("glm52_mi355x", "orion_mi300x", "vega_mi355x", "lyra_mi355x", "corvus_mi300x",
                   "deepseek_r1_mxfp4_mi355x", "qwen35_397b_mxfp4_mi355x", "glm47_mxfp4_mi355x")  # fmt: skip




def _crash(model: Path, sglang: Path) -> WeightLoadError | None:
    try:
        load_weights(model, sglang, with_draft=True, tp_size=8)
    except WeightLoadError as exc:
        return exc
    return None


def _diagnosis(ws: Path, err: WeightLoadError) -> dict:
    """The crash as launch_server reports it: classified, paths relative to the workspace, suspects attached."""
    d = json.loads(classify(err.log).model_dump_json().replace(str(ws.resolve()) + "/", ""))

    def read(p: str) -> str | None:
        return (ws / p).read_text() if (ws / p).is_file() else None

    found = suspects_in_workspace(Diagnosis(**d), read, "model/config.json")
    return {**d, "suspects": found.model_dump() if found else None}


_FIXES: dict[str, dict] = {}


def _fix(name: str, tmp_path_factory: pytest.TempPathFactory, edit=None) -> dict:
    """Materialise ``name`` (its exclude list edited by ``edit``), crash the draft, and ask the playbook."""
    key = name + (edit.__name__ if edit else "")
    if key not in _FIXES:
        ws = tmp_path_factory.mktemp(key) / "ws"
        materialize(name, ws)
        if edit:
            path = ws / "model" / "config.json"
            cfg = json.loads(path.read_text())
            edit(cfg["quantization_config"])
            path.write_text(json.dumps(cfg, indent=2))
        err = _crash(ws / "model", ws / "sglang")
        assert err is not None and err.draft
        diag = _diagnosis(ws, err)
        ctx = SimpleNamespace(workspace=DirWorkspace(ws))
        out = PlaybookPolicy()._exclude_fix(ctx, diag)
        assert out is not None
        call, note = out
        _FIXES[key] = {"ws": ws, "diag": diag, "call": call, "note": note, "ctx": ctx}
    return _FIXES[key]


def _config_with(ws: Path, call, into: Path) -> Path:
    """A private model directory whose config.json has the edit applied."""
    into.mkdir(parents=True)
    text = (ws / "model" / "config.json").read_text()
    (into / "config.json").write_text(text.replace(call.args["old"], call.args["new"], 1))
    (into / "model.safetensors.index.json").symlink_to(ws / "model" / "model.safetensors.index.json")
    return into


def _added(fix: dict) -> list[str]:
    before = json.loads((fix["ws"] / "model" / "config.json").read_text())["quantization_config"]["exclude"]
    after = json.loads((fix["ws"] / "model" / "config.json").read_text().replace(
        fix["call"].args["old"], fix["call"].args["new"], 1))["quantization_config"]["exclude"]  # fmt: skip
    return [e for e in after if e not in before]


@pytest.mark.parametrize("name", EXCLUDE_DEFECTS)
def test_only_what_the_draft_quantizes_is_added(name: str, tmp_path_factory: pytest.TempPathFactory,
                                                tmp_path: Path) -> None:  # fmt: skip
    fix = _fix(name, tmp_path_factory)
    ws, call = fix["ws"], fix["call"]
    if call.args["path"] != "model/config.json":
        pytest.fail(f"{name}: expected a config fix, got an edit of {call.args['path']}")
    cfg = json.loads((ws / "model" / "config.json").read_text())
    tree = _draft_tree(fix["ctx"], fix["diag"], cfg)
    assert tree is not None
    index = json.loads((ws / "model" / "model.safetensors.index.json").read_text())["weight_map"]
    added = _added(fix)
    assert added
    for entry in added:
        if entry.startswith("re:"):  # a pattern reaches at least one module the draft builds quantized
            continue
        top = entry.split(".", 1)[0]
        assert _quantized_in_draft(tree, entry, top) is not False, f"{entry}: built unquantized anyway"
        exists = tree.find(entry) is not None or any(n.startswith(entry + ".") for n in index)
        assert exists, f"{entry}: no such module in the draft or the checkpoint"
        assert not any(w in entry.rpartition(".")[2] for w in ("norm", "embed")), entry
    # the fix holds: the draft loads with the edited list
    report = load_weights(_config_with(ws, call, tmp_path / "m"), ws / "sglang", with_draft=True, tp_size=8)
    assert report.draft_bytes > 0 and not report.not_loaded


def _whole_layer_regex(qc: dict) -> None:
    """Lyra's exact-name list of its MTP layer 40, replaced by one escaped whole-layer pattern."""
    qc["exclude"] = [e for e in qc["exclude"] if not e.startswith("model.layers.40.")] + [r"re:model\.layers\.40\..*"]


def test_a_whole_bf16_layer_gets_one_layer_entry(tmp_path_factory: pytest.TempPathFactory) -> None:
    # GLM-4.7's draft (glm4_moe_nextn.py): its eh_proj is a plain nn.Linear, only the decoder is quantized
    glm = _fix("glm47_mxfp4_mi355x", tmp_path_factory)
    assert _added(glm) == ["re:model.decoder.*"]  # the list's unescaped style: re:model.layers.92.*
    # DeepSeek's draft (deepseek_nextn.py) builds eh_proj as a Quark linear beside the decoder: both, one pattern
    lyra = _fix("lyra_mi355x", tmp_path_factory, _whole_layer_regex)
    (entry,) = _added(lyra)
    assert entry == r"re:model\.(decoder\..*|eh_proj)"
    assert excluded("model.eh_proj", [entry]) and excluded("model.decoder.mlp.experts", [entry])
    assert not excluded("model.enorm", [entry]) and not excluded("model.layers.3.mlp.experts", [entry])


def _apply(ws: Path, diff: str, into: Path) -> Path:
    shutil.copytree(ws / "sglang", into / "sglang", symlinks=True)
    done = subprocess.run(["patch", "-p1", "-d", str(into)], input=diff, text=True, capture_output=True)
    assert done.returncode == 0, done.stdout + done.stderr
    return into / "sglang"


@pytest.mark.parametrize(("name", "edit", "draft_file"), [
    ("glm47_mxfp4_mi355x", None, "glm4_moe_nextn.py"),
    ("lyra_mi355x", None, "deepseek_nextn.py"),
    ("lyra_mi355x", _whole_layer_regex, "deepseek_nextn.py"),
])  # fmt: skip
def test_the_engine_fix_is_in_the_tracebacks_file_and_holds_alone(name: str, edit, draft_file: str,
                                                                  tmp_path_factory: pytest.TempPathFactory,
                                                                  tmp_path: Path) -> None:  # fmt: skip
    fix = _fix(name, tmp_path_factory, edit)
    up = fix["note"]["upstream"]
    assert up["file"] == fix["diag"]["model_file"] and up["file"].endswith("/" + draft_file)
    assert up["files"][0] == up["file"] and f"a/{up['file']}" in up["diff"]
    # its unit test goes in with it, where the engine's repository keeps its tests (test/ beside python/)
    test = fix["note"]["upstream"]["note"]["test"]
    root = up["file"].split("/", 1)[0]
    assert up["files"][1:] == [f"{root}/{test['path']}"] and test["path"].startswith("test/")
    assert f"+++ b/{root}/{test['path']}" in up["diff"]
    # with the engine fix and the checkpoint's config as released, the draft loads: eh_proj and a whole-layer
    # pattern included
    sglang = _apply(fix["ws"], up["diff"], tmp_path)
    report = load_weights(fix["ws"] / "model", sglang, with_draft=True, tp_size=8)
    assert report.draft_bytes > 0 and not report.not_loaded
    if draft_file == "deepseek_nextn.py":
        assert "model.eh_proj" in report.unquantized_modules
        assert '("eh_proj",)' in up["diff"]


def run_engine_test(sglang_root: Path, content: str) -> tuple[bool, str]:
    """Run a generated SGLang unit test with the twin's executor (the workspace's real model and quantization
    modules, torch stubbed): (passed, what happened)."""
    executor = Executor(sglang_root)
    namespace = {"__builtins__": {**vars(builtins), "__import__": executor}, "__name__": "engine_test"}
    try:
        exec(compile(content, "engine_test.py", "exec"), namespace)
    except Exception as exc:  # an import of what the fix adds, on the release's file
        return False, f"{type(exc).__name__}: {exc}"
    cases = [v for v in namespace.values() if isinstance(v, type) and issubclass(v, unittest.TestCase)]
    suite = unittest.TestSuite(unittest.defaultTestLoader.loadTestsFromTestCase(c) for c in cases)
    out = io.StringIO()
    result = unittest.TextTestRunner(stream=out).run(suite)
    return result.wasSuccessful() and result.testsRun > 0, out.getvalue()


@pytest.mark.parametrize("name", ["glm47_mxfp4_mi355x", "lyra_mi355x"])
def test_the_engine_fix_comes_with_a_unit_test_that_fails_before(name: str, tmp_path_factory: pytest.TempPathFactory,
                                                                 tmp_path: Path) -> None:  # fmt: skip
    fix = _fix(name, tmp_path_factory)
    up = fix["note"]["upstream"]
    test = up["note"]["test"]
    stem = Path(up["file"]).stem
    assert test["path"] == f"test/srt/models/test_{stem}_mtp_exclude.py"
    content = test["content"]
    tree = ast.parse(content)  # the engine's style: unittest, the helper imported from the draft's own module
    assert f"from sglang.srt.models.{stem} import _map_mtp_exclude_layers" in content
    assert any(isinstance(n, ast.ClassDef) and n.bases and ast.unparse(n.bases[0]) == "unittest.TestCase"
               for n in tree.body)  # fmt: skip
    assert content.rstrip().endswith("unittest.main()") and "/" + "tmp" not in content
    if name == "lyra_mi355x":
        assert '"model.eh_proj"' in content
    passed, why = run_engine_test(fix["ws"] / "sglang", content)
    assert not passed and "_map_mtp_exclude_layers" in why  # the release's file has no such mapping
    passed, why = run_engine_test(_apply(fix["ws"], up["diff"], tmp_path), content)
    assert passed, why


def test_the_engine_fix_applies_to_every_draft_file_of_the_release() -> None:
    """Every draft class of the pinned release's ``*_nextn.py`` / ``*mtp*.py`` files whose constructor takes the
    config and the quantization config gets the fix in its own constructor; any other is declined (None)."""
    tree_root = release.release_tree("0.5.12")
    if not isinstance(tree_root, release.ReleaseTree):
        pytest.skip(f"release not available: {tree_root.reason}")
    models = tree_root.package / "srt" / "models"
    files = sorted({*models.glob("*_nextn.py"), *models.glob("*mtp*.py")})
    assert len(files) >= 10
    applied = []
    for f in files:
        source = f.read_text()
        module = ast.parse(source)
        entry = next((n for n in module.body if isinstance(n, ast.Assign)
                      and any(getattr(t, "id", "") == "EntryClass" for t in n.targets)), None)  # fmt: skip
        names = [e.id for e in ast.walk(entry.value) if isinstance(e, ast.Name)] if entry else []
        for cls in names:
            fixed = map_draft_excludes(source, cls, 'f"model.layers.{config.num_hidden_layers}"',
                                       "model.layers.<num_hidden_layers>", "model.decoder", ("eh_proj",))  # fmt: skip
            assert (fixed is not None) == (_init_of(module, cls) is not None), (f.name, cls)
            if fixed is not None:
                init = _init_of(ast.parse(fixed), cls)[1]
                assert "_map_mtp_exclude_layers" in ast.unparse(init), (f.name, cls)
                applied.append(f.name)
    assert {"deepseek_nextn.py", "glm4_moe_nextn.py", "hunyuan_v3_nextn.py"} <= set(applied)


def test_the_draft_tree_reads_quantization_from_the_engine(tmp_path_factory: pytest.TempPathFactory) -> None:
    """Norms and plain torch linears are never quantized; a Quark linear and a fused MoE are, by their prefix."""
    ws = _fix("lyra_mi355x", tmp_path_factory)["ws"]

    def read(p: str) -> str | None:
        return (ws / p).read_text() if (ws / p).is_file() else None

    src = EngineSource(read, "sglang/python")
    deepseek = ModuleTree(src, "sglang.srt.models.deepseek_nextn", "DeepseekV3ForCausalLMNextN", "quark")
    assert deepseek.find("model.eh_proj").quantized is True
    assert deepseek.find("model.enorm").quantized is False
    assert deepseek.find("model.decoder.input_layernorm").quantized is False
    assert deepseek.find("model.shared_head.head").quantized is False  # Quark leaves the LM head alone
    experts = deepseek.find("model.decoder.mlp.experts.7.down_proj")
    assert (experts.name, experts.quantized) == ("model.decoder.mlp.experts", True)
    assert deepseek.find("model.input_layernorm") is None  # the draft builds no such module
    glm = ModuleTree(src, "sglang.srt.models.glm4_moe_nextn", "Glm4MoeForCausalLMNextN", "quark")
    assert glm.find("model.eh_proj").quantized is False  # nn.Linear: no quantization config reaches it


def test_the_engine_fixs_unit_test_reaches_the_patch() -> None:
    """The fix note's test travels with the patch its call applies (``Patch.test``), for the PR material."""
    from agent.outcomes import _record_patch
    from agent.state import AgentState, Observation, Patch

    test = {"path": "test/srt/models/test_x_mtp_exclude.py", "content": "import unittest\n"}
    state = AgentState(run_id="r", task_path="t.yaml", annotations={"patch": {"category": "weight_shape_mismatch",
                                                                         "defect": "engine:x", "test": test}})  # fmt: skip
    obs = Observation(call_id="c", tool="apply_patch", args={"diff": "--- a/x\n+++ b/x\n"}, ok=True,
                      result={"files": ["sglang/x.py"]}, step=3)  # fmt: skip
    patches: list[Patch] = []
    _record_patch(state, patches, obs)
    assert patches[0].test == test
    assert Patch(id=1, files=[], diff="", reason="").test is None  # optional: older traces load unchanged
