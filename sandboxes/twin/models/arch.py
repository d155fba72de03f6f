"""What a model is made of: its layers one by one (attention kind, MLP kind), its MTP head and its dimensions.

A ``ModelArch`` is derived from the module tree the pinned release builds of the model's ``config.json``
(``models.derive``); every part of the twin that depends on the model's shape (the KV and state pools, the cost of
a step) reads it from here, so a new family needs no twin code, and a new kernel kind is a new attention or MLP
kind in this module, not a change in every consumer.

Attention kinds:

* ``MLA``: DeepSeek's multi-head latent attention; with ``index_topk`` > 0 it is DSA sparse attention (an
  indexer picks the keys each query attends to: DeepSeek-V3.2, GLM-5).
* ``GQA``: grouped-query attention over ``num_kv_heads`` KV heads, with the variants real models use: a sliding
  window (``sliding_window`` > 0), attention sinks (one learned logit per head: GPT-OSS), per-head q/k norms
  (Qwen3), a sigmoid output gate (Qwen3-Next's gated attention), biases.
* ``LinearAttention``: a Gated DeltaNet layer (Qwen3-Next, Qwen3.5): no KV cache, a recurrent state per request
  (a convolution state and an SSM state) that SGLang keeps in its mamba pool.

Standard library only (the twin runs in a minimal image).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import ClassVar


@dataclass(frozen=True)
class MLA:
    """Multi-head latent attention (DeepSeek-V2/V3); DSA sparse attention when ``index_topk`` > 0."""

    kind: ClassVar[str] = "mla"
    num_heads: int
    kv_lora_rank: int
    qk_nope_head_dim: int
    qk_rope_head_dim: int
    v_head_dim: int
    q_lora_rank: int = 0  # 0: q_proj straight from the hidden state
    index_topk: int = 0  # DSA: keys each query attends to (0: dense)
    index_heads: int = 0
    index_head_dim: int = 0

    @property
    def sparse(self) -> bool:
        return self.index_topk > 0

    @property
    def qk_head_dim(self) -> int:
        return self.qk_nope_head_dim + self.qk_rope_head_dim

    @property
    def name(self) -> str:
        return "mla+dsa" if self.sparse else "mla"


@dataclass(frozen=True)
class GQA:
    """Grouped-query attention, full or over a sliding window, with or without sinks."""

    kind: ClassVar[str] = "gqa"
    num_heads: int
    num_kv_heads: int
    head_dim: int
    sliding_window: int = 0  # 0: every earlier token; else the last this many
    chunk_size: int = 0  # chunked local attention: only the tokens of the query's own chunk
    v_head_dim: int = 0  # the value heads' size where it is not head_dim (0: head_dim)
    sinks: bool = False  # a learned per-head logit added to the softmax (GPT-OSS)
    qk_norm: bool = False  # per-head RMSNorm of q and k (Qwen3)
    output_gate: bool = False  # q_proj also yields a per-head sigmoid gate on the output (Qwen3-Next)
    qkv_bias: bool = False
    o_bias: bool = False

    @property
    def value_dim(self) -> int:
        return self.v_head_dim or self.head_dim

    @property
    def name(self) -> str:
        parts = (["gqa"] + (["swa"] if self.sliding_window else []) + (["chunked"] if self.chunk_size else [])
                 + (["sinks"] if self.sinks else []))  # fmt: skip
        return "+".join(parts)


@dataclass(frozen=True)
class LinearAttention:
    """Gated DeltaNet linear attention: a causal convolution and a recurrent state instead of a KV cache."""

    kind: ClassVar[str] = "linear"
    num_key_heads: int
    num_value_heads: int
    key_head_dim: int
    value_head_dim: int
    conv_kernel: int
    ssm_dtype: str | None = None  # config.json's mamba_ssm_dtype: the recurrent state's dtype (None: not said)
    mixer: str = ""  # the release's class of the layer's mixer (its name, as the release spells it)
    conv_channels: int = 0  # the convolution's channels where the release says (0: q, k and v side by side)
    # the state the release allocates per request and layer, at each attention TP size it divides over:
    # (attention TP, convolution elements, temporal (SSM) state shape), from its mamba2_cache_params
    states: tuple[tuple[int, int, tuple[int, ...]], ...] = ()

    @property
    def key_dim(self) -> int:
        return self.num_key_heads * self.key_head_dim

    @property
    def value_dim(self) -> int:
        return self.num_value_heads * self.value_head_dim

    @property
    def conv_dim(self) -> int:
        """Channels of the causal convolution: q, k and v side by side (or as the release's state says)."""
        return self.conv_channels or 2 * self.key_dim + self.value_dim

    @property
    def conv_state_elements(self) -> int:
        """What the causal convolution keeps per sequence: its last ``conv_kernel - 1`` inputs of every channel."""
        return self.conv_dim * (self.conv_kernel - 1)

    @property
    def recurrent_state_elements(self) -> int:
        """The delta rule's state per sequence: a ``key_head_dim`` x ``value_head_dim`` matrix per value head
        (query and key heads are shared by ``num_value_heads // num_key_heads`` value heads)."""
        return self.num_value_heads * self.key_head_dim * self.value_head_dim

    @property
    def name(self) -> str:
        return "linear"


Attention = MLA | GQA | LinearAttention


@dataclass(frozen=True)
class DenseMLP:
    kind: ClassVar[str] = "dense"
    intermediate_size: int
    bias: bool = False
    gated: bool = True  # a gate and an up projection (SwiGLU); False: an up projection only (squared ReLU)


@dataclass(frozen=True)
class MoE:
    """Routed experts (``top_k`` of ``num_experts`` per token) plus optional shared experts."""

    kind: ClassVar[str] = "moe"
    num_experts: int
    top_k: int
    intermediate_size: int  # one routed expert's
    shared_intermediate_size: int = 0  # all shared experts together (0: none)
    shared_expert_gate: bool = False  # a sigmoid gate on the shared expert's output (Qwen)
    expert_bias: bool = False  # the experts' linears carry biases (GPT-OSS)
    router_bias: bool = False  # the router linear carries a bias (GPT-OSS)
    correction_bias: bool = False  # DeepSeek's e_score_correction_bias beside the router

    @property
    def has_shared(self) -> bool:
        return self.shared_intermediate_size > 0


MLP = DenseMLP | MoE


@dataclass(frozen=True)
class Layer:
    attention: Attention | None  # None: a layer with no token mixer (an MLP-only layer)
    mlp: MLP | None  # None: a layer with no MLP (a mixer-only layer)

    @property
    def name(self) -> str:
        return f"{self.attention.name if self.attention else 'none'}/{self.mlp.kind if self.mlp else 'none'}"


@dataclass(frozen=True)
class LayerParams:
    """A layer's weights by what they do, counted as the release's layers are sized (a linear's input x output, a
    routed expert's gate, up and down), whatever their storage: what a step reads and multiplies."""

    attention: int = 0  # the token mixer's projections (attention, a DSA indexer, a recurrent mixer's)
    dense_mlp: int = 0
    shared_experts: int = 0
    routed_expert: int = 0  # one routed expert
    router: int = 0


@dataclass(frozen=True)
class MTP:
    """The multi-token-prediction head the checkpoint ships for speculative decoding."""

    num_layers: int
    layer: Layer  # its decoder layer (the same kinds as the model's)
    draft_class: str = ""  # the release's class that drafts with it (ModelConfig._config_draft_model's choice)


@dataclass(frozen=True)
class ModelArch:
    architecture: str  # config.json's architectures[0]
    model_type: str
    hidden_size: int
    vocab_size: int
    layers: tuple[Layer, ...]
    max_position_embeddings: int = 131072
    tie_word_embeddings: bool = False
    mtp: MTP | None = None
    torch_dtype: str = "bfloat16"
    notes: tuple[str, ...] = field(default=(), compare=False)  # what the reader decided and why
    layer_params: tuple[LayerParams, ...] = field(default=(), compare=False)  # per layer, as the release sizes it
    embedding_params: int = 0
    lm_head_params: int = 0

    @property
    def num_hidden_layers(self) -> int:
        return len(self.layers)

    def kinds(self) -> Counter[str]:
        """How many layers of each kind, e.g. ``{"linear/moe": 45, "gqa/moe": 15}``."""
        return Counter(layer.name for layer in self.layers)

    def attention_layers(self, kind: str) -> list[int]:
        """Indices of the layers whose attention is of ``kind`` (``mla``, ``gqa`` or ``linear``)."""
        return [i for i, layer in enumerate(self.layers) if layer.attention is not None and layer.attention.kind == kind]

    @property
    def full_attention_layers(self) -> list[int]:
        """Layers whose attention sees the whole context: MLA (sparse or not) and GQA without a window."""
        return [i for i, layer in enumerate(self.layers)
                if isinstance(layer.attention, MLA) or (isinstance(layer.attention, GQA)
                                                        and not layer.attention.sliding_window)]  # fmt: skip

    @property
    def sliding_window_layers(self) -> list[int]:
        """Layers whose attention sees only the last ``sliding_window`` tokens."""
        return [i for i, layer in enumerate(self.layers)
                if isinstance(layer.attention, GQA) and layer.attention.sliding_window]  # fmt: skip

    @property
    def kv_layers(self) -> list[int]:
        """Layers that keep a KV cache (every attention kind but linear attention)."""
        return [i for i, layer in enumerate(self.layers)
                if layer.attention is not None and layer.attention.kind != "linear"]  # fmt: skip

    @property
    def full_attention(self) -> MLA | GQA | None:
        """The attention of the layers that see the whole context (the first such layer's), if any."""
        for layer in self.layers:
            a = layer.attention
            if isinstance(a, MLA) or (isinstance(a, GQA) and not a.sliding_window):
                return a
        return None

    @property
    def moe(self) -> MoE | None:
        """The routed-expert MLP (the last MoE layer's), if the model has one."""
        for layer in reversed(self.layers):
            if isinstance(layer.mlp, MoE):
                return layer.mlp
        return None

    def describe(self) -> str:
        """One line: ``GlmMoeDsaForCausalLM: 78 layers (75 mla+dsa/moe, 3 mla+dsa/dense), MTP 1``."""
        kinds = ", ".join(f"{n} {k}" for k, n in self.kinds().most_common())
        mtp = f", MTP {self.mtp.num_layers}" if self.mtp else ""
        return f"{self.architecture}: {self.num_hidden_layers} layers ({kinds}){mtp}"
