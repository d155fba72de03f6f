"""The memory a forward pass allocates beyond the static pool: a prefill chunk's activations, the graphs' pool.

SGLang sizes neither: the static fraction is the user's (or the release's default, from its ``reserved_mem``
heuristic of 1.5 MB per chunk token), and a forward pass takes what it needs from what is left, failing with
``HIP out of memory`` where it does not fit. What it needs follows the model's layers, as torch allocates them,
one layer at a time (each layer's temporaries are freed before the next):

- the residual stream: the hidden state, the residual and the normalised input, ``3 x hidden_size`` per token;
- the token mixer's temporaries, per rank's share of the heads: GQA's q, k, v and output (and a gate where
  q_proj yields one); MLA's latent projections, the query, and for a prefill the keys and values it decompresses for the chunk (the
  MHA path), and its output; a linear-attention mixer's projections and gates;
- the MLP's: a dense MLP's gate/up pair and its activation; a MoE's router logits (fp32), each routed token's
  expert shard of gate/up and its activation, and the stage-2 output before the top-k sum, one ``hidden_size``
  row per routed copy of the token (``topk x hidden``: aiter's fused-MoE stage-2 buffer on MI355X, which a public
  out-of-memory report of a top-8, 7168-wide MoE names at 1.75 GiB for a 16384-token chunk at TP8, 16384 x 8 x
  7168 x 2 bytes), plus the shared experts'.

A layer's mixer and MLP run one after the other, so a token's peak is the residual stream plus the larger of
the two. The prefill chunk's activations are that per token times the chunk, plus the release's own allowance
for constant metadata (``reserved_mem = 512`` MB, "Constant meta data (e.g., from attention backend)", in
``ServerArgs``). The logits of a step are not here (``serving_faults.StepMemory`` adds them per row).

The graphs share one memory pool that holds the largest captured batch's temporaries: its tokens' activations
as above, its logits (bf16 gathered and their fp32 copy), and the pool's own overhead. That overhead is the
median, over the public capture logs we collected (``tests/benchmarks/data/memory_points.yaml``), of the
measured ``Capture cuda graph end ... mem usage`` less the two terms above for those models; those logs were not
taken on AMD GPUs (none public shows a finished capture), so it is the one figure here not measured on the GPUs
the twin simulates.
"""

from __future__ import annotations

import math
from typing import Any

from ..models.arch import GQA, MLA, DenseMLP, LinearAttention, MoE

GIB = 1024**3
MIB = 1024**2
ACTIVATION_BYTES = 2  # bf16 activations
ROUTER_LOGIT_BYTES = 4  # the router's logits in fp32
# ServerArgs' reserved_mem base: "Constant meta data (e.g., from attention backend)"
CONSTANT_METADATA_BYTES = 512 * MIB
# the graph pool's overhead beyond the largest batch's activations and logits (the module's docstring)
GRAPH_POOL_OVERHEAD_BYTES = 0.84 * GIB
LOGIT_BYTES = 2 + 4  # the gathered bf16 logits and their fp32 copy, per row and vocabulary entry


def _share(n: int, ranks: int) -> int:
    """One rank's part of ``n`` heads or channels split over ``ranks`` (at least one: a head is replicated)."""
    return max(math.ceil(n / max(ranks, 1)), 1) if n else 0


def _mixer(attention: Any, attn_tp: int, prefill: bool) -> int:
    """Elements per token of the token mixer's temporaries on one rank."""
    if isinstance(attention, MLA):
        heads = _share(attention.num_heads, attn_tp)
        latent = attention.q_lora_rank + attention.kv_lora_rank + attention.qk_rope_head_dim
        query = heads * attention.qk_head_dim
        if prefill:  # keys and values decompressed from the latent for the chunk's tokens
            keys_values = heads * (attention.qk_head_dim + attention.v_head_dim)
        else:  # decode attends in the latent space (the absorbed query, the latent output)
            keys_values = heads * (attention.kv_lora_rank + attention.qk_rope_head_dim)
        indexer = attention.index_heads * attention.index_head_dim if attention.sparse else 0
        return latent + query + keys_values + heads * attention.v_head_dim + indexer
    if isinstance(attention, GQA):
        heads, kv = _share(attention.num_heads, attn_tp), _share(attention.num_kv_heads, attn_tp)
        query = heads * attention.head_dim * (2 if attention.output_gate else 1)
        return query + kv * (attention.head_dim + attention.value_dim) + heads * attention.value_dim
    if isinstance(attention, LinearAttention):
        conv = _share(attention.conv_dim, attn_tp)
        value = _share(attention.value_dim, attn_tp)
        return 2 * conv + 3 * value  # the projections, the convolved input, the gates and the output
    return 0


def _mlp(mlp: Any, tp: int, hidden: int) -> float:
    """Elements per token of the MLP's temporaries on one rank (the router's fp32 logits counted in elements)."""
    if isinstance(mlp, DenseMLP):
        width = _share(mlp.intermediate_size, tp)
        return (3 if mlp.gated else 2) * width
    if isinstance(mlp, MoE):
        width = _share(mlp.intermediate_size, tp)
        router = mlp.num_experts * ROUTER_LOGIT_BYTES / ACTIVATION_BYTES
        routed = mlp.top_k * (3 * width + hidden)  # gate/up and activation of its shard, the stage-2 rows
        shared = 3 * _share(mlp.shared_intermediate_size, tp) if mlp.shared_intermediate_size else 0
        return router + routed + shared
    return 0


def per_token_bytes(
    arch: Any, tp_size: int, attn_tp_size: int | None = None, *, prefill: bool = True
) -> float:
    """Peak bytes one token of a forward pass holds on one GPU (``attn_tp_size``: the GPUs the attention heads
    are split over, fewer than ``tp_size`` under DP attention)."""
    attn_tp = attn_tp_size or tp_size
    hidden = arch.hidden_size
    layers = list(arch.layers) + ([arch.mtp.layer] if getattr(arch, "mtp", None) else [])
    peak = max((max(_mixer(la.attention, attn_tp, prefill), _mlp(la.mlp, tp_size, hidden)) for la in layers),
               default=0)  # fmt: skip
    return ACTIVATION_BYTES * (3 * hidden + peak)


def prefill_bytes(arch: Any, cfg: Any, tokens: int) -> float:
    """A prefill step of ``tokens`` tokens' activations on one GPU, with the release's constant metadata."""
    return tokens * per_token_bytes(arch, cfg.tp_size, cfg.gpus_per_rank) + CONSTANT_METADATA_BYTES


def graph_tokens(cfg: Any) -> int:
    """Tokens of the largest captured batch: ``--cuda-graph-max-bs`` requests, each with its draft tokens when
    speculating (a verify step runs them all)."""
    return cfg.cuda_graph_max_bs * max(int(cfg.speculative_num_draft_tokens or 0), 1)


def graph_batch_bytes(arch: Any, cfg: Any, vocab_size: int) -> tuple[float, float]:
    """(activations, logits) of the largest captured batch on one GPU: what the graphs' pool holds beyond its
    overhead."""
    tokens = graph_tokens(cfg)
    rows = tokens  # a verify step returns every draft token's logits; a decode step one row per request
    activations = tokens * per_token_bytes(arch, cfg.tp_size, cfg.gpus_per_rank, prefill=False)
    return activations, rows * vocab_size * LOGIT_BYTES


def graph_pool_bytes(arch: Any, cfg: Any, vocab_size: int) -> float:
    """The captured graphs' memory pool on one GPU (0 with ``--disable-cuda-graph``)."""
    if cfg.disable_cuda_graph:
        return 0.0
    return sum(graph_batch_bytes(arch, cfg, vocab_size)) + GRAPH_POOL_OVERHEAD_BYTES
