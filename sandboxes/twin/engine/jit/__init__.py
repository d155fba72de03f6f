"""JIT kernel compilation, mechanically: a compiler's rules applied to the workspace's real kernel sources.

When a launch switches on a feature that needs a JIT kernel (``JitKernel.when`` fires on a server argument),
SGLang 0.5.12 builds it with ``load_jit`` (``python/sglang/jit_kernel/utils.py``): tvm-ffi's ``load_inline``
writes a ``cuda.cu`` that ``#include``s the kernel's source by absolute path and runs ninja, whose build line on
ROCm is ``hipcc <tvm-ffi's flags> -DUSE_ROCM -std=c++20 -O3 -I<tvm_ffi>/include -I/opt/rocm/include
-I<sglang>/jit_kernel/include -c cuda.cu``. The twin has no compiler, so it applies the two rules of that build
that decide whether a CUDA-born source builds on ROCm, with only the C preprocessor and the standard library:

1. **Headers.** The same translation unit (the ``cuda.cu`` tvm-ffi writes, with the workspace's file included
   by absolute path) is preprocessed as C++20 the way clang's HIP device pass sees it (``USE_ROCM``,
   ``__HIP_PLATFORM_AMD__``, ``__HIP__``, ``__gfx950__``, ...; ``__clang_hip_runtime_wrapper.h`` force-included),
   with the kernel include directory of the workspace and the image's headers on the include path. The image's
   headers are declaration stubs under ``rocm_include/`` (ROCm's hip/hipcub, tvm-ffi and dlpack, the C++
   library): names only. A header the image does not have -- every CUDA header -- is a fatal error.
2. **Declarations.** After a clean preprocess, every identifier the translation unit uses that only a CUDA
   header provides (``cuda_names/`` lists what each CUDA header declares; it is never on the include path) must
   be declared somewhere in the translation unit -- by a header it includes (HIP's, or SGLang's own
   ``utils.cuh`` aliases) or by the source itself. The first use of one that is not fails like clang does:
   ``unknown type name 'X'`` for a type, ``use of undeclared identifier 'X'`` otherwise. So hiding a CUDA
   header behind ``#ifndef USE_ROCM`` fixes the build only when what it provided is provided another way.

The twin runs ``cpp`` in C mode with ``__cplusplus`` defined (``cpp -x c++`` needs ``cc1plus``, which Debian's
``cpp`` package does not ship; it is in ``g++``). For these sources that is the same preprocessing: gnu17 mode
lexes raw strings too, and SGLang's kernels put no C++-only tokens (digit separators, ``and``/``or``/``true``)
in their ``#if`` lines. Diagnostics are printed the way hipcc (clang) prints them, positions mapped back through cpp's
linemarkers, then the build failure surfaces as the Python traceback SGLang's ``load_jit`` raises. Nothing here
knows what the fix is.
"""

from __future__ import annotations

import ast
import contextlib
import dataclasses
import hashlib
import json
import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

from ...scenario import JitKernel, Scenario
from .. import tracebacks

ROCM_INCLUDE = Path(__file__).parent / "rocm_include"  # the image's headers, as declaration stubs
CUDA_NAMES = Path(__file__).parent / "cuda_names"  # what CUDA's headers declare; only read, never included
SIMULATED = "dayzero digital twin (simulated)"

# --- the image: where SGLang's ROCm image keeps what the build uses --------------------------------------------
ROCM_HOME = "/opt/rocm"
IMAGE_SITE_PACKAGES = "/usr/local/lib/python3.12/dist-packages"
TVM_FFI_INCLUDE = f"{IMAGE_SITE_PACKAGES}/tvm_ffi/include"  # find_include_path() == find_dlpack_include_path()
TVM_FFI_EXTENSION = f"{IMAGE_SITE_PACKAGES}/tvm_ffi/cpp/extension.py"
TVM_FFI_CACHE = "/root/.cache/tvm-ffi"  # $TVM_FFI_CACHE_DIR, default ~/.cache/tvm-ffi (the image runs as root)
CLANG_MAJOR = 20  # ROCm 7.0's amdclang

# SGLang 0.5.12 python/sglang/jit_kernel/utils.py: DEFAULT_CFLAGS, and _get_default_target_flags() on ROCm
SGLANG_CFLAGS = ("-std=c++20", "-O3")
SGLANG_ROCM_CUDA_CFLAGS = ("-DUSE_ROCM", "-std=c++20", "-O3")
KERNEL_DIR = "python/sglang/jit_kernel"  # KERNEL_PATH; DEFAULT_INCLUDE = [KERNEL_PATH / "include"]
# tvm-ffi 0.1.9 tvm_ffi/cpp/extension.py: _decorate_with_tvm_ffi() puts these first in the generated source
TVM_FFI_PRELUDE = ("tvm/ffi/container/tensor.h", "tvm/ffi/dtype.h", "tvm/ffi/error.h", "tvm/ffi/extra/c_env_api.h",
                   "tvm/ffi/function.h")  # fmt: skip


class JitCompileError(RuntimeError):
    """A JIT kernel failed to build; ``log`` holds the compiler output inside SGLang's traceback."""

    def __init__(self, summary: str, log: str, *, kernel: str = "", source: str = "", returncode: int = 1) -> None:
        super().__init__(summary)
        self.summary = summary
        self.log = log
        self.kernel = kernel
        self.source = source
        self.returncode = returncode


def _coerce(value: Any, kernel: JitKernel) -> Any:
    if kernel.when.above is not None and isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            return None
    return value


def triggered(scenario: Scenario, server_args: Mapping[str, Any]) -> list[JitKernel]:
    """The scenario's JIT kernels whose trigger fires for these server arguments."""
    out = []
    for kernel in scenario.engine.jit_kernels:
        if kernel.when.fires(_coerce(server_args.get(kernel.when.flag), kernel)):
            out.append(kernel)
    return out


# --- what load_jit does with a kernel: its loader in the workspace, the generated source, the hipcc line -------


@dataclass(frozen=True)
class Loader:
    """The workspace function that calls ``load_jit`` for a kernel source, read with ``ast`` (real line numbers).

    ``file`` is relative to the SGLang root. The loader's parameters take the values the twin builds with
    (ints 0, bools False), so the module name, wrappers and logged error are the ones load_jit would produce.
    """

    file: str
    func: str
    call: str  # first line of the statement that calls load_jit
    line: int  # its line
    cached: bool  # decorated with @cache_once (the call goes through utils.py's wrapper)
    module_name: str  # "sgl_kernel_jit_" + marker args, as load_jit builds it
    wrappers: tuple[tuple[str, str], ...]  # cuda_wrappers as (export name, kernel name)
    error_template: str | None  # the logger.error f-string of the except block, "{e}" for the exception
    caller: tracebacks.Frame | None  # the function of the same module that calls the loader
    call_site: tracebacks.Frame | None  # where SGLang's runtime (python/sglang/srt) calls that function


def _kernel_rel(kernel_source: str) -> str | None:
    prefix = f"{KERNEL_DIR}/csrc/"
    return kernel_source[len(prefix):] if kernel_source.startswith(prefix) else None


def _stmt_line(lines: list[str], lineno: int) -> str:
    return lines[lineno - 1].strip() if 0 < lineno <= len(lines) else ""


def _cpp_value(annotation: ast.expr | None) -> tuple[str, str]:
    """(value as make_cpp_args renders it, value as an f-string renders it) for a loader parameter."""
    name = annotation.id if isinstance(annotation, ast.Name) else ""
    if name == "bool":
        return "false", "False"
    if name in ("int", "float"):
        return "0", "0"
    return "", ""


def _fstring(node: ast.expr, values: Mapping[str, str]) -> str | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        out = []
        for part in node.values:
            if isinstance(part, ast.Constant):
                out.append(str(part.value))
            elif isinstance(part, ast.FormattedValue) and isinstance(part.value, ast.Name):
                out.append(values.get(part.value.id, "{" + part.value.id + "}"))
            else:
                return None
        return "".join(out)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left, right = _fstring(node.left, values), _fstring(node.right, values)
        return None if left is None or right is None else left + right
    return None


def _calls(node: ast.AST, name: str) -> Iterator[ast.Call]:
    for sub in ast.walk(node):
        if isinstance(sub, ast.Call) and isinstance(sub.func, ast.Name) and sub.func.id == name:
            yield sub


def _statement_of(func: ast.AST, call: ast.Call) -> ast.stmt:
    best: ast.stmt | None = None
    for sub in ast.walk(func):
        if (isinstance(sub, ast.stmt) and not isinstance(sub, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Try))
                and sub.lineno <= call.lineno <= (sub.end_lineno or sub.lineno)
                and any(n is call for n in ast.walk(sub)) and (best is None or sub.lineno >= best.lineno)):
            best = sub
    return best or call  # type: ignore[return-value]


def _parse(path: Path) -> tuple[ast.Module, list[str]] | None:
    try:
        text = path.read_text(errors="replace")
        return ast.parse(text), text.splitlines()
    except (OSError, SyntaxError, ValueError):
        return None


def _functions(tree: ast.Module) -> Iterator[ast.FunctionDef]:
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef):
            yield node


def _parsed_mentioning(paths: Iterable[Path], *texts: str) -> Iterator[tuple[Path, ast.Module, list[str]]]:
    """(path, tree, lines) of each Python file among ``paths`` whose text contains every one of ``texts``."""
    for path in paths:
        try:
            text = path.read_text(errors="replace")
        except OSError:
            continue
        if not all(t in text for t in texts):
            continue
        parsed = _parse(path)
        if parsed is not None:
            yield path, *parsed


def _call_site(root: Path, module: str, func: str) -> tracebacks.Frame | None:
    """The first place under python/sglang/srt that imports ``module`` from sglang.jit_kernel and calls ``func``."""
    srt = root / "python/sglang/srt"
    needle = f"sglang.jit_kernel.{module}"
    for path, tree, lines in _parsed_mentioning(sorted(srt.rglob("*.py")) if srt.is_dir() else (), needle, func):
        for fn in _functions(tree):
            for call in _calls(fn, func):
                stmt = _statement_of(fn, call)
                return tracebacks.Frame(path.relative_to(root).as_posix(), fn.name, _stmt_line(lines, stmt.lineno),
                                        stmt.lineno)
    return None


def find_loader(root: Path, kernel: JitKernel) -> Loader | None:
    """The function in ``python/sglang/jit_kernel/*.py`` that passes this kernel's source to ``load_jit``.

    Several may (SGLang 0.5.12 builds fused_metadata_copy.cuh as two modules); the one whose ``load_jit`` marker
    is the kernel's name wins, else the first.
    """
    rel = _kernel_rel(kernel.source)
    jit_dir = root / KERNEL_DIR
    if rel is None or not jit_dir.is_dir():
        return None
    found: list[tuple[bool, Loader]] = []
    for path, tree, lines in _parsed_mentioning(sorted(jit_dir.glob("*.py")), rel):
        for fn in _functions(tree):
            for call in _calls(fn, "load_jit"):
                files = [kw.value for kw in call.keywords if kw.arg in ("cuda_files", "cpp_files")]
                if not any(isinstance(e, ast.Constant) and e.value == rel
                           for v in files if isinstance(v, (ast.List, ast.Tuple)) for e in v.elts):
                    continue
                found.append(_loader(root, path, tree, lines, fn, call, kernel))
    if not found:
        return None
    found.sort(key=lambda item: not item[0])
    loader = found[0][1]
    if loader.caller is None:
        return loader
    return dataclasses.replace(loader, call_site=_call_site(root, Path(loader.file).stem, loader.caller.func))


def _loader(root: Path, path: Path, tree: ast.Module, lines: list[str], fn: ast.FunctionDef, call: ast.Call,
            kernel: JitKernel) -> tuple[bool, Loader]:
    rendered, shown = {}, {}
    for arg in fn.args.args:
        rendered[arg.arg], shown[arg.arg] = _cpp_value(arg.annotation)
    # args = make_cpp_args(p1, p2, ...): the CPPArgList load_jit gets as *args and the wrappers interpolate
    cpp_args: list[str] = []
    for node in ast.walk(fn):
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call) and \
                isinstance(node.value.func, ast.Name) and node.value.func.id == "make_cpp_args":
            for a in node.value.args:
                if isinstance(a, ast.Name) and rendered.get(a.id):
                    cpp_args.append(rendered[a.id])
                elif isinstance(a, ast.Constant):
                    cpp_args.append(str(a.value).lower() if isinstance(a.value, bool) else str(a.value))
            for target in node.targets:
                if isinstance(target, ast.Name):
                    rendered[target.id] = ", ".join(cpp_args)
    marker = ""
    parts: list[str] = []
    for a in call.args:
        if isinstance(a, ast.Constant) and isinstance(a.value, str):
            marker = marker or a.value
            parts.append(a.value)
        elif isinstance(a, ast.Starred):
            parts.extend(cpp_args)
    wrappers: list[tuple[str, str]] = []
    for kw in call.keywords:
        if kw.arg == "cuda_wrappers" and isinstance(kw.value, (ast.List, ast.Tuple)):
            for elt in kw.value.elts:
                if isinstance(elt, ast.Tuple) and len(elt.elts) == 2:
                    export, name = (_fstring(e, rendered) for e in elt.elts)
                    if export is not None and name is not None:
                        wrappers.append((export, name))
    template = None
    for handler in (n for n in ast.walk(fn) if isinstance(n, ast.ExceptHandler)):
        for sub in ast.walk(handler):
            if isinstance(sub, ast.Call) and isinstance(sub.func, ast.Attribute) and sub.func.attr == "error" \
                    and sub.args:
                template = _fstring(sub.args[0], {**shown, **({handler.name: "{e}"} if handler.name else {})})
    stmt = _statement_of(fn, call)
    rel_file = path.relative_to(root).as_posix()
    cached = any(isinstance(d, ast.Name) and d.id == "cache_once" for d in fn.decorator_list)
    caller = next((tracebacks.Frame(rel_file, other.name, _stmt_line(lines, st.lineno), st.lineno)
                   for other in _functions(tree) for c in _calls(other, fn.name)
                   for st in (_statement_of(other, c),)), None)
    loader = Loader(rel_file, fn.name, _stmt_line(lines, stmt.lineno), stmt.lineno, cached,
                    "sgl_kernel_jit_" + "_".join(parts or [kernel.name]), tuple(wrappers), template, caller, None)
    return marker == kernel.name, loader


def _decorate(source: str) -> str:
    """tvm-ffi 0.1.9 ``_decorate_with_tvm_ffi(source, {})``: its headers, a blank line, the source."""
    return "\n".join([*(f"#include <{h}>" for h in TVM_FFI_PRELUDE), "", source, ""])


def generated_source(kernel_path: Path, wrappers: Iterable[tuple[str, str]] = ()) -> str:
    """The ``cuda.cu`` load_inline writes for this kernel: the source by absolute path, then its exports."""
    cuda_sources = [f'#include "{kernel_path}"']
    cuda_sources += [f"TVM_FFI_DLL_EXPORT_TYPED_FUNC({export}, ({name}));" for export, name in wrappers]
    return _decorate("\n".join(cuda_sources))


def _tvm_hash(cuda_source: str, include_dir: str) -> str:
    """tvm-ffi 0.1.9 ``_hash_sources`` over what ``build_inline`` hashes (the build directory's suffix)."""
    m = hashlib.sha256()

    def _hash(obj: Any) -> None:
        if obj is None:
            m.update(b"None")
        elif isinstance(obj, str):
            m.update(b"str" + obj.encode("utf-8"))
        elif isinstance(obj, Mapping):
            m.update(b"Mapping")
            for key in sorted(obj):
                _hash(key)
                _hash(obj[key])
        else:
            m.update(b"Sequence")
            for item in obj:
                _hash(item)

    _hash((_decorate(""), cuda_source, None, None, {}, list(SGLANG_CFLAGS), list(SGLANG_ROCM_CUDA_CFLAGS), [],
           [include_dir], None))
    return m.hexdigest()[:16]


def hipcc_command(gfx: str, include_dir: str, source: str) -> list[str]:
    """The compile line tvm-ffi's build.ninja runs on ROCm (rule ``compile_cuda``: ``$nvcc $cuda_cflags -c $in``).

    tvm-ffi 0.1.9 ``_generate_ninja_build``: ``-std=c++17 -O2`` then ``-fPIC -D__HIP_PLATFORM_AMD__=1 -fno-gpu-rdc
    --offload-arch=<arch>``, then SGLang's ``extra_cuda_cflags``, then ``-I`` for its include, dlpack's (the same
    directory in a wheel install), ``$ROCM_HOME/include`` and SGLang's ``extra_include_paths``.
    """
    return [f"{ROCM_HOME}/bin/hipcc", "-std=c++17", "-O2", "-fPIC", "-D__HIP_PLATFORM_AMD__=1", "-fno-gpu-rdc",
            f"--offload-arch={gfx}", *SGLANG_ROCM_CUDA_CFLAGS, f"-I{TVM_FFI_INCLUDE}", f"-I{TVM_FFI_INCLUDE}",
            f"-I{ROCM_HOME}/include", f"-I{include_dir}", "-c", source, "-o", "cuda_0.o"]  # fmt: skip


def device_macros(gfx: str) -> list[str]:
    """What clang's HIP device pass for ``gfx`` predefines (beyond the command line's -D flags)."""
    family = re.match(r"gfx(\d+?)\d\w$", gfx)
    out = ["__cplusplus=202002L", "__clang__=1", f"__clang_major__={CLANG_MAJOR}", "__clang_minor__=0",
           "__GNUC__=4", "__GNUC_MINOR__=2", "__GNUC_PATCHLEVEL__=1", "__HIP__=1", "__HIP_DEVICE_COMPILE__=1",
           "__AMDGCN__=1", "__AMDGPU__=1", f"__{gfx}__=1", "__AMDGCN_WAVEFRONT_SIZE__=64",
           "__AMDGCN_WAVEFRONT_SIZE=64", "__x86_64__=1", "__linux__=1", "__unix__=1", "__CHAR_BIT__=8",
           "__SIZEOF_POINTER__=8", "__SIZEOF_LONG__=8", "__SIZEOF_INT__=4", "__ORDER_LITTLE_ENDIAN__=1234",
           "__BYTE_ORDER__=__ORDER_LITTLE_ENDIAN__", "__cpp_concepts=202002L", "__cpp_constexpr=202002L",
           "__cpp_if_constexpr=201606L", "__cpp_consteval=202211L", "__cpp_fold_expressions=201603L",
           "__has_feature(x)=0", "__has_extension(x)=0"]  # fmt: skip
    if family:
        out.append(f"__GFX{family.group(1)}__=1")
    return out


def preprocess_command(source: Path, include_dirs: Iterable[str], gfx: str, cpp: str = "cpp") -> list[str]:
    """The twin's stand-in for hipcc's device pass: ``cpp`` as C++20 on clang's HIP macros, keeping #defines."""
    cmd = [cpp, "-x", "c", "-std=gnu17", "-undef", "-U__STDC_VERSION__", "-nostdinc", "-dD"]
    cmd += [f"-D{m}" for m in (*device_macros(gfx), "__HIP_PLATFORM_AMD__=1", "USE_ROCM")]
    for d in include_dirs:
        cmd += ["-I", d]
    return [*cmd, "-include", str(ROCM_INCLUDE / "__clang_hip_runtime_wrapper.h"), str(source)]


# --- clang's diagnostics -----------------------------------------------------------------------------------------
# Format as hipcc (clang) prints it, checked against public build logs:
#   - ggml-org/llama.cpp PR #9567 (hipcc, gfx906):
#       In file included from .../out-prod.cu:2:
#       .../vendors/cuda.h:3:10: fatal error: 'cuda_runtime.h' file not found
#       #include <cuda_runtime.h>
#                ^~~~~~~~~~~~~~~~
#       1 error generated when compiling for gfx906.
#   - rocm-arch/python-pytorch-rocm issue #5: "In file included from" once per level, outermost file first.
#   - Anbeeld/beellama.cpp issue #55 (ROCm 6.4, clang >= 17 shows line numbers):
#       .../common.cuh:487:17: error: use of undeclared identifier '__shfl_xor_sync'
#         487 |             x = __shfl_xor_sync(0xFFFFFFFFULL, x, offset, width) && x;
#             |                 ^
#       12 errors generated when compiling for gfx906.
#   - ROCm/hcc issue #911, justxi/rocm issue #182: "error: unknown type name 'X'" with a bare caret.
#   - clang/lib/Frontend/TextDiagnostic.cpp (emitSnippetAndCaret, emitSnippet): the line-number gutter is
#     max(4, digits(line + SnippetLineLimit(16))) wide, " <n> | " before the source, "| " indented by width+2
#     before the caret line; tabs expand to 8 columns.
# The image's ROCm 7.0 clang (20) prints the line-number gutter, so the twin does.

SNIPPET_LINE_LIMIT = 16
TAB_STOP = 8


@dataclass(frozen=True)
class Diagnostic:
    path: str  # as printed
    line: int
    col: int
    severity: str  # "fatal error" | "error"
    message: str
    source: str = ""  # the source line (raw)
    length: int = 1  # highlighted columns from col: 1 is a bare caret
    includes: tuple[tuple[str, int], ...] = ()  # the include stack, outermost first
    notes: tuple[Diagnostic, ...] = ()  # e.g. "expanded from macro 'X'"


def snippet(line_no: int, text: str, col: int, length: int = 1) -> list[str]:
    width = max(4, len(str(line_no + SNIPPET_LINE_LIMIT)))
    start = len(text[: col - 1].expandtabs(TAB_STOP))
    end = max(start + 1, len(text[: col - 1 + length].expandtabs(TAB_STOP)))
    caret = " " * start + "^" + "~" * (end - start - 1)
    return [f"{' ' * (width - len(str(line_no)) + 1)}{line_no} | {text.expandtabs(TAB_STOP)}", f"{' ' * (width + 2)}| {caret}"]


def render(diags: list[Diagnostic], gfx: str) -> str:
    out: list[str] = []
    last: tuple[tuple[str, int], ...] | None = None
    for d in diags:
        if d.includes and d.includes != last:
            out += [f"In file included from {p}:{n}:" for p, n in d.includes]
        last = d.includes
        for one in (d, *d.notes):
            out.append(f"{one.path}:{one.line}:{one.col}: {one.severity}: {one.message}")
            out += snippet(one.line, one.source, one.col, one.length)
    n = len(diags)
    out.append(f"{n} error{'' if n == 1 else 's'} generated when compiling for {gfx}.")
    return "\n".join(out)


def _stamp(path: str) -> tuple[int, int]:
    st = os.stat(path)
    return st.st_mtime_ns, st.st_size


@lru_cache(maxsize=512)
def _file_lines(path: str, stamp: tuple[int, int]) -> tuple[str, ...]:
    try:
        return tuple(Path(path).read_text(errors="replace").splitlines())
    except OSError:
        return ()


def _lines(path: str) -> tuple[str, ...]:
    try:
        return _file_lines(path, _stamp(path))
    except OSError:
        return ()


_CODE_BLANK = re.compile(r'//[^\n]*|/\*.*?\*/|"(?:[^"\\\n]|\\.)*"|\'(?:[^\'\\\n]|\\.)*\'', re.S)


@lru_cache(maxsize=256)
def _code_lines(path: str, stamp: tuple[int, int]) -> tuple[str, ...]:
    """The file with comments and literals blanked (same columns), to find where an identifier is written."""
    text = "\n".join(_file_lines(path, stamp))
    return tuple(_CODE_BLANK.sub(lambda m: re.sub(r"[^\n]", " ", m.group(0)), text).splitlines())


# --- gcc's report of a failed preprocess, as clang reports it -----------------------------------------------------

_GCC_DIAG = re.compile(r"^(?P<path>.+?):(?P<line>\d+):(?P<col>\d+): (?P<sev>fatal error|error): (?P<msg>.*)$")
_GCC_INCLUDED = re.compile(r"^(?:In file included from|\s+from) (?P<path>.+?):(?P<line>\d+)[,:]$")


def _header_token(text: str, col: int) -> int:
    if 0 < col <= len(text) and text[col - 1] in '<"':
        close = text.find(">" if text[col - 1] == "<" else '"', col)
        if close >= 0:
            return close - col + 2
    return 1


def translate_cpp_errors(stderr: str, show: Callable[[str], str]) -> list[Diagnostic]:
    """gcc's preprocessor errors (``file:line:col: fatal error: x.h: No such file or directory``) as clang's."""
    diags: list[Diagnostic] = []
    chain: list[tuple[str, int]] = []
    for line in stderr.splitlines():
        m = _GCC_INCLUDED.match(line)
        if m:
            if not m.group("path").startswith("<"):
                chain.append((show(m.group("path")), int(m.group("line"))))
            continue
        m = _GCC_DIAG.match(line)
        if not m:
            continue
        path, ln, col, msg = m.group("path"), int(m.group("line")), int(m.group("col")), m.group("msg")
        text = _lines(path)[ln - 1] if 0 < ln <= len(_lines(path)) else ""
        length = 1
        missing = re.fullmatch(r"(.+): No such file or directory", msg)
        if missing:
            msg, length = f"'{missing.group(1)}' file not found", _header_token(text, col)
        elif msg.startswith("#error"):
            msg = msg[len("#error"):].strip()
        diags.append(Diagnostic(show(path), ln, col, "fatal error" if missing else m.group("sev"), msg, text, length,
                                tuple(reversed(chain))))
        chain = []
    return diags


# --- the declaration check ----------------------------------------------------------------------------------------

_TOKEN = re.compile(r"""
    (?P<ws>\s+)
  | (?P<str>(?:u8|u|U|L)?R"(?P<delim>[^()\\\s]{0,16})\(.*?\)(?P=delim)"|(?:u8|u|U|L)?"(?:[^"\\]|\\.)*")
  | (?P<chr>(?:u8|u|U|L)?'(?:[^'\\]|\\.)*')
  | (?P<num>\.?\d(?:[eEpP][+-]|['\w.])*)
  | (?P<id>[A-Za-z_$][\w$]*)
  | (?P<punct>::|->\*|->|\.\.\.|\.\*|<=>|<<=|>>=|[-+*/%&|^!=<>]=|&&|\|\||<<|\+\+|--|\#\#|.)
""", re.X | re.S)  # fmt: skip

_LINEMARKER = re.compile(r'^# (\d+) "((?:[^"\\]|\\.)*)"((?: \d)*)\s*$')
_DEFINE = re.compile(r"^\s*#\s*define\s+([A-Za-z_$][\w$]*)(.*)$")

KEYWORDS = frozenset({"alignas", "alignof", "and", "and_eq", "asm", "auto", "bitand", "bitor", "bool", "break",
    "case", "catch", "char", "char8_t", "char16_t", "char32_t", "class", "compl", "concept", "const",
    "consteval", "constexpr", "constinit", "const_cast", "continue", "co_await", "co_return", "co_yield",
    "decltype", "default", "delete", "do", "double", "dynamic_cast", "else", "enum", "explicit", "export",
    "extern", "false", "float", "for", "friend", "goto", "if", "inline", "int", "long", "mutable", "namespace",
    "new", "noexcept", "not", "not_eq", "nullptr", "operator", "or", "or_eq", "private", "protected", "public",
    "register", "reinterpret_cast", "requires", "return", "short", "signed", "sizeof", "static",
    "static_assert", "static_cast", "struct", "switch", "template", "this", "thread_local", "throw", "true",
    "try", "typedef", "typeid", "typename", "union", "unsigned", "using", "virtual", "void", "volatile",
    "wchar_t", "while", "xor", "xor_eq", "_Bool", "_Pragma", "__restrict__", "__restrict", "__inline",
    "__inline__", "__extension__", "__typeof__", "__typeof", "__alignof__", "__volatile__", "__const",
    "__signed__", "__int128", "__null", "__asm__", "__asm", "__attribute__", "__declspec", "__func__",
    "__PRETTY_FUNCTION__", "__FUNCTION__", "__label__", "__real__", "__imag__", "_Float16", "__bf16", "__fp16"})  # fmt: skip
_TYPE_WORDS = frozenset({"auto", "bool", "char", "char8_t", "char16_t", "char32_t", "const", "constexpr",
    "double", "float", "int", "long", "short", "signed", "unsigned", "void", "volatile", "wchar_t", "_Float16",
    "__bf16", "__int128", "static", "inline", "extern", "mutable", "thread_local", "consteval", "constinit",
    "__restrict__", "__restrict"})  # fmt: skip
_SKIP_PARENS = frozenset({"__attribute__", "__declspec", "asm", "__asm__", "__asm", "_Pragma", "__pragma"})
_DECL_NEXT = frozenset({"(", "=", ";", ",", "[", "{", ")", ":"})


@dataclass
class Token:
    kind: str
    text: str
    file: str = ""
    line: int = 0
    nth: int = 0  # how many tokens with this text precede it on its output line
    includes: tuple[tuple[str, int], ...] = ()


def tokenize(text: str, file: str = "", line: int = 1) -> list[Token]:
    """Tokens of C++ source text with no directives (a stub file, or one line of cpp's output)."""
    out: list[Token] = []
    seen: dict[str, int] = {}
    for m in _TOKEN.finditer(text):
        kind = m.lastgroup if m.lastgroup != "delim" else "str"
        if kind == "ws":
            continue
        tok = m.group(0)
        nth = seen.get(tok, 0)
        seen[tok] = nth + 1
        out.append(Token(kind or "punct", tok, file, line + text.count("\n", 0, m.start()), nth))
    return out


@dataclass(frozen=True)
class Macro:
    file: str
    line: int
    body: str  # parameters and replacement list, continuation lines joined


def preprocessed_tokens(output: str) -> tuple[list[Token], dict[str, Macro]]:
    """cpp's output (with -dD) as tokens placed by its linemarkers, and the macros it defines (last wins)."""
    tokens: list[Token] = []
    macros: dict[str, Macro] = {}
    file, line = "", 0
    stack: list[tuple[str, int]] = []  # (includer, line of its #include), outermost first
    for raw in output.splitlines():
        m = _LINEMARKER.match(raw)
        if m:
            new_line, new_file, flags = int(m.group(1)), m.group(2), m.group(3).split()
            if "1" in flags and file and not file.startswith("<"):
                stack.append((file, line))
            elif "2" in flags and stack:
                stack.pop()
            file, line = new_file, new_line
            continue
        d = _DEFINE.match(raw)
        if d:
            macros[d.group(1)] = Macro(file, line, d.group(2))
        elif raw.strip() and not raw.lstrip().startswith("#") and not file.startswith("<"):
            snapshot = tuple(stack)
            for tok in tokenize(raw, file, line):
                tok.includes = snapshot
                tokens.append(tok)
        line += 1
    return tokens, macros


def _matching(tokens: list[Token], i: int, open_: str, close: str) -> int:
    depth = 0
    for j in range(i, len(tokens)):
        t = tokens[j].text
        if t == open_:
            depth += 1
        elif t == close:
            depth -= 1
            if depth == 0:
                return j
        elif close == ">" and t == ">>":
            depth -= 2
            if depth <= 0:
                return j
        elif close == ">" and t in (";", "{", "}"):
            return j - 1
    return len(tokens) - 1


@dataclass
class Scan:
    """What a token stream declares (name -> kind: "type", "namespace" or "other") and where it uses names."""

    declared: dict[str, str] = field(default_factory=dict)
    global_names: dict[str, str] = field(default_factory=dict)  # declared outside any namespace, class or body
    uses: list[int] = field(default_factory=list)  # token indexes, in order


def scan(tokens: list[Token]) -> Scan:  # noqa: PLR0912, PLR0915 - one pass over C++'s declaring forms
    """Classify identifiers: declared (struct/class/union/enum, typedef, alias, namespace, enumerator, template
    parameter, a declarator after a type) or used. A name declared outside any namespace, class, function or
    parameter list is a global name (what a header provides)."""
    out = Scan()
    role: dict[int, str] = {}  # token index -> "skip" or a declaration kind
    scopes: list[str] = []  # one per open brace: "extern" (extern "C", transparent) or "body"
    parens = 0
    pending_extern = False
    n = len(tokens)

    def text(j: int) -> str:
        return tokens[j].text if 0 <= j < n else ""

    def is_id(j: int) -> bool:
        return 0 <= j < n and tokens[j].kind == "id"

    def at_top() -> bool:
        return parens == 0 and all(s == "extern" for s in scopes)

    def declare(j: int, kind: str, top: bool | None = None) -> None:
        role[j] = kind
        name = tokens[j].text
        out.declared.setdefault(name, kind)
        if (at_top() if top is None else top):
            out.global_names.setdefault(name, kind)

    i = 0
    while i < n:
        tok = tokens[i]
        t = tok.text
        if t in _SKIP_PARENS and text(i + 1) in ("(", "volatile", "__volatile__"):
            start = i + 1 if text(i + 1) == "(" else i + 2
            end = _matching(tokens, start, "(", ")")
            role.update({j: "skip" for j in range(i, end + 1)})
            i = end + 1
            continue
        if t == "[" and text(i + 1) == "[":  # [[attribute]]
            end = i + 1
            while end + 1 < n and not (tokens[end].text == "]" and text(end + 1) == "]"):
                end += 1
            role.update({j: "skip" for j in range(i, end + 2)})
            i = end + 2
            continue
        if t == "template" and text(i + 1) == "<":  # the parameter list: its names are declared here only
            end = _matching(tokens, i + 1, "<", ">")
            depth = 0
            for j in range(i + 2, end):
                tj = tokens[j].text
                if tj in ("(", "[", "{", "<"):
                    depth += 1
                elif tj in (")", "]", "}", ">"):
                    depth -= 1
                elif depth == 0 and is_id(j) and tj not in KEYWORDS and text(j + 1) in (",", "=", ">") and \
                        (text(j - 1) in ("typename", "class", "...") or is_id(j - 1)):
                    declare(j, "type", top=False)
                elif tj in KEYWORDS:
                    role[j] = "skip"
            i = end + 1
            continue
        if t == "(":
            parens += 1
        elif t == ")":
            parens = max(0, parens - 1)
        elif t == "{":
            scopes.append("extern" if pending_extern else "body")
            pending_extern = False
        elif t == "}":
            if scopes:
                scopes.pop()
        elif t == ";":
            pending_extern = False
        elif t == "extern" and i + 1 < n and tokens[i + 1].kind == "str":
            pending_extern = text(i + 2) == "{"
        elif t == "namespace":
            j = i + 1
            while is_id(j) or text(j) == "::":
                if is_id(j) and text(j) != "inline":
                    declare(j, "namespace", top=j == i + 1 and at_top())
                j += 1
            i = j + 1 if text(j) == "=" else j  # an alias: what follows is a use
            continue
        elif t in ("struct", "class", "union", "enum") and text(i - 1) not in ("template", "friend"):
            j = i + 1
            while text(j) in ("class", "struct") or text(j) in _SKIP_PARENS or (text(j) == "[" and text(j + 1) == "["):
                if text(j) == "[":
                    j = _matching(tokens, j, "[", "]") + 2
                elif text(j) in _SKIP_PARENS:
                    end = _matching(tokens, j + 1, "(", ")")
                    role.update({k: "skip" for k in range(j, end + 1)})
                    j = end + 1
                else:
                    j += 1
            if is_id(j) and text(j + 1) != "::" and text(j) not in KEYWORDS:
                declare(j, "type")
                j += 1
            if t == "enum":  # enumerators are declared in the enclosing scope
                k = j
                while k < n and tokens[k].text not in ("{", ";"):
                    k += 1
                if text(k) == "{":
                    end = _matching(tokens, k, "{", "}")
                    depth = 0
                    for e in range(k + 1, end):
                        te = tokens[e].text
                        depth += te in ("(", "[", "{")
                        depth -= te in (")", "]", "}")
                        if depth == 0 and is_id(e) and text(e - 1) in ("{", ",") and text(e + 1) in ("=", ",", "}"):
                            declare(e, "other")
            i = j
            continue
        elif t == "using" and text(i + 1) != "namespace":
            end = i + 1
            while end < n and tokens[end].text != ";":
                end += 1
            if is_id(i + 1) and text(i + 2) == "=":
                declare(i + 1, "type")
                i += 3
                continue
            last = max((j for j in range(i + 1, end) if is_id(j)), default=-1)
            if last > 0:
                declare(last, "other")
        elif t == "typedef":
            depth, j = 0, i + 1
            while j < n and not (tokens[j].text == ";" and depth == 0):
                tj = tokens[j].text
                if tj == "{":
                    j = _matching(tokens, j, "{", "}") + 1  # the body is scanned as the loop goes on
                    continue
                depth += tj in ("(", "[")
                depth -= tj in (")", "]")
                if is_id(j) and tj not in KEYWORDS and (
                        (depth == 0 and text(j + 1) in (";", ",", "[")) or
                        (depth == 1 and text(j - 1) == "*" and text(j + 1) == ")")):
                    declare(j, "type")
                j += 1
        elif t == "concept" and is_id(i + 1):
            declare(i + 1, "other")
            i += 2
            continue
        elif tok.kind == "id" and i not in role:
            prev, nxt = text(i - 1), text(i + 1)
            if t in KEYWORDS or t.startswith("__builtin_"):
                role[i] = "skip"
            elif prev in (".", "->", ".*", "->*") or (prev == "::" and (is_id(i - 2) or text(i - 2) == ">")):
                role[i] = "skip"  # a member, or a name qualified by a namespace or class: looked up there
            elif nxt in _DECL_NEXT and (
                    (is_id(i - 1) and (prev not in KEYWORDS or prev in _TYPE_WORDS)) or
                    (prev == ">" and nxt in ("(", "=", ";", "{", ",")) or
                    (prev in ("*", "&", "&&") and (is_id(i - 2) or text(i - 2) in ("*", "&", ">")))):
                declare(i, "other")  # a declarator: variable, function, parameter or member
        i += 1
    for i, tok in enumerate(tokens):
        if tok.kind == "id" and i not in role and tok.text not in KEYWORDS and not tok.text.startswith("__builtin_"):
            out.uses.append(i)
    return out


@lru_cache(maxsize=4)
def _cuda_declarations(directory: str, stamp: float) -> tuple[tuple[str, str, str], ...]:
    """(name, kind, header) for every name CUDA's headers declare at global scope, from the cuda_names stubs."""
    out: dict[str, tuple[str, str]] = {}
    for path in sorted(Path(directory).rglob("*")):
        if not path.is_file():
            continue
        text = path.read_text()
        header = path.relative_to(directory).as_posix()
        body = "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("#"))
        found = scan(tokenize(_CODE_BLANK.sub(" ", body)))
        for name, kind in found.global_names.items():
            out.setdefault(name, (kind, header))
        for line in text.splitlines():
            d = _DEFINE.match(line)
            if d:
                out.setdefault(d.group(1), ("other", header))
    return tuple((name, kind, header) for name, (kind, header) in sorted(out.items()))


def cuda_declarations() -> dict[str, tuple[str, str]]:
    """name -> (kind, CUDA header) for what only CUDA's headers provide."""
    stamp = max((p.stat().st_mtime for p in CUDA_NAMES.rglob("*") if p.is_file()), default=0.0)
    return {name: (kind, header) for name, kind, header in _cuda_declarations(str(CUDA_NAMES), stamp)}


def _word(name: str) -> re.Pattern[str]:
    return re.compile(rf"(?<![\w$]){re.escape(name)}(?![\w$])")


def _source(path: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    try:
        stamp = _stamp(path)
    except OSError:
        return (), ()
    return _file_lines(path, stamp), _code_lines(path, stamp)


def _locate(tok: Token, macros: Mapping[str, Macro], show: Callable[[str], str]) -> tuple[int, int, str, tuple[Diagnostic, ...]]:
    """(line, col, source line, notes) where clang reports ``tok``; cpp's output keeps lines, not columns.

    A token written on its line is reported there. One that came out of a macro is reported where the macro is
    invoked, with a note at its spelling in the macro's definition ("expanded from macro 'X'"), as clang does.
    """
    raw, code = _source(tok.file)
    text = raw[tok.line - 1] if 0 < tok.line <= len(raw) else ""
    if not code or tok.line > len(code):
        return tok.line, 1, text, ()
    word = _word(tok.text)
    hits = [m.start() for m in word.finditer(code[tok.line - 1])]
    if hits:
        return tok.line, hits[tok.nth if tok.nth < len(hits) else 0] + 1, text, ()
    for m in re.finditer(r"[A-Za-z_$][\w$]*", code[tok.line - 1]):  # the macro invoked on this line
        macro = macros.get(m.group(0))
        if macro is None or not word.search(macro.body):
            continue
        notes: tuple[Diagnostic, ...] = ()
        def_raw, def_code = _source(macro.file)
        for ln in range(macro.line, min(macro.line + 200, len(def_code)) + 1):
            hit = word.search(def_code[ln - 1])
            if hit:
                notes = (Diagnostic(show(macro.file), ln, hit.start() + 1, "note",
                                    f"expanded from macro '{m.group(0)}'", def_raw[ln - 1]),)
                break
            if not def_raw[ln - 1].rstrip().endswith("\\"):
                break
        return tok.line, m.start() + 1, text, notes
    for ln in range(tok.line + 1, min(tok.line + 30, len(code)) + 1):  # an invocation spanning lines
        hit = word.search(code[ln - 1])
        if hit:
            return ln, hit.start() + 1, raw[ln - 1], ()
    return tok.line, len(text) - len(text.lstrip()) + 1, text, ()


def check_declarations(output: str, show: Callable[[str], str]) -> list[Diagnostic]:
    """Every name only a CUDA header provides that the translation unit uses without declaring it, at first use."""
    tokens, macros = preprocessed_tokens(output)
    found = scan(tokens)
    declared = set(found.declared) | set(macros)
    cuda = cuda_declarations()
    diags: list[Diagnostic] = []
    reported: set[str] = set()
    for i in found.uses:
        tok = tokens[i]
        if tok.text in reported or tok.text in declared or tok.text not in cuda:
            continue
        reported.add(tok.text)
        kind = cuda[tok.text][0]
        message = f"unknown type name '{tok.text}'" if kind == "type" else f"use of undeclared identifier '{tok.text}'"
        line, col, source, notes = _locate(tok, macros, show)
        diags.append(Diagnostic(show(tok.file), line, col, "error", message, source, 1,
                                tuple((show(p), n) for p, n in tok.includes), notes))
    return diags


# --- the build, and the traceback SGLang prints when it fails -----------------------------------------------------


@dataclass(frozen=True)
class Build:
    """One kernel's build as load_jit runs it: the generated source, where tvm-ffi puts it, the hipcc line."""

    kernel: JitKernel
    source: Path  # the workspace file
    loader: Loader | None
    include_dir: str  # <sglang>/python/sglang/jit_kernel/include: load_jit's DEFAULT_INCLUDE
    build_dir: str  # as in the image
    command: list[str]
    cuda_source: str

    @property
    def main(self) -> str:
        return f"{self.build_dir}/cuda.cu"


def plan_build(root: Path, kernel: JitKernel, gfx: str) -> Build:
    source = root / kernel.source
    loader = find_loader(root, kernel)
    include_dir = str(root / KERNEL_DIR / "include")
    cuda_source = generated_source(source, loader.wrappers if loader else ())
    name = loader.module_name if loader else f"sgl_kernel_jit_{kernel.name}"
    build_dir = f"{TVM_FFI_CACHE}/{name}_{_tvm_hash(cuda_source, include_dir)}"
    return Build(kernel, source, loader, include_dir, build_dir,
                 hipcc_command(gfx, include_dir, f"{build_dir}/cuda.cu"), cuda_source)


def ninja_failure(build: Build, compiler_output: str) -> str:
    """tvm-ffi 0.1.9 ``build_ninja``'s RuntimeError message: ninja -v's stdout (stderr is empty)."""
    cmd = " ".join(build.command)
    stdout = [f"[1/2] {cmd}", "FAILED: [code=1] cuda_0.o ", cmd, compiler_output,
              "ninja: build stopped: subcommand failed."]
    return "ninja exited with status 1\nstdout:\n" + "\n".join(stdout) + "\n"


def traceback_frames(build: Build) -> list[tracebacks.Frame]:
    """The frames of the exception load_jit raises, outermost first, with the workspace's real lines.

    From the runtime call site down (SGLang 0.5.12 reaches the JIT kernels from the attention backend; there the
    NSA backend catches the error and falls back, the twin's scenario makes it fatal): the public function of the
    kernel's module (e.g. jit_kernel/fused_metadata_copy.py: fused_metadata_copy_cuda), utils.py's cache_once
    ``wrapper``, the loader (``_jit_fused_metadata_copy_module``, which logs "Failed to compile JIT ..." and
    re-raises), utils.py ``load_jit`` -> tvm_ffi.cpp ``load_inline`` -> ``build_inline`` -> ``_build_impl`` ->
    ``build_ninja`` (tvm-ffi 0.1.9's line numbers: it is not part of the workspace).
    """
    utils = f"{KERNEL_DIR}/utils.py"
    frames: list[tracebacks.Frame] = []
    ld = build.loader
    if ld is not None:
        frames += [f for f in (ld.call_site, ld.caller) if f is not None]
        if ld.cached:
            frames.append(tracebacks.Frame(utils, "wrapper", "result_map[key] = fn(*args, **kwargs)", 57))
        frames.append(tracebacks.Frame(ld.file, ld.func, ld.call, ld.line))
    frames += [
        tracebacks.Frame(utils, "load_jit", "return load_inline(", 208),
        tracebacks.Frame(TVM_FFI_EXTENSION, "load_inline", "build_inline(", 1035),
        tracebacks.Frame(TVM_FFI_EXTENSION, "build_inline", "return _build_impl(", 877),
        tracebacks.Frame(TVM_FFI_EXTENSION, "_build_impl", "build_ninja(str(build_dir))", 672),
        tracebacks.Frame(TVM_FFI_EXTENSION, "build_ninja", 'raise RuntimeError("\\n".join(msg))', 542),
    ]
    return frames


def _logged_error(build: Build, message: str) -> str | None:
    """The loader's ``logger.error(f"Failed to compile JIT ... kernel (...): {e}")`` line, filled in."""
    if build.loader is None or build.loader.error_template is None:
        return None
    return build.loader.error_template.replace("{e}", message)


def _fail(build: Build, root: Path, compiler_output: str, emit: Callable[[str], Any], code: int) -> JitCompileError:
    message = ninja_failure(build, compiler_output)
    logged = _logged_error(build, message.rstrip("\n"))
    if logged:
        emit(logged)
    log = tracebacks.render(root, traceback_frames(build), [f"RuntimeError: {message.rstrip(chr(10))}"])
    kernel = build.kernel
    return JitCompileError(f"JIT compilation of {kernel.name} failed (exit {code}): {kernel.source}", log,
                           kernel=kernel.name, source=kernel.source, returncode=code)


def compile_kernel(build: Build, gfx: str, cpp: str) -> tuple[int, str]:
    """Run the twin's compiler on one build: (0, "") or (1, clang's diagnostics). The outcome is kept in the
    per-user cache with every file the preprocessor read and its hash (what ``cpp -MD`` lists, as ccache's direct
    mode does): the same source, command and included files give it again without running ``cpp``; a changed
    header (an agent's patch) runs it again."""
    key = _compile_key(build, gfx, cpp)
    kept = _kept_outcome(key)
    if kept is not None:
        return kept
    code, output, read = _compile(build, gfx, cpp)
    if read is not None:
        _keep_outcome(key, read, code, output)
    return code, output


COMPILED_FOLDER = "jit-outcomes"  # in the per-user cache
COMPILED_KEEP = 1024  # entries kept (a few kB each; a workspace's path is part of the command, so of the key)
_COMPILE_FORMAT = "1"


def _compile_key(build: Build, gfx: str, cpp: str) -> str:
    cmd = preprocess_command(Path("<main>"), [str(ROCM_INCLUDE), build.include_dir], gfx, cpp)
    try:
        tool = os.stat(cpp)
        stamp = [tool.st_size, tool.st_mtime_ns]
    except OSError:
        stamp = []
    text = json.dumps([_COMPILE_FORMAT, build.cuda_source, build.main, cmd, stamp])
    return hashlib.sha256(text.encode()).hexdigest()[:40]


def _entry(key: str) -> Path:
    from ...workspace.release import cache_dir

    return cache_dir() / COMPILED_FOLDER / f"{key}.json"


def _digest(path: str) -> str | None:
    try:
        return hashlib.sha256(Path(path).read_bytes()).hexdigest()
    except OSError:
        return None


def _kept_outcome(key: str) -> tuple[int, str] | None:
    try:
        kept = json.loads(_entry(key).read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(kept, dict) or any(_digest(p) != h for p, h in (kept.get("read") or {}).items()):
        return None
    with contextlib.suppress(OSError):
        os.utime(_entry(key))  # recently used: evicted last
    return int(kept["code"]), str(kept["output"])


def _keep_outcome(key: str, read: list[str], code: int, output: str) -> None:
    from ... import cache_files

    digests = {p: _digest(p) for p in read}
    if any(d is None for d in digests.values()):
        return
    with contextlib.suppress(OSError):  # a read-only cache (a container's home): nothing kept
        folder = _entry(key).parent
        folder.mkdir(parents=True, exist_ok=True)
        cache_files.write_atomic(_entry(key), json.dumps({"read": digests, "code": code, "output": output}))
        for old in cache_files.least_recent(folder.glob("*.json"))[:-COMPILED_KEEP]:
            old.unlink(missing_ok=True)


def _depfile_paths(text: str, main: Path) -> list[str]:
    """The files a ``-MD`` dependency file lists (the target and the main source left out)."""
    body = text.replace("\\\n", " ").split(":", 1)[-1]
    paths = [p.replace("\\ ", " ") for p in re.split(r"(?<!\\)\s+", body.strip()) if p]
    return [p for p in paths if p != str(main)]


def _compile(build: Build, gfx: str, cpp: str) -> tuple[int, str, list[str] | None]:
    """``compile_kernel`` without its cache, with the files the preprocessor read (None: unknown)."""
    with tempfile.TemporaryDirectory(prefix="dayzero-jit-") as tmp:
        main = Path(tmp) / "cuda.cu"
        main.write_text(build.cuda_source)
        depfile = Path(tmp) / "cuda.d"

        def show(path: str) -> str:
            if path == str(main):
                return build.main
            if path.startswith(str(ROCM_INCLUDE) + "/"):
                return f"{ROCM_HOME}/include/" + path[len(str(ROCM_INCLUDE)) + 1:]
            return path

        cmd = preprocess_command(main, [str(ROCM_INCLUDE), build.include_dir], gfx, cpp)
        cmd = [*cmd[:-1], "-MD", "-MF", str(depfile), cmd[-1]]
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
        except (OSError, subprocess.TimeoutExpired) as exc:
            return 1, f"clang: error: unable to execute command: {exc}", None
        try:
            read: list[str] | None = _depfile_paths(depfile.read_text(), main)
        except OSError:  # cpp stopped before writing it (a missing header): not kept
            read = None
        if proc.returncode != 0:
            fatal = translate_cpp_errors(proc.stderr, show)
            if not fatal:
                return 1, proc.stderr.rstrip("\n"), None
            # what cpp wrote before it stopped is the translation unit up to there: clang reports its errors first
            return 1, render([*check_declarations(proc.stdout, show), *fatal], gfx), read
        diags = check_declarations(proc.stdout, show)
        return (1, render(diags, gfx), read) if diags else (0, "", read)


def compile_jit_kernels(scenario: Scenario, sglang_root: Path, server_args: Mapping[str, Any],
                        log: Callable[[str], Any] | None = None) -> list[str]:
    """Build every JIT kernel the server arguments switch on; returns the names built.

    ``log`` receives the lines a launch log shows: the build line, and on failure the loader's "Failed to
    compile JIT ..." error. Raises ``JitCompileError`` (its ``log``: the traceback whose RuntimeError carries the
    compiler output) when the build fails, or when ``cpp`` is not installed.
    """
    root = Path(sglang_root).resolve()
    emit = log or (lambda _line: None)
    gfx = scenario.hardware.gfx_arch
    built: list[str] = []
    for kernel in triggered(scenario, server_args):
        flag = kernel.when.flag
        build = plan_build(root, kernel, gfx)
        emit(f"[JIT] building {kernel.name} for {gfx} ({flag}={server_args.get(flag)!r})")
        emit(f"[JIT] {' '.join(build.command)}   # {SIMULATED}: preprocessed and declaration-checked only")
        cpp = shutil.which("cpp")
        if cpp is None:
            msg = ("the twin needs the C preprocessor `cpp` to build JIT kernels and it is not installed "
                   "(Debian: apt-get install cpp)")
            raise JitCompileError(f"JIT compilation of {kernel.name} failed: {msg}", f"RuntimeError: {msg}",
                                  kernel=kernel.name, source=kernel.source, returncode=127)
        code, output = compile_kernel(build, gfx, cpp)
        if code != 0:
            raise _fail(build, root, output, emit, code)
        emit(f"[JIT] {kernel.name} built")
        built.append(kernel.name)
    return built
