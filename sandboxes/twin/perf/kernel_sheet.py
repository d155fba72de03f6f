"""What the engine's kernel classes reach on a GPU architecture, as data: ``data/hardware/kernels/<gfx_arch>.yaml``.

The scenario's calibration block holds constants fitted on GLM-5's public figures; a kernel class that has public
benchmarks of its own gets its curve here instead, one for every model on that architecture, with the source of
every number. ``load(arch)`` returns the sheet, or None for an architecture without one (the calibrated constants
then apply as before).

``fused_moe``: aiter's fused MoE with a tuned selection. A layer on one GPU pays the larger of streaming the touched
experts (``bandwidth`` of the HBM peak) and their FLOPs at ``compute[dtype][inter_dim]`` of the dtype's matrix
peak, for the expert's intermediate size on that GPU (TP splits it; fewer N tiles fill fewer CUs).
``layer_seconds`` is that model for one table row, so the tests can hold the sheet against the measurements it
carries.

``sparse_mla``: the sparse-MLA and DSA indexer kernels (TileLang and aiter on ROCm, SGLang's ``nsa`` backend), of
the bf16 (indexer: fp8) peak. No public benchmark of them was found; GLM-5 is the only sparse-attention model with
public figures, so this one number is fitted there, with every other class of GLM-5's step from its own sheet.
``decode_attention``: the dense (GQA/MHA) decode-attention kernels the sheet has measurements of, by name: the share
of the HBM peak at which each streams the KV cache, and whether a speculative verify reads each sequence's KV once per
query token (``perf/decode_attention.py`` says which kernel a server runs).
Standard library and PyYAML only.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field
from pathlib import Path

from .. import shipped_yaml

KERNELS_DIR = Path(__file__).resolve().parents[1] / "data" / "hardware" / "kernels"
BYTES_PER_PARAM = {"fp8": 1.0, "mxfp4": 4.25 / 8}  # MXFP4: 4-bit values and one e8m0 scale per 32
MEASURED_FROM_TOKENS = 16  # below, the tuned kernels sit on a latency floor that neither the curve nor a row covers


@dataclass(frozen=True)
class MoEKernel:
    bandwidth: float
    compute: dict[str, dict[int, float]]  # dtype -> expert intermediate size on one GPU -> share of the dtype's peak
    untuned_share: float | None = None  # an untuned selection's speed against the tuned kernel's (None: calibration)
    source: str = ""
    measured: tuple[dict, ...] = field(default=(), repr=False)

    def compute_efficiency(self, dtype: str, inter_dim: float) -> float | None:
        """Share of ``dtype``'s matrix peak the tuned kernel's GEMMs reach with ``inter_dim`` per GPU: log-linear
        between the measured sizes, the nearest measured one outside them (no extrapolation); None for a dtype the
        sheet has no measurement of."""
        points = sorted(self.compute.get(dtype, {}).items())
        return _log_linear(points, inter_dim) if points else None

    def measured_us(self, shape: dict, tokens: float) -> float | None:
        """The tuned kernel's measured microseconds for one layer of exactly ``shape`` (``model_dim``, ``inter_dim``
        on one GPU, ``experts``, ``top_k``, ``dtype``) at ``tokens`` tokens: log-linear between the row's listed
        counts, from ``MEASURED_FROM_TOKENS`` to its last; None where no row lists the shape or outside that range."""
        key = ("model_dim", "inter_dim", "experts", "top_k", "dtype")
        row = next((r for r in self.measured if all(r[k] == shape[k] for k in key)), None)
        if row is None:
            return None
        points = sorted((int(t), float(us)) for t, us in row["us_by_tokens"].items() if int(t) >= MEASURED_FROM_TOKENS)
        if not points or not points[0][0] <= tokens <= points[-1][0]:
            return None
        return _log_linear(points, tokens)

    def shape_factor(self, shape: dict, tokens: float, peak_tflops: dict[str, float], memory_tbs: float) -> float:
        """How much longer than the curve the tuned kernel measured for exactly ``shape`` at ``tokens`` (1.0 where
        no row lists it): the curve is a fit over every table, a listed shape is its own measurement."""
        measured = self.measured_us(shape, tokens)
        if measured is None:
            return 1.0
        curve = layer_seconds(self, shape, tokens, peak_tflops, memory_tbs, BYTES_PER_PARAM[shape["dtype"]])
        return measured * 1e-6 / curve


def _log_linear(points: list[tuple[float, float]], x: float) -> float:
    """The value at ``x`` of sorted ``(x, value)`` points, log-linear in both between neighbours, the nearest end's
    outside them."""
    if x <= points[0][0]:
        return points[0][1]
    for (lo, v_lo), (hi, v_hi) in zip(points, points[1:], strict=False):
        if x <= hi:
            return v_lo * (v_hi / v_lo) ** (math.log(x / lo) / math.log(hi / lo))
    return points[-1][1]


def touched_experts(experts: int, top_k: int, tokens: float, shared_fused: bool) -> float:
    """Experts a batch of ``tokens`` touches (uniform routing); a fused shared expert is always one of them."""
    routed, k = (experts - 1, top_k - 1) if shared_fused else (experts, top_k)
    return routed * (1.0 - (1.0 - k / routed) ** tokens) + (1 if shared_fused else 0)


def layer_seconds(
    kernel: MoEKernel, row: dict, tokens: int, peak_tflops: dict[str, float], memory_tbs: float, bytes_per_param: float
) -> float:
    """The sheet's time for one MoE layer of a table ``row`` (its shape) at ``tokens`` tokens. aiter's tables fuse
    the shared expert as one more expert (an odd expert count, top-k + 1)."""
    d, i, e, k = row["model_dim"], row["inter_dim"], row["experts"], row["top_k"]
    touched = touched_experts(e, k, tokens, shared_fused=e % 2 == 1)
    memory = touched * 3 * d * i * bytes_per_param / (memory_tbs * 1e12 * kernel.bandwidth)
    eff = kernel.compute_efficiency(row["dtype"], i)
    compute = 2 * tokens * k * 3 * d * i / (peak_tflops[row["dtype"]] * 1e12 * eff)
    return max(memory, compute)


@dataclass(frozen=True)
class DecodeAttentionKernel:
    bandwidth: float  # share of the HBM peak at which it streams the KV cache
    verify_reads_per_token: bool = False  # a verify of T tokens reads the KV T times (else the cost model's sqrt(T))
    source: str = ""


@dataclass(frozen=True)
class KernelSheet:
    arch: str
    fused_moe: MoEKernel | None = None
    sparse_mla_efficiency: float | None = None  # the sparse-MLA and DSA indexer kernels, of the bf16 / fp8 peak
    decode_attention: dict[str, DecodeAttentionKernel] = field(default_factory=dict)  # by kernel name
    path: str = ""


@functools.lru_cache(maxsize=8)
def load(arch: str) -> KernelSheet | None:
    path = KERNELS_DIR / f"{arch}.yaml"
    if not path.is_file():
        return None
    data = shipped_yaml.load(path) or {}
    moe = data.get("fused_moe")
    kernel = None
    if moe:
        compute = {str(dtype): {int(n): float(e) for n, e in by_dim.items()} for dtype, by_dim in moe["compute"].items()}
        share = moe.get("untuned_share")
        kernel = MoEKernel(bandwidth=float(moe["bandwidth"]), compute=compute, source=str(moe.get("source", "")),
                           untuned_share=float(share) if share is not None else None,
                           measured=tuple(moe.get("measured") or ()))  # fmt: skip
    sparse = (data.get("sparse_mla") or {}).get("efficiency")
    decode = {str(name): DecodeAttentionKernel(bandwidth=float(k["bandwidth"]),
                                               verify_reads_per_token=bool(k.get("verify_reads_per_token", False)),
                                               source=str(k.get("source", "")))
              for name, k in (data.get("decode_attention") or {}).items()}  # fmt: skip
    return KernelSheet(arch=str(data.get("arch", arch)), fused_moe=kernel,
                       sparse_mla_efficiency=float(sparse) if sparse is not None else None, decode_attention=decode,
                       path=str(path))  # fmt: skip
