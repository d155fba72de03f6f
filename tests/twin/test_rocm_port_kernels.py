"""Every JIT kernel of each pinned release (every ``engine.version`` a scenario pins) that fails on ROCm, under the twin's hipcc rules, is fixed by the agent's
ROCm port -- crash, fix, rebuild, as the agent does, within its fix budget -- or declined with the precise identifier,
header or construct and its file:line.

The kernels are the release's own: each source a ``load_jit(..., cuda_files=[...])`` call of
``python/sglang/jit_kernel/*.py`` names (an f-string entry by its glob). One copy of the release's ``jit_kernel``
tree is the workspace for all of them, so a fix of a shared header (``sgl_kernel/runtime.cuh``, ``utils.cuh``)
serves every kernel that reaches it, as it would in a real workspace.
"""

from __future__ import annotations

import ast
import re
import shutil
from pathlib import Path

import pytest

from agent.policies.playbook import MAX_FIXES_PER_CONFIG, PlaybookPolicy
from sandboxes.twin.engine.jit import compile_kernel, plan_build
from sandboxes.twin.scenario import load
from sandboxes.twin.scenario.format import JitKernel, JitTrigger
from sandboxes.twin.workspace.release import ReleaseTree
from tests.workspace_dir import DirWorkspace
from tools.diagnose import classify

pytestmark = pytest.mark.skipif(shutil.which("cpp") is None, reason="the twin's JIT needs cpp")

JIT = "sglang/python/sglang/jit_kernel"  # in the workspace: the SGLang clone's python tree
def pinned_releases() -> list[str]:
    """The SGLang releases the scenarios pin."""
    from sandboxes.twin.scenario import SCENARIO_DIR

    return sorted({str(load(p).engine.version) for p in SCENARIO_DIR.glob("*.yaml")})


DECLINED = re.compile(r"(?:'(?P<name>[^']+)'|<(?P<header>[^>]+)>) \((?P<file>[^():]+):(?P<line>\d+)\)")


def release_kernels(jit_dir: Path) -> list[str]:
    """The csrc-relative sources the release's loaders pass to ``load_jit`` as ``cuda_files``."""
    found: set[str] = set()
    csrc = jit_dir / "csrc"
    for py in sorted(jit_dir.rglob("*.py")):  # loaders of sub-packages too (dsv4/, diffusion/, ...)
        if {"tests", "benchmark"} & set(py.relative_to(jit_dir).parts):
            continue
        for call in ast.walk(ast.parse(py.read_text())):
            if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and call.func.id == "load_jit"):
                continue
            for kw in call.keywords:
                if kw.arg != "cuda_files" or not isinstance(kw.value, (ast.List, ast.Tuple)):
                    continue
                for e in kw.value.elts:
                    if isinstance(e, ast.Constant) and isinstance(e.value, str):
                        found.add(e.value)
                    elif isinstance(e, ast.JoinedStr):  # f"deepseek_v4/c{ratio}.cuh": every file it can name
                        pattern = "".join(p.value if isinstance(p, ast.Constant) else "*" for p in e.values)
                        found.update(p.relative_to(csrc).as_posix() for p in csrc.glob(pattern))
    return sorted(s for s in found if (csrc / s).is_file())




class Ctx:
    def __init__(self, root: Path) -> None:
        self.workspace = DirWorkspace(root)


def _relative(path: str, ws: Path) -> str:
    prefix = str(ws) + "/"
    return str(Path(path).resolve()).removeprefix(prefix) if path.startswith(prefix) else path


@pytest.mark.parametrize("version", pinned_releases())
def test_every_release_kernel_that_fails_on_rocm_is_ported_or_declined_precisely(
        version: str, tmp_path: Path, record_property) -> None:  # fmt: skip
    from sandboxes.twin.workspace.release import release_tree

    default_release = release_tree(version)
    if not isinstance(default_release, ReleaseTree):
        pytest.skip(f"SGLang {version} is not cached and could not be downloaded: {default_release.reason}")
    ws = tmp_path / "ws"
    shutil.copytree(default_release.package / "jit_kernel", ws / JIT,
                    ignore=shutil.ignore_patterns("tests", "benchmark", "__pycache__"))  # fmt: skip
    ws = ws.resolve()
    root = ws / "sglang"
    gfx = load().hardware.gfx_arch
    cpp = shutil.which("cpp") or "cpp"
    kernels = release_kernels(ws / JIT)
    assert len(kernels) > 20
    builds = {k: plan_build(root, JitKernel(name=Path(k).stem, source=f"python/sglang/jit_kernel/csrc/{k}",
                                            when=JitTrigger(flag="speculative_num_steps")), gfx) for k in kernels}
    before = {k: compile_kernel(b, gfx, cpp) for k, b in builds.items()}  # the release as shipped
    failing = [k for k in kernels if before[k][0] != 0]

    policy, ctx = PlaybookPolicy(), Ctx(ws)
    edited: set[str] = set()
    fixed: dict[str, int] = {}  # kernel -> fixes it took itself (0: a shared fix made for another did it)
    declined: dict[str, str] = {}
    shared_first: set[str] = set()  # kernels whose first failure was in a header other than their own source
    for k in failing:
        code, out = before[k]
        first = classify(out)
        if first.file and not first.file.endswith(k):
            shared_first.add(k)
        if first.file and _relative(first.file, ws) in edited:
            code, out = compile_kernel(builds[k], gfx, cpp)  # a shared fix since: rebuild first, as the agent does
        seen: set[str] = set()
        fixes = 0
        while code != 0:
            diag = classify(out).model_dump()
            diag["file"] = _relative(diag["file"] or "", ws)
            signature = f"{diag.get('header') or diag.get('symbol')}@{diag['file']}"
            assert signature not in seen, f"{k}: the same failure after its fix: {diag['summary']}"
            assert fixes < MAX_FIXES_PER_CONFIG, f"{k}: still failing after {fixes} fixes: {diag['summary']}"
            seen.add(signature)
            edit = policy._guard_fix(ctx, diag)
            if edit is None:
                declined[k] = diag["summary"]
                break
            call, note = edit
            assert note["category"] == "compile_error" and note["defect"].startswith("include:")
            path = ws / call.args["path"]
            text = path.read_text()
            assert text.count(call.args["old"]) == 1
            path.write_text(text.replace(call.args["old"], call.args["new"], 1))
            edited.add(call.args["path"])
            fixes += 1
            code, out = compile_kernel(builds[k], gfx, cpp)
        else:
            fixed[k] = fixes

    summary = (f"{len(kernels)} JIT kernels; {len(failing)} fail on ROCm as released; {len(fixed)} fixed, "
               f"{len(declined)} declined")  # fmt: skip
    print(summary)
    for k, why in sorted(declined.items()):
        print(f"  declined {k}: {why}")
    record_property("rocm_port", {"kernels": len(kernels), "failing": len(failing), "fixed": len(fixed),
                                  "declined": len(declined)})  # fmt: skip
    assert failing and len(fixed) + len(declined) == len(failing), summary
    for k, why in declined.items():  # the decline names what, and where, and it is there
        m = DECLINED.search(why)
        assert m and "not portable to ROCm" in why, (k, why)
        line = (ws / m["file"]).read_text().splitlines()[int(m["line"]) - 1]
        assert (m["name"] or m["header"]) in line, (k, why, line)
    # the shared-header case: kernels that first failed inside a header they include now build
    assert any(k in fixed for k in shared_first), (shared_first, fixed)
    assert fixed  # (0.5.12: 34 fixed, 15 declined; 0.5.13: 23 and 15 -- every decline checked above)


LATER = "0.5.13"  # the release after the pinned one, which ported sgl_kernel/runtime.cuh to ROCm by hand


def test_a_shared_headers_port_spells_what_the_next_release_spelled_by_hand(default_release: ReleaseTree) -> None:
    """Where the next SGLang release guarded a CUDA include the pinned release leaves unguarded and spelled CUDA
    names for HIP in the ``#else`` branch (``#define cudaX hipX``), the agent's port of the pinned file spells the
    same names the same way (what it cannot spell, the maintainers' hand-written shim, it names as unported)."""
    from agent.fixes import rocm_port
    from sandboxes.twin.workspace.release import Unavailable, release_tree

    later = release_tree(LATER)
    if isinstance(later, Unavailable):
        pytest.skip(f"SGLang {LATER} is not cached and could not be downloaded: {later.reason}")
    old_root, new_root = default_release.package / "jit_kernel", later.package / "jit_kernel"
    ws = DirWorkspace(old_root)
    compared = 0
    for new in sorted(p for p in new_root.rglob("*") if p.suffix in (".cuh", ".h", ".cu", ".hpp")):
        rel = new.relative_to(new_root).as_posix()
        old = old_root / rel
        if not old.is_file():
            continue
        new_text, old_text = new.read_text(), old.read_text()
        new_lines = new_text.splitlines(keepends=True)
        theirs = set()
        for g in rocm_port.guards(new_text):
            theirs |= set(re.findall(r"#\s*define\s+((?:cu|CU|__nv)\w+)\s+(hip\w+)", "".join(g.rocm_side(new_lines))))
        if not theirs:
            continue
        old_lines = old_text.splitlines(keepends=True)
        unguarded = [m.group(2) for i, ln in enumerate(old_lines) if (m := rocm_port._INCLUDE_LINE.match(ln))
                     and m.group(2) in rocm_port.hipify_map().headers
                     and not any(g.start < i < g.end for g in rocm_port.guards(old_text))]  # fmt: skip
        if not unguarded:
            continue
        ours: set[tuple[str, ...]] = set()
        for header in unguarded:
            port = rocm_port.port_header(ws, rel, header)
            assert isinstance(port, rocm_port.Port), (rel, header, port)
            ours |= {tuple(s.split(" -> ")) for s in port.spelled}
            shims = {n for n in re.findall(r"#\s*ifndef\s+((?:cu|CU)\w+)", new_text) if n not in dict(theirs)}
            assert all(any(n in u for u in port.unported) for n in shims), (shims, port.unported)
        assert ours == theirs, (rel, sorted(ours ^ theirs))
        compared += 1
    assert compared, f"no file of {LATER} spells CUDA names for a guard the pinned release lacks"
