"""The twin's cost model: how long one scheduler step takes on the simulated node, and where the time goes.

Every cost is derived from the hardware ceilings (memory bandwidth, matrix peak per dtype, link bandwidth)
and the model's dimensions, scaled by the scenario's few efficiency constants (``calibration``). Nothing
here is keyed by flag values: a flag changes an input (bytes per KV element, tokens per step, kernels per
step, GPUs per rank), and the cost follows.

Units: seconds, bytes, FLOPs. "Rank" means one DP rank: one scheduler with ``gpus_per_rank`` GPUs in TP.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Mapping
from dataclasses import dataclass, field

from ..engine.pools import kv_cell_bytes
from ..scenario import ModelSpec, Scenario
from . import kernel_sheet, release_profile
from .attention import LayerGroup, layer_groups, state_traffic
from .decode_attention import DecodeKV, decode_kv
from .kernels import draft_layer_kernels, model_kernels
from .serving_config import ServingConfig

KV_BYTES = {"auto": 2.0, "bf16": 2.0, "bfloat16": 2.0, "fp8_e4m3": 1.0, "fp8_e5m2": 1.0}
# "nsa" is what SGLang picks for a DSA model (GLM-5.x, DeepSeek V3.2) on ROCm: tilelang sparse-MLA kernels and
# aiter's indexer. The published GLM-5.2 figures the calibration reproduces were measured with that default,
# so it carries the calibrated efficiency, the same as aiter's dense kernels.
ATTENTION_BACKEND_EFFICIENCY = {"aiter": 1.0, "nsa": 1.0, "triton": 0.6, "torch_native": 0.2, "wave": 0.8}
MOE_BACKEND_EFFICIENCY = {"auto": 1.0, "aiter": 1.0, "triton": 0.7, "triton_kernel": 0.8}
SPEC_STEP_OVERHEAD_S = 80e-6  # per draft step: sampling and tree bookkeeping
# Host time per speculative iteration that spec v1 (no overlap scheduler) pays and spec v2 hides: SGLang PR 11398
# ("Beta spec-overlap for EAGLE", Llama-3.1-8B, EAGLE 5/1/6, send_one): 273.43 tok/s at accept length 3.01 with
# spec v2 against 246.80 at 2.99 without, 11.0 against 12.1 ms an iteration. PR 9588 reports 5-10 % for the same
# host overlap at other batch sizes.
SPEC_V1_HOST_S = 1.1e-3
# When the draft's best candidate is wrong, the share of the remaining probability its next-best candidate
# catches (and so on down the ranks). Medusa (Cai et al. 2024, arXiv 2401.10774, section 2.1.1): a head's top-1
# accuracy for the next-next token is about 0.6 while its top-5 accuracy exceeds 0.8, so ranks 2-5 catch about half
# of the 0.4 the best candidate misses: 1 - (1 - h)**4 = 0.5 gives h = 0.16. (Drawing every rank with the best's
# own rate, as the twin did before, gives a top-5 of 0.99.)
ALTERNATIVE_HIT = 0.16
# Kernels a tree draft (top-k above 1) adds per iteration: the tree's mask and positions
# (build_tree_kernel_efficient), the pruning top-k and gather (organize_draft_results) and the verify's tree
# sampling (tree_speculative_sampling_target_only), each a few launches
TREE_KERNELS = 8
# A FlashAttention-style kernel reaches its peak rate only over enough keys per query: at ``c`` keys it runs at
# ``c / (c + ATTENTION_HALF_KEYS)`` of it. aiter's forward-attention benchmark (op_tests/cpp/mha/README.md, ROCm/aiter
# PR 1270: batch 1, 64 query / 4 KV heads, head dim 128) runs 1017 TFLOPS at 1k keys and 1406 at 8k: a half point
# of ~480 keys.
ATTENTION_HALF_KEYS = 512
# What the model writes, which decides how often the draft is accepted (``CostModel.accept_length``)
NATURAL_TEXT = "natural_text"  # a chat answer or a continuation of real text
TOKEN_NOISE = "token_noise"  # a continuation of raw random token ids, no chat template
# One MTP layer reused for every draft step: each step's acceptance is this share of the step before's. From the
# published acceptance of DeepSeek-V3's own MTP layer (one layer, SGLang and vLLM reuse it for every step): 81-82.3 %
# at the first position (vLLM PR 12755, DeepSeek-R1, one step) and an average accepted length of 3.20 with seven
# draft tokens at temperature 0 (nebius/MTP-DeepSeek-V3-0324 model card, "Original MTP", MT-bench, HumanEval and
# GSM8K; "trained primarily for first-token prediction and reused autoregressively for later positions, causing
# degraded acceptance rates at later draft positions"): 0.82 * d**i over seven positions gives 3.20 at d = 0.886
# (0.897 to 0.883 over the first position's range). Docs: docs/twin.md, "Speculative decoding".
MTP_REUSE_DECAY = 0.89
# Share of the first draft position's misses left when the model continues token noise (its greedy output settles
# into repetition). Fitted, with MTP_REUSE_DECAY fixed, to the published single-stream figure of the GLM-5.2 case
# (213 tok/s at MTP 5/1/6, random-ids prompts: tests/twin/test_calibration.py).
TOKEN_NOISE_MISS_SHARE = 0.3


@dataclass(frozen=True)
class ModelSizes:
    """Parameter counts by category (from the parameters the release builds: ``ModelArch.layer_params``). What attention reads and computes
    per layer kind is ``attention.layer_groups``'s."""

    layers: int
    moe_layers: int
    attention_per_layer: int  # MLA projections and the DSA indexer of one layer
    expert_params: int  # one routed expert (gate, up, down)
    shared_expert_params: int
    dense_mlp_params: int  # one dense MLP layer
    lm_head_params: int


@functools.lru_cache(maxsize=32)
def model_sizes(spec: ModelSpec) -> ModelSizes:
    """The sizes of the model as the release builds it (``ModelArch.layer_params``): per-layer figures are the
    layers' totals spread over the layers that have them, so that a figure times its count is the model's."""
    a = spec.arch
    params = list(a.layer_params)
    moe = [p for p, la in zip(params, a.layers, strict=False) if la.mlp is not None and la.mlp.kind == "moe"]
    others = [p for p, la in zip(params, a.layers, strict=False) if la.mlp is None or la.mlp.kind != "moe"]
    layers = max(len(a.layers), 1)
    return ModelSizes(
        layers=len(a.layers),
        moe_layers=len(moe),
        attention_per_layer=round(sum(p.attention for p in params) / layers),
        expert_params=moe[-1].routed_expert if moe else 0,
        shared_expert_params=round(sum(p.shared_experts for p in moe) / len(moe)) if moe else 0,
        dense_mlp_params=round(sum(p.dense_mlp for p in others) / len(others)) if others else 0,
        lm_head_params=a.lm_head_params or a.hidden_size * a.vocab_size,
    )


def reference_weight_bytes(scenario: Scenario) -> dict[str, int]:
    """Bytes per category of the checkpoint as exported (the workspace's index), when no engine load report is at
    hand; the MTP layer's tensors apart (a step reads them only when it drafts)."""
    from ..engine.loading.loader import category
    from ..models.dtypes import tensor_bytes
    from ..workspace.materialize import checkpoint_tensors

    tensors = checkpoint_tensors(scenario, with_mtp=False)  # one object per checkpoint in a process
    kept = _REFERENCE_BYTES.get(id(tensors))
    if kept is not None and kept[0] is tensors:
        return dict(kept[1])
    out: dict[str, int] = {}
    for name, meta in tensors.items():
        c = category(name)
        out[c] = out.get(c, 0) + tensor_bytes(meta["dtype"], meta["shape"])
    _REFERENCE_BYTES[id(tensors)] = (tensors, out)
    return dict(out)


# a checkpoint's bytes per category, summed once per process (each cost model of a sweep asks: 100k tensors each)
_REFERENCE_BYTES: dict[int, tuple[dict[str, dict], dict[str, int]]] = {}


@dataclass
class StepCost:
    """One forward pass on one rank, split the way the benchmark reports GPU time."""

    prefill_attention: float = 0.0
    prefill_moe: float = 0.0
    prefill_dense: float = 0.0
    decode: float = 0.0
    communication: float = 0.0
    overhead: float = 0.0

    @property
    def total(self) -> float:
        return (
            self.prefill_attention
            + self.prefill_moe
            + self.prefill_dense
            + self.decode
            + self.communication
            + self.overhead
        )

    def add_to(self, acc: dict[str, float]) -> None:
        for k, v in self.__dict__.items():
            acc[k] = acc.get(k, 0.0) + v


@dataclass
class CostModel:
    """Step costs for one serving configuration. ``weight_bytes`` is what the engine loaded, by category
    (the launcher's weight-load report); without it, the checkpoint's own bytes are used. ``draft_bytes``: what the
    engine's draft class loaded of the checkpoint's MTP layers, by category (the same report); without it, a draft
    step reads as much as one of the target's layers."""

    scenario: Scenario
    config: ServingConfig
    weight_bytes: Mapping[str, int] | None = None
    draft_bytes: Mapping[str, int] | None = None
    sizes: ModelSizes = field(init=False)

    def __post_init__(self) -> None:
        # what the pinned release changes against the calibrated one (data/releases/<version>.yaml)
        self.release = release_profile.load(str(self.scenario.engine.version))
        calibration = self.release.calibrate(self.scenario.calibration)
        if calibration is not self.scenario.calibration:
            self.scenario = dataclasses.replace(self.scenario, calibration=calibration)
        self._decode_fixed: dict[tuple[int, int], tuple] = {}  # decode's batch-only terms, per (batch, tokens)
        self.sizes = model_sizes(self.scenario.model)
        self.arch = self.scenario.model.arch  # every layer's kind (models.arch.ModelArch)
        routed = self.arch.moe  # None: a model without routed experts (every MoE term is then nothing)
        self.num_experts = routed.num_experts if routed else 0
        self.top_k = routed.top_k if routed else 0
        self.expert_width = routed.intermediate_size if routed else 0
        sc, cfg, cal = self.scenario, self.config, self.scenario.calibration
        hw = sc.hardware
        self.g = cfg.gpus_per_rank
        self.moe_g = cfg.tp_size  # MoE and dense weights are sharded over the whole TP group
        # Under DP attention the attention ranks share that group in lockstep: a weight read serves every
        # rank's tokens, but the group's FLOPs are split between the ranks.
        self.flop_g = cfg.tp_size / cfg.dp_size if cfg.enable_dp_attention else cfg.tp_size
        self.bw = hw.memory_bandwidth_tbs * 1e12 * cal.hbm_efficiency
        fmt = sc.quantization.weight_format
        self.wfmt = fmt
        self.kv_bytes = KV_BYTES[cfg.kv_cache_dtype]
        # smaller shards per GPU run kernels less efficiently: each doubling of the TP degree keeps a share
        shard = cal.tp_doubling_efficiency ** math.log2(max(self.moe_g, 1))
        self.linear_flops = hw.peak_tflops[fmt] * 1e12 * cal.gemm_efficiency[fmt] * shard
        attn_eff = ATTENTION_BACKEND_EFFICIENCY.get(cfg.attention_backend, 0.5)
        attn_shard = cal.tp_doubling_efficiency ** math.log2(max(self.g, 1))
        bf16 = hw.peak_tflops["bf16"] * 1e12 * attn_eff * attn_shard
        # attention kernels by class (attention.LayerGroup.sparse): the sparse-MLA kernels and the DSA indexer
        # (fitted on GLM-5's figures, the only sparse-attention data: the kernel sheet's where it has them, else the
        # calibration's), the dense FlashAttention-style kernels (from their public benchmarks), and linear
        # attention's recurrent kernels (``linear_flops_rate``: the calibration's ``attention_efficiency``)
        sheet = kernel_sheet.load(hw.gfx_arch) if hw.gfx_arch else None
        sparse_eff = sheet.sparse_mla_efficiency if sheet and sheet.sparse_mla_efficiency else cal.attention_efficiency
        self.linear_attn_flops = bf16 * cal.attention_efficiency
        self.attn_flops = bf16 * sparse_eff
        self.dense_attn_flops = bf16 * cal.dense_attention_efficiency
        self.idx_flops = hw.peak_tflops.get("fp8", hw.peak_tflops["bf16"]) * 1e12 * sparse_eff * attn_shard
        # the routed experts' kernel: from the architecture's kernel sheet (aiter's tuned fused MoE, measured) where it
        # has this dtype, else the calibrated constants; an untuned selection runs at the fallback's share of it
        backend = MOE_BACKEND_EFFICIENCY.get(cfg.moe_runner_backend, 0.7)
        fallback = 1.0 if cfg.moe_tuned else cal.moe_fallback_efficiency
        moe_kernel = sheet.fused_moe if sheet else None
        self._moe_sheet: tuple[kernel_sheet.MoEKernel, dict] | None = None
        self._moe_factors: dict[float, float] = {}
        inter_dim = self.expert_width / max(self.moe_g, 1)
        kernel_eff = moe_kernel.compute_efficiency(fmt, inter_dim) if moe_kernel and routed else None
        if moe_kernel is not None and kernel_eff is not None:
            if not cfg.moe_tuned and moe_kernel.untuned_share is not None:
                fallback = moe_kernel.untuned_share
            self.moe_flops = hw.peak_tflops[fmt] * 1e12 * kernel_eff * backend * fallback
            self.moe_bw = hw.memory_bandwidth_tbs * 1e12 * moe_kernel.bandwidth * fallback**0.5
            # where the sheet lists the very shape the experts run (the shared expert runs beside them, with the
            # dense weights), that row's measured time replaces the curve's (``moe_rates``)
            self._moe_sheet = (moe_kernel, {"model_dim": sc.model.hidden_size, "inter_dim": inter_dim,
                                            "experts": self.num_experts, "top_k": self.top_k, "dtype": fmt})  # fmt: skip
        else:
            self.moe_flops = hw.peak_tflops[fmt] * 1e12 * cal.gemm_efficiency[fmt] * shard * backend * fallback
            self.moe_bw = self.bw * cal.moe_bandwidth_efficiency * fallback**0.5
        self.link_bw = hw.interconnect_gbs * 1e9
        s = self.sizes
        loaded = dict(self.weight_bytes or reference_weight_bytes(sc))
        self.loaded_bytes = sum(loaded.values())
        experts = loaded.get("routed_experts", 0)
        self.expert_bytes = experts / max(s.moe_layers * self.num_experts, 1)
        # bytes every forward reads whatever the routing (the embedding is a lookup, not a stream)
        self.fixed_weight_bytes = self.loaded_bytes - experts - loaded.get("embedding", 0) - loaded.get("mtp", 0)
        self.layer_fixed_bytes = (self.fixed_weight_bytes - loaded.get("lm_head", 0)) / s.layers
        self.lm_head_bytes = loaded.get("lm_head", 0)
        # one MTP layer as the draft class loaded it, in the dtypes the checkpoint stores it in (a layer the vendor
        # kept unquantized streams more bytes every draft step); its head where it has its own, else the target's
        drafted = dict(self.draft_bytes or {})
        if drafted:
            mtp_layers = max(self.arch.mtp.num_layers if self.arch.mtp else 1, 1)
            d_experts = drafted.get("routed_experts", 0)
            self.draft_expert_bytes = d_experts / max(mtp_layers * self.num_experts, 1)
            self.draft_layer_fixed_bytes = (sum(drafted.values()) - d_experts - drafted.get("embedding", 0)
                                            - drafted.get("lm_head", 0)) / mtp_layers  # fmt: skip
            self.draft_lm_head_bytes = drafted.get("lm_head") or self.lm_head_bytes
        else:
            self.draft_expert_bytes, self.draft_layer_fixed_bytes = self.expert_bytes, self.layer_fixed_bytes
            self.draft_lm_head_bytes = self.lm_head_bytes
        self.active_linear_params = (
            s.layers * s.attention_per_layer
            + s.moe_layers * s.shared_expert_params
            + (s.layers - s.moe_layers) * s.dense_mlp_params
            + s.lm_head_params
        )
        # attention by layer kind: keys read, bytes and FLOPs per key, linear attention's state (attention.py)
        self.attention = layer_groups(self.arch, cfg, self.kv_bytes)
        # how each group's decode (verify) attention streams its KV: the kernel the flags select, at its measured share
        # of the HBM peak where the kernel sheet has one (perf/decode_attention.py), else at the calibrated stream
        self.decode_kv: list[DecodeKV] = [
            decode_kv(grp, cfg, sheet, hw.memory_bandwidth_tbs * 1e12, self.bw) for grp in self.attention
        ]
        # bytes of the token pools per token of max_total_num_tokens, as the release sizes them (engine/pools.py):
        # each GPU of an attention group holds all of MLA's latent, only its own share of GQA's KV heads, no KV
        # for linear attention, and a hybrid sliding-window model's sliding layers in a smaller pool of their own
        self.kv_token_bytes = kv_cell_bytes(self.arch, cfg)
        self.model_kernels = model_kernels(self.arch)
        # the sparse-attention kernels' latency floor per decode step (calibration.sparse_attention_latency_us)
        sparse_layers = sum(g.count for g in self.attention if g.sparse)
        self.sparse_latency = sparse_layers * cal.sparse_attention_latency_us * 1e-6
        self.draft_layer_kernels = draft_layer_kernels(self.arch)

    # --- building blocks -------------------------------------------------------------------------------

    def total_weight_bytes(self) -> float:
        return float(self.loaded_bytes)

    def moe_rates(self, tokens: float) -> tuple[float, float]:
        """The routed experts' stream (bytes/s a GPU) and FLOP rate with ``tokens`` tokens in the layer: the kernel
        sheet's curve, or the tuned kernel's measured time where the sheet lists the model's exact shape
        (``kernel_sheet.MoEKernel.shape_factor``), or the calibration's constants where it has no sheet."""
        if self._moe_sheet is None:
            return self.moe_bw, self.moe_flops
        factor = self._moe_factors.get(tokens)
        if factor is None:
            kernel, shape = self._moe_sheet
            hw = self.scenario.hardware
            factor = kernel.shape_factor(shape, tokens, hw.peak_tflops, hw.memory_bandwidth_tbs)
            self._moe_factors[tokens] = factor
        return self.moe_bw / factor, self.moe_flops / factor

    def experts_touched(self, tokens: float) -> float:
        e, k = self.num_experts, self.top_k
        return e * (1.0 - (1.0 - k / e) ** tokens) if e else 0.0

    def allreduce_time(self, tokens: float) -> float:
        """All-reduces of one forward over the TP group (two per layer), fused or not."""
        g = self.moe_g
        if g <= 1:
            return 0.0
        cal = self.scenario.calibration
        per = cal.allreduce_latency_us * 1e-6 * (1 + 0.1 * (g - 1))
        per += tokens * self.scenario.model.hidden_size * 2 * 2 * (g - 1) / g / (self.link_bw * (g - 1))
        t = 2 * self.sizes.layers * per
        if self.config.enable_aiter_allreduce_fusion:
            t *= 1.0 - cal.allreduce_fusion_saving
        if self.config.enable_dp_attention and self.config.dp_size > 1:
            t *= 1.5  # gather before and scatter after the MoE instead of one all-reduce
        return t

    def kernel_overhead(self, batch: int, layers: int | None = None) -> float:
        """The kernels' fixed cost of one forward: ``kernel_overhead_us`` per kernel, the kernels counted from the
        model's own layers (``kernels.py``). ``layers``: a draft's forward of that many layers (its MTP layer's
        kinds), or the whole model when it is the model's depth."""
        cal = self.scenario.calibration
        if layers is None or layers >= self.sizes.layers:
            n = self.model_kernels
        else:
            n = layers * self.draft_layer_kernels
        t = n * cal.kernel_overhead_us * 1e-6
        if self.config.disable_cuda_graph or batch > self.config.cuda_graph_max_bs:
            t *= cal.eager_overhead_factor
        return t

    def attention_flops(self, grp: LayerGroup) -> float:
        """The FLOP rate of ``grp``'s attention kernels on one GPU (its kernel class's efficiency)."""
        return self.attn_flops if grp.sparse else self.dense_attn_flops

    def request_latency(self, input_tokens: int) -> float:
        """Tokenization and HTTP handling of one request before it reaches the scheduler."""
        cal = self.scenario.calibration
        return cal.request_overhead_ms * 1e-3 + input_tokens * cal.tokenize_us_per_token * 1e-6

    # --- steps ------------------------------------------------------------------------------------------

    def prefill(self, new_tokens: int, contexts: list[tuple[int, int]], decode_batch: int = 0) -> StepCost:
        """A prefill (extend) step over ``contexts`` = [(prefix_len, new_len), ...] summing to new_tokens."""
        s, g = self.sizes, self.g
        c = StepCost()
        attention = 0.0
        for grp in self.attention:
            if grp.linear:  # a chunked scan over the new tokens, from the state the prefix left
                attention += grp.count * sum(new for _, new in contexts) * grp.scan_flops_per_token / (
                    g * self.linear_attn_flops
                )
                continue
            keys = idx_keys = prefix_keys = 0.0
            for prefix, new in contexts:
                # each new token attends to its prefix and the new tokens before it (at most the group's cap)
                mean_ctx = prefix + new / 2
                keys += new * grp.keys(mean_ctx)
                idx_keys += new * mean_ctx
                prefix_keys += prefix
            flops = self.attention_flops(grp)
            if not grp.sparse:  # a dense kernel runs below its peak over few keys per query
                per_query = keys / max(new_tokens, 1)
                flops *= per_query / (per_query + ATTENTION_HALF_KEYS)
            attention += grp.count * (
                (keys * grp.prefill_flops_per_key + prefix_keys * grp.prefix_flops_per_key) / (g * flops)
                + idx_keys * grp.indexer_flops_per_key / (g * self.idx_flops)
            )
        c.prefill_attention = attention
        tokens = new_tokens + decode_batch
        dense_flops = 2 * tokens * self.active_linear_params
        c.prefill_dense = max(
            dense_flops / (self.flop_g * self.linear_flops), self.fixed_weight_bytes / (self.moe_g * self.bw)
        )
        moe_flops = 2 * tokens * self.top_k * s.moe_layers * s.expert_params
        moe_bytes = s.moe_layers * self.experts_touched(tokens) * self.expert_bytes
        moe_bw, moe_rate = self.moe_rates(tokens)
        c.prefill_moe = max(moe_flops / (self.flop_g * moe_rate), moe_bytes / (self.moe_g * moe_bw))
        c.communication = self.allreduce_time(tokens)
        c.overhead = self.kernel_overhead(batch=10**9) + self.scenario.calibration.scheduler_overhead_ms * 1e-3
        return c

    def decode(self, batch: int, sum_context: float, tokens_per_seq: int = 1) -> StepCost:
        """One decode (or speculative verify) step: ``batch`` sequences, ``tokens_per_seq`` tokens each."""
        t = self.decode_terms(batch, sum_context, tokens_per_seq)
        c = StepCost()
        c.decode = max(t["weight_reads"] + t["kv_reads"] + t["state_reads"], t["compute"])
        c.communication = t["communication"]
        c.overhead = t["kernel_launch"] + (t["draft"] if self.config.speculative else 0.0)
        c.overhead += self.cpu_exposed(c.total, t["scheduler"])
        return c

    def cpu_exposed(self, gpu: float, cpu: float) -> float:
        """What of a step's CPU work (``scheduler``: scheduling, sampling's bookkeeping, output processing, graph
        launch) the step pays on top of its GPU time. SGLang's overlap scheduler (``event_loop_overlap``, on by
        default; spec v2 keeps it for top-k 1 drafts in 0.5.12) prepares the next batch and processes the last
        one's output while the GPU runs this one, so only CPU work longer than the GPU's shows; without it
        (``--disable-overlap-schedule``, top-k > 1 drafts) the two run one after the other. The same for every
        model: a small model steps at its GPU time, not at the CPU's fixed cost plus it."""
        if self.config.disable_overlap_schedule:
            return cpu
        return max(cpu - gpu, 0.0)

    def decode_terms(self, batch: int, sum_context: float, tokens_per_seq: int = 1) -> dict[str, float]:
        """The terms of one decode (verify) step before ``decode`` combines them, in seconds: streaming the
        weights, the KV cache and linear attention's recurrent state (``weight_reads``, ``kv_reads``,
        ``state_reads``) overlaps with the matrix work (``compute``), so the step pays the larger of the two; TP
        all-reduces (``communication``), kernel launches
        (``kernel_launch``), the CPU scheduler (``scheduler``) and the draft model's steps (``draft``, 0
        without speculation) add to it. For reports: which term a step's time is made of."""
        # the batch-only terms are remembered per (batch, tokens_per_seq); only the context's (KV reads,
        # attention) are computed per step: this is the simulator's hot path
        key = (batch, tokens_per_seq)
        fixed = self._decode_fixed.get(key)
        if fixed is None:
            fixed = self._decode_fixed[key] = self._batch_terms(batch, tokens_per_seq)
        tokens, linear_terms, base_flops, terms = fixed
        mean_ctx = sum_context / batch if batch else 0.0
        kv_time = attention = 0.0
        for grp, linear_term, kv in zip(self.attention, linear_terms, self.decode_kv, strict=True):  # groups in order
            if linear_term is not None:
                attention += linear_term
                continue
            per_seq_kv = grp.count * (grp.keys(mean_ctx) * grp.kv_bytes_per_key + mean_ctx * grp.indexer_bytes_per_key)
            kv_time += batch * kv.reads(tokens_per_seq) * per_seq_kv / kv.bandwidth
            attention += tokens * grp.count * grp.keys(mean_ctx) * grp.flops_per_key / (self.g * self.attention_flops(grp))
        out = dict(terms)
        out["kv_reads"] = kv_time
        out["compute"] = base_flops + attention
        return out

    def _batch_terms(self, batch: int, tokens_per_seq: int) -> tuple:
        s, cal = self.sizes, self.scenario.calibration
        tokens = batch * tokens_per_seq
        expert_bytes = s.moe_layers * self.experts_touched(tokens) * self.expert_bytes / self.moe_g
        per_seq_state = 0.0
        linear_terms: list[float | None] = []
        for grp in self.attention:
            if grp.linear:
                per_seq_state += grp.count * grp.state_bytes
                linear_terms.append(tokens * grp.count * grp.step_flops_per_token / (self.g * self.linear_attn_flops))
            else:
                linear_terms.append(None)
        state_bytes = batch * state_traffic(tokens_per_seq) * per_seq_state
        moe_flops = 2 * tokens * self.top_k * s.moe_layers * s.expert_params
        flops = (2 * tokens * self.active_linear_params) / (self.flop_g * self.linear_flops)
        moe_bw, moe_rate = self.moe_rates(tokens)
        flops += moe_flops / (self.flop_g * moe_rate)
        terms = {
            "weight_reads": self.fixed_weight_bytes / self.moe_g / self.bw + expert_bytes / moe_bw,
            "kv_reads": 0.0,
            "state_reads": state_bytes / self.bw,
            "compute": 0.0,
            "communication": self.allreduce_time(tokens),
            "kernel_launch": self.kernel_overhead(batch) + self.sparse_latency,
            "scheduler": (cal.scheduler_overhead_ms + cal.decode_step_overhead_ms) * 1e-3,
            "draft": self.draft_time(batch) if self.config.speculative else 0.0,
        }
        return tokens, linear_terms, flops, terms

    def draft_time(self, batch: int) -> float:
        """The draft model's steps for one speculative iteration, and the host work speculation adds to it.

        An MTP draft runs one layer + the LM head per step; a draft that is the target's own class runs every
        layer; a separate draft checkpoint (EAGLE3) reads its own weights, split over the TP group as the target's
        are, and runs its own layers. Every step after the first widens each of the ``topk`` kept paths by its
        ``topk`` best tokens (``batch * topk`` tokens through the draft, a top-k over ``topk**2`` candidates),
        and a tree (top-k above 1) is built and pruned to the verify budget before the verify
        (``build_tree_kernel_efficient``, ``organize_draft_results``): ``TREE_KERNELS`` launches more.

        Spec v2 (the overlap scheduler's speculative worker) prepares the next iteration on the host while this one
        runs; without it (spec v1, or a release's synchronous path) the host waits for the verify's accepted lengths
        every iteration (``SPEC_V1_HOST_S``). Which configurations keep the overlap is the release's
        (``release_profile``: 0.5.12 runs trees, top-k above 1, on spec v1; 0.5.13 on spec v2)."""
        cfg, s = self.config, self.sizes
        k = max(cfg.speculative_eagle_topk, 1)
        if cfg.draft_weight_bytes:
            per_step = cfg.draft_weight_bytes / self.g / self.bw
            per_step += self.kernel_overhead(batch, layers=cfg.draft_layers)
            per_step += self.allreduce_time(batch * k) * cfg.draft_layers / s.layers + SPEC_STEP_OVERHEAD_S
            draft = cfg.speculative_num_steps * per_step
        else:
            if cfg.draft_is_target:  # every layer of the target
                layers, expert, fixed, head = s.layers, self.expert_bytes, self.layer_fixed_bytes, self.lm_head_bytes
            else:  # its MTP layer
                layers, expert, fixed, head = 1, self.draft_expert_bytes, self.draft_layer_fixed_bytes, \
                    self.draft_lm_head_bytes  # fmt: skip
            experts = layers * self.experts_touched(batch * k) * expert / self.moe_g
            per_step = (layers * fixed + head) / self.moe_g / self.bw
            per_step += experts / self.moe_rates(batch * k)[0]
            per_step += self.kernel_overhead(batch, layers=layers) + self.allreduce_time(batch * k) * layers / s.layers
            per_step += SPEC_STEP_OVERHEAD_S
            draft = cfg.speculative_num_steps * per_step
        if k > 1:
            draft += TREE_KERNELS * self.scenario.calibration.kernel_overhead_us * 1e-6
        if not self.release.overlaps_speculation(cfg.disable_overlap_schedule, k):
            draft += SPEC_V1_HOST_S
        return draft

    # --- speculative decoding ----------------------------------------------------------------------------

    def accept_length(self, content: str = NATURAL_TEXT) -> float:
        """Expected tokens per verify step for prompts of this ``content`` (``workload.prompt_content``).

        A chain of draft positions: position *i* is accepted with probability ``rate * decay**i``
        (``acceptance_by_depth``). When the model writes natural text (a chat answer, a continuation of real
        text) ``rate`` and ``decay`` are the drafter's, as measured on chat prompts. Continuing raw token noise
        (random token ids without a chat template) the greedy output settles into repetition, which removes a
        share of the first position's misses (``TOKEN_NOISE_MISS_SHARE``) and leaves only the decay of the draft
        itself: an MTP layer reused for every step (``MTP_REUSE_DECAY``). InferenceX added
        ``--use-chat-template`` to its MTP benchmarks because "without this arg, MTP acceptance rates are
        artificially high" (SemiAnalysisAI/InferenceX PR 649)."""
        cfg = self.config
        if not cfg.speculative:
            return 1.0
        rate, decay = self.acceptance_by_depth(content)
        return expected_accept_length(
            rate, decay, cfg.speculative_num_steps, cfg.speculative_eagle_topk, cfg.speculative_num_draft_tokens
        )

    def acceptance_by_depth(self, content: str = NATURAL_TEXT) -> tuple[float, float]:
        """``(rate, decay)``: the draft's candidate at depth *i* is right with probability ``rate * decay**i``.

        An MTP head is trained to predict one token ahead from the target's hidden state; SGLang's EAGLE worker
        reuses that one layer for every further step, fed its own hidden state, so each step's acceptance is
        lower than the one before even where the content is predictable (``MTP_REUSE_DECAY``). On natural text
        the content's own uncertainty adds to it: the decay is the drafter's measured one, never above the
        reuse's. A separate draft checkpoint (EAGLE3, trained over several steps with its own outputs fed back)
        has no reuse decay of its own."""
        cfg = self.config
        if cfg.draft_is_target:  # the model drafting for itself, greedy: it proposes what it will verify
            return 1.0, 1.0
        drafter = self.scenario.model.draft if cfg.draft_weight_bytes else self.scenario.model.mtp
        rate = drafter.acceptance_rate if drafter else 0.6
        decay = drafter.acceptance_decay if drafter else 0.8
        reuse = 1.0 if cfg.draft_weight_bytes else MTP_REUSE_DECAY
        if content == TOKEN_NOISE:
            return 1.0 - (1.0 - rate) * TOKEN_NOISE_MISS_SHARE, reuse
        return rate, min(decay, reuse)

    def tokens_per_verify(self) -> int:
        return max(1, self.config.speculative_num_draft_tokens) if self.config.speculative else 1


def scored_draft_tokens(steps: int, topk: int) -> int:
    """How many candidates an EAGLE draft scores: ``topk`` at its first step, ``topk`` x ``topk`` (each of the
    ``topk`` best paths so far, widened by its ``topk`` best next tokens) at every later one. SGLang 0.5.12 keeps
    the best ``num_draft_tokens - 1`` of them (``eagle_utils.organize_draft_results``, ``torch.topk``), so a
    verify budget larger than this plus the root cannot run."""
    k = max(topk, 1)
    return k + max(steps - 1, 0) * k * k if steps > 0 else 0


def expected_accept_length(alpha: float, decay: float, steps: int, topk: int, draft_tokens: int) -> float:
    """Tokens one verify step yields on average: the root's token plus, for every draft token verified, the
    probability that the path to it is what the target model writes.

    At depth ``i`` (0-based) the draft's best candidate is the right token with probability ``a = alpha *
    decay**i``; when it is not, its rank-``j`` candidate (``j`` >= 1) is with probability ``(1 - a) *
    candidate_hit(j)`` (``ALTERNATIVE_HIT``: the runners-up are right far less often than the best). A path's
    probability is the product along it. The draft keeps the ``topk`` most likely paths at every step and scores
    their ``topk`` next tokens; the verify step checks the best ``draft_tokens - 1`` of everything scored
    (``scored_draft_tokens``), which always includes a kept node's parent (a path is never likelier than its
    prefix). A top-1 draft is a chain of ``steps`` tokens; a wider tree pruned to a small budget stays deep along
    its likeliest path, as SGLang's does.
    """
    k = max(topk, 1)
    budget = (draft_tokens - 1) if draft_tokens else scored_draft_tokens(steps, k)
    if budget <= 0 or steps <= 0:
        return 1.0
    scored: list[float] = []
    paths = [1.0]
    for i in range(steps):
        ranked = candidate_probabilities(min(alpha * decay**i, 1.0), k)
        widened = sorted((p * q for p in paths for q in ranked), reverse=True)
        scored += widened
        paths = widened[:k]
    return 1.0 + sum(sorted(scored, reverse=True)[:budget])


def candidate_probabilities(a: float, k: int) -> list[float]:
    """How likely the draft's ``k`` best candidates at one depth are the right token, best first: ``a`` for the
    best, then ``(1 - a) * h * (1 - h)**(j - 1)`` for rank ``j`` >= 1 (``h`` = ``ALTERNATIVE_HIT``)."""
    h = ALTERNATIVE_HIT
    return [a] + [(1.0 - a) * h * (1.0 - h) ** (j - 1) for j in range(1, k)]


def single_stream_tpot(model: CostModel, context: int) -> float:
    """Seconds per output token for one request alone on a rank (used to pace the HTTP API)."""
    step = model.decode(1, context, model.tokens_per_verify()).total
    return step / model.accept_length()

