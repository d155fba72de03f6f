"""GPU memory at start-up: weights, the KV-cache and state pools and what is left for activations and graphs.

SGLang sizes its pools from ``mem_fraction_static`` of the memory that was free before the weights loaded, minus
the weights (``ModelRunnerKVCacheMixin._profile_available_bytes``: what is free after loading, less
``1 - mem_fraction_static`` of what was free before); how that memory is split between the pools follows each
layer's kind (``pools.py``: one token-to-KV pool, full and sliding-window pools, or the mamba pool of linear
attention's states and the KV pool of the full-attention layers). What stays outside the static fraction must
hold activations (a chunked-prefill step) and captured graphs. Too much static memory is an out-of-memory crash
while capturing graphs; too little leaves no KV pool, a start-up error.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..perf.cost_model import CostModel
from . import activations as act
from .pools import PoolPlan, size_pools

GIB = 1024**3
# the share of a GPU's memory still free when the weights begin to load: the HIP context and torch.distributed
# hold the rest (the twin's "Load weight begin. avail mem" line). A public log of SGLang 0.4.6 on MI308 cards, TP8
# (sgl-project/sglang#6001: "avail mem=103.71 GB, mem usage=81.66 GB" when the weights have loaded), puts 185.4 GB
# free before them: about 6.6 GB held of a 192-GB card, 3.4 %. The 1.5 % here is if anything short.
AVAIL_BEFORE_WEIGHTS = 0.985


def free_before_weights_gb(memory_gb: float) -> float:
    """What a GPU of ``memory_gb`` has free when the weights begin to load (the pool is sized from it)."""
    return memory_gb * AVAIL_BEFORE_WEIGHTS


class OutOfMemory(RuntimeError):
    """The simulated HIP allocator could not satisfy an allocation."""


class NotEnoughMemory(RuntimeError):
    """SGLang's own start-up check: the KV-cache pool would be empty."""


@dataclass(frozen=True)
class MemoryPlan:
    gpu_bytes: float
    weight_bytes_per_gpu: float
    kv_pool_bytes_per_gpu: float
    kv_bytes_per_token: float
    max_total_num_tokens: int  # KV capacity of one rank, tokens
    activation_bytes: float
    graph_bytes: float
    free_bytes: float  # outside the static pool, after activations and graphs
    activation_per_token: float = 0.0  # a prefill token's activations (a step under load: serving_faults.py)
    pools: PoolPlan | None = None  # the pools by kind, their log lines and the running-request limit they set

    @property
    def max_mamba_cache_size(self) -> int | None:
        """Recurrent-state slots of a hybrid linear-attention model (None for other models)."""
        return self.pools.max_mamba_cache_size if self.pools else None

    def summary(self) -> str:
        state = self.pools.state_bytes if self.pools else 0
        return (
            f"weights {self.weight_bytes_per_gpu / GIB:.2f} GB/GPU, KV pool {self.kv_pool_bytes_per_gpu / GIB:.2f} GB"
            f" ({self.max_total_num_tokens} tokens)"
            + (f", state pool {state / GIB:.2f} GB ({self.max_mamba_cache_size} slots)" if state else "")
            + f", activations {self.activation_bytes / GIB:.2f} GB, graphs {self.graph_bytes / GIB:.2f} GB"
        )


def plan_memory(model: CostModel, draft_bytes: float = 0.0, hybrid_swa: bool | None = None) -> MemoryPlan:
    """Raise ``OutOfMemory`` or ``NotEnoughMemory`` as SGLang would; else the plan.

    ``draft_bytes``: weights of the speculative draft model, when one was loaded (TP-sharded like the rest).
    ``hybrid_swa``: whether the release gives sliding-window layers a pool of their own (default: the pinned
    release's ``is_hybrid_swa_model`` list, ``pools.HYBRID_SWA_ARCHITECTURES``).
    """
    sc, cfg = model.scenario, model.config
    cal = sc.calibration
    gpu = sc.hardware.memory_gb * GIB
    weights = (model.total_weight_bytes() + draft_bytes) / model.moe_g
    if weights > gpu * 0.98:
        raise OutOfMemory(
            f"HIP out of memory. Tried to allocate {weights / GIB / 8:.2f} GiB. GPU 0 has a total capacity of"
            f" {gpu / GIB:.2f} GiB of which {max(gpu - weights * 7 / 8, 0) / GIB:.2f} GiB is free."
            " Weights do not fit: use more GPUs per rank (--tp-size)."
        )
    before = free_before_weights_gb(sc.hardware.memory_gb) * GIB
    static = before * cfg.mem_fraction_static
    pool = static - weights
    context_len = cfg.context_length or sc.model.max_position_embeddings
    pools = size_pools(model.arch, cfg, pool, context_len, hybrid_swa)
    tokens = pools.max_total_num_tokens
    if tokens <= 0:
        raise NotEnoughMemory(  # pool_configurator.MemoryPoolConfig.__post_init__, verbatim
            "Not enough memory. Please try to increase --mem-fraction-static. "
            f"Current value: mem_fraction_static={cfg.mem_fraction_static}"
        )
    chunk = cfg.chunked_prefill_size if cfg.chunked_prefill_size > 0 else 65536
    if cal.activation_gb_per_gpu is not None:  # a scenario's own measured figure, at a 16384-token chunk
        per_token = cal.activation_gb_per_gpu * GIB / 16384
        activation = per_token * max(chunk, 4096)
    else:  # from the model's layers (activations.py)
        per_token = act.per_token_bytes(model.arch, cfg.tp_size, cfg.gpus_per_rank)
        activation = act.prefill_bytes(model.arch, cfg, chunk)
    graph = act.graph_pool_bytes(model.arch, cfg, sc.model.vocab_size)
    free = before - static - activation - graph
    if free < 0:
        raise OutOfMemory(
            f"HIP out of memory. Tried to allocate {(activation + graph) / GIB:.2f} GiB. GPU 0 has a total capacity"
            f" of {gpu / GIB:.2f} GiB of which {(before - static) / GIB:.2f} GiB is free. Of the allocated memory"
            f" {static / GIB:.2f} GiB is reserved by the static pool (--mem-fraction-static"
            f" {cfg.mem_fraction_static}). Lower --mem-fraction-static, --chunked-prefill-size or"
            " --cuda-graph-max-bs."
        )
    return MemoryPlan(
        gpu_bytes=gpu,
        weight_bytes_per_gpu=weights,
        kv_pool_bytes_per_gpu=pools.kv_budget_bytes,
        kv_bytes_per_token=pools.token_bytes,
        max_total_num_tokens=tokens,
        activation_bytes=activation,
        graph_bytes=graph,
        free_bytes=free,
        activation_per_token=per_token,
        pools=pools,
    )
