"""The tensors of a separate draft checkpoint (``--speculative-draft-model-path``), from its config.json.

EAGLE3 drafts (SGLang's ``LlamaForCausalLMEagle3``; SpecForge and the EAGLE reference implementation export them)
are stored in one layout whatever the target: one decoder layer named ``midlayer`` whose attention reads the
token's embedding and the fused hidden state side by side (q/k/v over ``2 * hidden_size``), ``fc`` fusing the
target's auxiliary hidden states (``len(eagle_aux_hidden_state_layer_ids) * target_hidden_size`` wide), a final
``norm``, an ``lm_head`` over the draft's own vocabulary (``draft_vocab_size``) and the two maps between the
vocabularies: ``d2t`` (int64, one offset per draft token) and ``t2d`` (bool, one flag per target token). The
embedding is the target's (the draft worker hands it over), so the checkpoint has none.

Shapes come from the config alone; a draft of another layout is refused in one line (``DraftLayoutError``), never
guessed. Standard library only.
"""

from __future__ import annotations

from typing import Any

DTYPES = {"bfloat16": "BF16", "float16": "F16", "float32": "F32"}


class DraftLayoutError(ValueError):
    """A draft config whose checkpoint layout the twin does not know (one line: which class and why)."""


def is_eagle3(config: dict[str, Any]) -> bool:
    """An EAGLE3 draft: its architecture says so (``...Eagle3``), or its config carries EAGLE3's aux-state layers."""
    archs = config.get("architectures") or [""]
    return str(archs[0]).endswith("Eagle3") or "eagle_config" in config


def draft_tensors(config: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Every tensor of the draft checkpoint: name -> ``{"dtype", "shape"}`` (safetensors dtype names)."""
    arch = str((config.get("architectures") or [""])[0])
    if not is_eagle3(config):
        raise DraftLayoutError(f"draft architecture {arch!r}: the twin writes separate draft checkpoints in the "
                               "EAGLE3 layout only (an ...Eagle3 class with an eagle_config)")  # fmt: skip
    layers = int(config.get("num_hidden_layers") or 1)
    if layers != 1:
        raise DraftLayoutError(f"draft architecture {arch!r}: {layers} decoder layers; the EAGLE3 layout the twin "
                               "writes has one (midlayer)")  # fmt: skip
    h = int(config["hidden_size"])
    heads = int(config["num_attention_heads"])
    kv_heads = int(config.get("num_key_value_heads") or heads)
    head_dim = int(config.get("head_dim") or h // heads)
    inter = int(config["intermediate_size"])
    vocab = int(config["vocab_size"])
    draft_vocab = int(config.get("draft_vocab_size") or vocab)
    target_h = int(config.get("target_hidden_size") or h)
    aux = (config.get("eagle_config") or {}).get("eagle_aux_hidden_state_layer_ids") or [0, 0, 0]
    dtype = DTYPES.get(str(config.get("torch_dtype") or config.get("dtype") or "bfloat16"), "BF16")

    def t(*shape: int, dt: str = dtype) -> dict[str, Any]:
        return {"dtype": dt, "shape": list(shape)}

    out = {
        "d2t": t(draft_vocab, dt="I64"),
        "t2d": t(vocab, dt="BOOL"),
        "fc.weight": t(h, len(aux) * target_h),
        "midlayer.input_layernorm.weight": t(h),
        "midlayer.hidden_norm.weight": t(h),
        "midlayer.post_attention_layernorm.weight": t(h),
        "midlayer.self_attn.q_proj.weight": t(heads * head_dim, 2 * h),
        "midlayer.self_attn.k_proj.weight": t(kv_heads * head_dim, 2 * h),
        "midlayer.self_attn.v_proj.weight": t(kv_heads * head_dim, 2 * h),
        "midlayer.self_attn.o_proj.weight": t(h, heads * head_dim),
        "midlayer.mlp.gate_proj.weight": t(inter, h),
        "midlayer.mlp.up_proj.weight": t(inter, h),
        "midlayer.mlp.down_proj.weight": t(h, inter),
        "norm.weight": t(h),
    }
    if not config.get("tie_word_embeddings"):
        out["lm_head.weight"] = t(draft_vocab, h)
    return out
