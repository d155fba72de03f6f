"""Reading an engine's log: why did it crash, and which MoE shapes ran on a fallback path.

Classification is by the mechanisms' own messages (PyTorch, the C preprocessor, argparse, HIP, RCCL, aiter),
never by model names, so it applies to any model the engine can load.
"""

from __future__ import annotations

import re
from typing import Literal

from pydantic import BaseModel, Field

from .base import ToolInput, ToolResult, tool
from .context import ToolContext

Category = Literal[
    "weight_shape_mismatch", "compile_error", "out_of_memory", "invalid_flag", "hang_timeout",
    "collective_error", "unknown",
]  # fmt: skip


class Diagnosis(BaseModel):
    category: Category
    summary: str
    parameter: str | None = Field(None, description="engine parameter that failed to load")
    checkpoint_parameter: str | None = None
    checkpoint_shape: list[int] | None = None
    engine_shape: list[int] | None = None
    checkpoint_dtype: str | None = None
    engine_dtype: str | None = None
    file: str | None = Field(None, description="source file the error points at")
    line: int | None = None
    header: str | None = Field(None, description="missing include")
    flag: str | None = Field(None, description="offending command-line flag")
    evidence: list[str] = Field(default_factory=list, description="the log lines this rests on")


class MoEShape(BaseModel):
    """A fused-MoE problem shape as aiter keys its tuned selections."""

    model_dim: int
    inter_dim: int
    expert: int
    topk: int
    act_type: str = "ActivationType.Silu"
    dtype: str = "torch.bfloat16"
    q_dtype_a: str = ""
    q_dtype_w: str = ""
    q_type: str = ""
    use_g1u1: bool = True
    doweight_stage1: bool = False

    def key(self) -> tuple:
        return (self.model_dim, self.inter_dim, self.expert, self.topk, self.q_dtype_w)


_SHAPE = r"torch\.Size\(\[([\d,\s]*)\]\)"
_DTYPE = r"(?:, dtype=([\w.]+))?"
_ASSIGN = re.compile(rf"Attempted to load weight \({_SHAPE}{_DTYPE}\) into parameter \({_SHAPE}{_DTYPE}\)")
_TENSOR_SIZE = re.compile(r"The size of tensor a \((\d+)\) must match the size of tensor b \((\d+)\)")
_FAILED_PARAM = re.compile(
    r"Failed to load parameter '([^']+)'(?: \(checkpoint: (\S+?), dtype (\S+), shape \[([\d, ]*)\]; "
    r"engine: (\S+) \[([\d, ]*)\]\s*(\S*)\))?"
)
_FATAL = re.compile(r"^(\S+?):(\d+):(?:\d+:)? fatal error: ([^:]+): No such file or directory", re.M)
_COMPILE = re.compile(r"^(\S+?):(\d+):(?:\d+:)? (?:fatal )?error: (.+)$", re.M)
_ARGPARSE = re.compile(r"error: (unrecognized arguments: (\S+).*|argument (--[\w-]+)(?:/\S+)?: (.+))$", re.M)
_OOM = re.compile(r"(out of memory|Not enough memory|OutOfMemoryError|Prefill out of memory|Decode out of memory)",
                  re.I)  # fmt: skip
_COLLECTIVE = re.compile(r"(NCCL|RCCL|ncclInternalError|ncclSystemError|HSA_STATUS_ERROR|Watchdog caught collective)")
_FALLBACK = re.compile(r"using 2stage default for \(([^)]*)\)")


def _shape(text: str) -> list[int]:
    return [int(x) for x in text.replace(" ", "").split(",") if x]


def _tail(lines: list[str], pattern: re.Pattern, n: int = 3) -> list[str]:
    return [ln for ln in lines if pattern.search(ln)][-n:]


def classify(log: str, *, timed_out: bool = False) -> Diagnosis:
    """Classify a failed start (or a failing run) from its log text."""
    lines = log.splitlines()
    if m := _ASSIGN.search(log):
        d = Diagnosis(category="weight_shape_mismatch", summary="",
                      checkpoint_shape=_shape(m.group(1)), engine_shape=_shape(m.group(3)),
                      checkpoint_dtype=m.group(2), engine_dtype=m.group(4),
                      evidence=_tail(lines, re.compile(r"Attempted to load weight|Failed to load parameter")))  # fmt: skip
        if p := _FAILED_PARAM.search(log):
            d.parameter = p.group(1)
            d.checkpoint_parameter = p.group(2)
            d.checkpoint_dtype = p.group(3) or d.checkpoint_dtype
            d.engine_dtype = p.group(5) or d.engine_dtype
        elif p := re.search(r"param(?:eter)?[ =:'\"]+([\w.]+\.(?:weight|bias|weight_scale))", log):
            d.parameter = p.group(1)
        what = "shape" if d.checkpoint_shape != d.engine_shape else "dtype"
        d.summary = (f"weight {what} mismatch loading {d.parameter or 'a parameter'}: checkpoint "
                     f"{d.checkpoint_dtype or ''} {d.checkpoint_shape} vs engine {d.engine_dtype or ''} {d.engine_shape}")  # fmt: skip
        return d
    if m := _FATAL.search(log):
        return Diagnosis(category="compile_error", file=m.group(1), line=int(m.group(2)), header=m.group(3).strip(),
                         summary=f"{m.group(1)}:{m.group(2)}: missing header {m.group(3).strip()}",
                         evidence=[m.group(0)])  # fmt: skip
    if m := _COMPILE.search(log):
        return Diagnosis(category="compile_error", file=m.group(1), line=int(m.group(2)),
                         summary=f"compile error in {m.group(1)}:{m.group(2)}: {m.group(3)}", evidence=[m.group(0)])  # fmt: skip
    if m := _ARGPARSE.search(log):
        flag = m.group(2) or m.group(3)
        return Diagnosis(category="invalid_flag", flag=flag, summary=f"invalid flag: {m.group(1)}", evidence=[m.group(0)])
    if m := _OOM.search(log):
        return Diagnosis(category="out_of_memory", summary=f"out of memory: {m.group(1)}",
                         evidence=_tail(lines, _OOM))  # fmt: skip
    if m := _COLLECTIVE.search(log):
        return Diagnosis(category="collective_error", summary=f"collective communication error ({m.group(1)})",
                         evidence=_tail(lines, _COLLECTIVE))  # fmt: skip
    for ln in reversed(lines):
        if re.search(r"\b(ValueError|ServerArgsError)\b", ln):
            flag = re.search(r"(--[\w-]+|\b(?:tp|dp)_size\b|\b[a-z]+_[a-z_]+\b)", ln.split(":", 1)[-1])
            return Diagnosis(category="invalid_flag", flag=flag.group(1) if flag else None,
                             summary=f"rejected configuration: {ln.strip()[-200:]}", evidence=[ln])  # fmt: skip
    if timed_out:
        return Diagnosis(category="hang_timeout", summary="the server did not become ready before the timeout",
                         evidence=lines[-3:])  # fmt: skip
    err = [ln for ln in lines if re.search(r"Error|[Ee]xception|error:", ln)]
    return Diagnosis(category="unknown", summary=(err[-1].strip() if err else "no error line found")[:300],
                     evidence=err[-3:])  # fmt: skip


def moe_fallbacks(log: str) -> list[MoEShape]:
    """MoE shapes that ran aiter's untuned default path, from its ``using 2stage default for (...)`` lines."""
    shapes: dict[tuple, MoEShape] = {}
    for m in _FALLBACK.finditer(log):
        parts = [p.strip().strip("'\"") for p in m.group(1).split(",")]
        if len(parts) < 13:
            continue
        _cu, _token, model_dim, inter_dim, expert, topk, act, dtype, qa, qw, qt, g1u1, dw = parts[:13]
        shape = MoEShape(model_dim=int(model_dim), inter_dim=int(inter_dim), expert=int(expert), topk=int(topk),
                         act_type=act, dtype=dtype, q_dtype_a=qa, q_dtype_w=qw, q_type=qt,
                         use_g1u1=g1u1 == "True", doweight_stage1=dw == "True")  # fmt: skip
        shapes.setdefault(shape.key(), shape)
    return list(shapes.values())


class DiagnoseInput(ToolInput):
    log_path: str | None = Field(None, description="a log under the run directory; default: the last server log")
    text: str | None = Field(None, description="log text to classify instead of a file")


class DiagnoseResult(ToolResult):
    diagnosis: Diagnosis
    moe_fallback_shapes: list[MoEShape] = []


@tool
def diagnose_crash(ctx: ToolContext, args: DiagnoseInput) -> DiagnoseResult:
    """Classify why the engine failed (weight shape mismatch, compile error, out of memory, invalid flag,
    hang, collective error, unknown) and extract the parameter, shapes, file, line, header or flag."""
    text = args.text
    if text is None:
        path = ctx.run_dir / args.log_path if args.log_path else ctx.last_log
        if path is None or not path.exists():
            return DiagnoseResult(ok=False, summary="no server log yet: launch first",
                                  diagnosis=Diagnosis(category="unknown", summary="no log"))  # fmt: skip
        text = path.read_text(errors="replace")
    d = classify(text)
    return DiagnoseResult(summary=d.summary, diagnosis=d, moe_fallback_shapes=moe_fallbacks(text))
