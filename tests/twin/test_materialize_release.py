"""materialize builds the workspace from the real release the scenario pins, and turns the scenario's defects
into edits of real files (or refuses, located, when they name what the tree does not have)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from sandboxes.twin.scenario import ScenarioError, load
from sandboxes.twin.workspace import release
from sandboxes.twin.workspace.materialize import MaterializeError, materialize, unguard_include
from tests.twin.conftest import edited_default_scenario

UTILS = "python/sglang/jit_kernel/include/sgl_kernel/utils.cuh"


@pytest.fixture(scope="module")
def tree(default_release: release.ReleaseTree) -> release.ReleaseTree:
    return default_release


def test_a_guarded_include_is_moved_out_of_its_guard(tree: release.ReleaseTree, tmp_path: Path) -> None:
    real = (tree.package / "jit_kernel/include/sgl_kernel/utils.cuh").read_text().splitlines()
    at = real.index("#include <cuda_bf16.h>")
    assert real[at - 1].strip() == "#ifndef USE_ROCM"  # the release guards it
    path = edited_default_scenario(tmp_path, lambda d: d["defects"]["unguarded_includes"].append(
        {"file": UTILS, "header": "cuda_bf16.h"}))
    result = materialize(path, tmp_path / "ws")
    lines = (tmp_path / "ws" / "sglang" / UTILS).read_text().splitlines()
    moved = lines.index("#include <cuda_bf16.h>")
    assert lines[moved + 1].strip() == "#ifndef USE_ROCM"  # now before the guard, unconditional
    assert "#include <cuda_fp16.h>" in lines[moved + 2:moved + 5]  # the rest of the guard is untouched
    assert len(lines) == len(real)
    assert any("moved out of its USE_ROCM guard" in e for e in result.defect_edits)
    assert any("unguarded as released" in e for e in result.defect_edits)


def test_unguard_is_a_no_op_on_an_unguarded_include(tmp_path: Path) -> None:
    f = tmp_path / "k.cuh"
    f.write_text("#pragma once\n#include <cuda_runtime.h>\n")
    assert unguard_include(f, "cuda_runtime.h") is False
    f.write_text("#ifdef USE_ROCM\n#include <hip/hip_runtime.h>\n#else\n#include <cuda_runtime.h>\n#endif\n")
    assert unguard_include(f, "cuda_runtime.h") is False  # the CUDA side of an #ifdef USE_ROCM: not the defect kind


def test_an_architecture_the_release_does_not_register_is_refused_when_loaded(tree: release.ReleaseTree,
                                                                               tmp_path: Path) -> None:  # fmt: skip
    """The release would serve it only through its Transformers fallback (transformers' own modeling code): the
    twin says so at the architecture's line, in one line."""
    path = edited_default_scenario(tmp_path, lambda d: d["model"].update(architecture="GlmNextMoeForCausalLM"))
    with pytest.raises(ScenarioError) as info:
        load(path)
    message = str(info.value)
    assert re.match(rf"{re.escape(str(path))}:\d+: model.architecture: ", message), message
    assert "\n" not in message and "Transformers fallback" in message


@pytest.mark.parametrize("edit,where", [
    (lambda d: d["defects"]["unguarded_includes"].append({"file": "python/sglang/nope.cuh", "header": "cuda.h"}),
     "defects.unguarded_includes[1].file"),
    (lambda d: d["defects"]["unguarded_includes"].append({"file": UTILS, "header": "cub/cub.cuh"}),
     "defects.unguarded_includes[1].header"),
    (lambda d: d["engine"]["jit_kernels"][0].update(source="python/sglang/jit_kernel/csrc/none.cuh"),
     "engine.jit_kernels[0].source"),
    (lambda d: d["engine"]["jit_kernels"][0].update(includes=["cuda_fp8.h"]), "engine.jit_kernels[0].includes"),
])  # fmt: skip
def test_defects_must_name_what_the_tree_has(tree: release.ReleaseTree, tmp_path: Path, edit, where: str) -> None:
    path = edited_default_scenario(tmp_path, edit)
    with pytest.raises(MaterializeError) as info:
        materialize(path, tmp_path / "ws")
    message = str(info.value)
    assert re.match(rf"{re.escape(str(path))}:\d+: {re.escape(where)}: ", message), message
    assert "\n" not in message
