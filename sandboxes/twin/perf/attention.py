"""What a model's attention costs, layer kind by layer kind and phase, on one GPU of an attention group.

The model's layers (``models.arch.ModelArch``) are grouped by their attention; each group says how many keys a
query reads and what one key costs, or, for linear attention, what its recurrent state costs:

| kind | decode: bytes one GPU reads per sequence and layer | FLOPs per query token (all heads) | prefill |
|---|---|---|---|
| MLA | every key's latent and rope key, ``(kv_lora_rank + qk_rope_head_dim)`` x KV dtype (replicated) | ``2 H (2 kv_lora_rank + qk_rope_head_dim)`` per key (absorbed) | MHA form: ``2 H (qk_nope + qk_rope + v_head_dim)`` per key, + ``2 kv_lora_rank H (qk_nope + v_head_dim)`` per cached prefix key and chunk (its up-projection) |
| MLA + DSA | ``min(context, index_topk)`` keys' latent, and the indexer's key of every earlier token (``index_head_dim`` fp8 + fp32 scales) | as MLA over the capped keys | absorbed over the capped keys + ``2 index_heads index_head_dim`` per context key (the indexer, at the fp8 peak) |
| GQA | every key's K and V of the GPU's KV heads (``max(1, kv_heads // attn_tp)``) | ``2 H 2 head_dim`` per key | the same |
| GQA, sliding window | the last ``min(context, sliding_window)`` keys | over ``min(context, sliding_window)`` keys | the same |
| linear (Gated DeltaNet) | no KV: its state (convolution + SSM, ``pools.linear_state``) read and written back every step | ``7 Hv Dk Dv`` (decay, two state products, the rank-1 update) + ``2 conv_dim K`` | chunked scan, ``Hv (6 C Dk + 4 C Dv + 6 Dk Dv) + 2 conv_dim K`` per new token, ``C`` = 64 |

Why MLA's prefill is charged in another form than its decode: SGLang's DeepSeek attention picks, per forward,
between the absorbed form (queries multiplied into the latent space: ``2 kv_lora_rank + qk_rope_head_dim`` per key
and head) and the MHA form (the latent up-projected into per-head keys and values: ``qk_nope + qk_rope +
v_head_dim`` per key and head). With the aiter backend (ROCm's default) decode and speculative verify run absorbed
(one query, many keys: the latent is read once for every head), and every other extend batch runs MHA
(``models/deepseek_common/attention_backend_handler.py`` ``handle_attention_aiter``, 0.5.12), the cached prefix
up-projected through ``kv_b_proj`` for the batch. For DeepSeek-R1 (``kv_lora_rank`` 512, ``qk_nope`` 128,
``qk_rope`` 64, ``v_head_dim`` 128) that is 2176 against 640 FLOPs per key and head: 3.4x fewer in MHA form. DSA
models (GLM-5, DeepSeek-V3.2) run the sparse kernel absorbed over the top-k keys in both phases
(``handle_attention_nsa``: MHA only for sequences within the top-k, where both forms read every key).

Each group names its **kernel class** (``sparse``: the sparse-MLA and indexer kernels; else the dense
FlashAttention-style kernels), whose efficiency the cost model takes from the calibration
(``attention_efficiency`` for sparse, ``dense_attention_efficiency`` for dense): the hardware's kernels, not the
model's.

Sinks (one logit per head), q/k norms and the output gate cost nothing here: they are per token, not per key, and
their projections are the layer's linear weights. A verify step of ``T`` draft tokens reads each sequence's KV
``sqrt(T)`` times (the cost model's convention) and its linear state once, writes ``T`` intermediate states
(``MambaPool``'s ``intermediate_ssm``, ``gdn_backend.py`` ``target_verify``) and copies the accepted one back
(``update_mamba_state_after_mtp_verify``): ``T + 3`` states; a plain decode step reads and writes it once.

The prefill scan's FLOPs are those of FLA's chunked gated delta rule (``layers/attention/fla/chunk.py``, chunks of
``CHUNK_SIZE`` = 64): per value head and token ``2 C Dk`` for ``beta k k^T``, ``2 C Dk + 2 C Dv`` for ``w`` and
``u``, ``4 Dk Dv`` for the state's recurrence over chunks (``w h`` and ``k^T v``), ``2 Dk Dv + 2 C Dk + 2 C Dv``
for the output (``q h`` and the masked ``q k^T`` times ``v``); the triangular solve (``C^2 / 3`` per token) is left
out. Standard library only.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass

from ..engine.pools import indexer_key_bytes, kv_heads_per_gpu, linear_state, ssm_dtype
from ..models.arch import GQA, MLA, Attention, LinearAttention, ModelArch
from .serving_config import ServingConfig

FLA_CHUNK_SIZE = 64  # layers/attention/fla/chunk.py CHUNK_SIZE


@dataclass(frozen=True)
class LayerGroup:
    """``count`` layers with the same attention, and what one of them costs on one GPU of its group."""

    attention: Attention
    count: int
    key_cap: float = math.inf  # keys a query reads at most: the DSA cap, the window; inf: the whole context
    kv_bytes_per_key: float = 0.0  # cache bytes one GPU reads per key a query attends to
    flops_per_key: float = 0.0  # per query token and attended key, every head (the group's GPUs split them)
    prefill_flops_per_key: float = 0.0  # the same in an extend batch (MLA: the MHA form)
    prefix_flops_per_key: float = 0.0  # per cached prefix key and extend batch (MLA MHA form: the up-projection)
    sparse: bool = False  # the sparse-MLA kernel class (DSA); else dense FlashAttention-style kernels
    indexer_bytes_per_key: float = 0.0  # DSA: the indexer's key of every earlier token
    indexer_flops_per_key: float = 0.0
    state_bytes: float = 0.0  # linear: one sequence's convolution and SSM state on one GPU
    scan_flops_per_token: float = 0.0  # linear, prefill: the chunked scan, every head
    step_flops_per_token: float = 0.0  # linear, decode: the recurrent update, every head

    @property
    def linear(self) -> bool:
        return isinstance(self.attention, LinearAttention)

    def keys(self, context: float) -> float:
        """Keys a query at ``context`` reads in one layer of this group."""
        return min(context, self.key_cap)


def state_traffic(tokens_per_seq: int) -> int:
    """Linear-attention states moved per sequence and layer in one decode (verify) step: read and written once
    in a plain decode; in a verify of ``T`` tokens read once, ``T`` intermediate states written, the accepted
    one read and copied back."""
    return 2 if tokens_per_seq <= 1 else tokens_per_seq + 3


def group(attention: Attention, count: int, kv_bytes: float, cfg: ServingConfig) -> LayerGroup:
    """What one layer of ``attention`` costs, at ``kv_bytes`` per cached element, on one GPU of ``cfg``'s
    attention group."""
    g = cfg.gpus_per_rank
    if isinstance(attention, MLA):
        a = attention
        absorbed = 2 * a.num_heads * (2 * a.kv_lora_rank + a.qk_rope_head_dim)
        mha = 2 * a.num_heads * (a.qk_head_dim + a.v_head_dim)  # QK^T over nope + rope, then PV
        return LayerGroup(
            a, count, key_cap=a.index_topk if a.sparse else math.inf,
            kv_bytes_per_key=(a.kv_lora_rank + a.qk_rope_head_dim) * kv_bytes,
            flops_per_key=absorbed,
            prefill_flops_per_key=absorbed if a.sparse else mha,
            prefix_flops_per_key=0 if a.sparse else 2 * a.kv_lora_rank * a.num_heads * (a.qk_nope_head_dim + a.v_head_dim),
            sparse=a.sparse,
            indexer_bytes_per_key=indexer_key_bytes(a),
            indexer_flops_per_key=2 * a.index_heads * a.index_head_dim if a.sparse else 0,
        )  # fmt: skip
    if isinstance(attention, GQA):
        a = attention
        return LayerGroup(
            a, count, key_cap=a.sliding_window or math.inf,
            kv_bytes_per_key=kv_heads_per_gpu(a, g) * 2 * a.head_dim * kv_bytes,
            flops_per_key=2 * a.num_heads * 2 * a.head_dim,  # QK^T and PV
            prefill_flops_per_key=2 * a.num_heads * 2 * a.head_dim,
        )  # fmt: skip
    a = attention
    dk, dv, hv = a.key_head_dim, a.value_head_dim, a.num_value_heads
    conv = 2 * a.conv_dim * a.conv_kernel
    return LayerGroup(
        a, count, state_bytes=linear_state(a, g, ssm_dtype(a, cfg)).bytes,
        scan_flops_per_token=hv * (6 * FLA_CHUNK_SIZE * dk + 4 * FLA_CHUNK_SIZE * dv + 6 * dk * dv) + conv,
        step_flops_per_token=hv * 7 * dk * dv + conv,
    )  # fmt: skip


def layer_groups(arch: ModelArch, cfg: ServingConfig, kv_bytes: float) -> list[LayerGroup]:
    """The model's layers grouped by attention, in the order each attention first appears."""
    counts = Counter(layer.attention for layer in arch.layers if layer.attention is not None)  # an MLP-only layer: none
    return [group(a, n, kv_bytes, cfg) for a, n in counts.items()]
