"""A model's layers as the pinned release builds them: ``derive(executor, config) -> ModelArch``.

Nothing here reads a config field by a rule of ours. The release makes the config (``ModelConfig``, through the
real transformers), builds the model class it registers (``build_model``), and this module reads what it built:

* **the decoder layers**: the module list of ``ModelConfig.num_hidden_layers`` entries that holds the model's
  attention or recurrent layers (a vision tower's blocks are another list, of other layers);
* **attention**, where a layer holds the release's ``RadixAttention``: MLA when the release's ``ModelConfig`` says
  the attention architecture is MLA (its latent ranks are the config's, as ``ModelConfig`` derives them), with DSA
  when the layer builds an indexer (its ``index_topk``, heads, head size); else grouped-query attention with the
  heads, KV heads, head sizes and sliding window the ``RadixAttention`` was given, chunked attention where it uses
  the release's chunked-local path (``use_irope``: ``ModelConfig.attention_chunk_size``), sinks (a per-head
  parameter of the attention module), q/k norms, an output gate (a query projection twice as tall), biases;
* **recurrent layers**: the layers the release's own state accounting lists (the config's ``mamba2_cache_params``:
  Gated DeltaNet, Mamba2, short convolutions, KDA, whatever the class is) with the state shapes it allocates, asked
  at each attention TP size (the shapes it splits over the GPUs);
* **the MLP**: routed experts where the layer builds a ``FusedMoE`` (experts, top-k, expert width; shared experts,
  their gate, router and correction biases as the parameters around it), else a dense MLP from its projections
  (gated: a merged gate/up projection or two of one width; ungated: one up projection), else none;
* **the MTP head**: the draft class the release's ``ModelConfig._config_draft_model`` picks, built and read the same
  way, when it is another class than the model's and the checkpoint ships it (``mtp_layers``).

Raises ``DeriveError`` (one line) when the release cannot build the model or builds nothing the twin can read.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from .arch import GQA, MLA, MTP, DenseMLP, Layer, LayerParams, LinearAttention, ModelArch, MoE

ATTENTION_TP_SIZES = (1, 2, 4, 8, 16)
FALLBACKS = ("Transformers",)  # the release's Transformers backend classes (models/transformers.py)  # the attention TP sizes the recurrent state shapes are asked at


class DeriveError(ValueError):
    """The release builds nothing the twin can read as a model (one line)."""


def _named(module: Any) -> Iterator[tuple[str, Any]]:
    yield from module.named_modules()


def _params(module: Any, recurse: bool = True) -> list[tuple[str, Any]]:
    return list(module.named_parameters(recurse=recurse))


class _Classes:
    """The release's layer classes, as the workspace defines them (what the derivation asks ``isinstance`` of)."""

    def __init__(self, executor: Any) -> None:
        self.radix = executor.module("sglang.srt.layers.radix_attention").RadixAttention
        self.fused_moe = executor.module("sglang.srt.layers.moe.fused_moe_triton.layer").FusedMoE
        linear = executor.module("sglang.srt.layers.linear")
        self.linear = linear.LinearBase
        self.merged = linear.MergedColumnParallelLinear
        self.qkv = linear.QKVParallelLinear
        self.row = linear.RowParallelLinear
        self.module_list = executor.torch["torch.nn"].ModuleList


def _weight(module: Any) -> Any:
    return module.__dict__.get("_parameters", {}).get("weight")


def _is_conv(module: Any, c: _Classes) -> bool:
    """A convolution the release stores as a linear (``[channels, 1, kernel]``): a recurrent mixer's."""
    w = _weight(module)
    return isinstance(module, c.linear) and w is not None and len(w.shape) == 3


def _has(module: Any, cls: Any) -> bool:
    return any(isinstance(m, cls) for _, m in _named(module))


def _out_size(linear: Any) -> int:
    return int(linear.__dict__.get("output_size") or 0)


def _has_bias(linear: Any) -> bool:
    return linear.__dict__.get("_parameters", {}).get("bias") is not None


# --- attention ----------------------------------------------------------------------------------------------


def _indexer(module: Any) -> Any:
    return next((m for _, m in _named(module) if "index_topk" in m.__dict__), None)


def _mla(layer_attention: Any, radix: list[Any], mc: Any) -> MLA:
    text = mc.hf_text_config
    heads = max(int(r.tp_q_head_num) for r in radix)
    index = _indexer(layer_attention)
    return MLA(
        num_heads=heads, kv_lora_rank=int(mc.kv_lora_rank), qk_nope_head_dim=int(mc.qk_nope_head_dim),
        qk_rope_head_dim=int(mc.qk_rope_head_dim), v_head_dim=int(mc.v_head_dim),
        q_lora_rank=int(getattr(text, "q_lora_rank", 0) or 0),
        index_topk=int(index.index_topk) if index is not None else 0,
        index_heads=int(index.n_heads) if index is not None else 0,
        index_head_dim=int(index.head_dim) if index is not None else 0,
    )  # fmt: skip


def _owner(scope: list[Any], target: Any) -> Any:
    """The module among ``scope`` that holds ``target`` as a direct child."""
    return next((m for m in scope if any(ch is target for ch in m.__dict__.get("_modules", {}).values())), None)


def _gqa(layer: Any, scope: list[Any], r: Any, mc: Any, c: _Classes) -> GQA:
    """Grouped-query attention from the ``RadixAttention`` ``r`` and the modules of its layer outside the MLP
    (``scope``: some classes keep the projections in an attention module, others on the layer itself)."""
    heads, kv, head_dim = int(r.tp_q_head_num), int(r.tp_k_head_num), int(r.head_dim)
    window = int(r.sliding_window_size)
    chunk = int(mc.attention_chunk_size or 0) if r.__dict__.get("use_irope") else 0
    linears = [m for m in scope if isinstance(m, c.linear)]
    query = next((m for m in linears if isinstance(m, c.qkv)), None) or next(
        (m for m in linears if not isinstance(m, c.row)), None)
    sizes = list(query.__dict__.get("output_sizes") or [_out_size(query)]) if query is not None else []
    gate = bool(sizes) and int(sizes[0]) == 2 * heads * head_dim
    on_layer = set(id(m) for m in layer.__dict__.get("_modules", {}).values())

    def q_or_k_norm(m: Any) -> bool:
        if isinstance(m, c.linear) or [n for n, _ in _params(m, recurse=False)] != ["weight"]:
            return False
        w = _weight(m)
        if len(w.shape) != 1:
            return False
        # per head, or over all heads inside the attention module (a per-layer norm)
        return w.shape[0] == head_dim or (id(m) not in on_layer and w.shape[0] in (heads * head_dim, kv * head_dim))

    owner = _owner(scope, r)
    own = dict(_params(owner, recurse=False)) if owner is not None and owner is not layer else {}
    sinks = any(len(p.shape) == 1 and p.shape[0] == heads for p in own.values())
    out = next((m for m in linears if isinstance(m, c.row)), None)
    return GQA(
        num_heads=heads, num_kv_heads=kv, head_dim=head_dim,
        v_head_dim=int(r.v_head_dim) if int(r.v_head_dim) != head_dim else 0,
        sliding_window=window + 1 if window >= 0 else 0, chunk_size=chunk, sinks=sinks,
        qk_norm=any(q_or_k_norm(m) for m in scope), output_gate=gate,
        qkv_bias=query is not None and _has_bias(query), o_bias=out is not None and _has_bias(out),
    )  # fmt: skip


# --- recurrent state ----------------------------------------------------------------------------------------


def _cache_params(mc: Any) -> Any:
    """The release's recurrent-state accounting for the model (``mamba2_cache_params`` of the config that has it)."""
    for config in (mc.hf_config, mc.hf_text_config, getattr(mc.hf_config, "llm_config", None)):
        if config is None:
            continue
        try:
            params = getattr(config, "mamba2_cache_params", None)
            params = params() if callable(params) else params
        except Exception:
            continue
        if params is not None and getattr(params, "layers", None) is not None:
            return params
    return None


def _states(executor: Any, mc: Any) -> tuple[list[int], tuple[tuple[int, int, tuple[int, ...]], ...], int]:
    """(layers with a recurrent state, ((attention TP, conv elements, temporal shape) per TP the shapes divide
    over), the convolution's kernel)."""
    platform = executor.platform
    saved = platform.attn_tp_size
    layers: list[int] = []
    table: list[tuple[int, int, tuple[int, ...]]] = []
    kernel = 0
    try:
        for tp in ATTENTION_TP_SIZES:
            platform.attn_tp_size = tp
            try:
                params = _cache_params(mc)
            except Exception:
                params = None
            if params is None:
                continue
            layers = [int(i) for i in params.layers]
            shape = params.shape
            conv = sum(math.prod(int(d) for d in s) for s in shape.conv)
            table.append((tp, conv, tuple(int(d) for d in shape.temporal)))
            kernel = int(getattr(shape, "conv_kernel", 0) or 0)
    finally:
        platform.attn_tp_size = saved
    return layers, tuple(table), kernel


def _linear_attention(states: tuple[tuple[int, int, tuple[int, ...]], ...], kernel: int, mixer: str,
                      ssm_dtype: str | None) -> LinearAttention:  # fmt: skip
    _, conv, temporal = states[0]  # at TP 1: the whole state of one layer
    heads, value_dim, key_dim = (tuple(temporal) + (0, 0, 0))[:3]
    channels = conv // max(kernel - 1, 1)
    # the convolution runs over the values and two groups of keys (Mamba2StateShape: intermediate + 2 groups x state)
    groups = (channels - heads * value_dim) // (2 * key_dim) if key_dim and channels > heads * value_dim else 0
    return LinearAttention(
        num_key_heads=int(groups), num_value_heads=int(heads), key_head_dim=int(key_dim), value_head_dim=int(value_dim),
        conv_kernel=kernel or 1, ssm_dtype=ssm_dtype, mixer=mixer, conv_channels=channels,
        states=states,
    )  # fmt: skip


# --- MLP ----------------------------------------------------------------------------------------------------


def _dense(block: Any, c: _Classes) -> DenseMLP | None:
    linears = [m for _, m in _named(block) if isinstance(m, c.linear)]
    column = [m for m in linears if not isinstance(m, c.row)]
    if not column or not any(isinstance(m, c.row) for m in linears):
        return None
    bias = any(_has_bias(m) for m in linears)
    for m in column:
        sizes = list(m.__dict__.get("output_sizes") or [])
        if isinstance(m, c.merged) and len(sizes) == 2 and sizes[0] == sizes[1]:
            return DenseMLP(intermediate_size=int(sizes[0]), bias=bias)
    widths = sorted({_out_size(m) for m in column})
    if len(column) == 2 and len(widths) == 1:
        return DenseMLP(intermediate_size=widths[0], bias=bias)
    if len(column) == 1:
        return DenseMLP(intermediate_size=_out_size(column[0]), bias=bias, gated=False)
    return None


def _moe(block: Any, hidden: int, c: _Classes) -> MoE:
    experts = next(m for _, m in _named(block) if isinstance(m, c.fused_moe))
    fused_shared = int(experts.__dict__.get("num_fused_shared_experts") or 0)
    routed = int(experts.num_experts) - fused_shared
    width = int(experts.intermediate_size_per_partition)
    inside = {id(m) for _, m in _named(experts)}
    around = [m for _, m in _named(block) if id(m) not in inside]
    shared = fused_shared * width
    for m in around:
        if m is not block and isinstance(m, c.linear) and not isinstance(m, c.row):
            sizes = list(m.__dict__.get("output_sizes") or [])
            if isinstance(m, c.merged) and len(sizes) == 2 and sizes[0] == sizes[1]:
                shared += int(sizes[0])
    router_bias = correction = gate = False
    for m in around:
        for name, p in _params(m, recurse=False):
            shape = tuple(p.shape)
            if shape == (1, hidden):
                gate = True  # a sigmoid gate on the shared expert's output
            elif shape == (routed,) or shape == (int(experts.num_experts),):
                if name == "bias" and isinstance(m, c.linear):
                    router_bias = True
                else:
                    correction = True
    expert_bias = any("bias" in n for n, _ in _params(experts))
    return MoE(
        num_experts=routed, top_k=int(experts.top_k) - fused_shared, intermediate_size=width,
        shared_intermediate_size=shared, shared_expert_gate=gate, expert_bias=expert_bias, router_bias=router_bias,
        correction_bias=correction,
    )  # fmt: skip


# --- weights, as the release sizes its layers ----------------------------------------------------------------


def _linear_params(module: Any) -> int:
    return int(module.__dict__.get("input_size") or 0) * int(module.__dict__.get("output_size") or 0)


def _layer_params(module: Any, mlp_child: Any, c: _Classes, hidden: int) -> LayerParams:
    inside_mlp = {id(m) for _, m in _named(mlp_child)} if mlp_child is not None else set()
    attention = sum(_linear_params(m) for _, m in _named(module) if isinstance(m, c.linear) and id(m) not in inside_mlp)
    if mlp_child is None:
        return LayerParams(attention=attention)
    experts = next((m for _, m in _named(mlp_child) if isinstance(m, c.fused_moe)), None)
    if experts is None:
        return LayerParams(attention=attention,
                           dense_mlp=sum(_linear_params(m) for _, m in _named(mlp_child) if isinstance(m, c.linear)))
    in_experts = {id(m) for _, m in _named(experts)}
    width = int(experts.intermediate_size_per_partition)
    gated = any("w13" in n for n, _ in _params(experts))
    routed = (3 if gated else 2) * width * int(experts.__dict__.get("hidden_size") or hidden)
    router = shared = 0
    for _, m in _named(mlp_child):
        if id(m) in in_experts or not isinstance(m, c.linear):
            continue
        if _out_size(m) == int(experts.num_experts) - int(experts.__dict__.get("num_fused_shared_experts") or 0):
            router += _linear_params(m)
        elif _out_size(m) > 1:
            shared += _linear_params(m)
    for _, m in _named(mlp_child):  # a router that is no linear of the release's (a gate module holding a bare weight)
        w = _weight(m)
        if id(m) not in in_experts and not isinstance(m, c.linear) and w is not None and len(w.shape) == 2:
            router += math.prod(int(d) for d in w.shape)
    shared += int(experts.__dict__.get("num_fused_shared_experts") or 0) * routed
    return LayerParams(attention=attention, shared_experts=shared, routed_expert=routed, router=router)


# --- layers -------------------------------------------------------------------------------------------------


def _decoder_layers(model: Any, count: int, c: _Classes) -> list[Any]:
    lists = [(name, m) for name, m in _named(model) if isinstance(m, c.module_list) and len(m) == count]
    for _, m in sorted(lists, key=lambda item: item[0].count(".")):
        if any(_has(layer, c.radix) or any(_is_conv(x, c) for _, x in _named(layer)) for layer in m):
            return list(m)
    return list(lists[0][1]) if lists else []


def _layer(module: Any, index: int, mc: Any, c: _Classes, recurrent: dict[int, LinearAttention],
           hidden: int, sizes: list[LayerParams] | None = None) -> Layer:  # fmt: skip
    attention: Any = recurrent.get(index)
    mlp: Any = None
    mlp_child = None
    for _, child in module.named_children():
        if _has(child, c.radix) or any(_is_conv(m, c) for _, m in _named(child)):
            continue
        if _has(child, c.fused_moe):
            mlp, mlp_child = _moe(child, hidden, c), child
            break
        dense = _dense(child, c)
        if dense is not None and mlp is None:
            mlp, mlp_child = dense, child
    inside_mlp = {id(m) for _, m in _named(mlp_child)} if mlp_child is not None else set()
    scope = [m for _, m in _named(module) if id(m) not in inside_mlp]
    radix = [m for m in scope if isinstance(m, c.radix) and not m.__dict__.get("is_cross_attention")]
    if radix and attention is None:
        if getattr(getattr(mc, "attention_arch", None), "name", "") == "MLA":
            attention = _mla(module, radix, mc)
        else:
            attention = _gqa(module, scope, radix[0], mc, c)
    if sizes is not None:
        sizes.append(_layer_params(module, mlp_child, c, hidden))
    return Layer(attention=attention, mlp=mlp)


def _read(model: Any, mc: Any, executor: Any, *, layers_count: int | None = None,
          sizes: list[LayerParams] | None = None) -> list[Layer]:  # fmt: skip
    c = _Classes(executor)
    hidden = int(mc.hf_text_config.hidden_size)
    count = int(layers_count if layers_count is not None else mc.num_hidden_layers)
    modules = _decoder_layers(model, count, c)
    if not modules:
        raise DeriveError(f"{type(model).__name__}: the release built no list of {count} decoder layers")
    state_layers, states, kernel = _states(executor, mc)
    recurrent: dict[int, LinearAttention] = {}
    if state_layers and states:
        ssm = getattr(mc.hf_text_config, "mamba_ssm_dtype", None)
        for i in state_layers:
            if 0 <= i < len(modules):
                mixer = next((type(ch).__name__ for _, ch in modules[i].named_children()
                              if any(_is_conv(m, c) for _, m in _named(ch))), "")  # fmt: skip
                recurrent[i] = _linear_attention(states, kernel, mixer, None if ssm is None else str(ssm))
    return [_layer(m, i, mc, c, recurrent, hidden, sizes) for i, m in enumerate(modules)]


def _top_params(model: Any, modules: list[Any]) -> tuple[int, int]:
    """(embedding, LM head) weights: what the model holds outside its decoder layers, by kind of module."""
    inside = {id(m) for layer in modules for _, m in _named(layer)}
    embedding = lm_head = 0
    for name, m in _named(model):
        if id(m) in inside or not m.__dict__.get("org_vocab_size"):
            continue
        w = _weight(m)
        count = math.prod(int(d) for d in w.shape) if w is not None else 0
        if type(m).__name__.endswith("LMHead") or name.endswith("lm_head"):
            lm_head += count
        else:
            embedding = max(embedding, count)  # the language model's (a vision tower's are smaller)
    return embedding, lm_head or embedding  # tied: the head is the embedding


def _draft_layers(model: Any, executor: Any, mc: Any) -> list[Layer]:
    """The decoder layers of a draft (MTP) model: a list of them, or the modules holding attention and an MLP."""
    c = _Classes(executor)
    hidden = int(mc.hf_text_config.hidden_size)
    lists = [m for _, m in _named(model) if isinstance(m, c.module_list) and len(m) and all(_has(x, c.radix) for x in m)]
    if lists:
        modules = list(lists[0])
    else:
        modules = [m for _, m in _named(model)
                   if any(_has(ch, c.radix) for _, ch in m.named_children())
                   and any(_has(ch, c.fused_moe) or _dense(ch, c) for _, ch in m.named_children()
                           if not _has(ch, c.radix))]  # fmt: skip
    return [_layer(m, i, mc, c, {}, hidden) for i, m in enumerate(modules)]


def stated_mtp_layers(config: dict[str, Any]) -> int | None:
    """How many MTP (next-token prediction) layers the vendor's config.json says the checkpoint ships
    (``num_nextn_predict_layers``, ``mtp_num_hidden_layers``, ``num_mtp_modules``...: a count under a name of MTP or
    NextN layers or modules), None when it says nothing. Whether the release can draft with them is its draft class's
    matter (``derive``)."""
    found: list[int] = []
    for part in (config, config.get("text_config") if isinstance(config.get("text_config"), dict) else {}):
        for k, v in part.items():
            name = k.lower()
            if (("mtp" in name or "nextn" in name) and ("layers" in name or "modules" in name)
                    and isinstance(v, int) and not isinstance(v, bool)):  # fmt: skip
                found.append(v)
    return max(found) if found else None


def _dtype_name(value: Any) -> str:
    """The checkpoint's dtype as config.json states it (bf16 where it states none, as the twin's checkpoints are)."""
    return str(value).replace("torch.", "") if value else "bfloat16"


def derive(executor: Any, config: dict[str, Any], *, model_dir: Path | None = None,
           mtp_layers: int | None = None) -> ModelArch:  # fmt: skip
    """The model of ``config`` as the release builds it. ``mtp_layers``: how many MTP layers the checkpoint ships
    (None: as many as the release's draft class builds, when it is another class than the model's)."""
    from ..engine.loading.build import BuildError, build_model

    built = build_model(executor, config, model_dir=model_dir)
    if built.model_class.name.startswith(FALLBACKS):
        archs = list(config.get("architectures") or [])
        raise DeriveError(f"SGLang registers no model class for {archs}: it would serve it through its Transformers "
                          f"fallback ({built.model_class.name}: transformers' own modeling code, run on torch), which "
                          "the twin does not simulate")  # fmt: skip
    mc = built.model_config
    sizes: list[LayerParams] = []
    layers = _read(built.model, mc, executor, sizes=sizes)
    embedding, lm_head = _top_params(built.model, _decoder_layers(built.model, len(layers), _Classes(executor)))
    text = mc.hf_text_config
    mtp = None
    if mtp_layers != 0:
        try:
            draft = build_model(executor, config, draft=True, model_dir=model_dir)
        except BuildError:
            draft = None
        if draft is not None and draft.model_class.name != built.model_class.name:
            drafted = _draft_layers(draft.model, executor, draft.model_config)
            if drafted:
                mtp = MTP(num_layers=mtp_layers or len(drafted), layer=drafted[0], draft_class=draft.model_class.name)
    archs = list(getattr(mc.hf_config, "architectures", None) or config.get("architectures") or [""])
    return ModelArch(
        architecture=str(config.get("architectures", archs)[0]), model_type=str(mc.hf_config.model_type or ""),
        hidden_size=int(text.hidden_size), vocab_size=int(text.vocab_size), layers=tuple(layers),
        max_position_embeddings=int(getattr(text, "max_position_embeddings", 0) or 131072),
        tie_word_embeddings=bool(getattr(text, "tie_word_embeddings", False)), mtp=mtp,
        torch_dtype=_dtype_name(getattr(text, "dtype", None) or getattr(mc.hf_config, "dtype", None)),
        notes=(f"derived from {built.model_class.file}:{built.model_class.name}",), layer_params=tuple(sizes),
        embedding_params=embedding, lm_head_params=lm_head,
    )  # fmt: skip
