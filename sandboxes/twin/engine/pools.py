"""The memory pools SGLang allocates at start-up, layer kind by layer kind, as the pinned release (0.5.12) sizes them.

Every layer kind keeps its own kind of memory per request (``models.arch``):

* full attention (MLA, MLA + DSA, GQA without a window) keeps every token of the context in the token-to-KV pool:
  MLA its latent and rope key (``kv_lora_rank + qk_rope_head_dim`` elements, replicated on every GPU of the
  attention group) and, under DSA, the indexer's key (``index_head_dim`` fp8 bytes and one fp32 scale per 128:
  ``NSATokenToKVPool``); GQA the K and V of the GPU's KV heads (``max(1, num_kv_heads // attn_tp)``,
  ``MHATokenToKVPool``);
* sliding-window GQA keeps its last ``sliding_window`` tokens. For the architectures the release lists in
  ``is_hybrid_swa_model`` (``HYBRID_SWA_ARCHITECTURES``) it gets a pool of its own, ``swa_full_tokens_ratio`` times
  the full pool's tokens (``HybridSWAPoolConfigurator``, ``SWAKVPool``); for any other model its layers sit in the
  one pool beside the full layers, at full size (``DefaultPoolConfigurator`` counts every layer);
* linear attention (Gated DeltaNet) keeps no KV: a convolution state and a recurrent (SSM) state per request in
  the mamba pool (``MambaPool``), whose slots are taken from the memory first (``handle_max_mamba_cache``); the
  KV pool of the full-attention layers gets what remains (``HybridLinearKVPool``), and the slots cap the running
  requests (``_resolve_max_num_reqs``).

Sources (``python/sglang/srt/`` of the release): ``model_executor/pool_configurator.py``
(``DefaultPoolConfigurator._compute_cell_size``, ``HybridSWAPoolConfigurator``), ``model_executor/
model_runner_kv_cache_mixin.py`` (``_profile_available_bytes``, ``handle_max_mamba_cache``,
``_calculate_mamba_ratio``, ``_resolve_max_num_reqs``, ``_init_pools``), ``mem_cache/memory_pool.py``
(``MHATokenToKVPool``, ``MLATokenToKVPool``, ``NSATokenToKVPool``, ``MambaPool``, ``HybridLinearKVPool``, the
"... is allocated" lines), ``mem_cache/swa_memory_pool.py`` (``SWAKVPool``), ``configs/mamba_utils.py``
(``Mamba2StateShape.create``, ``mamba_cache_per_req``, ``mamba2_state_dtype``), ``configs/qwen3_next.py``
(``mamba2_cache_params``) and ``configs/model_config.py`` (``is_hybrid_swa_model``, ``get_num_kv_heads``).
``tests/twin/test_layer_kinds.py`` runs those functions of the release beside these.

Standard library only (the twin runs in a minimal image).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ..models.arch import GQA, MLA, LinearAttention, ModelArch
from ..perf.serving_config import ServingConfig

GB = 1 << 30  # memory_pool.GB, swa_memory_pool.GB: what the pool lines divide by
ELEMENT_SIZE = {"auto": 2, "bf16": 2, "bfloat16": 2, "fp8_e4m3": 1, "fp8_e5m2": 1}  # the KV cache dtype's bytes
NSA_QUANT_BLOCK = 128  # NSATokenToKVPool.quant_block_size: one fp32 scale per 128 fp8 indexer elements
NSA_SCALE_BYTES = 4
STATE_DTYPE_SIZE = {"float32": 4, "bfloat16": 2, "float16": 2}  # mamba2_state_dtype's dtype_map
MAMBA_CONV_DTYPE = "bfloat16"  # SGLANG_MAMBA_CONV_DTYPE's default
MAMBA_SSM_DTYPE = "float32"  # mamba2_state_dtype's default when neither the flag nor the config says
# configs/model_config.py is_hybrid_swa_model (with MIMO_V2_MODEL_ARCHS expanded): the architectures whose
# sliding-window layers get a pool of their own
HYBRID_SWA_ARCHITECTURES = frozenset({
    "Llama4ForConditionalGeneration", "DeepseekV4ForCausalLM", "DeepseekV4ForCausalLMNextN", "GptOssForCausalLM",
    "MiMoV2ForCausalLM", "MiMoV2FlashForCausalLM", "MiMoV2MTP", "Step3p5ForCausalLM", "Step3p5MTP",
    "Gemma4ForCausalLM", "Gemma4ForConditionalGeneration", "LagunaForCausalLM",
})  # fmt: skip


class PoolError(AssertionError):
    """An assertion of the release's pool code (a shape that does not divide over the attention TP group)."""


def _divide(numerator: int, denominator: int) -> int:
    if numerator % denominator:  # distributed/utils.py ensure_divisibility, verbatim
        raise PoolError(f"{numerator} is not divisible by {denominator}")
    return numerator // denominator


def kv_element_size(kv_cache_dtype: str) -> int:
    return ELEMENT_SIZE[kv_cache_dtype]


def indexer_key_bytes(a: MLA) -> int:
    """The DSA indexer's key of one token in one layer: fp8 elements and an fp32 scale per 128 of them."""
    return a.index_head_dim + a.index_head_dim // NSA_QUANT_BLOCK * NSA_SCALE_BYTES if a.sparse else 0


def kv_heads_per_gpu(a: GQA, attn_tp: int) -> int:
    """``ModelConfig.get_num_kv_heads``: the KV heads one GPU keeps (replicated when fewer than the GPUs)."""
    return max(1, a.num_kv_heads // attn_tp)


def kv_token_bytes(a: MLA | GQA, kv_size: int, attn_tp: int) -> int:
    """What one token costs in one layer's KV cache on one GPU of the attention group."""
    if isinstance(a, MLA):
        return (a.kv_lora_rank + a.qk_rope_head_dim) * kv_size + indexer_key_bytes(a)
    return kv_heads_per_gpu(a, attn_tp) * 2 * a.head_dim * kv_size  # K and V (v_head_dim = head_dim)


@dataclass(frozen=True)
class LinearState:
    """One linear-attention layer's state of one request on one GPU, as ``MambaPool`` stores it."""

    conv_shape: tuple[int, int]  # (conv channels / attn_tp, conv_kernel - 1)
    temporal_shape: tuple[int, int, int]  # (value heads / attn_tp, value_head_dim, key_head_dim)
    conv_dtype: str
    ssm_dtype: str

    @property
    def conv_bytes(self) -> int:
        return self.conv_shape[0] * self.conv_shape[1] * STATE_DTYPE_SIZE[self.conv_dtype]

    @property
    def ssm_bytes(self) -> int:
        h, v, k = self.temporal_shape
        return h * v * k * STATE_DTYPE_SIZE[self.ssm_dtype]

    @property
    def bytes(self) -> int:
        return self.conv_bytes + self.ssm_bytes


def ssm_dtype(a: LinearAttention, cfg: ServingConfig) -> str:
    """``mamba2_state_dtype``: ``--mamba-ssm-dtype`` (SGLANG_MAMBA_SSM_DTYPE), else the config's
    ``mamba_ssm_dtype`` when it is a dtype the release knows, else float32."""
    if cfg.mamba_ssm_dtype in STATE_DTYPE_SIZE:
        return cfg.mamba_ssm_dtype
    return a.ssm_dtype if a.ssm_dtype in STATE_DTYPE_SIZE else MAMBA_SSM_DTYPE


def linear_state(a: LinearAttention, attn_tp: int, ssm: str = MAMBA_SSM_DTYPE,
                 conv_dtype: str = MAMBA_CONV_DTYPE) -> LinearState:  # fmt: skip
    """One layer's state on one GPU of an attention TP group of ``attn_tp``: the shapes the release's own
    ``mamba2_cache_params`` gives at that size, as the model's description recorded them (``LinearAttention.states``);
    for a hand-written model without them, ``Mamba2StateShape.create`` as a Gated DeltaNet config's ``mamba2_cache_params``
    calls it (the convolution's channels are the values and two key groups, widened to a multiple of the TP degree
    when they do not divide it, split over the attention TP group with the value heads)."""
    by_tp = {tp: (conv, tuple(temporal)) for tp, conv, temporal in a.states}
    if attn_tp in by_tp:  # a size the release's shapes were asked at; any other is worked out (and checked) below
        conv, temporal = by_tp[attn_tp]
        kept = max(a.conv_kernel - 1, 1)
        h, v, k = (tuple(temporal) + (1, 1, 1))[:3] if temporal else (0, 1, 1)
        return LinearState(conv_shape=(conv // kept, kept), temporal_shape=(h, v, k), conv_dtype=conv_dtype,
                           ssm_dtype=ssm)  # fmt: skip
    groups = a.num_key_heads
    if groups % attn_tp:  # extra_groups_for_head_shards
        groups += attn_tp - groups
    conv_dim = a.value_dim + 2 * groups * a.key_head_dim
    return LinearState(
        conv_shape=(_divide(conv_dim, attn_tp), a.conv_kernel - 1),
        temporal_shape=(_divide(a.num_value_heads, attn_tp), a.value_head_dim, a.key_head_dim),
        conv_dtype=conv_dtype,
        ssm_dtype=ssm,
    )


def layer_states(arch: ModelArch, cfg: ServingConfig) -> list[LinearState]:
    """The state of every linear-attention layer of one request on one GPU, in layer order."""
    g = cfg.gpus_per_rank
    return [linear_state(layer.attention, g, ssm_dtype(layer.attention, cfg)) for layer in arch.layers
            if isinstance(layer.attention, LinearAttention)]  # fmt: skip


def mamba_cache_per_req(arch: ModelArch, cfg: ServingConfig) -> int:
    """``BaseLinearStateParams.mamba_cache_per_req``: one request's states over every linear layer, one GPU."""
    return sum(s.bytes for s in layer_states(arch, cfg))


@dataclass(frozen=True)
class KVPool:
    """A token-to-KV pool: ``tokens`` rows (and a page of padding) in each of its ``layers``."""

    tokens: int
    layers: int
    page_size: int
    mla: bool  # one latent buffer per layer (MLA), else K and V buffers (MHA)
    row_bytes: int  # MLA: latent + rope of one token; MHA: K of one token (V the same)
    index_row_bytes: int = 0  # DSA's indexer key and scales of one token (NSATokenToKVPool)

    @property
    def k_bytes(self) -> int:
        return (self.tokens + self.page_size) * self.row_bytes * self.layers

    @property
    def v_bytes(self) -> int:
        return 0 if self.mla else self.k_bytes

    @property
    def index_bytes(self) -> int:
        pages = (self.tokens + self.page_size + 1) // self.page_size
        return pages * self.page_size * self.index_row_bytes * self.layers

    @property
    def bytes(self) -> int:
        return self.k_bytes + self.v_bytes + self.index_bytes

    def log_line(self) -> str:
        """``KVCache._finalize_allocation_log``: K and V apart for MHA pools, one size for MLA pools."""
        if self.mla:
            return f"KV Cache is allocated. #tokens: {self.tokens}, KV size: {self.bytes / GB:.2f} GB"
        return (f"KV Cache is allocated. #tokens: {self.tokens}, K size: {self.k_bytes / GB:.2f} GB, "
                f"V size: {self.v_bytes / GB:.2f} GB")  # fmt: skip


@dataclass(frozen=True)
class MambaPool:
    """The recurrent states of ``size`` requests (and a padding slot) in every linear-attention layer; under
    speculative decoding also every draft token's intermediate state of the running requests."""

    size: int  # max_mamba_cache_size
    states: tuple[LinearState, ...]  # one per linear layer
    spec_state_size: int = 0  # running requests whose draft tokens keep intermediate states
    draft_tokens: int = 0  # 0: no speculative decoding

    @property
    def conv_bytes(self) -> int:
        return (self.size + 1) * sum(s.conv_bytes for s in self.states)

    @property
    def ssm_bytes(self) -> int:
        return (self.size + 1) * sum(s.ssm_bytes for s in self.states)

    @property
    def intermediate_ssm_bytes(self) -> int:
        return (self.spec_state_size + 1) * self.draft_tokens * sum(s.ssm_bytes for s in self.states)

    @property
    def intermediate_conv_bytes(self) -> int:
        return (self.spec_state_size + 1) * self.draft_tokens * sum(s.conv_bytes for s in self.states)

    @property
    def bytes(self) -> int:
        return self.conv_bytes + self.ssm_bytes + self.intermediate_ssm_bytes + self.intermediate_conv_bytes

    def log_line(self) -> str:
        """``MambaPool.__init__``'s line (its trailing space included)."""
        line = (f"Mamba Cache is allocated. max_mamba_cache_size: {self.size}, "
                f"conv_state size: {self.conv_bytes / GB:.2f}GB, ssm_state size: {self.ssm_bytes / GB:.2f}GB ")  # fmt: skip
        if self.draft_tokens:
            line += (f"intermediate_ssm_state_cache size: {self.intermediate_ssm_bytes / GB:.2f}GB "
                     f"intermediate_conv_window_cache size: {self.intermediate_conv_bytes / GB:.2f}GB ")  # fmt: skip
        return line


@dataclass(frozen=True)
class PoolPlan:
    """What one GPU of a rank allocates for its requests' caches, and the limits that follow."""

    kind: str  # "kv": one token-to-KV pool; "hybrid_swa": full and SWA pools; "hybrid_linear": KV and mamba pools
    kv_pools: tuple[KVPool, ...]  # in the order the release creates them (the SWA pool before the full pool)
    mamba: MambaPool | None
    token_bytes: float  # the configurator's bytes per max_total_num_tokens token (hybrid SWA: full + ratio x SWA)
    kv_budget_bytes: float  # what the token pools were sized from (after the mamba pool)
    max_total_num_tokens: int  # the full pool's tokens: what the scheduler admits against
    swa_max_total_num_tokens: int | None = None
    max_running_requests: int = 0  # per rank (``_resolve_max_num_reqs``), capped by the mamba slots
    draft_pool: KVPool | None = None  # the speculative draft worker's pool: one full-attention layer, same tokens

    @property
    def max_mamba_cache_size(self) -> int | None:
        return self.mamba.size if self.mamba else None

    @property
    def kv_bytes(self) -> int:
        return sum(p.bytes for p in self.kv_pools)

    @property
    def state_bytes(self) -> int:
        return self.mamba.bytes if self.mamba else 0

    def log_lines(self) -> list[str]:
        """The lines the release prints while it allocates these pools, in its order."""
        lines: list[str] = []
        if self.mamba:  # HybridReqToTokenPool (and its MambaPool) comes before the token-to-KV pool
            lines.append(self.mamba.log_line())
        if self.kind == "hybrid_swa":
            full = self.kv_pools[-1].tokens if len(self.kv_pools) > 1 else 0
            swa = self.kv_pools[0].tokens
            if full:
                lines.append(f"Use sliding window memory pool. full_layer_tokens={full}, swa_layer_tokens={swa}")
            else:
                lines.append(f"Use sliding window memory pool (all SWA). swa_layer_tokens={swa}")
        lines += [p.log_line() for p in self.kv_pools]
        if self.kind == "hybrid_swa":
            usage = sum(p.k_bytes + p.v_bytes for p in self.kv_pools) / GB
            full_size = self.kv_pools[-1].tokens if len(self.kv_pools) > 1 else 0
            lines.append(f"SWAKVPool mem usage: {usage:.2f} GB, swa size: {self.kv_pools[0].tokens}, full size: {full_size}")
        return lines

    def draft_log_lines(self) -> list[str]:
        """The line the draft worker prints when it allocates its pool (after the target's graphs are captured)."""
        return [self.draft_pool.log_line()] if self.draft_pool else []


def is_hybrid_swa(arch: ModelArch, cfg: ServingConfig, architectures: frozenset[str] = HYBRID_SWA_ARCHITECTURES) -> bool:
    """``ModelConfig.is_hybrid_swa``: the release's list names the architecture and the flag does not turn it off."""
    return arch.architecture in architectures and not cfg.disable_hybrid_swa_memory


def _pool(layers: Sequence[MLA | GQA], tokens: int, cfg: ServingConfig) -> KVPool:
    kv_size, g = kv_element_size(cfg.kv_cache_dtype), cfg.gpus_per_rank
    a = layers[0] if layers else None
    if isinstance(a, MLA):
        return KVPool(tokens, len(layers), cfg.page_size, True, (a.kv_lora_rank + a.qk_rope_head_dim) * kv_size,
                      indexer_key_bytes(a))  # fmt: skip
    row = kv_heads_per_gpu(a, g) * a.head_dim * kv_size if a is not None else 0
    return KVPool(tokens, len(layers), cfg.page_size, False, row)


def kv_cell_bytes(arch: ModelArch, cfg: ServingConfig, hybrid_swa: bool | None = None) -> float:
    """Bytes of the token pools per ``max_total_num_tokens`` token on one GPU: the release's ``cell_size``.

    Every layer that keeps KV in the one pool (``DefaultPoolConfigurator``: linear layers keep none); for a hybrid
    sliding-window model, the full layers plus ``swa_full_tokens_ratio`` of the sliding ones
    (``HybridSWAPoolConfigurator``; all of them when there is no full layer)."""
    if hybrid_swa is None:
        hybrid_swa = is_hybrid_swa(arch, cfg)
    kv_size, g = kv_element_size(cfg.kv_cache_dtype), cfg.gpus_per_rank
    full, swa = _split(arch, hybrid_swa)
    full_bytes = sum(kv_token_bytes(a, kv_size, g) for a in full)
    if not hybrid_swa:
        return full_bytes
    swa_layers = [kv_token_bytes(a, kv_size, g) for a in swa]
    if not full:
        return sum(swa_layers)
    if len(set(swa_layers)) == 1:  # the release's order of operations: F * n_full + ratio * S * n_swa
        return full_bytes + cfg.swa_full_tokens_ratio * swa_layers[0] * len(swa_layers)
    return full_bytes + cfg.swa_full_tokens_ratio * sum(swa_layers)


def _split(arch: ModelArch, hybrid_swa: bool) -> tuple[list[MLA | GQA], list[GQA]]:
    """The attentions of the layers in the full pool, and of those in the SWA pool."""
    full, swa = [], []
    for layer in arch.layers:
        a = layer.attention
        if a is None or isinstance(a, LinearAttention):  # no KV cache: an MLP-only or a recurrent layer
            continue
        (swa if hybrid_swa and isinstance(a, GQA) and a.sliding_window else full).append(a)
    return full, swa


def mamba_slots(arch: ModelArch, cfg: ServingConfig, rest_gb: float) -> tuple[int, float]:
    """``handle_max_mamba_cache``: the recurrent-state slots of one GPU and what is left (GB) for the KV pool.

    Under speculative decoding the intermediate states of ``--max-running-requests`` requests' draft tokens are
    set aside first. Then the slots are ``--max-mamba-cache-size`` (per DP rank under DP attention), else, with
    the radix cache off and a running-request limit, that limit, else what makes the state memory
    ``mamba_full_memory_ratio`` times the KV memory."""
    per_req = mamba_cache_per_req(arch, cfg)
    dp = cfg.dp_size if cfg.enable_dp_attention else 1
    if cfg.speculative:
        if cfg.max_running_requests is None or not cfg.speculative_num_draft_tokens:
            raise PoolError("speculative decoding of a linear-attention model needs max_running_requests and "
                            "speculative_num_draft_tokens")  # fmt: skip
        rest_gb -= per_req * (cfg.max_running_requests // dp) * cfg.speculative_num_draft_tokens / GB
    if cfg.max_mamba_cache_size is not None:
        size = cfg.max_mamba_cache_size // dp
    elif cfg.disable_radix_cache and cfg.max_running_requests is not None:
        size = cfg.max_running_requests // dp
    else:
        ratio = cfg.mamba_full_memory_ratio
        size = int((rest_gb * ratio / (1 + ratio) * GB) // per_req)
    return size, rest_gb - size * per_req / GB


def size_pools(arch: ModelArch, cfg: ServingConfig, rest_bytes: float, context_len: int,
               hybrid_swa: bool | None = None) -> PoolPlan:  # fmt: skip
    """The pools of one GPU of a rank, from ``rest_bytes``: what ``_profile_available_bytes`` finds for them before
    any mamba pool (free after the weights less ``1 - mem_fraction_static`` of what was free before them).

    With speculative decoding the draft model's KV pool (one full-attention layer, the same tokens) is sized from
    the same memory: the twin's stand-in for the memory the release keeps outside the static fraction for it.
    ``max_total_num_tokens`` may come out zero or negative: the caller raises the release's "Not enough memory"."""
    if hybrid_swa is None:
        hybrid_swa = is_hybrid_swa(arch, cfg)
    page = max(cfg.page_size, 1)
    kv_size, g = kv_element_size(cfg.kv_cache_dtype), cfg.gpus_per_rank
    full, swa = _split(arch, hybrid_swa)
    if hybrid_swa and not swa:
        raise PoolError("Hybrid SWA model must have at least one SWA layer")
    cell = kv_cell_bytes(arch, cfg, hybrid_swa)
    mamba = None
    budget = rest_bytes
    states = layer_states(arch, cfg)
    if states:  # _profile_available_bytes works in GB and returns int(rest * (1 << 30))
        size, rest_gb = mamba_slots(arch, cfg, rest_bytes / GB)
        budget = float(int(rest_gb * GB))
        mamba = MambaPool(size, tuple(states))
    token_bytes = cell
    if cfg.speculative and full:  # the draft's pool: one more full-attention layer per token
        token_bytes = cell * (1.0 + kv_token_bytes(full[0], kv_size, g) / cell)
    tokens = int(budget // token_bytes) if budget > 0 else 0
    swa_tokens = None
    if hybrid_swa:
        tokens = tokens // page * page
        if full:
            swa_tokens = int(tokens * cfg.swa_full_tokens_ratio) // page * page
            pools = (_pool(swa, swa_tokens, cfg), _pool(full, tokens, cfg))
        else:
            swa_tokens = tokens
            pools = (_pool(swa, tokens, cfg),)
    else:
        tokens -= tokens % page
        pools = (_pool(full, tokens, cfg),)
    max_running = cfg.max_running_per_rank(tokens, context_len, mamba.size if mamba else None) if tokens > 0 else 0
    if mamba and cfg.speculative:
        mamba = MambaPool(mamba.size, mamba.states, max(max_running, 0), cfg.speculative_num_draft_tokens)
    # the draft worker's own pool (an MTP/EAGLE layer: "we only need 1 attention layer's kv pool")
    draft = _pool(full[:1], tokens, cfg) if cfg.speculative and full and not hybrid_swa else None
    return PoolPlan(
        kind="hybrid_swa" if hybrid_swa else "hybrid_linear" if mamba else "kv",
        kv_pools=pools, mamba=mamba, token_bytes=token_bytes, kv_budget_bytes=budget,
        max_total_num_tokens=tokens, swa_max_total_num_tokens=swa_tokens, max_running_requests=max_running,
        draft_pool=draft,
    )  # fmt: skip
