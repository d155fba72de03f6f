"""Task specs: what the agent is asked to bring up, where, how it is measured, and what counts as done.

A task is a YAML file validated by the pydantic models below. ``load_task`` turns any problem into a
``TaskError`` whose message is one line naming the file, the line and the field, e.g.
``tasks/x.yaml:23: targets[0].min: Input should be a valid number``.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

Scalar = int | float | str | bool


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ModelInfo(Strict):
    name: str
    architecture: str
    quantization: str = Field(description="weight format of the checkpoint, e.g. mxfp4")


class HardwareInfo(Strict):
    accelerator: str
    gpus: int = Field(gt=0)
    gpu_memory_gb: float | None = None


class DockerSpec(Strict):
    """How containers are started. Defaults are AMD's recipe for the SGLang ROCm image; a task overrides any."""

    image: str = "lmsysorg/sglang:v0.5.12-rocm700-mi35x"
    engine: Literal["sglang", "twin"] = "sglang"  # which engine's argv templates run in this image
    devices: list[str] = ["/dev/kfd", "/dev/dri"]
    group_add: list[str] = ["video"]
    ipc_mode: str | None = "host"
    shm_size: str = "16g"
    cap_add: list[str] = ["SYS_PTRACE"]
    security_opt: list[str] = ["seccomp=unconfined"]
    network: Literal["bridge", "host"] = "bridge"
    workspace_mount: str = "/workspace"
    mounts: dict[str, str] = Field(default_factory=dict, description="'{workspace}/sglang' -> path in the image")
    env: dict[str, str] = {}
    gpus: list[int] | None = Field(None, description="a GPU subset for partial-node trials (HIP_VISIBLE_DEVICES)")


class SandboxSpec(Strict):
    kind: Literal["auto", "local", "docker"] = "auto"
    docker: DockerSpec = DockerSpec()


class EngineSpec(Strict):
    """How to drive one engine, as argv templates.

    Placeholders: ``{python}`` (this interpreter), ``{workspace}`` (the workspace root), ``{host}``,
    ``{port}``, ``{base_url}``, ``{output_file}``. Benchmark and tuner arguments are appended as ``--flag value``.
    """

    launch: list[str] = Field(min_length=1)
    benchmark: list[str] = Field(min_length=1)
    tune_moe: list[str] = Field(min_length=1)
    ready_line: str = "The server is fired up and ready to roll!"
    startup_timeout_s: float = Field(1800, gt=0)
    env: dict[str, str] = {}


class Engines(Strict):
    sglang: EngineSpec | None = None  # the real SGLang ROCm image on an MI355X node
    twin: EngineSpec | None = None  # the MI355X digital twin (no GPU)


class TwinWorkspace(Strict):
    scenario: str = Field("glm52_mi355x", description="twin scenario name or YAML path to materialise")


class WorkspaceSpec(Strict):
    """The sources the agent may patch. For a real node, paths to an SGLang checkout and the checkpoint's
    config directory; for the twin, a scenario it materialises."""

    sources: dict[str, str] = {}
    twin: TwinWorkspace = TwinWorkspace()


class Workload(Strict):
    description: str = ""
    dataset: Literal["random-ids", "random", "generated-shared-prefix"]
    params: dict[str, Scalar] = Field(default_factory=dict, description="bench_serving flags, without '--'")
    request_rate: float | None = Field(None, gt=0, description="None: all at once (inf)")
    max_concurrency: int | None = Field(None, gt=0)
    duration_s: float | None = Field(None, gt=0, description="rate runs: arrivals for this long")
    ttft_limit_ms: float | None = Field(None, gt=0, description="the knee: highest rate with TTFT p50 <= this")
    prefix_groups: int = Field(32, gt=0, description=(
        "generated-shared-prefix: how many distinct shared prefixes the prompts draw from. Fixed, so the workload "
        "keeps its shape (the prefixes a cache must hold) at every rate and run length; the prompts per group "
        "follow from rate x duration"))
    knee_seeds: list[int] = Field([1, 2], min_length=1, description=(
        "benchmark seeds (bench_serving --seed) a knee is measured with: a rate counts as sustained only when the "
        "run with every seed keeps TTFT p50 within the limit, and the figure reported is the lowest of them"))


class Target(Strict):
    name: str
    metric: Literal["throughput_at_knee", "decode_tok_s", "output_throughput", "accuracy_delta"]
    workload: str | None = None
    min: float


class EvalSpec(Strict):
    dataset: str = Field(description="JSON list of {question, answer} (path relative to the repository)")
    n: int = Field(200, gt=0)
    max_tokens: int = Field(512, gt=0)
    few_shot: int = Field(5, ge=0)


class AccuracySpec(Strict):
    suite: str
    baseline: float | Literal["first"] = "first"
    max_drop: float = Field(0.02, ge=0)


class EnvVar(Strict):
    value: str | None = None
    from_env: str | None = None
    secret: bool = False

    @model_validator(mode="after")
    def _one_source(self) -> EnvVar:
        if (self.value is None) == (self.from_env is None):
            raise ValueError("give exactly one of 'value' or 'from_env'")
        return self

    def resolve(self) -> str | None:
        return self.value if self.value is not None else os.environ.get(self.from_env or "")


class SearchSpace(Strict):
    flags: dict[str, list[Scalar | None]] = {}  # None: the flag is left out
    env: dict[str, list[str]] = {}

    @field_validator("flags", "env")
    @classmethod
    def _non_empty(cls, v: dict[str, list[Any]]) -> dict[str, list[Any]]:
        for name, values in v.items():
            if not values:
                raise ValueError(f"{name}: no allowed values")
        return v


class AfterTargets(Strict):
    """What a run may still spend once every target is met: the targets are a floor, and the run keeps improving
    until this is spent (or the policy has nothing left to try)."""

    node_hours: float | None = Field(None, ge=0, description=(
        "node-hours to spend after the targets are met; default: a tenth of budgets.node_hours; 0 stops at once"))
    benchmark_runs: int | None = Field(None, ge=0, description=(
        "benchmark runs to spend after the targets are met; default: no limit by count"))


class Budgets(Strict):
    trials: int = Field(60, gt=0)
    wall_minutes: float = Field(30, gt=0)
    node_hours: float = Field(24, gt=0, description="simulated on the twin, real on a node")
    llm_tokens: int = Field(2_000_000, ge=0)
    after_targets: AfterTargets = Field(default_factory=AfterTargets, description=(
        "the share of the budget that buys improvements beyond the targets"))

    def after_targets_node_hours(self) -> float:
        """Node-hours a run may spend after its targets are met."""
        n = self.after_targets.node_hours
        return self.node_hours / 10 if n is None else n


class ReportSpec(Strict):
    """Settings of the run report (``agent/report.py``); none changes what the agent does."""

    gpu_hour_usd: float | None = Field(
        None, gt=0, description="price of one GPU-hour in US dollars, for the report's cost per million output "
        "tokens; unset: the report states that the cost needs a price instead of assuming one")  # fmt: skip


class TaskSpec(Strict):
    name: str
    description: str = ""
    model: ModelInfo
    hardware: HardwareInfo
    sandbox: SandboxSpec = SandboxSpec()
    engines: Engines
    workspace: WorkspaceSpec = WorkspaceSpec()
    env: dict[str, EnvVar] = {}
    workloads: dict[str, Workload]
    targets: list[Target] = Field(min_length=1)
    evals: dict[str, EvalSpec] = {}
    accuracy: AccuracySpec | None = None
    search_space: SearchSpace = SearchSpace()
    budgets: Budgets = Budgets()
    report: ReportSpec = ReportSpec()  # optional: e.g. ``report: {gpu_hour_usd: 2.5}``

    @model_validator(mode="after")
    def _references(self) -> TaskSpec:
        for i, t in enumerate(self.targets):
            if t.workload is not None and t.workload not in self.workloads:
                raise ValueError(f"targets[{i}].workload: unknown workload {t.workload!r} "
                                 f"(known: {', '.join(self.workloads)})")  # fmt: skip
            if t.metric == "throughput_at_knee" and (t.workload is None or self.workloads[t.workload].ttft_limit_ms is None):
                raise ValueError(f"targets[{i}]: throughput_at_knee needs a workload with ttft_limit_ms")
        if self.accuracy and self.accuracy.suite not in self.evals:
            raise ValueError(f"accuracy.suite: unknown eval {self.accuracy.suite!r}")
        if self.engines.sglang is None and self.engines.twin is None:
            raise ValueError("engines: define at least one of 'sglang' and 'twin'")
        return self

    def secrets(self) -> list[str]:
        """Values that must never reach a trace, log or report."""
        return [v for e in self.env.values() if e.secret and (v := e.resolve())]

    def resolved_env(self) -> dict[str, str]:
        return {k: v for k, e in self.env.items() if (v := e.resolve()) is not None}


class TaskError(ValueError):
    """A task file that cannot be used. The message is one line: ``file:line: field: problem``."""


def _read_yaml(p: Path) -> tuple[Any, yaml.Node | None]:
    try:
        text = p.read_text()
    except OSError as exc:
        raise TaskError(f"{p}: cannot read task file ({exc.strerror or exc})") from None
    try:
        node = yaml.compose(text)
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        raise TaskError(f"{p}:{mark.line + 1 if mark else 1}: not valid YAML: {getattr(exc, 'problem', exc)}") from None
    if not isinstance(data, dict):
        raise TaskError(f"{p}:1: a task file is a mapping (name, model, hardware, engines, workloads, targets...)")
    return data, node


def _merge(base: dict, over: dict) -> dict:
    out = dict(base)
    for k, v in over.items():
        out[k] = _merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def load_task(path: str | Path) -> TaskSpec:
    """Load and validate a task. ``extends: other.yaml`` (relative to the file) starts from another task and
    overrides it key by key (mappings merge, everything else is replaced)."""
    p = Path(path)
    data, node = _read_yaml(p)
    if "extends" in data:
        base_path = p.parent / str(data.pop("extends"))
        base, _ = _read_yaml(base_path)
        if "extends" in base:
            raise TaskError(f"{base_path}:1: extends: a task can only extend a task that extends nothing")
        data = _merge(base, data)
    try:
        return TaskSpec.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        loc = list(err["loc"])
        message = err["msg"].removeprefix("Value error, ")
        if err["type"] == "missing":
            message = "required field is missing"
        elif err["type"] == "extra_forbidden":
            message = "unknown field"
        if not loc and (m := re.match(r"^([\w.\[\]-]+): (.*)$", message)):  # a check across fields
            loc = [int(x) if x.isdigit() else x for x in re.findall(r"[^.\[\]]+", m.group(1))]
            message = m.group(2)
        line = _line_of(node, loc)
        field = _format_loc(loc) or "(top)"
        more = f" (and {len(exc.errors()) - 1} more)" if len(exc.errors()) > 1 else ""
        raise TaskError(f"{p}:{line}: {field}: {message}{more}") from None


def _format_loc(loc: list[Any]) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def _line_of(node: yaml.Node | None, loc: list[Any]) -> int:
    """The line of the deepest YAML node along ``loc`` (1-based)."""
    line = 1
    for part in loc:
        if node is None:
            break
        line = node.start_mark.line + 1
        if isinstance(node, yaml.MappingNode):
            node = next((v for k, v in node.value if k.value == part), None)
            if node is None:
                break
        elif isinstance(node, yaml.SequenceNode) and isinstance(part, int) and part < len(node.value):
            node = node.value[part]
        else:
            break
    if node is not None:
        line = node.start_mark.line + 1
    return line
