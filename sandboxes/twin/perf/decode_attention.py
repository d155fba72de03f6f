"""Which kernel a dense (GQA/MHA) layer's decode attention runs under a server's flags, and how fast it streams the KV.

A decode step's attention is a stream of the KV cache, and how much of the HBM peak that stream reaches is the
kernel's, not the model's: a Triton split-KV kernel reads Qwen3.5's head_dim-256 cache at about 2.2 TB/s on MI355X
where a hand-written kernel reads it at 5 (the kernel sheet, ``data/hardware/kernels/<gfx_arch>.yaml``,
``decode_attention``, with the sources). SGLang 0.5.12 picks the kernel per backend:

| backend (``--attention-backend``) | decode kernel (non-MLA layer) | sheet entry |
|---|---|---|
| ``triton`` (``TritonAttnBackend``) | ``decode_attention_fwd``: Triton split-KV (``triton_ops/decode_attention.py``) | ``sglang_triton`` |
| ``aiter`` with ``SGLANG_USE_AITER_UNIFIED_ATTN=1`` | aiter's Triton ``unified_attention`` (``aiter_backend.py`` ``forward_decode``) | ``aiter_unified`` |
| ``aiter`` otherwise | aiter's HIP ``paged_attention_ragged`` | none: the calibration's ``hbm_efficiency`` |

MLA, DSA and linear attention have kernels of their own and keep the calibrated stream. A kernel the sheet does not
list, or a GPU without a sheet, keeps it too: nothing changes where nothing was measured.

Not modelled: 0.5.12 also runs unified attention whenever the aiter backend serves a hybrid sliding-window pool
(``use_sliding_window_kv_pool``: GPT-OSS), and the Triton backend verifies speculative drafts through its prefill
kernel (``extend_attention_fwd``), which its split-KV verify (sgl-project/sglang PR 27382, after 0.5.12) replaced;
both keep the calibrated stream here. Standard library only.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..models.arch import GQA
from .attention import LayerGroup
from .kernel_sheet import KernelSheet
from .serving_config import ServingConfig


@dataclass(frozen=True)
class DecodeKV:
    """How one layer group's decode (verify) step reads its KV cache on one GPU."""

    kernel: str  # the sheet's name of the kernel; "" for the calibrated stream
    bandwidth: float  # bytes per second of KV it streams
    verify_reads_per_token: bool = False  # a verify of T tokens reads the KV T times

    def reads(self, tokens_per_seq: int) -> float:
        """Times one sequence's KV is read in a step of ``tokens_per_seq`` tokens: once in a plain decode; in a verify
        ``T`` times through a kernel that takes one query token per workgroup, else ``sqrt(T)`` (the cost model's
        convention for kernels that share a KV tile among a sequence's query tokens)."""
        if tokens_per_seq <= 1:
            return 1.0
        return float(tokens_per_seq) if self.verify_reads_per_token else tokens_per_seq**0.5


def kernel_name(grp: LayerGroup, cfg: ServingConfig) -> str | None:
    """The sheet's name of the kernel ``grp``'s decode attention runs under ``cfg`` (None: not a dense GQA/MHA layer,
    or aiter's HIP paged attention, which the sheet does not list)."""
    if not isinstance(grp.attention, GQA):
        return None
    if cfg.attention_backend == "triton":
        return "sglang_triton"
    if cfg.attention_backend == "aiter" and cfg.aiter_unified_attention:
        return "aiter_unified"
    return None


def decode_kv(
    grp: LayerGroup, cfg: ServingConfig, sheet: KernelSheet | None, peak_bytes_s: float, calibrated_bytes_s: float
) -> DecodeKV:
    """How ``grp``'s decode attention streams its KV under ``cfg`` on a GPU of ``peak_bytes_s`` HBM bandwidth: at the
    sheet's share of the peak for the kernel it runs, else at ``calibrated_bytes_s``."""
    name = kernel_name(grp, cfg)
    kernel = sheet.decode_attention.get(name) if sheet and name else None
    if kernel is None:
        return DecodeKV("", calibrated_bytes_s)
    return DecodeKV(name or "", peak_bytes_s * kernel.bandwidth, kernel.verify_reads_per_token)
