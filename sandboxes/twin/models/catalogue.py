"""The checkpoint's module catalogue: every parameter of a DeepSeek-style MLA + DSA + MoE checkpoint.

The twin never holds tensor data. It knows, from the model dimensions, which modules the checkpoint has,
their logical shapes and how each one is stored (quantized or not). The same catalogue describes both sides
of weight loading: the checkpoint as Quark exported it (``materialize``) and the modules the engine builds
(``weights``); only the names and the quantization decisions differ between the two.

Shapes (``(out_features, in_features)`` for linears; ``h`` = hidden size, ``H`` = attention heads):

* attention (MLA): ``q_a_proj (q_lora_rank, h)``, ``q_b_proj (H*(qk_nope+qk_rope), q_lora_rank)`` -- or
  ``q_proj (H*(qk_nope+qk_rope), h)`` when ``q_lora_rank`` is 0 --, ``kv_a_proj_with_mqa
  (kv_lora_rank+qk_rope, h)``, ``kv_b_proj (H*(qk_nope+v_head), kv_lora_rank)``, ``o_proj (h, H*v_head)``,
  and the norms ``q_a_layernorm (q_lora_rank)``, ``kv_a_layernorm (kv_lora_rank)``.
* DSA indexer (when ``sparse_topk > 0``): ``indexer.wq_b (index_heads*index_head_dim, q_lora_rank)``,
  ``indexer.wk (index_head_dim, h)``, ``indexer.weights_proj (index_heads, h)`` -- a plain bf16 linear the
  engine builds without a quantization config --, and ``indexer.k_norm`` (a LayerNorm: weight and bias).
* dense MLP (layers ``< first_k_dense_replace``): ``gate_proj/up_proj (I, h)``, ``down_proj (h, I)`` with
  ``I = dense_intermediate_size`` (falls back to ``moe_intermediate_size * top_k`` when 0).
* MoE layers: ``mlp.experts.{e}.gate_proj/up_proj (i, h)`` and ``down_proj (h, i)`` with ``i`` the MoE
  intermediate size, for every routed expert; ``mlp.shared_experts.*`` the same with ``i * n_shared``; the
  router ``mlp.gate`` (``weight (E, h)`` bf16 plus ``e_score_correction_bias (E,)`` f32; never quantized).
* every layer: ``input_layernorm (h)``, ``post_attention_layernorm (h)``.
* the MTP layer (``mtp.layer_index``, stored under ``mtp.checkpoint_prefix``) is a full MoE decoder layer
  plus ``eh_proj (h, 2h)`` (with a Quark config the draft builds it as a quantizable ``ReplicatedLinear``
  named ``model.eh_proj``, so it is quantized unless the exclude list names it), ``enorm (h)``,
  ``hnorm (h)`` and ``shared_head.norm (h)``; it shares ``embed_tokens`` and ``lm_head`` with the target.
* top level: ``model.embed_tokens (vocab, h)``, ``model.norm (h)``, ``lm_head (vocab, h)`` (a linear; it
  is quantized unless the exclude list names it).

Packing rule for a linear stored in format ``fmt``: ``mxfp4`` -> ``weight`` U8 ``[out, in/2]`` (two e2m1
values per byte) + ``weight_scale`` U8 ``[out, in/32]`` (one e8m0 scale per group of 32); ``fp8`` ->
``weight`` F8_E4M3 ``[out, in]`` + ``weight_scale`` F32 ``[out]`` (Quark per_channel: one scale per output channel); ``bf16`` ->
``weight`` BF16 ``[out, in]``. Norms, embeddings, the router and the plain linears are never quantized.

Parameter order is the natural sort of the full names (``lm_head``, ``model.embed_tokens``,
``model.layers.0 ... N``, ``model.norm``; alphabetical inside a layer, expert numbers numerically), which is
how a sharded safetensors checkpoint is walked when shards follow the layers.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple

from ..scenario import ModelSpec

QUANT_FORMATS = ("mxfp4", "fp8", "bf16")
DTYPE_BYTES = {"BF16": 2, "F16": 2, "F32": 4, "U8": 1, "I8": 1, "F8_E4M3": 1, "I64": 8, "BOOL": 1}
MXFP4_GROUP = 32

# module kinds
LINEAR = "linear"  # quantizable linear: asks the exclude list
PLAIN = "plain_linear"  # a linear the engine always builds in bf16 (no quantization config)
ROUTER = "router"  # MoE router: weight bf16 + e_score_correction_bias f32
NORM = "norm"  # RMSNorm: weight only
LAYERNORM = "layernorm"  # LayerNorm: weight and bias
EMBEDDING = "embedding"

# names of the MTP-only modules (everything else in the MTP layer is an ordinary decoder layer)
MTP_ONLY_MODULES = ("eh_proj", "enorm", "hnorm", "shared_head.norm")


@dataclass(frozen=True)
class ModelDims:
    """The dimensions the catalogue needs; built from a scenario (``from_spec``) or a ``config.json``."""

    architecture: str
    model_type: str
    hidden_size: int
    num_hidden_layers: int
    vocab_size: int
    num_heads: int
    q_lora_rank: int
    kv_lora_rank: int
    qk_nope_head_dim: int
    qk_rope_head_dim: int
    v_head_dim: int
    num_experts: int
    top_k: int
    moe_intermediate_size: int
    num_shared_experts: int = 0
    first_k_dense_replace: int = 0
    dense_intermediate_size: int = 0
    sparse_topk: int = 0
    indexer_heads: int = 0
    indexer_head_dim: int = 0
    mtp_layer_index: int | None = None
    mtp_checkpoint_prefix: str | None = None
    attention_kind: str = "mla"  # mla | gqa
    num_kv_heads: int = 0
    head_dim: int = 0
    qk_norm: bool = False

    @classmethod
    def from_spec(cls, spec: ModelSpec) -> ModelDims:
        a, m = spec.attention, spec.moe
        return cls(
            architecture=spec.architecture,
            model_type=spec.model_type,
            hidden_size=spec.hidden_size,
            num_hidden_layers=spec.num_hidden_layers,
            vocab_size=spec.vocab_size,
            num_heads=a.num_heads,
            q_lora_rank=a.q_lora_rank,
            kv_lora_rank=a.kv_lora_rank,
            qk_nope_head_dim=a.qk_nope_head_dim,
            qk_rope_head_dim=a.qk_rope_head_dim,
            v_head_dim=a.v_head_dim,
            num_experts=m.num_experts,
            top_k=m.top_k,
            moe_intermediate_size=m.intermediate_size,
            num_shared_experts=m.num_shared_experts,
            first_k_dense_replace=spec.first_k_dense_replace,
            dense_intermediate_size=spec.dense_intermediate_size,
            sparse_topk=a.sparse_topk,
            indexer_heads=a.indexer_heads,
            indexer_head_dim=a.indexer_head_dim,
            mtp_layer_index=spec.mtp.layer_index if spec.mtp else None,
            mtp_checkpoint_prefix=spec.mtp.checkpoint_prefix if spec.mtp else None,
            attention_kind=a.kind,
            num_kv_heads=a.num_kv_heads,
            head_dim=a.head_dim,
            qk_norm=a.qk_norm,
        )

    @classmethod
    def from_config(cls, cfg: Mapping[str, Any]) -> ModelDims:
        """Dims from an HF-style ``config.json`` dict (DeepSeek-V3 / GLM-MoE-DSA key names).

        The MTP layer follows the DeepSeek convention: with ``num_nextn_predict_layers >= 1`` it is stored
        as layer ``num_hidden_layers`` under ``model.layers.<num_hidden_layers>``, where SGLang's NextN loader
        reads it (scenarios may not place it elsewhere).
        """

        def need(key: str) -> Any:
            if key not in cfg:
                raise KeyError(f"config.json has no {key!r}")
            return cfg[key]

        n_layers = int(need("num_hidden_layers"))
        mtp_index: int | None = None
        mtp_prefix: str | None = None
        if int(cfg.get("num_nextn_predict_layers") or 0) > 0:
            mtp_index = n_layers
            mtp_prefix = f"model.layers.{n_layers}"
        archs = cfg.get("architectures") or [""]
        if cfg.get("kv_lora_rank") is None:  # no latent attention: grouped-query attention
            heads = int(need("num_attention_heads"))
            return cls(
                architecture=str(archs[0]), model_type=str(cfg.get("model_type", "")),
                hidden_size=int(need("hidden_size")), num_hidden_layers=n_layers, vocab_size=int(need("vocab_size")),
                num_heads=heads, q_lora_rank=0, kv_lora_rank=0, qk_nope_head_dim=0, qk_rope_head_dim=0, v_head_dim=0,
                num_experts=int(cfg.get("n_routed_experts") or cfg.get("num_experts") or 0),
                top_k=int(need("num_experts_per_tok")), moe_intermediate_size=int(need("moe_intermediate_size")),
                num_shared_experts=int(cfg.get("n_shared_experts") or 0),
                first_k_dense_replace=int(cfg.get("first_k_dense_replace") or 0),
                dense_intermediate_size=int(cfg.get("intermediate_size") or 0),
                mtp_layer_index=mtp_index, mtp_checkpoint_prefix=mtp_prefix, attention_kind="gqa",
                num_kv_heads=int(cfg.get("num_key_value_heads") or heads),
                head_dim=int(cfg.get("head_dim") or int(need("hidden_size")) // heads),
                qk_norm=bool(cfg.get("use_qk_norm", False)),
            )  # fmt: skip
        return cls(
            architecture=str(archs[0]),
            model_type=str(cfg.get("model_type", "")),
            hidden_size=int(need("hidden_size")),
            num_hidden_layers=n_layers,
            vocab_size=int(need("vocab_size")),
            num_heads=int(need("num_attention_heads")),
            q_lora_rank=int(cfg.get("q_lora_rank") or 0),
            kv_lora_rank=int(need("kv_lora_rank")),
            qk_nope_head_dim=int(need("qk_nope_head_dim")),
            qk_rope_head_dim=int(need("qk_rope_head_dim")),
            v_head_dim=int(need("v_head_dim")),
            num_experts=int(need("n_routed_experts")),
            top_k=int(need("num_experts_per_tok")),
            moe_intermediate_size=int(need("moe_intermediate_size")),
            num_shared_experts=int(cfg.get("n_shared_experts") or 0),
            first_k_dense_replace=int(cfg.get("first_k_dense_replace") or 0),
            dense_intermediate_size=int(cfg.get("intermediate_size") or 0),
            sparse_topk=int(cfg.get("index_topk") or 0),
            indexer_heads=int(cfg.get("index_n_heads") or 0),
            indexer_head_dim=int(cfg.get("index_head_dim") or 0),
            mtp_layer_index=mtp_index,
            mtp_checkpoint_prefix=mtp_prefix,
        )

    @property
    def dense_inter(self) -> int:
        return self.dense_intermediate_size or self.moe_intermediate_size * max(1, self.top_k)

    def is_moe_layer(self, layer_index: int) -> bool:
        return layer_index >= self.first_k_dense_replace and self.num_experts > 0


class Entry(NamedTuple):
    """One module of a layer, relative to the layer prefix."""

    local: str
    kind: str
    shape: tuple[int, ...]
    category: str
    expert: bool  # a routed-expert linear (part of the layer's FusedMoE module)
    mtp_only: bool  # eh_proj / enorm / hnorm / shared_head.norm


class Module(NamedTuple):
    name: str  # full module name, e.g. "model.layers.3.mlp.experts.17.gate_proj"
    local: str  # name inside its layer ("" for top-level modules)
    kind: str
    shape: tuple[int, ...]
    category: str
    layer: int | None
    fused_moe: str | None  # "<layer prefix>.mlp.experts" for routed-expert linears, else None
    mtp_only: bool = False


_NUM = re.compile(r"(\d+)")


def natural_key(name: str) -> tuple[Any, ...]:
    """Sort key that orders embedded integers numerically (``experts.2`` before ``experts.10``)."""
    return tuple(int(p) if p.isdigit() else p for p in _NUM.split(name))


def layer_entries(dims: ModelDims, layer_index: int, *, mtp: bool = False) -> list[Entry]:
    """The modules of decoder layer ``layer_index`` (plus the MTP-only modules when ``mtp``), sorted."""
    h, H = dims.hidden_size, dims.num_heads
    qk_head = dims.qk_nope_head_dim + dims.qk_rope_head_dim
    out: list[Entry] = []

    def add(local: str, kind: str, shape: tuple[int, ...], category: str, *, expert: bool = False,
            mtp_only: bool = False) -> None:
        out.append(Entry(local, kind, shape, category, expert, mtp_only))

    add("input_layernorm", NORM, (h,), "norm")
    add("post_attention_layernorm", NORM, (h,), "norm")
    if dims.attention_kind == "gqa":
        hd, kv = dims.head_dim, dims.num_kv_heads
        add("self_attn.q_proj", LINEAR, (H * hd, h), "attention")
        add("self_attn.k_proj", LINEAR, (kv * hd, h), "attention")
        add("self_attn.v_proj", LINEAR, (kv * hd, h), "attention")
        add("self_attn.o_proj", LINEAR, (h, H * hd), "attention")
        if dims.qk_norm:
            add("self_attn.q_norm", NORM, (hd,), "norm")
            add("self_attn.k_norm", NORM, (hd,), "norm")
    elif dims.q_lora_rank > 0:
        add("self_attn.q_a_proj", LINEAR, (dims.q_lora_rank, h), "attention")
        add("self_attn.q_a_layernorm", NORM, (dims.q_lora_rank,), "norm")
        add("self_attn.q_b_proj", LINEAR, (H * qk_head, dims.q_lora_rank), "attention")
    else:
        add("self_attn.q_proj", LINEAR, (H * qk_head, h), "attention")
    if dims.attention_kind == "mla":
        add("self_attn.kv_a_proj_with_mqa", LINEAR, (dims.kv_lora_rank + dims.qk_rope_head_dim, h), "attention")
        add("self_attn.kv_a_layernorm", NORM, (dims.kv_lora_rank,), "norm")
        add("self_attn.kv_b_proj", LINEAR, (H * (dims.qk_nope_head_dim + dims.v_head_dim), dims.kv_lora_rank),
            "attention")
        add("self_attn.o_proj", LINEAR, (h, H * dims.v_head_dim), "attention")
    if dims.sparse_topk > 0:
        q_in = dims.q_lora_rank or h
        add("self_attn.indexer.wq_b", LINEAR, (dims.indexer_heads * dims.indexer_head_dim, q_in), "indexer")
        add("self_attn.indexer.wk", LINEAR, (dims.indexer_head_dim, h), "indexer")
        add("self_attn.indexer.weights_proj", PLAIN, (dims.indexer_heads, h), "indexer")
        add("self_attn.indexer.k_norm", LAYERNORM, (dims.indexer_head_dim,), "indexer")
    if dims.is_moe_layer(layer_index):
        i = dims.moe_intermediate_size
        add("mlp.gate", ROUTER, (dims.num_experts, h), "router")
        for e in range(dims.num_experts):
            add(f"mlp.experts.{e}.gate_proj", LINEAR, (i, h), "routed_experts", expert=True)
            add(f"mlp.experts.{e}.up_proj", LINEAR, (i, h), "routed_experts", expert=True)
            add(f"mlp.experts.{e}.down_proj", LINEAR, (h, i), "routed_experts", expert=True)
        if dims.num_shared_experts > 0:
            s = i * dims.num_shared_experts
            add("mlp.shared_experts.gate_proj", LINEAR, (s, h), "shared_experts")
            add("mlp.shared_experts.up_proj", LINEAR, (s, h), "shared_experts")
            add("mlp.shared_experts.down_proj", LINEAR, (h, s), "shared_experts")
    else:
        d = dims.dense_inter
        add("mlp.gate_proj", LINEAR, (d, h), "dense_mlp")
        add("mlp.up_proj", LINEAR, (d, h), "dense_mlp")
        add("mlp.down_proj", LINEAR, (h, d), "dense_mlp")
    if mtp:
        add("eh_proj", LINEAR, (h, 2 * h), "mtp", mtp_only=True)
        add("enorm", NORM, (h,), "mtp", mtp_only=True)
        add("hnorm", NORM, (h,), "mtp", mtp_only=True)
        add("shared_head.norm", NORM, (h,), "mtp", mtp_only=True)
    out.sort(key=lambda en: natural_key(en.local))
    return out


def layer_modules(dims: ModelDims, layer_index: int, prefix: str, *, mtp: bool = False,
                  mtp_only_prefix: str | None = None,
                  entries: list[Entry] | None = None) -> list[Module]:
    """Modules of one layer named under ``prefix``; MTP-only modules go under ``mtp_only_prefix``.

    In the checkpoint both prefixes are the layer's (``model.layers.78``); in the engine's draft model the
    decoder layer lives under its registration prefix (e.g. ``model.decoder``) and the MTP-only modules
    under the draft model's top level (``model``).
    """
    if entries is None:
        entries = layer_entries(dims, layer_index, mtp=mtp)
    top = mtp_only_prefix if mtp_only_prefix is not None else prefix
    moe = f"{prefix}.mlp.experts"
    return [
        Module(f"{top if en.mtp_only else prefix}.{en.local}", en.local, en.kind, en.shape, en.category,
               layer_index, moe if en.expert else None, en.mtp_only)
        for en in entries
    ]


def checkpoint_modules(dims: ModelDims, *, include_mtp: bool = True) -> Iterator[Module]:
    """Every module of the checkpoint, in checkpoint (natural-sort) order."""
    h = dims.hidden_size
    yield Module("lm_head", "", LINEAR, (dims.vocab_size, h), "lm_head", None, None)
    yield Module("model.embed_tokens", "", EMBEDDING, (dims.vocab_size, h), "embedding", None, None)
    layers: list[tuple[int, str, bool]] = [(i, f"model.layers.{i}", False) for i in range(dims.num_hidden_layers)]
    if include_mtp and dims.mtp_layer_index is not None:
        layers.append((dims.mtp_layer_index, dims.mtp_checkpoint_prefix or f"model.layers.{dims.mtp_layer_index}",
                       True))
    cache: dict[tuple[bool, bool], list[Entry]] = {}
    for index, prefix, is_mtp in layers:
        key = (dims.is_moe_layer(index), is_mtp)
        if key not in cache:
            cache[key] = layer_entries(dims, index, mtp=is_mtp)
        yield from layer_modules(dims, index, prefix, mtp=is_mtp, entries=cache[key])
    yield Module("model.norm", "", NORM, (h,), "norm", None, None)


def quantizable(module: Module) -> bool:
    return module.kind == LINEAR


def param_specs(module: Module, fmt: str) -> list[tuple[str, str, tuple[int, ...]]]:
    """``[(suffix, dtype, shape)]`` of ``module`` stored in format ``fmt`` (ignored for non-linears)."""
    kind = module.kind
    if kind == LINEAR:
        out_f, in_f = module.shape
        if fmt == "mxfp4":
            return [
                ("weight", "U8", (out_f, (in_f + 1) // 2)),
                ("weight_scale", "U8", (out_f, -(-in_f // MXFP4_GROUP))),
            ]
        if fmt == "fp8":
            return [("weight", "F8_E4M3", (out_f, in_f)), ("weight_scale", "F32", (out_f,))]  # Quark per_channel
        if fmt == "bf16":
            return [("weight", "BF16", module.shape)]
        raise ValueError(f"unknown weight format {fmt!r} (expected one of {QUANT_FORMATS})")
    if kind in (PLAIN, NORM, EMBEDDING):
        return [("weight", "BF16", module.shape)]
    if kind == LAYERNORM:
        return [("bias", "BF16", module.shape), ("weight", "BF16", module.shape)]
    if kind == ROUTER:
        return [("e_score_correction_bias", "F32", (module.shape[0],)), ("weight", "BF16", module.shape)]
    raise ValueError(f"unknown module kind {kind!r}")


def tensor_bytes(dtype: str, shape: tuple[int, ...] | list[int]) -> int:
    n = DTYPE_BYTES[dtype]
    for d in shape:
        n *= d
    return n


# =============================================================================================================
# The checkpoint of a model given by its real config.json, in any architecture the twin reads (``ModelArch``)
# =============================================================================================================
#
# ``config_checkpoint(arch, config, naming, quant)`` lists every tensor the vendor's checkpoint holds: its name
# in the vendor's own style (``naming``: the scenario's ``model.checkpoint`` section, for what config.json does
# not say), its dtype and its shape, stored as the published quantization_config says (``quant``: a
# ``models.quantization.Scheme``). Module kinds decide what a quantization may touch: a ``LINEAR`` is quantized
# unless the vendor's list (or ``naming.unquantized``) names it; norms, embeddings, routers, gates, a DSA
# indexer's ``weights_proj`` and the Gated DeltaNet's small tensors never are.

GATE = "gate_param"  # a tensor stored as is (router weights, shared_expert_gate, A_log...): name ends in its param
FUSED_EXPERTS = "fused_experts"  # one tensor for every expert of a layer: [E, out, in]


class CheckpointQuestion(ValueError):
    """The checkpoint's naming is not in config.json and nobody answered ``fact`` (one line)."""

    def __init__(self, fact: str, what: str) -> None:
        super().__init__(f"config.json does not say {what}: set model.checkpoint.{fact} in the scenario (or give "
                         "the checkpoint's model.safetensors.index.json to `python -m sandboxes.twin scenario`)")
        self.fact = fact


CHECKPOINT_FACTS: dict[str, str] = {
    "moe_block": "under which module the routed experts are stored (mlp | block_sparse_moe)",
    "experts": "whether each routed expert is its own tensors (per_expert) or one tensor per layer holds them (fused)",
    "expert_names": "the routed experts' projection names (gate_up_down | w1_w3_w2)",
    "router": "the router's module name (gate | router)",
    "shared_expert": "the shared expert's module name (shared_experts | shared_expert)",
    "linear_attention": "the Gated DeltaNet input projections' names (qkvz_ba | qkv_z_b_a)",
    "o_proj_bias": "whether o_proj carries a bias like q/k/v_proj (attention_bias)",
    "mtp": "where the MTP head is stored (layer: model.layers.<N> | mtp: Qwen's mtp.* | none)",
    "mtp_embeddings": "whether the MTP layer stores its own embed_tokens and shared_head.head",
    "vision": "how the vision tower is stored (qwen3_vl | none)",
}


def _ask(fact: str) -> CheckpointQuestion:
    return CheckpointQuestion(fact, CHECKPOINT_FACTS[fact])


def _dtype_name(torch_dtype: str) -> str:
    return {"bfloat16": "BF16", "float16": "F16", "float32": "F32"}.get(str(torch_dtype), "BF16")


@dataclass(frozen=True)
class Tensor:
    """One module of the checkpoint: ``name`` (without ``.weight``), its kind, logical shape, what it is for."""

    name: str
    kind: str
    shape: tuple[int, ...]
    category: str
    params: tuple[tuple[Any, ...], ...] = ()  # GATE kind: (suffix, dtype[, shape]) stored as is; "" suffix: bare name
    bias: bool = False  # a LINEAR/LAYERNORM-free bias (linears with bias=True store <name>.bias)


class _Builder:
    def __init__(self, arch: Any, config: Mapping[str, Any], naming: Any) -> None:
        self.arch, self.naming = arch, naming
        self.c = config.get("text_config") if isinstance(config.get("text_config"), Mapping) else config
        self.top = config
        self.norm_dtype = naming.dtypes.get("norm") or _dtype_name(self.c.get("torch_dtype") or self.c.get("dtype")
                                                                     or config.get("torch_dtype") or "bfloat16")  # fmt: skip
        self.out: list[Tensor] = []

    def need(self, fact: str) -> Any:
        value = getattr(self.naming, fact)
        if value in ("", None):
            raise _ask(fact)
        return value

    def add(self, name: str, kind: str, shape: tuple[int, ...], category: str, **kw: Any) -> None:
        self.out.append(Tensor(name, kind, tuple(int(d) for d in shape), category, **kw))

    def norm(self, name: str, size: int, category: str = "norm", dtype: str | None = None) -> None:
        self.add(name, GATE, (size,), category, params=(("weight", dtype or self.norm_dtype),))

    # --- attention ---------------------------------------------------------------------------------------

    def attention(self, p: str, a: Any) -> None:
        from .arch import GQA, MLA, LinearAttention

        h = self.arch.hidden_size
        if isinstance(a, MLA):
            qk = a.qk_nope_head_dim + a.qk_rope_head_dim
            if a.q_lora_rank:
                self.add(f"{p}.self_attn.q_a_proj", LINEAR, (a.q_lora_rank, h), "attention")
                self.norm(f"{p}.self_attn.q_a_layernorm", a.q_lora_rank)
                self.add(f"{p}.self_attn.q_b_proj", LINEAR, (a.num_heads * qk, a.q_lora_rank), "attention")
            else:
                self.add(f"{p}.self_attn.q_proj", LINEAR, (a.num_heads * qk, h), "attention")
            self.add(f"{p}.self_attn.kv_a_proj_with_mqa", LINEAR, (a.kv_lora_rank + a.qk_rope_head_dim, h), "attention")
            self.norm(f"{p}.self_attn.kv_a_layernorm", a.kv_lora_rank)
            self.add(f"{p}.self_attn.kv_b_proj", LINEAR,
                     (a.num_heads * (a.qk_nope_head_dim + a.v_head_dim), a.kv_lora_rank), "attention")  # fmt: skip
            self.add(f"{p}.self_attn.o_proj", LINEAR, (h, a.num_heads * a.v_head_dim), "attention")
            if a.sparse:
                q_in = a.q_lora_rank or h
                self.add(f"{p}.self_attn.indexer.wq_b", LINEAR, (a.index_heads * a.index_head_dim, q_in), "indexer")
                self.add(f"{p}.self_attn.indexer.wk", LINEAR, (a.index_head_dim, h), "indexer")
                self.add(f"{p}.self_attn.indexer.weights_proj", PLAIN, (a.index_heads, h), "indexer")
                dt = self.norm_dtype
                self.add(f"{p}.self_attn.indexer.k_norm", GATE, (a.index_head_dim,), "indexer",
                         params=(("bias", dt), ("weight", dt)))  # fmt: skip
        elif isinstance(a, GQA):
            hd, H, kv = a.head_dim, a.num_heads, a.num_kv_heads
            q_rows = H * hd * (2 if a.output_gate else 1)
            o_bias = bool(self.need("o_proj_bias")) if a.qkv_bias else False
            self.add(f"{p}.self_attn.q_proj", LINEAR, (q_rows, h), "attention", bias=a.qkv_bias)
            self.add(f"{p}.self_attn.k_proj", LINEAR, (kv * hd, h), "attention", bias=a.qkv_bias)
            self.add(f"{p}.self_attn.v_proj", LINEAR, (kv * hd, h), "attention", bias=a.qkv_bias)
            self.add(f"{p}.self_attn.o_proj", LINEAR, (h, H * hd), "attention", bias=o_bias)
            if a.qk_norm:
                per_layer = str(self.c.get("qk_norm_type", "")).lower() == "per_layer"  # MiniMax: over all heads
                self.norm(f"{p}.self_attn.q_norm", H * hd if per_layer else hd)
                self.norm(f"{p}.self_attn.k_norm", kv * hd if per_layer else hd)
            if a.sinks:
                self.add(f"{p}.self_attn.sinks", GATE, (H,), "attention", params=(("", self.norm_dtype),))
        elif isinstance(a, LinearAttention):
            la = f"{p}.linear_attn"
            style = self.need("linear_attention")
            nv = a.num_value_heads
            if style == "qkvz_ba":
                self.add(f"{la}.in_proj_qkvz", LINEAR, (2 * a.key_dim + 2 * a.value_dim, h), "attention")
                self.add(f"{la}.in_proj_ba", LINEAR, (2 * nv, h), "attention")
            elif style == "qkv_z_b_a":
                self.add(f"{la}.in_proj_qkv", LINEAR, (2 * a.key_dim + a.value_dim, h), "attention")
                self.add(f"{la}.in_proj_z", LINEAR, (a.value_dim, h), "attention")
                self.add(f"{la}.in_proj_b", LINEAR, (nv, h), "attention")
                self.add(f"{la}.in_proj_a", LINEAR, (nv, h), "attention")
            else:
                raise ValueError(f"model.checkpoint.linear_attention: unknown style {style!r} (qkvz_ba | qkv_z_b_a)")
            self.add(f"{la}.conv1d", GATE, (a.conv_dim, 1, a.conv_kernel), "attention",
                     params=(("weight", self.norm_dtype),))  # fmt: skip
            state = self.naming.dtypes.get("linear_state", self.norm_dtype)
            self.add(f"{la}.A_log", GATE, (nv,), "attention", params=(("", state),))
            self.add(f"{la}.dt_bias", GATE, (nv,), "attention", params=(("", state),))
            self.norm(f"{la}.norm", a.value_head_dim, dtype=self.naming.dtypes.get("linear_norm"))
            self.add(f"{la}.out_proj", LINEAR, (h, a.value_dim), "attention")
        if self.naming.rotary_inv_freq and not isinstance(a, LinearAttention):
            rope = a.qk_rope_head_dim if isinstance(a, MLA) else a.head_dim
            self.add(f"{p}.self_attn.rotary_emb", GATE, (rope // 2,), "attention", params=(("inv_freq", self.norm_dtype),))

    # --- MLP ---------------------------------------------------------------------------------------------

    def mlp(self, p: str, m: Any, *, experts_style: str | None = None) -> None:
        from .arch import DenseMLP

        h = self.arch.hidden_size
        if isinstance(m, DenseMLP):
            i = m.intermediate_size
            self.add(f"{p}.mlp.gate_proj", LINEAR, (i, h), "dense_mlp", bias=m.bias)
            self.add(f"{p}.mlp.up_proj", LINEAR, (i, h), "dense_mlp", bias=m.bias)
            self.add(f"{p}.mlp.down_proj", LINEAR, (h, i), "dense_mlp", bias=m.bias)
            return
        block = f"{p}.{self.need('moe_block')}"
        router = self.need("router")
        E, i = m.num_experts, m.intermediate_size
        router_dtype = self.naming.dtypes.get("router", self.norm_dtype)
        self.add(f"{block}.{router}", GATE, (E, h), "router", params=(("weight", router_dtype),))
        if m.router_bias:
            self.add(f"{block}.{router}", GATE, (E,), "router", params=(("bias", router_dtype),))
        if m.correction_bias:  # DeepSeek's e_score_correction_bias: beside the router (mlp.gate.) or in the block
            where = f"{block}.{router}.e_score_correction_bias" if self.naming.moe_block == "mlp" else \
                f"{block}.e_score_correction_bias"  # fmt: skip
            self.add(where, GATE, (E,), "router", params=(("", "F32"),))
        style = experts_style or self.need("experts")
        if style == "per_expert":
            gate, up, down = {"gate_up_down": ("gate_proj", "up_proj", "down_proj"),
                              "w1_w3_w2": ("w1", "w3", "w2")}[self.need("expert_names")]  # fmt: skip
            for e in range(E):
                self.add(f"{block}.experts.{e}.{gate}", LINEAR, (i, h), "routed_experts", bias=m.expert_bias)
                self.add(f"{block}.experts.{e}.{up}", LINEAR, (i, h), "routed_experts", bias=m.expert_bias)
                self.add(f"{block}.experts.{e}.{down}", LINEAR, (h, i), "routed_experts", bias=m.expert_bias)
        elif style == "fused":
            self.add(f"{block}.experts.gate_up_proj", FUSED_EXPERTS, (E, 2 * i, h), "routed_experts", bias=m.expert_bias)
            self.add(f"{block}.experts.down_proj", FUSED_EXPERTS, (E, h, i), "routed_experts", bias=m.expert_bias)
        else:
            raise ValueError(f"model.checkpoint.experts: unknown style {style!r} (per_expert | fused)")
        if m.has_shared:
            s = m.shared_intermediate_size
            name = self.need("shared_expert")
            for proj, shape in (("gate_proj", (s, h)), ("up_proj", (s, h)), ("down_proj", (h, s))):
                self.add(f"{block}.{name}.{proj}", LINEAR, shape, "shared_experts")
            if m.shared_expert_gate:
                self.add(f"{block}.shared_expert_gate", GATE, (1, h), "shared_experts",
                         params=(("weight", self.norm_dtype),))  # fmt: skip

    def layer(self, p: str, layer: Any, *, experts_style: str | None = None) -> None:
        self.norm(f"{p}.input_layernorm", self.arch.hidden_size)
        self.norm(f"{p}.post_attention_layernorm", self.arch.hidden_size)
        self.attention(p, layer.attention)
        self.mlp(p, layer.mlp, experts_style=experts_style)

    # --- the whole checkpoint ----------------------------------------------------------------------------

    def vision(self) -> None:
        style = self.naming.vision or ("none" if not isinstance(self.top.get("vision_config"), Mapping) else "")
        if style == "none":
            return
        if style != "qwen3_vl":
            raise _ask("vision") if not style else ValueError(f"model.checkpoint.vision: unknown style {style!r}")
        v = self.top["vision_config"]
        h, inter, depth = int(v["hidden_size"]), int(v["intermediate_size"]), int(v["depth"])
        ps, tps, ch = int(v.get("patch_size", 16)), int(v.get("temporal_patch_size", 2)), int(v.get("in_channels", 3))
        merge = int(v.get("spatial_merge_size", 2)) ** 2 * h
        out = int(v.get("out_hidden_size", self.arch.hidden_size))
        vd = self.naming.dtypes.get("vision", "BF16")

        def lin(name: str, shape: tuple[int, ...]) -> None:
            self.add(name, GATE, shape, "vision", params=(("bias", vd, (shape[0],)), ("weight", vd)))

        lin("model.visual.patch_embed.proj", (h, ch, tps, ps, ps))
        if v.get("num_position_embeddings"):
            self.add("model.visual.pos_embed", GATE, (int(v["num_position_embeddings"]), h), "vision",
                     params=(("weight", vd),))  # fmt: skip
        for b in range(depth):
            q = f"model.visual.blocks.{b}"
            self.add(f"{q}.norm1", GATE, (h,), "vision", params=(("bias", vd), ("weight", vd)))
            self.add(f"{q}.norm2", GATE, (h,), "vision", params=(("bias", vd), ("weight", vd)))
            lin(f"{q}.attn.qkv", (3 * h, h))
            lin(f"{q}.attn.proj", (h, h))
            lin(f"{q}.mlp.linear_fc1", (inter, h))
            lin(f"{q}.mlp.linear_fc2", (h, inter))
        self.add("model.visual.merger.norm", GATE, (h,), "vision", params=(("bias", vd), ("weight", vd)))
        lin("model.visual.merger.linear_fc1", (merge, merge))
        lin("model.visual.merger.linear_fc2", (out, merge))

    def build(self, *, include_mtp: bool = True) -> list[Tensor]:
        arch, n = self.arch, self.naming
        h, V = arch.hidden_size, arch.vocab_size
        pre = n.prefix or "model"
        self.add("lm_head", LINEAR, (V, h), "lm_head")
        self.add(f"{pre}.embed_tokens", EMBEDDING, (V, h), "embedding")
        for i, layer in enumerate(arch.layers):
            self.layer(f"{pre}.layers.{i}", layer)
        self.norm(f"{pre}.norm", h)
        if arch.mtp is not None and include_mtp:
            style = self.need("mtp")
            experts = n.mtp_experts or None
            if style == "layer":
                for k in range(arch.mtp.num_layers):
                    index = (n.mtp_layer if n.mtp_layer >= 0 else arch.num_hidden_layers) + k
                    p = f"model.layers.{index}"
                    self.layer(p, arch.mtp.layer, experts_style=experts)
                    self.add(f"{p}.eh_proj", LINEAR, (h, 2 * h), "mtp")
                    self.norm(f"{p}.enorm", h, "mtp")
                    self.norm(f"{p}.hnorm", h, "mtp")
                    self.norm(f"{p}.shared_head.norm", h, "mtp")
                    if self.need("mtp_embeddings"):
                        self.add(f"{p}.embed_tokens", EMBEDDING, (V, h), "mtp")
                        self.add(f"{p}.shared_head.head", LINEAR, (V, h), "mtp")
            elif style == "mtp":
                self.add("mtp.fc", LINEAR, (h, 2 * h), "mtp")
                self.norm("mtp.pre_fc_norm_embedding", h, "mtp")
                self.norm("mtp.pre_fc_norm_hidden", h, "mtp")
                self.norm("mtp.norm", h, "mtp")
                for k in range(arch.mtp.num_layers):
                    self.layer(f"mtp.layers.{k}", arch.mtp.layer, experts_style=experts)
            elif style != "none":
                raise ValueError(f"model.checkpoint.mtp: unknown style {style!r} (layer | mtp | none)")
        self.vision()
        return self.out


def config_modules(arch: Any, config: Mapping[str, Any], naming: Any, *, include_mtp: bool = True) -> list[Tensor]:
    """Every module of the checkpoint of ``arch`` (read from ``config``), named as ``naming`` says.

    Raises ``CheckpointQuestion`` for a naming fact the model needs and ``naming`` leaves open."""
    return _Builder(arch, config, naming).build(include_mtp=include_mtp)


def config_checkpoint(arch: Any, config: Mapping[str, Any], naming: Any, scheme: Any,
                      *, include_mtp: bool = True) -> dict[str, dict[str, Any]]:  # fmt: skip
    """``{tensor name: {"dtype", "shape"}}``: the whole checkpoint as the vendor stored it, in natural order."""
    from .quantization import Matcher

    modules = config_modules(arch, config, naming, include_mtp=include_mtp)
    extra = Matcher(list(naming.unquantized), "quark") if naming.unquantized else None
    out: dict[str, dict[str, Any]] = {}
    for t in modules:
        if t.kind == GATE:
            for suffix, dtype, *shape in t.params:
                out[f"{t.name}.{suffix}" if suffix else t.name] = {"dtype": dtype, "shape": list(shape[0] if shape
                                                                                                  else t.shape)}
            continue
        if t.kind in (EMBEDDING, PLAIN):
            out[f"{t.name}.weight"] = {"dtype": "BF16", "shape": list(t.shape)}
            continue
        quantized = t.kind in (LINEAR, FUSED_EXPERTS) and scheme.quantizes(t.name, t.category) and not (
            extra is not None and extra(t.name))
        for suffix, dtype, shape in scheme.tensors(t, quantized):
            out[t.name + suffix] = {"dtype": dtype, "shape": list(shape)}
        if t.bias:
            rows = t.shape[:-1]
            name = f"{t.name}_bias" if t.kind == FUSED_EXPERTS else f"{t.name}.bias"
            out[name] = {"dtype": "BF16", "shape": list(rows)}
    return dict(sorted(out.items(), key=lambda kv: natural_key(kv[0])))
