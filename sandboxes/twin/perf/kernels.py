"""How many GPU kernels one decoder layer launches, counted from the layer's own modules.

A decode step's fixed GPU cost is the gap each kernel of the captured graph leaves (launch, dependency wait,
tail): it grows with the number of kernels, not with the model's size in bytes. The count here follows what
SGLang 0.5.12 runs on ROCm for each module of a layer (``models/deepseek_v2.py``, ``models/qwen3_5.py``,
``models/gpt_oss.py`` and the aiter paths they call), so a shallow model or one with simple layers steps in a
fraction of a deep sparse-attention model's time. The per-kernel cost is the engine's (``kernel_overhead_us``,
calibrated once); only the counts differ between models.

| module | kernels |
|---|---|
| input norm (fused residual add + RMSNorm) | 1 |
| MLA | fused ``q_a``/``kv_a`` GEMM (or ``q_proj`` + ``kv_a``), the latent norms (1 each), ``q_b_proj``, rope, the absorbed ``W_kc`` bmm, KV-cache store, the MLA kernel and its split-KV reduce, the ``W_vc`` bmm, ``o_proj`` |
| DSA indexer | ``wq_b``, ``wk``, its key norm, ``weights_proj``, rope, fp8 quantisation, key-cache store, the logits kernel, top-k |
| GQA | ``qkv_proj``, q/k norms (1, when present), rope, KV-cache store, attention, the output gate (1, when present), ``o_proj`` |
| linear attention (Gated DeltaNet) | ``in_proj_qkvz``, ``in_proj_ba``, the causal-conv update, the gating, the recurrent update, the gated norm, ``out_proj`` |
| post-attention norm | 1 |
| dense MLP | ``gate_up_proj``, the activation, ``down_proj`` |
| MoE | router GEMM, top-k (with its bias or correction), the routing sort, aiter's two-stage fused MoE (2), and for shared experts their ``gate_up``, activation, ``down`` (+ the shared gate, when present) and the add |

The all-reduces are the communication term's (``CostModel.allreduce_time``), and what aiter's all-reduce + norm
fusion saves is that term's ``allreduce_fusion_saving``. Standard library only.
"""

from __future__ import annotations

from ..models.arch import GQA, MLA, DenseMLP, Layer, LinearAttention, ModelArch


def attention_kernels(attention: MLA | GQA | LinearAttention | None) -> int:
    if attention is None:  # a layer with no attention (an MLP-only layer)
        return 0
    if isinstance(attention, MLA):
        a = attention
        q_path = 3 if a.q_lora_rank else 2  # fused q_a+kv_a, q_a norm, q_b | q_proj, kv_a
        n = q_path + 1 + 7  # the kv_a norm; rope, W_kc bmm, cache store, MLA, split-KV reduce, W_vc bmm, o_proj
        return n + (9 if a.sparse else 0)
    if isinstance(attention, GQA):
        a = attention
        return 5 + int(a.qk_norm) + int(a.output_gate)
    return 7


def mlp_kernels(mlp) -> int:
    if mlp is None:  # a layer with no MLP (a mixer-only layer)
        return 0
    if isinstance(mlp, DenseMLP):
        return 3
    n = 5  # router, top-k, sort, two-stage fused MoE
    if mlp.has_shared:
        n += 3 + int(mlp.shared_expert_gate) + 1
    return n


def layer_kernels(layer: Layer) -> int:
    """Kernels one forward of ``layer`` launches on each GPU of its group: two norms, its attention, its MLP."""
    return 2 + attention_kernels(layer.attention) + mlp_kernels(layer.mlp)


def model_kernels(arch: ModelArch) -> int:
    """Kernels of one forward through every decoder layer (the LM head and sampling are the step's own)."""
    return sum(layer_kernels(layer) for layer in arch.layers)


def draft_layer_kernels(arch: ModelArch) -> int:
    """Kernels of one MTP draft step's decoder layer (its own layer kinds; the last layer's without an MTP head),
    plus the draft's input projection (``eh_proj``) and its two input norms."""
    layer = arch.mtp.layer if arch.mtp else arch.layers[-1]
    return layer_kernels(layer) + 3
