"""GPU memory at start-up: weights, the KV-cache pool and what is left for activations and graphs.

SGLang sizes its KV pool as ``mem_fraction_static`` of the memory that was free before the weights loaded, minus
the weights (``ModelRunnerKVCacheMixin._profile_available_bytes``: what is free after loading, less
``1 - mem_fraction_static`` of what was free before); what stays outside the static fraction must hold
activations (a chunked-prefill step) and captured graphs. Too much static memory is
an out-of-memory crash while capturing graphs; too little leaves no KV pool, a start-up error.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..perf.cost_model import CostModel

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

    def summary(self) -> str:
        return (
            f"weights {self.weight_bytes_per_gpu / GIB:.2f} GB/GPU, KV pool {self.kv_pool_bytes_per_gpu / GIB:.2f} GB"
            f" ({self.max_total_num_tokens} tokens), activations {self.activation_bytes / GIB:.2f} GB,"
            f" graphs {self.graph_bytes / GIB:.2f} GB"
        )


def plan_memory(model: CostModel, draft_bytes: float = 0.0) -> MemoryPlan:
    """Raise ``OutOfMemory`` or ``NotEnoughMemory`` as SGLang would; else the plan.

    ``draft_bytes``: weights of the speculative draft model, when one was loaded (TP-sharded like the rest).
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
    kv_token = model.kv_token_bytes * (1.0 + (1.0 / model.sizes.layers if cfg.speculative else 0.0))
    tokens = int(pool // kv_token) if pool > 0 else 0
    tokens -= tokens % max(cfg.page_size, 1)
    if tokens <= 0:
        raise NotEnoughMemory(  # pool_configurator.MemoryPoolConfig.__post_init__, verbatim
            "Not enough memory. Please try to increase --mem-fraction-static. "
            f"Current value: mem_fraction_static={cfg.mem_fraction_static}"
        )
    chunk = cfg.chunked_prefill_size if cfg.chunked_prefill_size > 0 else 65536
    activation = cal.activation_gb_per_gpu * GIB * max(chunk / 16384, 0.25)
    graph = 0.0 if cfg.disable_cuda_graph else cfg.cuda_graph_max_bs * 24 * 1024**2
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
        kv_pool_bytes_per_gpu=pool,
        kv_bytes_per_token=kv_token,
        max_total_num_tokens=tokens,
        activation_bytes=activation,
        graph_bytes=graph,
        free_bytes=free,
    )
