"""Twin scenarios: the model, checkpoint, hardware, defects and calibration of one simulated node.

A scenario is a YAML file (format: docs/twin-scenarios.md). It is loaded into the frozen dataclasses below;
any problem is reported as ``ScenarioError`` naming the file, the line and the field. The twin runs inside a
minimal image (python3 + PyYAML), so this module uses the standard library and PyYAML only.
"""

from __future__ import annotations

import dataclasses
import functools
import re
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

SCENARIO_DIR = Path(__file__).resolve().parents[1] / "scenarios"
DEFAULT_SCENARIO = "glm52_mi355x"


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
    layer_index: int
    checkpoint_prefix: str
    engine_prefix: str
    draft_model_file: str
    draft_model_class: str = "DeepseekV3ForCausalLMNextN"
    acceptance_rate: float = 0.8
    acceptance_decay: float = 0.8


@dataclass(frozen=True)
class ModelSpec:
    served_name: str
    architecture: str
    model_type: str
    hidden_size: int
    num_hidden_layers: int
    vocab_size: int
    attention: AttentionSpec
    moe: MoESpec
    mtp: MTPSpec | None = None
    first_k_dense_replace: int = 0
    dense_intermediate_size: int = 0
    max_position_embeddings: int = 131072

    @functools.cached_property
    def config(self) -> dict[str, Any]:
        """The model's config.json (without its quantization_config)."""
        from ..models.legacy import config_from_spec

        return config_from_spec(self)

    @functools.cached_property
    def arch(self) -> Any:
        """The model layer by layer (``models.arch.ModelArch``), read from ``config`` as any config is read."""
        from ..models.config_reader import read_arch
        from ..models.legacy import LEGACY_FACTS

        return read_arch(self.config, LEGACY_FACTS)


@dataclass(frozen=True)
class QuantSpec:
    weight_format: str  # mxfp4 | fp8 | bf16
    exclude: tuple[str, ...] = ()


@dataclass(frozen=True)
class HardwareSpec:
    name: str
    gfx_arch: str
    num_gpus: int
    memory_gb: float
    memory_bandwidth_tbs: float
    peak_tflops: dict[str, float]
    interconnect_gbs: float = 150.0


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
    kernel_overhead_us: float
    kernels_per_layer: int
    eager_overhead_factor: float
    allreduce_latency_us: float
    allreduce_fusion_saving: float
    scheduler_overhead_ms: float
    activation_gb_per_gpu: float
    tp_doubling_efficiency: float = 1.0
    request_overhead_ms: float = 10.0
    # issue 10's mechanisms, calibrated on InferenceX's GLM-5 FP8 figures (docs/twin.md); engine and kernel
    # properties, so a scenario that does not set them gets the calibrated values
    decode_step_overhead_ms: float = 2.5  # per decode (verify) step, on top of the scheduler's; not shrinking with TP
    moe_bandwidth_efficiency: float = 0.8  # routed experts stream at this share of hbm_efficiency
    tokenize_us_per_token: float = 1.0


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


def resolve(name_or_path: str | Path) -> Path:
    """A scenario name (a file in ``scenarios/``) or a path to a YAML file."""
    p = Path(name_or_path)
    if p.suffix in (".yaml", ".yml") or p.exists():
        if not p.exists():
            raise ScenarioError(f"{p}: no such scenario file")
        return p
    candidate = SCENARIO_DIR / f"{name_or_path}.yaml"
    if not candidate.exists():
        known = ", ".join(sorted(q.stem for q in SCENARIO_DIR.glob("*.yaml")))
        raise ScenarioError(f"{name_or_path}: unknown scenario (known: {known})")
    return candidate


def available() -> list[str]:
    return sorted(q.stem for q in SCENARIO_DIR.glob("*.yaml"))


def load(name_or_path: str | Path = DEFAULT_SCENARIO) -> Scenario:
    path = resolve(name_or_path)
    text = path.read_text()
    try:
        node = yaml.compose(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = mark.line + 1 if mark else 0
        raise ScenarioError(f"{path}:{line}: not valid YAML: {getattr(exc, 'problem', exc)}") from None
    if node is None or not isinstance(node, yaml.MappingNode):
        raise ScenarioError(f"{path}:1: a scenario is a mapping of sections")
    lines: dict[str, int] = {}
    scenario = _build(Scenario, node, str(path), "", lines)
    scenario = dataclasses.replace(scenario, path=str(path), lines=lines)
    _check(scenario)
    return scenario


# --- what a scenario must not say: checked after parsing, each problem one located line ------------------

WEIGHT_FORMATS = ("mxfp4", "fp8", "bf16")
MOE_DTYPES = ("mxfp4", "fp8", "bf16")


def _check(sc: Scenario) -> None:
    def fail(where: str, problem: str) -> typing.NoReturn:
        raise ScenarioError(f"{sc.where(where)}: {problem}")

    a = sc.model.attention
    if a.kind not in ATTENTION_KINDS:
        fail("model.attention.kind", f"unknown attention kind {a.kind!r} (expected one of {', '.join(ATTENTION_KINDS)})")
    need = ("kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim") if a.kind == "mla" else (
        "num_kv_heads", "head_dim")
    for name in need:
        if getattr(a, name) <= 0:
            fail(f"model.attention.{name}", f"{a.kind} attention needs a positive {name}")
    if a.kind == "gqa":
        if a.num_heads % a.num_kv_heads:
            fail("model.attention.num_kv_heads", f"num_heads ({a.num_heads}) is not a multiple of it")
        if a.sparse_topk or a.kv_lora_rank or a.q_lora_rank:
            fail("model.attention.kind", "gqa attention has no latent ranks or sparse indexer (those are MLA's)")
    fmt = sc.quantization.weight_format
    if fmt not in WEIGHT_FORMATS:
        fail("quantization.weight_format", f"unknown format {fmt!r} (expected one of {', '.join(WEIGHT_FORMATS)})")
    for table, where in ((sc.hardware.peak_tflops, "hardware.peak_tflops"),
                         (sc.calibration.gemm_efficiency, "calibration.gemm_efficiency"), (sc.accuracy, "accuracy")):
        if fmt not in table:
            fail(where, f"has no entry for the weight format {fmt!r}")
    for i, entry in enumerate(sc.quantization.exclude):
        if entry.startswith("re:"):
            try:
                re.compile(entry[3:])
            except re.error as exc:
                fail(f"quantization.exclude[{i}]", f"bad regular expression {entry[3:]!r}: {exc}")
    for i, shape in enumerate(sc.defects.tuned_moe_shapes):
        if shape.dtype not in MOE_DTYPES:
            fail(f"defects.tuned_moe_shapes[{i}].dtype",
                 f"unknown MoE dtype {shape.dtype!r} (expected one of {', '.join(MOE_DTYPES)})")
    flags = _sglang_flags()
    for i, kernel in enumerate(sc.engine.jit_kernels):
        if kernel.when.flag not in flags:
            fail(f"engine.jit_kernels[{i}].when.flag", f"{kernel.when.flag!r} is not an SGLang server argument")
    _check_serving_defects(sc.defects, sc.hardware.num_gpus, flags, fail)
    m = sc.model
    if m.mtp is not None:
        if m.mtp.layer_index != m.num_hidden_layers:
            fail("model.mtp.layer_index", f"SGLang's NextN loader takes the MTP layer at num_hidden_layers "
                                          f"({m.num_hidden_layers}), not {m.mtp.layer_index}")
        want = f"model.layers.{m.mtp.layer_index}"
        if m.mtp.checkpoint_prefix != want:
            fail("model.mtp.checkpoint_prefix", f"SGLang's NextN loader reads the MTP layer from {want!r}")


COLLECTIVE_PATHS = ("aiter_allreduce_fusion", "custom_allreduce", "quick_allreduce", "rccl")
COLLECTIVE_FAILURES = ("hang", "error")
WORKER_ERRORS = ("memory_access_fault", "illegal_memory_access")


def _check_serving_defects(defects: DefectSpec, num_gpus: int, flags: set[str], fail: Any) -> None:
    """The defects that fail while serving (``collective_faults``, ``worker_faults``): known paths and errors, a
    rank the node has, a trigger on a real flag."""
    for i, cf in enumerate(defects.collective_faults):
        where = f"defects.collective_faults[{i}]"
        if cf.allreduce not in COLLECTIVE_PATHS:
            fail(f"{where}.allreduce", f"unknown all-reduce path {cf.allreduce!r} (expected one of "
                                       f"{', '.join(COLLECTIVE_PATHS)})")
        if cf.failure not in COLLECTIVE_FAILURES:
            fail(f"{where}.failure", f"unknown failure {cf.failure!r} (expected one of {', '.join(COLLECTIVE_FAILURES)})")
        if cf.failure == "error" and cf.allreduce != "rccl":
            fail(f"{where}.failure", "only RCCL reports an error (the custom all-reduce kernels wait: use hang)")
        if cf.min_tokens < 1:
            fail(f"{where}.min_tokens", "must be at least 1")
    for i, wf in enumerate(defects.worker_faults):
        where = f"defects.worker_faults[{i}]"
        if wf.error not in WORKER_ERRORS:
            fail(f"{where}.error", f"unknown error {wf.error!r} (expected one of {', '.join(WORKER_ERRORS)})")
        if not 0 <= wf.rank < num_gpus:
            fail(f"{where}.rank", f"the node has ranks 0 to {num_gpus - 1}, not {wf.rank}")
        if wf.min_tokens < 1:
            fail(f"{where}.min_tokens", "must be at least 1")
        if wf.when is not None and wf.when.flag not in flags:
            fail(f"{where}.when.flag", f"{wf.when.flag!r} is not an SGLang server argument")


def _sglang_flags() -> set[str]:
    from ..engine.server_args import build_parser  # the twin's copy of SGLang's command line

    return {a.dest for a in build_parser()._actions}


# --- a small typed builder over YAML nodes, so that every error carries its line --------------------------


def _fail(file: str, node: yaml.Node, where: str, problem: str) -> typing.NoReturn:
    raise ScenarioError(f"{file}:{node.start_mark.line + 1}: {where or '(top)'}: {problem}")


def _scalar(node: yaml.Node) -> Any:
    return yaml.safe_load(yaml.serialize(node))


def _build(tp: Any, node: yaml.Node, file: str, where: str, lines: dict[str, int] | None = None) -> Any:
    if lines is not None and where:
        lines.setdefault(where, node.start_mark.line + 1)
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):
        if isinstance(node, yaml.ScalarNode) and node.tag.endswith(":null") and type(None) in args:
            return None
        inner = [a for a in args if a is not type(None)]
        last: ScenarioError | None = None
        for a in inner:
            try:
                return _build(a, node, file, where, lines)
            except ScenarioError as exc:
                last = exc
        assert last is not None
        raise last
    if tp is Any:
        return _scalar(node)
    if dataclasses.is_dataclass(tp):
        if not isinstance(node, yaml.MappingNode):
            _fail(file, node, where, f"expected a mapping for {tp.__name__}")
        hints = typing.get_type_hints(tp)
        fields = {f.name: f for f in dataclasses.fields(tp) if f.name not in ("path", "lines")}
        values: dict[str, Any] = {}
        for key_node, value_node in node.value:
            key = key_node.value
            sub = f"{where}.{key}" if where else key
            if key not in fields:
                _fail(file, key_node, sub, f"unknown field (expected one of: {', '.join(fields)})")
            values[key] = _build(hints[key], value_node, file, sub, lines)
        for name, f in fields.items():
            missing = f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
            if missing and name not in values:
                _fail(file, node, f"{where}.{name}" if where else name, "required field is missing")
        return tp(**values)
    if origin is tuple or origin is list:
        if not isinstance(node, yaml.SequenceNode):
            _fail(file, node, where, "expected a list")
        item_tp = args[0]
        return tuple(_build(item_tp, n, file, f"{where}[{i}]", lines) for i, n in enumerate(node.value))
    if origin is dict:
        if not isinstance(node, yaml.MappingNode):
            _fail(file, node, where, "expected a mapping")
        return {k.value: _build(args[1], v, file, f"{where}.{k.value}", lines) for k, v in node.value}
    if not isinstance(node, yaml.ScalarNode):
        _fail(file, node, where, f"expected a {tp.__name__}")
    value = _scalar(node)
    if tp is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if tp is str and isinstance(value, (int, float)) and not isinstance(value, bool):
        return str(value)
    if not isinstance(value, tp) or (tp is int and isinstance(value, bool)):
        _fail(file, node, where, f"expected {tp.__name__}, got {value!r}")
    return value
