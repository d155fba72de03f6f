"""JIT kernel compilation, mechanically: preprocess the workspace's kernel sources for ROCm.

When a launch switches on a feature that needs a JIT kernel (``JitKernel.when`` fires on a server
argument), SGLang compiles the kernel's source with hipcc. The twin runs the real C preprocessor over the
workspace's source with ``USE_ROCM`` defined and only a ROCm-like include tree on the include path
(``rocm_include/``, which has hip/* headers and no cuda_* headers)::

    cpp -x c -DUSE_ROCM -nostdinc -I <rocm_include> -o /dev/null <source>

so a CUDA-only include that is not behind a ``USE_ROCM`` guard fails exactly as it would on a ROCm image:
with the compiler's own "No such file or directory". Nothing checks the source for a particular fix.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from .scenario import JitKernel, Scenario

ROCM_INCLUDE = Path(__file__).parent / "rocm_include"
SIMULATED = "dayzero MI355X twin (simulated)"


class JitCompileError(RuntimeError):
    """A JIT kernel failed to build; ``log`` holds the compiler output and an SGLang-like traceback."""

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


def preprocess_command(source: Path, cpp: str = "cpp") -> list[str]:
    return [cpp, "-x", "c", "-DUSE_ROCM", "-nostdinc", "-I", str(ROCM_INCLUDE), "-o", "/dev/null", str(source)]


def _traceback(root: Path, kernel: JitKernel, source: Path, code: int, gfx: str) -> str:
    if kernel.when.flag.startswith("speculative"):  # built while the draft worker sets up its backends
        frames = [
            ("python/sglang/srt/speculative/eagle_worker.py", 187, "__init__",
             "self.draft_attn_backend = self._create_draft_attn_backend()"),
            ("python/sglang/srt/speculative/draft_utils.py", 91, "create_decode_backend",
             "return self._create_multi_step_backend()"),
        ]
    else:  # built while the model runner sets up the feature the flag switches on
        frames = [
            ("python/sglang/srt/model_executor/model_runner.py", 412, "initialize", "self.init_jit_kernels()"),
            ("python/sglang/srt/model_executor/model_runner.py", 655, "init_jit_kernels",
             f"load_jit({kernel.name!r}, [{kernel.source!r}])"),
        ]
    frames += [
        ("python/sglang/jit_kernel/utils.py", 214, "load_jit", "module = _build_and_load(name, sources, extra_flags)"),
        ("python/sglang/jit_kernel/utils.py", 176, "_build_and_load", "raise RuntimeError("),
    ]
    lines = ["Traceback (most recent call last):"]
    for path, line, func, text in frames:
        lines.append(f'  File "{root}/{path}", line {line}, in {func}\n    {text}')
    lines.append(f"RuntimeError: JIT compilation of {kernel.name} failed (exit {code}): {source} "
                 f"(hipcc --offload-arch={gfx})")
    return "\n".join(lines)


def compile_jit_kernels(scenario: Scenario, sglang_root: Path, server_args: Mapping[str, Any],
                        log: Callable[[str], Any] | None = None) -> list[str]:
    """Build every JIT kernel the server arguments switch on; returns the names built.

    ``log`` receives one line at a time (the build lines a launch log would show). Raises
    ``JitCompileError`` when a source is missing, ``cpp`` is not installed, or preprocessing fails.
    """
    root = Path(sglang_root)
    emit = log or (lambda _line: None)
    gfx = scenario.hardware.gfx_arch
    built: list[str] = []
    for kernel in triggered(scenario, server_args):
        source = root / kernel.source
        flag = kernel.when.flag
        emit(f"[JIT] building {kernel.name} for {gfx} ({flag}={server_args.get(flag)!r})")
        emit(f"[JIT] hipcc -x hip --offload-arch={gfx} -DUSE_ROCM -O3 -std=c++17 -I/opt/rocm/include "
             f"-c {source}   # {SIMULATED}: preprocessed only")
        if not source.is_file():
            text = f"clang: error: no such file or directory: '{source}'\nclang: error: no input files"
            log_text = text + "\n" + _traceback(root, kernel, source, 1, gfx)
            raise JitCompileError(f"JIT compilation of {kernel.name} failed: {source} is missing", log_text,
                                  kernel=kernel.name, source=kernel.source)
        cpp = shutil.which("cpp")
        if cpp is None:
            msg = ("the twin needs the C preprocessor `cpp` to build JIT kernels and it is not installed "
                   "(Debian: apt-get install cpp)")
            raise JitCompileError(f"JIT compilation of {kernel.name} failed: {msg}", f"RuntimeError: {msg}",
                                  kernel=kernel.name, source=kernel.source, returncode=127)
        try:
            proc = subprocess.run(preprocess_command(source, cpp), capture_output=True, text=True, timeout=120)
        except (OSError, subprocess.TimeoutExpired) as exc:
            msg = f"could not run {cpp}: {exc}"
            raise JitCompileError(f"JIT compilation of {kernel.name} failed: {msg}", f"RuntimeError: {msg}",
                                  kernel=kernel.name, source=kernel.source) from None
        for line in proc.stderr.splitlines():
            if proc.returncode == 0:
                emit(line)
        if proc.returncode != 0:
            log_text = proc.stderr.rstrip("\n") + "\n" + _traceback(root, kernel, source, proc.returncode, gfx)
            raise JitCompileError(
                f"JIT compilation of {kernel.name} failed (exit {proc.returncode}): {kernel.source}",
                log_text, kernel=kernel.name, source=kernel.source, returncode=proc.returncode)
        emit(f"[JIT] {kernel.name} built")
        built.append(kernel.name)
    return built
