"""What the performance model needs to know about one running server: layout, dtypes and kernel paths.

The launcher builds a ``ServingConfig`` from the resolved SGLang flags (``server_args.resolve``) and what it
found in the workspace (for example which MoE shapes have a tuned kernel selection); it publishes it in
``/server_info`` under ``twin`` so that ``bench_serving`` can rebuild the same model without sharing memory
with the server.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

TRUE_WORDS = ("1", "true", "yes", "y", "on")  # what SGLang's EnvBool reads as set (environ.py)


@dataclass(frozen=True)
class ServingConfig:
    tp_size: int = 1
    dp_size: int = 1
    enable_dp_attention: bool = False
    weight_format: str = "mxfp4"  # how the served weights are stored (the checkpoint's format)
    kv_cache_dtype: str = "auto"  # auto | bf16 | fp8_e4m3 | fp8_e5m2
    attention_backend: str = "aiter"
    # SGLANG_USE_AITER_UNIFIED_ATTN in the engine's environment: the aiter backend decodes dense layers through
    # aiter's Triton unified attention instead of its HIP paged attention (perf/decode_attention.py)
    aiter_unified_attention: bool = False
    moe_runner_backend: str = "auto"
    moe_tuned: bool = False  # a tuned kernel selection exists for the model's MoE shape
    speculative_algorithm: str | None = None
    speculative_num_steps: int = 0
    speculative_eagle_topk: int = 1
    speculative_num_draft_tokens: int = 0
    # the draft the engine built is the target's own class (a checkpoint with no MTP head, EAGLE with no draft
    # path): each draft step runs the whole model, which predicts what the model itself will verify
    draft_is_target: bool = False
    # a separate draft checkpoint (--speculative-draft-model-path, e.g. an EAGLE3 head): its weight bytes on the
    # node and its decoder layers; 0 bytes: the model drafts with its own MTP layer (or itself)
    draft_weight_bytes: int = 0
    draft_layers: int = 0
    enable_aiter_allreduce_fusion: bool = False
    chunked_prefill_size: int = 16384
    max_running_requests: int | None = None
    cuda_graph_max_bs: int = 512
    disable_cuda_graph: bool = False
    disable_radix_cache: bool = False
    page_size: int = 1
    mem_fraction_static: float = 0.90  # the launcher passes the resolved value (server_args.resolve)
    enable_mixed_chunk: bool = False
    disable_overlap_schedule: bool = False  # resolved (speculative top-k > 1 sets it); False: the overlap scheduler
    context_length: int | None = None  # the served context length (None: the model's max_position_embeddings)
    schedule_conservativeness: float = 1.0  # resolved (x 0.3 under DP attention): scales the admission's reserve
    # hybrid models' pools (ServerArgs of the release; engine/pools.py sizes them)
    swa_full_tokens_ratio: float = 0.8  # hybrid sliding-window models: SWA pool tokens per full-pool token
    disable_hybrid_swa_memory: bool = False  # one pool for every layer, sliding or not
    max_mamba_cache_size: int | None = None  # recurrent-state slots (None: from the memory, see pools.py)
    mamba_full_memory_ratio: float = 0.9  # recurrent-state memory / full-attention KV memory
    mamba_ssm_dtype: str | None = None  # --mamba-ssm-dtype (None: the config's mamba_ssm_dtype, else float32)
    mamba_scheduler_strategy: str = "no_buffer"  # resolved: 0.5.12 turns its default "auto" into "no_buffer"
    # what decides the all-reduce path a step takes and who notices a stuck one (engine/serving_faults.py)
    disable_custom_all_reduce: bool = False
    quick_reduce_quantization: str = "NONE"  # ROCM_QUICK_REDUCE_QUANTIZATION in the engine's environment
    watchdog_timeout: float = 300  # --watchdog-timeout: SGLang's scheduler watchdog, seconds (the release's int default)
    dist_timeout: int | None = None  # --dist-timeout: torch.distributed's collective timeout (None: 600 s for NCCL)

    @property
    def speculative(self) -> bool:
        return bool(self.speculative_algorithm)

    @property
    def gpus_per_rank(self) -> int:
        """GPUs behind one scheduler (one DP rank)."""
        return self.tp_size // self.dp_size if self.enable_dp_attention else self.tp_size

    @property
    def num_ranks(self) -> int:
        return self.dp_size

    @property
    def gpus_used(self) -> int:
        return self.tp_size if self.enable_dp_attention else self.tp_size * self.dp_size

    def mamba_ratio(self) -> int:
        """Recurrent-state slots per running request (``ModelRunner._calculate_mamba_ratio``): one when the
        radix cache is off, else three (the cache keeps states of cached prefixes) plus the ping-pong buffers of
        ``--mamba-scheduler-strategy extra_buffer`` (two with the overlap scheduler, one without)."""
        if self.disable_radix_cache:
            return 1
        extra = 0
        if self.mamba_scheduler_strategy == "extra_buffer":
            extra = 1 if self.disable_overlap_schedule else 2
        return 3 + extra

    def max_running_per_rank(self, token_capacity: int, context_len: int, mamba_cache_size: int | None = None) -> int:
        """The running-request limit of one scheduler (one DP rank), as SGLang 0.5.12 derives it from
        ``--max-running-requests`` and the rank's KV capacity (``ModelRunner._resolve_max_num_reqs``,
        model_executor/model_runner_kv_cache_mixin.py:817-836).

        ``mamba_cache_size``: a hybrid linear-attention model's recurrent-state slots on the rank
        (``pools.PoolPlan.max_mamba_cache_size``); they cap the requests at ``slots // mamba_ratio()``.

        ``--max-running-requests`` (also the 48 that speculative decoding sets) is a limit for the whole
        server under DP attention: it is divided by ``dp_size`` there, ``ModelRunner.dp_size`` being
        ``dp_size if enable_dp_attention else 1`` (model_runner.py:364). Without DP attention every DP rank is
        a full replica started with the same server arguments, so each replica gets the whole limit.
        """
        estimated = int(token_capacity / max(context_len, 1) * 512)
        estimated = max(min(estimated, 4096), 2048)
        if self.max_running_requests is not None:
            divisor = self.dp_size if self.enable_dp_attention else 1
            limit = min(self.max_running_requests // divisor, estimated)
        else:
            limit = min(estimated, token_capacity // 2)
        if mamba_cache_size is not None:
            limit = min(limit, mamba_cache_size // self.mamba_ratio())
        return limit

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ServingConfig:
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in names})


def with_engine_environment(cfg: ServingConfig, environ: Mapping[str, str]) -> ServingConfig:
    """``cfg`` with what the engine's environment changes beyond its flags (SGLang 0.5.12's ``environ.py``):
    ``SGLANG_USE_AITER_UNIFIED_ATTN`` (the aiter backend decodes dense layers through aiter's Triton unified attention,
    ``aiter_backend.py``) and ``SGLANG_MAMBA_SSM_DTYPE`` (the recurrent state's dtype, ahead of the config's:
    ``configs/mamba_utils.py``). A variable not set leaves the field as the flags made it."""
    changes: dict[str, Any] = {}
    unified = environ.get("SGLANG_USE_AITER_UNIFIED_ATTN")
    if unified is not None:
        changes["aiter_unified_attention"] = unified.strip().lower() in TRUE_WORDS
    ssm = environ.get("SGLANG_MAMBA_SSM_DTYPE")
    if ssm:
        changes["mamba_ssm_dtype"] = ssm
    return dataclasses.replace(cfg, **changes) if changes else cfg
