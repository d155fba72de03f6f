"""The ``config.json`` a hand-written scenario ``model`` section stands for (the DeepSeek/GLM key names).

Scenarios written before the twin read real configs describe a model field by field; ``config_from_spec`` turns
that description into the config.json such a model publishes, so that every scenario, hand-written or built from
a real config, reaches the engine and the cost model through the same file and the same derivation (the release
builds the class the config names: ``models.description``). Standard library only.
"""

from __future__ import annotations

from typing import Any


def config_from_spec(m: Any) -> dict[str, Any]:
    """config.json (without ``quantization_config``) for a hand-written ``ModelSpec``."""
    a, moe = m.attention, m.moe
    vocab = m.vocab_size
    cfg: dict[str, Any] = {
        "architectures": [m.architecture],
        "model_type": m.model_type,
        "hidden_size": m.hidden_size,
        "num_hidden_layers": m.num_hidden_layers,
        "num_nextn_predict_layers": 1 if m.mtp else 0,
        "vocab_size": vocab,
        "num_attention_heads": a.num_heads,
        "num_key_value_heads": a.num_heads,
        "q_lora_rank": a.q_lora_rank or None,
        "kv_lora_rank": a.kv_lora_rank,
        "qk_nope_head_dim": a.qk_nope_head_dim,
        "qk_rope_head_dim": a.qk_rope_head_dim,
        "v_head_dim": a.v_head_dim,
        "head_dim": a.qk_rope_head_dim,
        "n_routed_experts": moe.num_experts,
        "num_experts_per_tok": moe.top_k,
        "moe_intermediate_size": moe.intermediate_size,
        "n_shared_experts": moe.num_shared_experts,
        "first_k_dense_replace": m.first_k_dense_replace,
        "intermediate_size": m.dense_intermediate_size or moe.intermediate_size * max(1, moe.top_k),
        "moe_layer_freq": 1,
        "n_group": 1,
        "topk_group": 1,
        "topk_method": "noaux_tc",
        "scoring_func": "sigmoid",
        "norm_topk_prob": True,
        "routed_scaling_factor": 2.5,
        "hidden_act": "silu",
        "rms_norm_eps": 1e-05,
        "max_position_embeddings": m.max_position_embeddings,
        "rope_theta": 1000000,
        "rope_scaling": None,
        "attention_bias": False,
        "tie_word_embeddings": False,
        "bos_token_id": vocab - 100,
        "eos_token_id": [vocab - 99, vocab - 92, vocab - 90],
        "pad_token_id": vocab - 99,
        "torch_dtype": "bfloat16",
        "use_cache": True,
        "transformers_version": "4.57.1",
    }
    if a.kind == "gqa":  # grouped-query attention: no latent ranks
        for key in ("q_lora_rank", "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim"):
            cfg.pop(key)
        cfg.update(num_key_value_heads=a.num_kv_heads, head_dim=a.head_dim, use_qk_norm=a.qk_norm)
        # Qwen's MoE key names (the GQA MoE classes read these), beside DeepSeek's
        cfg.update(num_experts=moe.num_experts, decoder_sparse_step=1,
                   mlp_only_layers=list(range(m.first_k_dense_replace)))
    if a.sparse_topk > 0:
        cfg["index_topk"] = a.sparse_topk
        cfg["index_n_heads"] = a.indexer_heads
        cfg["index_head_dim"] = a.indexer_head_dim
    return cfg


def spec_fields(arch: Any, config: dict[str, Any]) -> dict[str, Any]:
    """The hand-written ``ModelSpec`` fields a config-driven model reads from its config (for the parts of the twin
    that describe a model by its full-attention layers and its routed experts)."""
    from ..scenario.format import AttentionSpec, MoESpec
    from .arch import GQA, MLA, LinearAttention

    full = arch.full_attention or next((la.attention for la in arch.layers
                                        if la.attention is not None and not isinstance(la.attention, LinearAttention)), None)
    if isinstance(full, MLA):
        attention = AttentionSpec(num_heads=full.num_heads, kind="mla", q_lora_rank=full.q_lora_rank,
                                  kv_lora_rank=full.kv_lora_rank, qk_nope_head_dim=full.qk_nope_head_dim,
                                  qk_rope_head_dim=full.qk_rope_head_dim, v_head_dim=full.v_head_dim,
                                  sparse_topk=full.index_topk, indexer_heads=full.index_heads,
                                  indexer_head_dim=full.index_head_dim)  # fmt: skip
    elif isinstance(full, GQA):
        attention = AttentionSpec(num_heads=full.num_heads, kind="gqa", num_kv_heads=full.num_kv_heads,
                                  head_dim=full.head_dim, qk_norm=full.qk_norm)  # fmt: skip
    else:
        attention = None
    moe = arch.moe
    moe_spec = MoESpec(num_experts=moe.num_experts, top_k=moe.top_k, intermediate_size=moe.intermediate_size,
                       num_shared_experts=(moe.shared_intermediate_size // moe.intermediate_size
                                           if moe.has_shared and moe.intermediate_size else 0)) if moe else None  # fmt: skip
    dense = [la for la in arch.layers if la.mlp is not None and la.mlp.kind == "dense"]
    first_dense = next((i for i, la in enumerate(arch.layers) if la.mlp is not None and la.mlp.kind != "dense"), 0)
    return {
        "architecture": arch.architecture, "model_type": arch.model_type, "hidden_size": arch.hidden_size,
        "num_hidden_layers": arch.num_hidden_layers, "vocab_size": arch.vocab_size, "attention": attention,
        "moe": moe_spec, "first_k_dense_replace": first_dense if moe else 0,
        "dense_intermediate_size": dense[0].mlp.intermediate_size if dense else 0,
        "max_position_embeddings": arch.max_position_embeddings,
    }  # fmt: skip
