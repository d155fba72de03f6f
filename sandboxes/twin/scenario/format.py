"""The scenario format: what one simulated node is, as frozen dataclasses (docs/twin-scenarios.md).

A scenario names the model (its real ``config.json``, or the fields of a hand-written one), how the checkpoint
stores it (the quantization config as published), the hardware, the engine image and its defects, accuracy,
start-up time and the performance model's calibration. ``loader`` reads a YAML file into these classes; every
field is documented where it is declared. Standard library only (the twin runs in a minimal image).
"""

from __future__ import annotations

import functools
import json
import re
from dataclasses import dataclass, field
from typing import Any


class ScenarioError(ValueError):
    """A scenario file that cannot be used; the message is one line: ``file:line: field: problem``."""


ATTENTION_KINDS = ("mla", "gqa")


@dataclass(frozen=True)
class AttentionSpec:
    num_heads: int
    kind: str = "mla"  # mla: DeepSeek-style latent attention; gqa: grouped-query attention (Llama, Qwen)
    # MLA
    q_lora_rank: int = 0
    kv_lora_rank: int = 0
    qk_nope_head_dim: int = 0
    qk_rope_head_dim: int = 0
    v_head_dim: int = 0
    sparse_topk: int = 0  # 0: dense attention over the whole context
    indexer_heads: int = 0
    indexer_head_dim: int = 0
    # GQA
    num_kv_heads: int = 0
    head_dim: int = 0
    qk_norm: bool = False  # per-head RMSNorm on q and k (Qwen3)


@dataclass(frozen=True)
class MoESpec:
    num_experts: int
    top_k: int
    intermediate_size: int
    num_shared_experts: int = 0


@dataclass(frozen=True)
class MTPSpec:
    """The MTP (next-token prediction) head's behaviour as a draft, and where a hand-written checkpoint keeps it.

    Which class drafts with it, and the names it builds, are the release's (``ModelConfig._config_draft_model``
    and that class's code): never a field here."""

    layer_index: int = -1  # the MTP layer's index in the checkpoint (hand-written models; else the config's)
    checkpoint_prefix: str = ""  # where the checkpoint stores that layer (hand-written models: model.layers.<N>)
    # draft position i is accepted with probability acceptance_rate * acceptance_decay**i on natural text
    acceptance_rate: float = 0.8
    acceptance_decay: float = 0.8


@dataclass(frozen=True)
class DraftSpec:
    """A separate draft checkpoint, served with ``--speculative-draft-model-path`` (an EAGLE3 head trained for
    the model, e.g. a SpecForge export). The workspace holds it as ``draft/`` beside ``model/``; which class
    loads it is its config's ``architectures`` through the release's registry, never a field here."""

    config: Any  # its config.json: a path relative to the scenario, or a mapping (loaded: its JSON text)
    # draft position i is accepted with probability acceptance_rate * acceptance_decay**i on natural text (the
    # draft's model card publishes its average acceptance length at a chain depth: fit these two to it)
    acceptance_rate: float = 0.8
    acceptance_decay: float = 0.8

    @functools.cached_property
    def hf_config(self) -> dict[str, Any]:
        return json.loads(self.config) if isinstance(self.config, str) else dict(self.config or {})


@dataclass(frozen=True)
class ModelSpec:
    """The model. Either ``config`` (its published config.json) or the hand-written fields below it; with a
    config those fields are read from what the release builds of it when the scenario is loaded
    (``models.description``)."""

    served_name: str  # the name /v1/models reports
    config: Any = None  # the model's config.json: a path relative to the scenario, or a mapping (loaded: its JSON text)
    facts: dict[str, Any] = field(default_factory=dict, compare=False)  # answers to what config.json leaves open
    # the checkpoint's published model.safetensors.index.json (or a name<TAB>shape<TAB>dtype listing): how the vendor
    # spells each tensor the release's loaders accept (a path relative to the scenario; loaded: absolute)
    index: str = ""
    index_partial: bool = False  # the index is another checkpoint's (a sibling's, a partial listing): spelling only
    mtp: MTPSpec | None = None  # with a config: the draft's acceptance (the MTP layer itself is the config's)
    draft: DraftSpec | None = None  # a separate draft checkpoint (EAGLE3), served from the workspace's draft/
    # a hand-written model (DeepSeek/GLM key names); with a config, read from it
    architecture: str = ""
    model_type: str = ""
    hidden_size: int = 0
    num_hidden_layers: int = 0
    vocab_size: int = 0
    attention: AttentionSpec | None = None  # the full-attention layers' attention
    moe: MoESpec | None = None
    first_k_dense_replace: int = 0
    dense_intermediate_size: int = 0
    max_position_embeddings: int = 131072
    # the model as the pinned release builds it (``models.description``), set when the scenario is loaded
    derived: Any = field(default=None, compare=False, repr=False)

    @functools.cached_property
    def hf_config(self) -> dict[str, Any]:
        """The model's config.json (without its quantization_config)."""
        if isinstance(self.config, str) and self.config:
            return json.loads(self.config)
        from ..models.legacy import config_from_spec

        return config_from_spec(self)

    @property
    def arch(self) -> Any:
        """The model layer by layer (``models.arch.ModelArch``) as the pinned release builds it (the loader derives
        it from ``hf_config``: ``models.description``)."""
        if self.derived is None:
            raise ScenarioError(f"model {self.served_name}: the scenario was not loaded (scenario.loader.load "
                                "derives the model from the release)")  # fmt: skip
        return self.derived


@dataclass(frozen=True)
class QuantSpec:
    """How the checkpoint is quantized: the ``quantization_config`` as published (``config``), or, for a Quark
    export the twin writes itself, the weight format and the exclude list."""

    weight_format: str = ""  # mxfp4 | fp8 | bf16 (with a config: read from it)
    exclude: tuple[str, ...] = ()  # Quark's exclude list (with a Quark config: read from it)
    config: Any = None  # the published quantization_config: a path relative to the scenario, or a mapping
    # modules the vendor's checkpoint stores unquantized although its quantization_config names none of them (seen
    # in the published checkpoint, when its index is not at hand): Quark-style entries (a name, or ``re:<regex>``)
    stored_unquantized: tuple[str, ...] = ()


@dataclass(frozen=True)
class HardwareSpec:
    """One GPU of the node and how many. ``spec_sheet`` names an AMD data sheet (``data/hardware/<key>.yaml``,
    ``scenario.hardware``) that supplies every field the scenario does not write itself."""

    name: str = ""
    gfx_arch: str = ""
    num_gpus: int = 8
    memory_gb: float = 0.0
    memory_bandwidth_tbs: float = 0.0
    peak_tflops: dict[str, float] = field(default_factory=dict)
    interconnect_gbs: float = 150.0  # one Infinity Fabric (xGMI) link, GB/s
    spec_sheet: str = ""
    cu_count: int = 0


@dataclass(frozen=True)
class JitTrigger:
    flag: str
    above: float | None = None
    equals: Any = None

    def fires(self, value: Any) -> bool:
        if self.above is not None:
            return value is not None and value > self.above
        return value == self.equals


@dataclass(frozen=True)
class JitKernel:
    name: str
    source: str
    when: JitTrigger
    includes: tuple[str, ...] = ()


@dataclass(frozen=True)
class EngineSpec:
    image: str
    version: str
    moe_config_reader: str
    default_moe_config: str
    jit_kernels: tuple[JitKernel, ...] = ()


@dataclass(frozen=True)
class UnguardedInclude:
    file: str
    header: str


@dataclass(frozen=True)
class MoEShape:
    model_dim: int
    inter_dim: int
    experts: int
    top_k: int
    dtype: str

    def key(self) -> str:
        return f"model_dim={self.model_dim}, inter_dim={self.inter_dim}, E={self.experts}, topk={self.top_k}, dtype={self.dtype}"


@dataclass(frozen=True)
class CollectiveFault:
    """An all-reduce path the node's image has a defect on (engine/serving_faults.py): a step whose all-reduce
    takes the path ``allreduce`` with at least ``min_tokens`` tokens hangs or fails."""

    allreduce: str  # aiter_allreduce_fusion | custom_allreduce | quick_allreduce | rccl
    failure: str = "hang"  # hang | error (RCCL reports an error: path rccl only)
    min_tokens: int = 1


@dataclass(frozen=True)
class WorkerFault:
    """A kernel that kills one TP rank's process while serving: on a forward step with at least ``min_tokens``
    tokens, when the served flags satisfy ``when`` (always, without it)."""

    rank: int
    error: str = "memory_access_fault"  # memory_access_fault (the runtime aborts) | illegal_memory_access (raised)
    min_tokens: int = 1
    when: JitTrigger | None = None


@dataclass(frozen=True)
class DefectSpec:
    unguarded_includes: tuple[UnguardedInclude, ...] = ()
    tuned_moe_shapes: tuple[MoEShape, ...] = ()
    collective_faults: tuple[CollectiveFault, ...] = ()
    worker_faults: tuple[WorkerFault, ...] = ()


@dataclass(frozen=True)
class StartupSpec:
    base_seconds: float = 90.0
    per_gb_weights_seconds: float = 0.35
    cuda_graph_seconds_per_bs: float = 0.25


@dataclass(frozen=True)
class Calibration:
    hbm_efficiency: float
    gemm_efficiency: dict[str, float]
    attention_efficiency: float
    moe_fallback_efficiency: float
    kernel_overhead_us: float  # per kernel of a forward, the kernels counted from the model's layers (perf/kernels.py)
    eager_overhead_factor: float
    allreduce_latency_us: float
    allreduce_fusion_saving: float
    scheduler_overhead_ms: float
    # a prefill chunk of 16384 tokens' activations, GB per GPU, where a scenario has its own measurement; None
    # (the default): from the model's layers (engine/activations.py)
    activation_gb_per_gpu: float | None = None
    tp_doubling_efficiency: float = 1.0
    request_overhead_ms: float = 10.0
    # issue 10's mechanisms, calibrated on InferenceX's GLM-5 FP8 figures (docs/twin.md); engine and kernel
    # properties, so a scenario that does not set them gets the calibrated values
    decode_step_overhead_ms: float = 2.5  # per decode (verify) step, on top of the scheduler's; not shrinking with TP
    moe_bandwidth_efficiency: float = 0.8  # routed experts stream at this share of hbm_efficiency
    tokenize_us_per_token: float = 1.0
    # issue 28: the dense FlashAttention-style kernels (MHA/GQA prefill, MLA prefill in MHA form, dense decode), of
    # the bf16 peak; ``attention_efficiency`` stays the sparse-MLA and indexer kernels'. Not fitted: aiter's causal
    # forward attention on MI355X peaks near 1.1 PFLOPS (FlyDSL PR 225's table: 928 TFLOPS at 84 % of aiter asm)
    dense_attention_efficiency: float = 0.45
    # per DSA layer and decode (verify) step: the sparse-MLA and indexer kernels' latency floor beyond their
    # launches (the indexer's top-k, the TileLang sparse kernels at a few tokens). GLM-5's decode fixed cost that its
    # counted kernels do not explain: fitted on InferenceX's GLM-5 points (the only sparse-attention data), the
    # 4.0 ms a step the calibration charged as CPU time before the overlap scheduler hid it (78 layers x 51.3 us)
    sparse_attention_latency_us: float = 51.3


@dataclass(frozen=True)
class Scenario:
    name: str
    description: str
    model: ModelSpec
    quantization: QuantSpec
    hardware: HardwareSpec
    engine: EngineSpec
    accuracy: dict[str, float]
    calibration: Calibration
    defects: DefectSpec = field(default_factory=DefectSpec)
    startup: StartupSpec = field(default_factory=StartupSpec)
    path: str = ""
    lines: dict[str, int] = field(default_factory=dict, compare=False, repr=False)  # field path -> YAML line

    def where(self, field_path: str) -> str:
        """``file:line: field_path`` for a message about one field (the nearest enclosing field's line)."""
        probe = field_path
        while probe and probe not in self.lines:
            probe = probe.rpartition(".")[0] if "." in probe else ""
        return f"{self.path}:{self.lines.get(probe, 1)}: {field_path}"

    def exclude_entries(self) -> list[str]:
        """The checkpoint's exclude list with every ``{a..b}`` range expanded."""
        out: list[str] = []
        for entry in self.quantization.exclude:
            out.extend(expand_ranges(entry))
        return out


_RANGE = re.compile(r"\{(\d+)\.\.(\d+)\}")


def expand_ranges(entry: str) -> list[str]:
    """``"a.{1..3}.b"`` -> ``["a.1.b", "a.2.b", "a.3.b"]``; entries without a range come back alone."""
    m = _RANGE.search(entry)
    if not m:
        return [entry]
    lo, hi = int(m.group(1)), int(m.group(2))
    out: list[str] = []
    for i in range(lo, hi + 1):
        out.extend(expand_ranges(entry[: m.start()] + str(i) + entry[m.end() :]))
    return out


