"""The twin's JIT build applies a compiler's rules to the real SGLang 0.5.12 kernel sources.

Each test copies the files it needs out of the cached real release into ``<root>/python/sglang/...`` (the
repository layout a workspace has), edits them the way an agent would, and builds. What is asserted is what a
hipcc build on the ROCm image reports: clang's fatal error for a CUDA header, clang's ``unknown type name`` /
``use of undeclared identifier`` for a CUDA-only name nothing declares, its exact positions and carets, and the
Python traceback SGLang's ``load_jit`` raises with the workspace's real line numbers.
"""

from __future__ import annotations

import dataclasses
import re
import shutil
from pathlib import Path

import pytest

from sandboxes.twin import scenario as scenario_mod
from sandboxes.twin.engine.jit import (
    CUDA_NAMES,
    ROCM_INCLUDE,
    TVM_FFI_EXTENSION,
    JitCompileError,
    compile_jit_kernels,
    preprocess_command,
)
from sandboxes.twin.workspace.release import ReleaseTree

pytestmark = pytest.mark.skipif(shutil.which("cpp") is None, reason="the twin's JIT needs cpp")

JIT = "python/sglang/jit_kernel"
FMC = f"{JIT}/csrc/elementwise/fused_metadata_copy.cuh"
GUARD_RUNTIME = "#ifndef USE_ROCM\n#include <cuda_runtime.h>\n#endif"
# what the tests copy out of the release: the kernel sources, SGLang's JIT headers, the loader modules and the
# attention backend that calls them
FILES = (f"{JIT}/include", f"{JIT}/csrc/elementwise", f"{JIT}/csrc/lora", f"{JIT}/csrc/nsa",
         f"{JIT}/csrc/fast-hadamard-transform", f"{JIT}/csrc/gemm/nvfp4", f"{JIT}/csrc/deepseek_v4",
         f"{JIT}/csrc/moe", f"{JIT}/utils.py", f"{JIT}/fused_metadata_copy.py",
         "python/sglang/srt/layers/attention/nsa_backend.py")  # fmt: skip


@pytest.fixture(scope="session")
def release_root(tmp_path_factory: pytest.TempPathFactory, default_release: ReleaseTree) -> Path:
    rel = default_release
    root = tmp_path_factory.mktemp("release") / "sglang"
    for item in FILES:
        src = rel.root / item.removeprefix("python/")
        dest = root / item
        dest.parent.mkdir(parents=True, exist_ok=True)
        if src.is_dir():
            shutil.copytree(src, dest)
        else:
            shutil.copyfile(src, dest)
    return root


@pytest.fixture
def root(release_root: Path, tmp_path: Path) -> Path:
    dest = tmp_path / "ws" / "sglang"
    shutil.copytree(release_root, dest)
    return dest.resolve()


def _scenario(source: str = FMC, name: str = "fused_metadata_copy", gfx: str | None = None) -> scenario_mod.Scenario:
    sc = scenario_mod.load()
    kernel = dataclasses.replace(sc.engine.jit_kernels[0], source=source, name=name)
    sc = dataclasses.replace(sc, engine=dataclasses.replace(sc.engine, jit_kernels=(kernel,)))
    if gfx:
        sc = dataclasses.replace(sc, hardware=dataclasses.replace(sc.hardware, gfx_arch=gfx))
    return sc


ARGS = {"speculative_num_steps": 5}


def _build(root: Path, source: str = FMC, name: str = "fused_metadata_copy", gfx: str | None = None,
           lines: list[str] | None = None) -> list[str]:
    return compile_jit_kernels(_scenario(source, name, gfx), root, ARGS, (lines if lines is not None else []).append)


def _fails(root: Path, source: str = FMC, name: str = "fused_metadata_copy", gfx: str | None = None,
           lines: list[str] | None = None) -> JitCompileError:
    with pytest.raises(JitCompileError) as info:
        _build(root, source, name, gfx, lines)
    return info.value


def _edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text, old
    path.write_text(text.replace(old, new, 1))


def _line_of(path: Path, text: str, after: str | None = None) -> int:
    lines = path.read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if after in line) if after else 0
    return next(i for i in range(start, len(lines)) if lines[i].strip().startswith(text)) + 1


def _kernel(root: Path, name: str, body: str) -> str:
    rel = f"{JIT}/csrc/elementwise/{name}.cuh"
    (root / rel).write_text(body)
    return rel


# --- 1 and 2: the real source, clang's fatal error -----------------------------------------------------------------


def test_real_kernel_as_released_fails_with_clangs_fatal_error(root: Path) -> None:
    err = _fails(root)
    src = root / FMC
    line = _line_of(src, "#include <cuda_runtime.h>")
    assert line == 38  # the pinned release's defect
    m = re.search(r"In file included from (/root/\.cache/tvm-ffi/sgl_kernel_jit_fused_metadata_copy_0_false_false_"
                  r"[0-9a-f]{16}/cuda\.cu):7:\n", err.log)
    assert m, err.log
    assert (f"{m.group(0)}"
            f"{src}:38:10: fatal error: 'cuda_runtime.h' file not found\n"
            "   38 | #include <cuda_runtime.h>\n"
            "      |          ^~~~~~~~~~~~~~~~\n"
            "1 error generated when compiling for gfx950.\n") in err.log
    assert err.summary == f"JIT compilation of fused_metadata_copy failed (exit 1): {FMC}"
    assert "\n" not in err.summary


def test_positions_follow_the_file(root: Path) -> None:
    src = root / FMC
    src.write_text("// one\n// two\n\t// three\n" + src.read_text())
    log = _fails(root).log
    assert f"{src}:41:10: fatal error: 'cuda_runtime.h' file not found\n   41 | #include <cuda_runtime.h>\n" in log


def test_guard_with_sglang_aliases_builds(root: Path) -> None:
    """utils.cuh includes hip/hip_runtime.h under USE_ROCM and aliases cudaStream_t & co.: the guard is enough."""
    _edit(root / FMC, "#include <cuda_runtime.h>", GUARD_RUNTIME)
    lines: list[str] = []
    assert _build(root, lines=lines) == ["fused_metadata_copy"]
    assert lines[-1] == "[JIT] fused_metadata_copy built"


def test_a_kept_outcome_follows_every_header_the_build_read(root: Path, tmp_path: Path, monkeypatch) -> None:
    """The outcome of a build is kept with the hashes of the files cpp read: the same build again is the kept
    outcome (cpp not run), an edit of an included header (not the kernel's own file) builds it again."""
    import sandboxes.twin.engine.jit as jit

    monkeypatch.setenv("DAYZERO_CACHE", str(tmp_path / "cache"))
    _edit(root / FMC, "#include <cuda_runtime.h>", GUARD_RUNTIME)
    assert _build(root) == ["fused_metadata_copy"]
    assert len(list((tmp_path / "cache" / jit.COMPILED_FOLDER).glob("*.json"))) == 1
    ran = []
    monkeypatch.setattr(jit, "_compile", lambda *a: ran.append(a) or (1, "not kept", None))
    assert _build(root) == ["fused_metadata_copy"] and ran == []  # kept
    monkeypatch.undo()
    monkeypatch.setenv("DAYZERO_CACHE", str(tmp_path / "cache"))
    header = root / JIT / "include/sgl_kernel/utils.cuh"
    header.write_text(header.read_text() + "\n#include <cuda_fp16.h>\n")  # the header the kernel includes
    err = _fails(root)
    assert f"{header}:" in err.log and "'cuda_fp16.h' file not found" in err.log


def test_gfx_from_the_scenario(root: Path) -> None:
    lines: list[str] = []
    err = _fails(root, gfx="gfx942", lines=lines)
    assert "1 error generated when compiling for gfx942." in err.log
    assert "--offload-arch=gfx942" in lines[1]


def test_hipcc_command_line_is_load_jits(root: Path) -> None:
    lines: list[str] = []
    _edit(root / FMC, "#include <cuda_runtime.h>", GUARD_RUNTIME)
    _build(root, lines=lines)
    cmd = lines[1].split("   # ")[0]
    site = "/usr/local/lib/python3.12/dist-packages/tvm_ffi/include"
    assert re.fullmatch(
        r"\[JIT\] /opt/rocm/bin/hipcc -std=c\+\+17 -O2 -fPIC -D__HIP_PLATFORM_AMD__=1 -fno-gpu-rdc "
        r"--offload-arch=gfx950 -DUSE_ROCM -std=c\+\+20 -O3 "
        + re.escape(f"-I{site} -I{site} -I/opt/rocm/include -I{root}/{JIT}/include ")
        + r"-c /root/\.cache/tvm-ffi/sgl_kernel_jit_fused_metadata_copy_0_false_false_[0-9a-f]{16}/cuda\.cu -o cuda_0\.o",
        cmd), cmd  # fmt: skip


def test_cuda_names_never_on_the_include_path(tmp_path: Path) -> None:
    cmd = preprocess_command(tmp_path / "cuda.cu", [str(ROCM_INCLUDE)], "gfx950")
    assert str(CUDA_NAMES) not in " ".join(cmd)
    assert not [p for p in ROCM_INCLUDE.rglob("*") if p.is_file() and p.name.startswith(("cuda", "cub"))]


# --- 3: declarations ---------------------------------------------------------------------------------------------

BF16 = """#pragma once

#include <sgl_kernel/utils.cuh>

#ifndef USE_ROCM
#include <cuda_bf16.h>
{rocm}#endif

__global__ void scale(__nv_bfloat16* __restrict__ out, const float* in, int n) {{
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = __float2bfloat16(in[i] * 2.0f);
}}
"""


def test_hidden_cuda_type_without_hip_counterpart_is_unknown_type(root: Path) -> None:
    rel = _kernel(root, "scale_bf16", BF16.format(rocm=""))
    err = _fails(root, rel, "scale_bf16")
    assert (f"{root / rel}:9:23: error: unknown type name '__nv_bfloat16'\n"
            "    9 | __global__ void scale(__nv_bfloat16* __restrict__ out, const float* in, int n) {\n"
            "      |                       ^\n"
            "1 error generated when compiling for gfx950.\n") in err.log
    assert "file not found" not in err.log


def test_hip_header_alone_does_not_declare_the_cuda_name(root: Path) -> None:
    rel = _kernel(root, "scale_bf16", BF16.format(rocm="#else\n#include <hip/hip_bf16.h>\n"))
    assert "error: unknown type name '__nv_bfloat16'" in _fails(root, rel, "scale_bf16").log


def test_hip_header_and_alias_builds(root: Path) -> None:
    rocm = "#else\n#include <hip/hip_bf16.h>\nusing __nv_bfloat16 = __hip_bfloat16;\n"
    rel = _kernel(root, "scale_bf16", BF16.format(rocm=rocm))
    assert _build(root, rel, "scale_bf16") == ["scale_bf16"]


def test_a_declaration_in_the_source_counts(root: Path) -> None:
    rocm = "#else\nstruct __nv_bfloat16 { unsigned short x; };\n"
    rel = _kernel(root, "scale_bf16", BF16.format(rocm=rocm))
    assert _build(root, rel, "scale_bf16") == ["scale_bf16"]


CUB = """#pragma once
#include <sgl_kernel/utils.cuh>
#ifndef USE_ROCM
#include <cub/cub.cuh>
{rocm}#endif

template <int kThreads>
__global__ void block_sum(const float* in, float* out) {{
  using BlockReduce = cub::BlockReduce<float, kThreads>;
  __shared__ typename BlockReduce::TempStorage tmp;
  const float v = BlockReduce(tmp).Sum(in[threadIdx.x]);
  if (threadIdx.x == 0) *out = v;
}}
"""


def test_hidden_cub_namespace(root: Path) -> None:
    rel = _kernel(root, "block_sum", CUB.format(rocm=""))
    log = _fails(root, rel, "block_sum").log
    assert (f"{root / rel}:9:23: error: use of undeclared identifier 'cub'\n"
            "    9 |   using BlockReduce = cub::BlockReduce<float, kThreads>;\n"
            "      |                       ^\n"
            "1 error generated when compiling for gfx950.\n") in log


def test_hipcub_with_namespace_alias_builds(root: Path) -> None:
    rel = _kernel(root, "block_sum", CUB.format(rocm="#else\n#include <hipcub/hipcub.hpp>\nnamespace cub = hipcub;\n"))
    assert _build(root, rel, "block_sum") == ["block_sum"]


def test_each_name_once_at_first_use_and_the_count(root: Path) -> None:
    body = """#pragma once
#ifndef USE_ROCM
#include <cuda_runtime.h>
#endif
#include <hip/hip_runtime.h>

inline cudaStream_t pick(cudaStream_t a, cudaStream_t b) { return a ? a : b; }
inline int check() { return cudaGetLastError() == 0; }
inline int check_again() { return cudaGetLastError() == 0; }
"""
    rel = _kernel(root, "two_names", body)
    log = _fails(root, rel, "two_names").log
    assert log.count("error: unknown type name 'cudaStream_t'") == 1
    assert f"{root / rel}:7:8: error: unknown type name 'cudaStream_t'" in log
    assert f"{root / rel}:8:29: error: use of undeclared identifier 'cudaGetLastError'" in log
    assert log.count("use of undeclared identifier 'cudaGetLastError'") == 1
    assert "2 errors generated when compiling for gfx950." in log
    # one include stack for both: clang prints it again only when it changes
    assert log.count("In file included from") == 1


def test_sglangs_macro_aliases_count(root: Path) -> None:
    body = """#pragma once
#ifndef USE_ROCM
#include <cuda_runtime.h>
#endif
#include <sgl_kernel/utils.cuh>

inline bool ok() { return cudaGetLastError() == cudaSuccess; }
"""
    rel = _kernel(root, "macro_alias", body)
    assert _build(root, rel, "macro_alias") == ["macro_alias"]


def test_name_from_a_macro_is_reported_at_the_invocation(root: Path) -> None:
    """pos_enc.cuh spells nv_bfloat16 inside DISPATCH_DTYPE: clang points at the use and notes the macro."""
    rel = f"{JIT}/csrc/elementwise/pos_enc.cuh"
    src = root / rel
    for header in ("cuda_fp16.h", "cuda_runtime.h"):
        _edit(src, f"#include <{header}>", f"#ifndef USE_ROCM\n#include <{header}>\n#endif")
    log = _fails(root, rel, "rotary_embedding").log
    use = _line_of(src, "DISPATCH_DTYPE(", after="using namespace host;")
    spelled = _line_of(src, "launch_kernel<nv_bfloat16, IS_NEOX>")
    lines = src.read_text().splitlines()
    col = lines[spelled - 1].index("nv_bfloat16") + 1
    assert (f"{src}:{use}:3: error: unknown type name 'nv_bfloat16'\n"
            f"{use:>5} |   DISPATCH_DTYPE(\n"
            "      |   ^\n"
            f"{src}:{spelled}:{col}: note: expanded from macro 'DISPATCH_DTYPE'\n"
            f"{spelled:>5} | {lines[spelled - 1]}\n"
            f"      | {' ' * (col - 1)}^\n") in log
    _edit(src, "#include <cuda_runtime.h>\n#endif", "#include <cuda_runtime.h>\n#else\nusing nv_bfloat16 = __hip_bfloat16;\n#endif")
    assert _build(root, rel, "rotary_embedding") == ["rotary_embedding"]


def test_concat_mla_guarded_builds(root: Path) -> None:
    rel = f"{JIT}/csrc/elementwise/concat_mla.cuh"
    err = _fails(root, rel, "concat_mla")
    assert f"{root / rel}:8:10: fatal error: 'cuda_bf16.h' file not found\n" in err.log
    for header in ("cuda_bf16.h", "cuda_runtime.h"):
        _edit(root / rel, f"#include <{header}>", f"#ifndef USE_ROCM\n#include <{header}>\n#endif")
    assert _build(root, rel, "concat_mla") == ["concat_mla"]


NVIDIA_ONLY = ("cuda", "cub/", "cute/", "cutlass/", "cooperative_groups")


@pytest.mark.parametrize("rel", [
    "elementwise/fused_metadata_copy.cuh", "elementwise/concat_mla.cuh", "elementwise/pos_enc.cuh",
    "elementwise/fused_qknorm_rope.cuh", "elementwise/qknorm.cuh", "elementwise/fused_add_rmsnorm.cuh",
    "elementwise/qknorm_across_heads.cuh", "nsa/fused_store_index_cache.cuh", "lora/moe_lora_align_kernel.cu",
    "fast-hadamard-transform/hadamard_jit.cuh", "deepseek_v4/store.cuh", "deepseek_v4/topk_v2.cuh",
    "gemm/nvfp4/nvfp4_quant.cuh",
])  # fmt: skip
def test_image_headers_cover_the_real_kernels(root: Path, rel: str) -> None:
    """With every CUDA include of the kernel guarded, anything still missing is NVIDIA-only, never a header the
    image has (the C++ library, ROCm's, tvm-ffi's): the stubs cover the real closure."""
    src = root / JIT / "csrc" / rel
    src.write_text(re.sub(r"^(#include <(?:cuda|cub/|cooperative_groups)[^>]*>.*)$",
                          r"#ifndef USE_ROCM\n\1\n#endif", src.read_text(), flags=re.M))
    try:
        _build(root, f"{JIT}/csrc/{rel}", Path(rel).stem)
    except JitCompileError as exc:
        missing = re.findall(r"fatal error: '([^']+)' file not found", exc.log)
        assert all(m.startswith(NVIDIA_ONLY) for m in missing), missing


# --- 4: SGLang's traceback -----------------------------------------------------------------------------------------


def test_traceback_has_sglangs_real_frames(root: Path) -> None:
    lines: list[str] = []
    err = _fails(root, lines=lines)
    nsa = root / "python/sglang/srt/layers/attention/nsa_backend.py"
    fmc = root / f"{JIT}/fused_metadata_copy.py"
    utils = root / f"{JIT}/utils.py"
    frames = [
        (nsa, _line_of(nsa, "fused_metadata_copy_cuda(", after="def init_forward_metadata_replay_cuda_graph_from"),
         "init_forward_metadata_replay_cuda_graph_from_precomputed", "fused_metadata_copy_cuda("),
        (fmc, _line_of(fmc, "module = _jit_fused_metadata_copy_module(", after="def fused_metadata_copy_cuda("),
         "fused_metadata_copy_cuda", "module = _jit_fused_metadata_copy_module("),
        (utils, _line_of(utils, "result_map[key] = fn(*args, **kwargs)"), "wrapper",
         "result_map[key] = fn(*args, **kwargs)"),
        (fmc, _line_of(fmc, "return load_jit(", after="def _jit_fused_metadata_copy_module("),
         "_jit_fused_metadata_copy_module", "return load_jit("),
        (utils, _line_of(utils, "return load_inline(", after="def load_jit("), "load_jit", "return load_inline("),
        (TVM_FFI_EXTENSION, 1035, "load_inline", "build_inline("),
        (TVM_FFI_EXTENSION, 877, "build_inline", "return _build_impl("),
        (TVM_FFI_EXTENSION, 672, "_build_impl", "build_ninja(str(build_dir))"),
        (TVM_FFI_EXTENSION, 542, "build_ninja", 'raise RuntimeError("\\n".join(msg))'),
    ]
    found = re.findall(r'^  File "([^"]+)", line (\d+), in (\S+)\n    (.*)$', err.log, re.M)
    assert found == [(str(f), str(n), func, code) for f, n, func, code in frames]
    assert err.log.startswith("Traceback (most recent call last):\n")
    tail = err.log[err.log.index("RuntimeError: "):]
    assert tail.startswith("RuntimeError: ninja exited with status 1\nstdout:\n[1/2] /opt/rocm/bin/hipcc ")
    assert "\nFAILED: [code=1] cuda_0.o \n/opt/rocm/bin/hipcc " in tail
    assert tail.endswith("1 error generated when compiling for gfx950.\nninja: build stopped: subcommand failed.")
    # the loader logs before it re-raises (logger.error in _jit_fused_metadata_copy_module)
    assert lines[2].startswith("Failed to compile JIT fused metadata copy kernel (forward_mode=0, "
                               "has_real_page_table=False, has_flashmla=False): ninja exited with status 1\nstdout:\n")


def test_frames_follow_edits(root: Path) -> None:
    utils = root / f"{JIT}/utils.py"
    before = _line_of(utils, "return load_inline(", after="def load_jit(")
    _edit(utils, "def load_jit(", "# a comment an agent added\n# and another\n\ndef load_jit(")
    log = _fails(root).log
    assert f'File "{utils}", line {before + 3}, in load_jit\n    return load_inline(' in log


def test_a_hand_written_tree_builds_through_the_same_mechanism(tmp_path: Path) -> None:
    """The bundled fallback: hand-written files at the release's paths, no loader module."""
    root = tmp_path / "sglang"
    inc = root / JIT / "include/sgl_kernel"
    inc.mkdir(parents=True)
    (inc / "utils.cuh").write_text("""#pragma once
#include <cstdint>
#ifndef USE_ROCM
#include <cuda_runtime.h>
#else
#include <hip/hip_runtime.h>
using cudaStream_t = hipStream_t;
#endif
""")
    rel = f"{JIT}/csrc/elementwise/fused_metadata_copy.cuh"
    (root / rel).parent.mkdir(parents=True)
    (root / rel).write_text("""#pragma once
#include <sgl_kernel/utils.cuh>

#include <cuda_runtime.h>

__global__ void copy_kernel(const int32_t* in, int32_t* out, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = in[i];
}
inline void launch(const int32_t* in, int32_t* out, int n, cudaStream_t s) {
  copy_kernel<<<(n + 127) / 128, 128, 0, s>>>(in, out, n);
}
""")
    err = _fails(root, rel)
    assert f"{(root / rel).resolve()}:4:10: fatal error: 'cuda_runtime.h' file not found" in err.log
    assert re.search(r'^  File "[^"]+/python/sglang/jit_kernel/utils\.py", line \d+, in load_jit$', err.log, re.M)
    _edit(root / rel, "#include <cuda_runtime.h>", GUARD_RUNTIME)
    assert _build(root, rel) == ["fused_metadata_copy"]


def test_errors_before_a_missing_header_come_first(root: Path) -> None:
    body = """#pragma once
#include <hip/hip_runtime.h>
inline cudaStream_t pick(cudaStream_t a) { return a; }
#include <cuda_fp16.h>
"""
    rel = _kernel(root, "early", body)
    log = _fails(root, rel, "early").log
    first = log.index(f"{root / rel}:3:8: error: unknown type name 'cudaStream_t'")
    second = log.index(f"{root / rel}:4:10: fatal error: 'cuda_fp16.h' file not found")
    assert first < second and "2 errors generated when compiling for gfx950." in log
