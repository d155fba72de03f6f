"""Rebuild ``hipify_map.tsv`` (the CUDA -> HIP mapping the ROCm port uses) from HIPIFY's own tables.

HIPIFY (github.com/ROCm/HIPIFY) keeps its CUDA -> HIP mapping as C++ maps in ``src/CUDA2HIP*.cpp``: each entry
``{"cudaX", {"hipX", "rocX", CONV_..., API_..., <section>, <flags>}}``, ``HIP_UNSUPPORTED`` / ``UNSUPPORTED`` /
``*_REMOVED`` among the flags when HIP has no such API. This reads those maps from a git checkout of HIPIFY (or of
a fork that carries its history) and writes the subset the port needs: the include map, and the identifiers of the
CUDA runtime and driver APIs, the device functions and types, and CUB, with their HIP spelling, kind and support.

    python -m agent.fixes.hipify_tables /path/to/HIPIFY/.git <commit> > agent/fixes/hipify_map.tsv

Headers HIPIFY's include map lacks are taken from PyTorch's hipify (``SUPPLEMENT_HEADERS``, source named there).
"""

from __future__ import annotations

import re
import subprocess
import sys

TABLES = {  # file -> the family of what it maps (where CUDA declares it)
    "src/CUDA2HIP_Runtime_API_functions.cpp": "runtime",
    "src/CUDA2HIP_Runtime_API_types.cpp": "runtime",
    "src/CUDA2HIP_Driver_API_functions.cpp": "driver",
    "src/CUDA2HIP_Driver_API_types.cpp": "driver",
    "src/CUDA2HIP_Device_functions.cpp": "device",
    "src/CUDA2HIP_Device_types.cpp": "device",
    "src/CUDA2HIP_CUB_API_types.cpp": "cub",
}
INCLUDES = "src/CUDA2HIP.cpp"
# PyTorch torch/utils/hipify/cuda_to_hip_mappings.py (CUDA_INCLUDE_MAP): headers HIPIFY's map does not list
SUPPLEMENT_HEADERS = {"cuda_bf16.h": "hip/hip_bf16.h"}
SUPPLEMENT_SOURCE = "pytorch/pytorch torch/utils/hipify/cuda_to_hip_mappings.py (CUDA_INCLUDE_MAP)"

# Names HIP provides under CUDA's own spelling that HIPIFY's tables do not list (it lists only what it renames or
# checks): the built-in variables and vector types of HIP's C++ language extensions (ROCm HIP documentation,
# "C++ language extensions": built-in variables, vector types; hip/amd_detail/amd_hip_vector_types.h), the fp16
# aliases of hip/hip_fp16.h, and the cooperative-groups namespace of hip/hip_cooperative_groups.h
_VECTORS = [f"{t}{n}" for t in ("char", "uchar", "short", "ushort", "int", "uint", "long", "ulong", "longlong",
                                 "ulonglong", "float", "double") for n in (1, 2, 3, 4)]  # fmt: skip
SUPPLEMENT_IDENTIFIERS = {
    **{n: ("type", "device") for n in ("dim3", *_VECTORS)},
    **{f"make_{n}": ("function", "device") for n in _VECTORS},
    **{n: ("other", "device") for n in ("threadIdx", "blockIdx", "blockDim", "gridDim", "warpSize")},
    **{n: ("type", "device") for n in ("half", "half2")},
    "cooperative_groups": ("namespace", "cg"),
}
SUPPLEMENT_IDENTIFIERS_SOURCE = "ROCm HIP documentation, C++ language extensions (built-in variables, vector types)"

_ENTRY = re.compile(r'^\s*\{"([^"]+)",\s*\{"([^"]*)",\s*"[^"]*",\s*(CONV_\w+),\s*(API_\w+)([^}]*)\}\}', re.M)
_UNSUPPORTED = re.compile(r"\b(?:HIP_UNSUPPORTED|UNSUPPORTED|HIP_REMOVED|REMOVED)\b")
# graphics interop, textures and surfaces: nothing a compute kernel's port needs
INTEROP = re.compile(r"GL|D3D|[Ee]gl|VDPAU|Vdpau|NvSci|Graphics|Texture|Surface|[Tt]exref|[Ss]urfref|TexObject|Mipmapped")
_KIND = {"CONV_TYPE": "type", "CONV_DEVICE_TYPE": "type", "CONV_NUMERIC_LITERAL": "constant", "CONV_DEFINE": "constant"}


_MAP = re.compile(r"std::map\s*<[^>]*>\s*(\w+)\s*\{(.*?)\n\};", re.S)


def _maps(text: str):  # noqa: ANN202
    """(map name, body) of each ``std::map`` of a table file; the version maps' entries do not match ``_ENTRY``."""
    for m in _MAP.finditer(text):
        yield m.group(1), m.group(2)


def read_tables(show) -> tuple[dict[str, str], dict[str, tuple[str, str, str, bool]]]:  # noqa: ANN001
    headers = {}
    for name, body in _maps(show(INCLUDES)):
        if name == "CUDA_INCLUDE_MAP":
            headers.update((m.group(1), m.group(2)) for m in _ENTRY.finditer(body))
    for cuda, hip in SUPPLEMENT_HEADERS.items():
        headers.setdefault(cuda, hip)
    identifiers: dict[str, list] = {}
    for path, family in TABLES.items():
        for name, body in _maps(show(path)):
            for m in _ENTRY.finditer(body):
                cuda, hip, conv, flags = m.group(1), m.group(2), m.group(3), m.group(5)
                if INTEROP.search(cuda):
                    continue
                supported = bool(hip) and not _UNSUPPORTED.search(flags)
                kind = "namespace" if "NAMESPACE" in name else _KIND.get(conv, "function" if "FUNCTION" in name else "other")
                identifiers.setdefault(cuda, (hip, kind, family, supported))
    for cuda, (kind, family) in SUPPLEMENT_IDENTIFIERS.items():
        identifiers.setdefault(cuda, (cuda, kind, family, True))
    return headers, identifiers


def main(argv: list[str]) -> int:
    git_dir, commit = argv[1], argv[2]

    def show(path: str) -> str:
        return subprocess.run(["git", "--git-dir", git_dir, "show", f"{commit}:{path}"], capture_output=True,
                              text=True, check=True).stdout

    headers, identifiers = read_tables(show)
    out = sys.stdout
    out.write(f"# CUDA -> HIP, from ROCm/HIPIFY {commit}: {', '.join([INCLUDES, *TABLES])}\n")
    out.write(f"# headers HIPIFY does not map: {SUPPLEMENT_SOURCE}\n")
    out.write(f"# names HIP keeps that HIPIFY does not list: {SUPPLEMENT_IDENTIFIERS_SOURCE}\n")
    out.write("# regenerate: python -m agent.fixes.hipify_tables <HIPIFY git dir> <commit> > agent/fixes/hipify_map.tsv\n")
    out.write("# cuda\thip\tkind (include|function|type|constant|namespace|other)\tfamily\tsupported by HIP (1/0)\n")
    for cuda, hip in sorted(headers.items()):
        out.write(f"{cuda}\t{hip}\tinclude\t-\t{int(bool(hip))}\n")
    for cuda, (hip, kind, family, supported) in sorted(identifiers.items()):
        out.write(f"{cuda}\t{hip}\t{kind}\t{family}\t{int(supported)}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
