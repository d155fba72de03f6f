"""The ROCm port (agent/fixes/rocm_port.py): hipify's identifier mapping on real names, a file's existing
``#ifndef USE_ROCM`` block extended rather than stacked, HIP spellings in the branch's own style, precise declines."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent.fixes import rocm_port
from agent.policies.playbook import PlaybookPolicy
from tests.workspace_dir import DirWorkspace
from tools.diagnose import classify


@pytest.mark.parametrize(("cuda", "hip"), [
    ("cudaOccupancyMaxActiveBlocksPerMultiprocessor", "hipOccupancyMaxActiveBlocksPerMultiprocessor"),
    ("cudaStream_t", "hipStream_t"),
    ("cudaGetDevice", "hipGetDevice"),
    ("cudaDeviceProp", "hipDeviceProp_t"),  # not a mechanical cuda -> hip rename
    ("cudaError_t", "hipError_t"),
    ("cudaSuccess", "hipSuccess"),
    ("cudaDevAttrMultiProcessorCount", "hipDeviceAttributeMultiprocessorCount"),
    ("cudaMemcpyHostToDevice", "hipMemcpyHostToDevice"),
    ("cudaIpcMemHandle_t", "hipIpcMemHandle_t"),
    ("CUdeviceptr", "hipDeviceptr_t"),
    ("__nv_bfloat16", "__hip_bfloat16"),
    ("cub", "hipcub"),
])  # fmt: skip
def test_hipify_spells_real_cuda_names(cuda: str, hip: str) -> None:
    assert rocm_port.hip_spelling(cuda) == hip


def test_what_hip_lacks_has_no_spelling() -> None:
    m = rocm_port.hipify_map()
    unsupported = m.spelling("cudaOccupancyAvailableDynamicSMemPerBlock")
    assert unsupported is not None and not unsupported.supported  # hipify lists it, HIP does not provide it
    assert rocm_port.hip_spelling("cudaOccupancyAvailableDynamicSMemPerBlock") is None
    assert m.spelling("__cvta_generic_to_shared") is None  # not in hipify at all
    assert m.spelling("__shfl_xor_sync").hip == "__shfl_xor_sync"  # the same name in HIP: nothing to spell
    assert m.header("cuda_runtime.h") == "hip/hip_runtime.h" and m.header("cub/cub.cuh") == "hipcub/hipcub.hpp"
    assert m.header("device_launch_parameters.h") is None  # HIP needs no header for it
    assert "cutlass/cutlass.h" not in m.headers


def test_the_mapping_covers_the_names_the_twins_cuda_headers_declare() -> None:
    """Every name the twin's CUDA headers declare (cuda_names/) is in the data -- a HIP spelling, the same name, or
    marked unsupported -- but what neither hipify nor HIP has: version macros, libcu++'s ``cuda::`` namespace, and
    device intrinsics HIP lacks (the port declines those by name)."""
    from sandboxes.twin.engine.jit import cuda_declarations

    m = rocm_port.hipify_map()
    missing = {n for n in cuda_declarations() if m.spelling(n) is None}
    assert missing == {"CUB_VERSION", "CUDART_INF_BF16", "CUDART_VERSION", "CUDA_VERSION", "cuda", "cudaLaunchKernelEx",
                       "__cvta_generic_to_shared", "__globaltimer", "__isShared", "__nanosleep", "__pipeline_commit",
                       "__pipeline_wait_prior", "__reduce_add_sync", "__reduce_max_sync", "__syncwarp",
                       "atomicAdd_block"}, sorted(missing)  # fmt: skip




class Ctx:
    def __init__(self, root: Path) -> None:
        from tasks.spec import load_task

        self.workspace = DirWorkspace(root)
        self.task = load_task(Path(__file__).resolve().parents[2] / "tasks" / "glm52_mi355x.yaml")


def _apply(root: Path, edit: dict) -> None:
    path = root / edit["path"]
    text = path.read_text()
    assert text.count(edit["old"]) == 1
    path.write_text(text.replace(edit["old"], edit["new"], 1))


def _missing(path: str, line: int, header: str) -> dict:
    log = f"{path}:{line}:10: fatal error: '{header}' file not found\n#include <{header}>\n"
    d = classify(log).model_dump()
    assert d["header"] == header
    return d


KERNEL = "sglang/python/sglang/jit_kernel/csrc/k.cuh"
GUARDED = """#pragma once
#include <cstdint>
#ifndef USE_ROCM
#include <cuda_fp16.h>
#else
#include <hip/hip_fp16.h>
#include <hip/hip_runtime.h>
#endif
#include <cuda_runtime.h>
#include <cuda_bf16.h>

__global__ void k(__half* x) { x[threadIdx.x] = __float2half(0.f); }
"""


def test_an_existing_guard_block_is_extended_not_stacked(tmp_path: Path) -> None:
    (tmp_path / KERNEL).parent.mkdir(parents=True)
    (tmp_path / KERNEL).write_text(GUARDED)
    policy, ctx = PlaybookPolicy(), Ctx(tmp_path)
    for line, header in ((9, "cuda_runtime.h"), (9, "cuda_bf16.h")):  # the second is on line 9 once the first moved
        call, note = policy._guard_fix(ctx, _missing(KERNEL, line, header))
        assert "existing USE_ROCM block" in note["change"] and note["defect"] == f"include:{KERNEL}:{header}"
        _apply(tmp_path, call.args)
    text = (tmp_path / KERNEL).read_text()
    assert text.count("#ifndef USE_ROCM") == 1 and text.count("#else") == 1 and text.count("#endif") == 1
    cuda, _, rocm = text.partition("#else")
    assert all(f"#include <{h}>" in cuda for h in ("cuda_fp16.h", "cuda_runtime.h", "cuda_bf16.h"))
    assert rocm.count("#include <hip/hip_fp16.h>") == 1 and rocm.count("#include <hip/hip_bf16.h>") == 1
    assert rocm.count("#include <hip/hip_runtime.h>") == 1  # already there: not added again
    assert "#include <cstdint>" in text and "__global__ void k" in text


RUNTIME = "sglang/python/sglang/jit_kernel/include/sgl_kernel/runtime.cuh"
UTILS = "sglang/python/sglang/jit_kernel/include/sgl_kernel/utils.cuh"
UTILS_TEXT = """#pragma once
#ifndef USE_ROCM
#include <cuda_runtime.h>
#else
#include <hip/hip_runtime.h>
using cudaError_t = hipError_t;
inline constexpr auto cudaSuccess = hipSuccess;
#define cudaGetLastError hipGetLastError
#endif
"""
RUNTIME_TEXT = """#pragma once
#include <sgl_kernel/utils.cuh>
#include <cuda_runtime.h>
inline int blocks(const void* k) {
  int n = 0;
  cudaError_t e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, k, 128, 0);
  cudaDeviceProp prop;
  size_t smem = 0;
  cudaOccupancyAvailableDynamicSMemPerBlock(&smem, k, 1, 128);
  return e == cudaSuccess ? n : 0;
}
// cudaStreamSynchronize in a comment is not a use
"""


def test_a_shared_headers_guard_brings_the_hip_spellings_of_what_it_uses(tmp_path: Path) -> None:
    for rel, text in ((UTILS, UTILS_TEXT), (RUNTIME, RUNTIME_TEXT)):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    call, note = PlaybookPolicy()._guard_fix(Ctx(tmp_path), _missing(RUNTIME, 3, "cuda_runtime.h"))
    new = call.args["new"]
    assert new.startswith("#ifndef USE_ROCM\n#include <cuda_runtime.h>\n#else\n#include <hip/hip_runtime.h>\n")
    assert "#define cudaOccupancyMaxActiveBlocksPerMultiprocessor hipOccupancyMaxActiveBlocksPerMultiprocessor" in new
    assert "#define cudaDeviceProp hipDeviceProp_t" in new
    # what utils.cuh (which it includes) already spells for ROCm is not spelled twice; comments are not uses
    assert "cudaError_t" not in new and "cudaSuccess" not in new and "cudaStreamSynchronize" not in new
    assert "cudaOccupancyMaxActiveBlocksPerMultiprocessor -> hipOccupancyMaxActiveBlocksPerMultiprocessor" in note["change"]
    # what HIP lacks is not spelled: it is named, where it is, for a human (a shim, as SGLang's maintainers wrote)
    assert "cudaOccupancyAvailableDynamicSMemPerBlock" not in new
    assert note["unported"] == [f"cudaOccupancyAvailableDynamicSMemPerBlock ({RUNTIME}:9): HIP has no "
                                "hipOccupancyAvailableDynamicSMemPerBlock"]  # fmt: skip


def test_an_undeclared_name_is_spelled_in_the_guard_that_hides_its_header_in_that_guards_style(tmp_path: Path) -> None:
    for rel, text in ((UTILS, UTILS_TEXT),
                      (KERNEL, "#include <sgl_kernel/utils.cuh>\nvoid f(cudaStream_t s, void* d) {\n"
                               "  cudaMemcpyAsync(d, d, 4, cudaMemcpyHostToDevice, s);\n}\n")):  # fmt: skip
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    log = f"{KERNEL}:2:8: error: unknown type name 'cudaStream_t'\n"
    call, note = PlaybookPolicy()._guard_fix(Ctx(tmp_path), classify(log).model_dump())
    assert call.args["path"] == UTILS and note["defect"] == f"include:{UTILS}:cuda_runtime.h"
    _apply(tmp_path, call.args)
    rocm = (tmp_path / UTILS).read_text().partition("#else")[2]
    assert "using cudaStream_t = hipStream_t;\n" in rocm  # types as the branch aliases them
    assert "#define cudaMemcpyAsync hipMemcpyAsync\n" in rocm  # functions as it defines them
    assert "inline constexpr auto cudaMemcpyHostToDevice = hipMemcpyHostToDevice;\n" in rocm  # constants likewise
    assert rocm.index("using cudaStream_t") < rocm.index("#endif")


def test_what_hip_lacks_is_declined_by_name_and_position(tmp_path: Path) -> None:
    (tmp_path / KERNEL).parent.mkdir(parents=True)
    (tmp_path / KERNEL).write_text("#include <cutlass/cutlass.h>\n__device__ unsigned f(void* p) {\n"
                                   "  return __cvta_generic_to_shared(p);\n}\n")  # fmt: skip
    policy, ctx = PlaybookPolicy(), Ctx(tmp_path)
    diag = classify(f"{KERNEL}:3:10: error: use of undeclared identifier '__cvta_generic_to_shared'\n").model_dump()
    assert policy._guard_fix(ctx, diag) is None
    assert f"'__cvta_generic_to_shared' ({KERNEL}:3)" in diag["summary"] and diag["declined"]["where"] == f"{KERNEL}:3"
    diag = _missing(KERNEL, 1, "cutlass/cutlass.h")
    assert policy._guard_fix(ctx, diag) is None  # a CUDA-only library: a guard would only hide the problem
    assert f"<cutlass/cutlass.h> ({KERNEL}:1) has no HIP counterpart" in diag["summary"]


def test_the_files_own_pairing_wins_over_hipify(tmp_path: Path) -> None:
    """A header that pairs an alias both ways (CUDA's type on one side, HIP's on the other) says how this code base
    spells that CUDA type on ROCm; hipify's own answer (``nv_bfloat16`` -> ``hip_bfloat16``) comes second."""
    assert rocm_port.hip_spelling("nv_bfloat16") == "hip_bfloat16"
    pairs = ("#pragma once\n#ifndef USE_ROCM\n#include <cuda_bf16.h>\nusing bf16_t = nv_bfloat16;\n#else\n"
             "#include <hip/hip_bf16.h>\nusing bf16_t = __hip_bfloat16;\nusing fp8_t = uint8_t;\n#endif\n")  # fmt: skip
    assert rocm_port.own_spellings(pairs) == {"nv_bfloat16": "__hip_bfloat16"}  # uint8_t is a stand-in, not a pair
    for rel, text in ((UTILS, pairs), (KERNEL, "#include <sgl_kernel/utils.cuh>\nnv_bfloat16 x;\n")):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    diag = classify(f"{KERNEL}:2:1: error: unknown type name 'nv_bfloat16'\n").model_dump()
    call, _ = PlaybookPolicy()._guard_fix(Ctx(tmp_path), diag)
    assert call.args["path"] == UTILS and "using nv_bfloat16 = __hip_bfloat16;\n" in call.args["new"]


def test_a_declined_port_abandons_the_configuration_with_the_precise_reason(tmp_path: Path) -> None:
    from agent.state import Observation

    (tmp_path / KERNEL).parent.mkdir(parents=True)
    (tmp_path / KERNEL).write_text("__device__ unsigned f(void* p) {\n  return __cvta_generic_to_shared(p);\n}\n")
    diag = classify(f"{KERNEL}:2:10: error: use of undeclared identifier '__cvta_generic_to_shared'\n").model_dump()
    obs = Observation(call_id="1", tool="launch_server", args={}, ok=False, result={"diagnosis": diag})
    memo = {"queue": [], "current": {}}
    cur = {"label": "speculative decoding 5/1/6", "keep_as": "single", "feature": "speculative decoding",
           "flags": {}, "seen": [], "fixes": 0}  # fmt: skip
    PlaybookPolicy()._fix(None, Ctx(tmp_path), memo, cur, obs)  # type: ignore[arg-type]
    why = memo["blocked"]["speculative decoding"]["why"]
    assert f"'__cvta_generic_to_shared' ({KERNEL}:2)" in why and "no HIP equivalent" in why
    # the kernel blocks what builds it, not the feature: a chain no deeper than the crashed one's flags is kept
    assert memo["blocked"]["speculative decoding"]["kernel"] == KERNEL
