"""The tuned fused-MoE CSV layout shared by the twin's workspace reader and the twin's tuner.

aiter reads its tuned MoE kernel selections from a CSV (``AITER_CONFIG_FMOE`` points at it): one row per
(CU count, token bucket, MoE shape, quantization), naming the chosen stage-1 / stage-2 kernels and their
measured times. The twin writes such a file into the workspace (``aiter/configs/tuned_fmoe.csv``) and its
tuner appends rows to it; the engine side reads it with the reader materialised into the workspace
(``python/sglang/srt/layers/moe/aiter_tuned_config.py``), whose column list is generated from
``FMOE_CSV_COLUMNS`` below so both sides agree.

Files written here start with a ``#`` comment line saying they are simulated; both readers skip such lines.
Standard library only (the twin runs in a minimal image).
"""

from __future__ import annotations

import csv
import io
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

FMOE_CSV_COLUMNS: tuple[str, ...] = (
    "cu_num",
    "token",
    "model_dim",
    "inter_dim",
    "expert",
    "topk",
    "act_type",
    "dtype",
    "q_dtype_a",
    "q_dtype_w",
    "q_type",
    "use_g1u1",
    "doweight_stage1",
    "block_m",
    "ksplit",
    "us1",
    "kernelName1",
    "err1",
    "us2",
    "kernelName2",
    "err2",
    "us",
    "run_1stage",
    "tflops",
    "bw",
)

SIMULATED_HEADER = "# dayzero digital twin (simulated): tuned fused-MoE kernel selections"

# Scenario weight dtypes -> the torch dtype names aiter writes into its CSVs. gfx950 (MI355X) uses the OCP
# fp8 format (float8_e4m3fn); gfx942 (MI300X) would use float8_e4m3fnuz.
_DTYPE_CODES = {
    "fp8": "torch.float8_e4m3fn",
    "mxfp4": "torch.float4_e2m1fn_x2",
    "bf16": "torch.bfloat16",
}
_QUANT_TYPES = {
    "fp8": "QuantType.per_Token",
    "mxfp4": "QuantType.per_1x32",
    "bf16": "QuantType.No",
}

# CU count per gfx architecture, as aiter's ``cu_num`` column records it.
CU_COUNT = {"gfx950": 256, "gfx942": 304, "gfx90a": 110}


def dtype_code(dtype: str) -> str:
    """``"fp8" | "mxfp4" | "bf16"`` -> the aiter-style torch dtype name (``q_dtype_a`` / ``q_dtype_w``)."""
    try:
        return _DTYPE_CODES[dtype]
    except KeyError:
        raise ValueError(f"unknown MoE weight dtype {dtype!r} (expected one of {sorted(_DTYPE_CODES)})") from None


def dtype_from_code(code: str) -> str | None:
    """The inverse of :func:`dtype_code`; ``None`` for a code the twin does not know."""
    for name, value in _DTYPE_CODES.items():
        if value == code:
            return name
    return None


def quant_type(dtype: str) -> str:
    """The aiter ``q_type`` for a scenario dtype (per-token fp8, per-1x32 block MXFP4, none for bf16)."""
    try:
        return _QUANT_TYPES[dtype]
    except KeyError:
        raise ValueError(f"unknown MoE weight dtype {dtype!r}") from None


def cu_count(gfx_arch: str) -> int:
    return CU_COUNT.get(gfx_arch, 256)


def _format(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, float):
        return f"{value:.4f}".rstrip("0").rstrip(".") if value == value else "nan"
    return str(value)


def format_rows(rows: Iterable[Mapping[str, Any]], *, header_comment: bool = True) -> str:
    """The CSV text for ``rows`` (columns in ``FMOE_CSV_COLUMNS`` order; missing values are empty)."""
    buf = io.StringIO()
    if header_comment:
        buf.write(SIMULATED_HEADER + "\n")
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(FMOE_CSV_COLUMNS)
    for row in rows:
        unknown = set(row) - set(FMOE_CSV_COLUMNS)
        if unknown:
            raise ValueError(f"unknown tuned-fmoe column(s): {', '.join(sorted(unknown))}")
        writer.writerow([_format(row.get(col)) for col in FMOE_CSV_COLUMNS])
    return buf.getvalue()


def write_rows(path: str | Path, rows: Iterable[Mapping[str, Any]]) -> None:
    """Write ``rows`` as a tuned-fmoe CSV (comment line, header, rows), replacing ``path``."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(format_rows(rows))


def parse_value(text: str) -> Any:
    """CSV cell -> int, float or the string itself (empty cells stay ``""``)."""
    s = text.strip()
    if s == "":
        return ""
    try:
        return int(s)
    except ValueError:
        pass
    try:
        return float(s)
    except ValueError:
        return s


def parse_rows(text: str) -> list[dict[str, Any]]:
    """Rows of a tuned-fmoe CSV text, values typed by :func:`parse_value`; ``#`` lines are skipped."""
    lines = [ln for ln in text.splitlines() if ln.strip() and not ln.lstrip().startswith("#")]
    if not lines:
        return []
    reader = csv.DictReader(lines)
    return [{k: parse_value(v or "") for k, v in rec.items() if k is not None} for rec in reader]


def read_rows(path: str | Path) -> list[dict[str, Any]]:
    """Read a tuned-fmoe CSV written by :func:`write_rows` (or by hand, with or without comment lines)."""
    return parse_rows(Path(path).read_text())
