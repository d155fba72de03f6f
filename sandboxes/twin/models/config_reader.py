"""Read a model's architecture from its real ``config.json``: ``read_arch(config, facts) -> ModelArch``.

The reader goes by the fields a config carries, never by the model's name, so a config it has never seen reads
the same way. Where the published config is silent about something the checkpoint and the engine depend on
(whether attention layers carry sinks, whether Qwen3's q/k norms exist, where the MTP head is stored...), the
answer must come from ``facts``: a mapping of ``"<part>.<field>"`` to a value, written in the scenario (the
``scenario`` command fills it from the checkpoint's index or from the SGLang class that loads the model). A
question nobody answered is a ``ConfigQuestion``: one line naming the fact and what would settle it. Nothing is
guessed.

Layer kinds, in the order the reader looks for them:

1. ``layer_types`` (one entry per layer): ``full_attention``, ``sliding_attention`` (``sliding_window`` tokens),
   ``linear_attention`` (Gated DeltaNet, ``linear_*`` fields);
2. ``full_attention_interval`` with ``linear_*`` fields (Qwen3-Next): layer ``i`` is full attention when
   ``(i + 1) % interval == 0`` (SGLang's ``Qwen3NextConfig.layers_block_type``), else linear;
3. otherwise every layer is full attention: MLA when the config has ``kv_lora_rank`` (DSA with ``index_topk``),
   else GQA.

MLP kinds: DeepSeek's ``first_k_dense_replace`` / ``moe_layer_freq``, Qwen's ``mlp_only_layers`` /
``decoder_sparse_step``, else every layer is MoE when the config names experts. Nested ``text_config`` (the
language model of a multimodal checkpoint) is read in place of the top level for everything but
``architectures``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .arch import GQA, MLA, MTP, DenseMLP, Layer, LinearAttention, ModelArch, MoE

# facts a config may leave open, and what settles each one (the text of a ConfigQuestion)
FACTS: dict[str, str] = {
    "attention.sinks": "whether the attention layers carry a learned sink per head (tensor '*.self_attn.sinks')",
    "attention.qk_norm": "whether attention normalises q and k per head (tensors '*.q_norm.weight', '*.k_norm.weight')",
    "attention.output_gate": "whether q_proj also yields a per-head output gate (q_proj twice num_heads*head_dim rows)",
    "moe.expert_bias": "whether the routed experts' linears carry biases (tensors '*.experts.*bias')",
    "moe.router_bias": "whether the router carries a bias (tensor '*.mlp.router.bias' or '*.mlp.gate.bias')",
    "moe.correction_bias": "whether the router has DeepSeek's e_score_correction_bias",
    "moe.shared_expert_gate": "whether the shared expert's output is gated (tensor '*.shared_expert_gate.weight')",
    "mtp.num_layers": "how many MTP (next-token prediction) layers the checkpoint ships (0: none)",
}


class ConfigError(ValueError):
    """The config cannot describe a model the twin simulates; the message is one line."""


class ConfigQuestion(ConfigError):
    """The config is silent about ``fact``; the scenario must answer it (``model.facts``)."""

    def __init__(self, fact: str) -> None:
        super().__init__(f"config.json does not say {FACTS[fact]}: set model.facts.{fact} in the scenario "
                         "(or give the checkpoint's model.safetensors.index.json)")  # fmt: skip
        self.fact = fact


def text_config(config: Mapping[str, Any]) -> Mapping[str, Any]:
    """The language model's part of a config (``text_config`` of a multimodal checkpoint, else the config)."""
    inner = config.get("text_config")
    return inner if isinstance(inner, Mapping) else config


class _Reader:
    def __init__(self, config: Mapping[str, Any], facts: Mapping[str, Any]) -> None:
        self.top = config
        self.c = text_config(config)
        self.facts = dict(facts)
        self.notes: list[str] = []

    def get(self, *keys: str, default: Any = None) -> Any:
        for key in keys:
            value = self.c.get(key)
            if value is not None:
                return value
        return default

    def need(self, *keys: str) -> Any:
        value = self.get(*keys)
        if value is None:
            raise ConfigError(f"config.json has none of {', '.join(repr(k) for k in keys)}")
        return value

    def int(self, *keys: str, default: int | None = None) -> int:
        value = self.get(*keys) if default is None else self.get(*keys, default=default)
        if value is None:
            value = self.need(*keys)
        if isinstance(value, bool) or not isinstance(value, int | float) or int(value) != value:
            raise ConfigError(f"config.json: {keys[0]} = {value!r} is not a whole number")
        return int(value)

    def fact(self, name: str, *, config: bool | None = None) -> Any:
        """The answer the config gives (``config``), else the scenario's, else a question."""
        if config is not None:
            return config
        if name in self.facts:
            return self.facts[name]
        raise ConfigQuestion(name)

    # --- attention ----------------------------------------------------------------------------------------

    def layer_kinds(self, n: int) -> list[str]:
        types_ = self.get("layer_types")
        if types_ is not None:
            if not isinstance(types_, list) or len(types_) < n:
                raise ConfigError(f"config.json: layer_types has {len(types_) if isinstance(types_, list) else 0} "
                                  f"entries for {n} layers")  # fmt: skip
            known = {"full_attention", "sliding_attention", "linear_attention"}
            for i, t in enumerate(types_[:n]):
                if t not in known:
                    raise ConfigError(f"config.json: layer_types[{i}] = {t!r} is a layer kind the twin does not "
                                      f"simulate (it knows {', '.join(sorted(known))})")  # fmt: skip
            return list(types_[:n])
        interval = self.get("full_attention_interval")
        if interval is not None and self.get("linear_num_value_heads") is not None:
            k = self.int("full_attention_interval")
            self.notes.append(f"layer i is full attention when (i + 1) % {k} == 0, else linear (full_attention_interval)")
            return ["full_attention" if (i + 1) % k == 0 else "linear_attention" for i in range(n)]
        return ["full_attention"] * n

    def full_attention(self) -> MLA | GQA:
        heads = self.int("num_attention_heads")
        if self.get("kv_lora_rank") is not None:
            return MLA(
                num_heads=heads, kv_lora_rank=self.int("kv_lora_rank"), q_lora_rank=self.int("q_lora_rank", default=0),
                qk_nope_head_dim=self.int("qk_nope_head_dim"), qk_rope_head_dim=self.int("qk_rope_head_dim"),
                v_head_dim=self.int("v_head_dim"), index_topk=self.int("index_topk", default=0),
                index_heads=self.int("index_n_heads", default=0), index_head_dim=self.int("index_head_dim", default=0),
            )  # fmt: skip
        return self.gqa(heads, window=0)

    def gqa(self, heads: int, window: int) -> GQA:
        kv = self.int("num_key_value_heads", default=heads)
        if kv <= 0 or heads % kv:
            raise ConfigError(f"config.json: num_attention_heads ({heads}) is not a multiple of num_key_value_heads ({kv})")
        head_dim = self.get("head_dim")
        if head_dim is None:
            head_dim = self.int("hidden_size") // heads
            self.notes.append(f"head_dim = hidden_size / num_attention_heads = {head_dim} (no head_dim in config)")
        bias = self.get("attention_bias")
        qk_norm = self.get("use_qk_norm")
        gate = self.get("attn_output_gate")
        sinks: bool | None = None
        if window and self.get("add_swa_attention_sink_bias") is not None:
            sinks = bool(self.get("add_swa_attention_sink_bias"))
        elif not window and self.get("add_full_attention_sink_bias") is not None:
            sinks = bool(self.get("add_full_attention_sink_bias"))
        return GQA(
            num_heads=heads, num_kv_heads=kv, head_dim=int(head_dim), sliding_window=window,
            sinks=bool(self.fact("attention.sinks", config=sinks)),
            qk_norm=bool(self.fact("attention.qk_norm", config=None if qk_norm is None else bool(qk_norm))),
            output_gate=bool(self.fact("attention.output_gate", config=None if gate is None else bool(gate))),
            qkv_bias=bool(bias), o_bias=bool(bias),
        )  # fmt: skip

    def linear_attention(self) -> LinearAttention:
        return LinearAttention(
            num_key_heads=self.int("linear_num_key_heads"), num_value_heads=self.int("linear_num_value_heads"),
            key_head_dim=self.int("linear_key_head_dim"), value_head_dim=self.int("linear_value_head_dim"),
            conv_kernel=self.int("linear_conv_kernel_dim"),
            ssm_dtype=None if self.get("mamba_ssm_dtype") is None else str(self.get("mamba_ssm_dtype")),
        )  # fmt: skip

    # --- MLP ----------------------------------------------------------------------------------------------

    def num_experts(self) -> int:
        return self.int("n_routed_experts", "num_experts", "num_local_experts", default=0)

    def is_moe(self, i: int) -> bool:
        if self.num_experts() <= 0:
            return False
        if self.get("first_k_dense_replace") is not None or self.get("moe_layer_freq") is not None:
            first = self.int("first_k_dense_replace", default=0)
            freq = self.int("moe_layer_freq", default=1)
            return i >= first and i % max(freq, 1) == 0
        if i in (self.get("mlp_only_layers") or []):
            return False
        step = self.int("decoder_sparse_step", default=1)
        return (i + 1) % max(step, 1) == 0

    def moe(self) -> MoE:
        e = self.num_experts()
        expert = self.int("moe_intermediate_size", default=0) or self.int("intermediate_size")
        shared = self.int("shared_expert_intermediate_size", default=0)
        gate: bool | None = None
        if shared:
            gate = None  # Qwen's shared expert: gated or not, the config does not say
        else:
            n_shared = self.int("n_shared_experts", default=0)
            shared = n_shared * expert if n_shared else self.int("shared_intermediate_size", default=0)
            gate = False
        routing_bias = self.get("use_routing_bias")
        correction: bool | None = None
        if self.get("topk_method") is not None:
            correction = self.get("topk_method") == "noaux_tc"
        elif routing_bias is not None:
            correction = bool(routing_bias)
        return MoE(
            num_experts=e, top_k=self.int("num_experts_per_tok", "experts_per_token", "moe_topk"),
            intermediate_size=expert, shared_intermediate_size=shared,
            shared_expert_gate=bool(self.fact("moe.shared_expert_gate", config=gate)) if shared else False,
            expert_bias=bool(self.fact("moe.expert_bias")),
            router_bias=bool(self.fact("moe.router_bias")),
            correction_bias=bool(self.fact("moe.correction_bias", config=correction)),
        )  # fmt: skip

    def dense(self) -> DenseMLP:
        return DenseMLP(intermediate_size=self.int("intermediate_size"), bias=bool(self.get("mlp_bias")))

    # --- the whole model ----------------------------------------------------------------------------------

    def layer(self, kind: str, i: int, moe: MoE | None) -> Layer:
        if kind == "linear_attention":
            attention: MLA | GQA | LinearAttention = self.linear_attention()
        elif kind == "sliding_attention":
            attention = self.gqa(self.int("num_attention_heads"), window=self.int("sliding_window"))
        else:
            attention = self.full_attention()
        mlp = moe if moe is not None and self.is_moe(i) else self.dense()
        return Layer(attention=attention, mlp=mlp)

    def mtp_layers(self) -> int:
        n = self.get("num_nextn_predict_layers", "mtp_num_hidden_layers")
        if n is not None:
            return self.int("num_nextn_predict_layers", "mtp_num_hidden_layers")
        return int(self.fact("mtp.num_layers"))

    def read(self) -> ModelArch:
        archs = self.top.get("architectures") or self.c.get("architectures")
        if not isinstance(archs, list) or not archs or not isinstance(archs[0], str):
            raise ConfigError("config.json has no 'architectures' list naming the model class")
        n = self.int("num_hidden_layers")
        kinds = self.layer_kinds(n)
        moe = self.moe() if self.num_experts() > 0 else None
        layers = tuple(self.layer(kind, i, moe) for i, kind in enumerate(kinds))
        mtp = None
        n_mtp = self.mtp_layers()
        if n_mtp > 0:
            # the MTP layer is a full-attention decoder layer with the model's MoE (DeepSeek, GLM, Qwen3-Next/3.5)
            kind = "full_attention" if "full_attention" in kinds else kinds[-1]
            mtp = MTP(num_layers=n_mtp, layer=self.layer(kind, n, moe))
        return ModelArch(
            architecture=archs[0], model_type=str(self.top.get("model_type") or self.c.get("model_type") or ""),
            hidden_size=self.int("hidden_size"), vocab_size=self.int("vocab_size"), layers=layers,
            max_position_embeddings=self.int("max_position_embeddings", default=131072),
            tie_word_embeddings=bool(self.top.get("tie_word_embeddings", self.c.get("tie_word_embeddings", False))),
            mtp=mtp, torch_dtype=str(self.get("torch_dtype", "dtype", default="bfloat16")), notes=tuple(self.notes),
        )  # fmt: skip


def read_arch(config: Mapping[str, Any], facts: Mapping[str, Any] | None = None) -> ModelArch:
    """The architecture ``config`` (a parsed config.json) describes, with ``facts`` answering what it leaves open.

    Raises ``ConfigQuestion`` for an unanswered fact, ``ConfigError`` for a config the twin cannot simulate."""
    unknown = sorted(set(facts or {}) - set(FACTS))
    if unknown:
        raise ConfigError(f"unknown fact {unknown[0]!r} (known: {', '.join(FACTS)})")
    return _Reader(config, facts or {}).read()


def open_questions(config: Mapping[str, Any], facts: Mapping[str, Any] | None = None) -> list[str]:
    """Every fact ``config`` leaves open that ``facts`` does not answer (asked one at a time by ``read_arch``)."""
    answered = dict(facts or {})
    missing: list[str] = []
    while True:
        try:
            read_arch(config, answered)
            return missing
        except ConfigQuestion as q:
            missing.append(q.fact)
            answered[q.fact] = False  # keep reading to find the next one; the caller must still answer it
