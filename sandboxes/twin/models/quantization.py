"""A checkpoint's quantization, as its published ``quantization_config`` says (each vendor's own style).

``weight_format(qc)`` reads the format of the quantized weights from a quantization_config: AMD Quark
(``quant_method: quark``, the format in ``global_quant_config.weight.dtype``), fp8 (``quant_method: fp8``:
DeepSeek's, Qwen's, Zhipu's block-scaled exports), native MXFP4 (``quant_method: mxfp4``: gpt-oss). Standard
library only.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

METHODS = ("quark", "fp8", "mxfp4")


class QuantizationError(ValueError):
    """A quantization_config the twin cannot read (one line)."""


def weight_format(qc: Mapping[str, Any] | None) -> str:
    """``mxfp4`` / ``fp8`` / ``bf16`` for a quantization_config (None: an unquantized checkpoint)."""
    if not qc:
        return "bf16"
    method = str(qc.get("quant_method", "")).lower()
    if method == "mxfp4":
        return "mxfp4"
    if method == "fp8":
        return "fp8"
    if method == "quark":
        weight = ((qc.get("global_quant_config") or {}).get("weight") or {})
        dtype = str(weight.get("dtype", "")).lower()
        if dtype in ("fp4", "mxfp4", "fp4_e2m1"):
            return "mxfp4"
        if dtype.startswith("fp8"):
            return "fp8"
        raise QuantizationError(f"quantization_config: Quark weight dtype {dtype!r} is not one the twin simulates")
    raise QuantizationError(f"quantization_config: quant_method {method!r} is not one the twin simulates "
                            f"(it knows {', '.join(METHODS)})")  # fmt: skip


def quark_exclude(qc: Mapping[str, Any] | None) -> list[str]:
    """A Quark config's exclude list (empty for other methods)."""
    if not qc or str(qc.get("quant_method", "")).lower() != "quark":
        return []
    return [str(x) for x in (qc.get("exclude") or [])]
