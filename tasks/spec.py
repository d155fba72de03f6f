"""Task specs: what the agent is asked to bring up, where, how it is measured, and what counts as done.

A task is a YAML file validated by the pydantic models below. ``load_task`` turns any problem into a
``TaskError`` whose message is one line naming the file, the line and the field, e.g.
``tasks/x.yaml:23: targets[0].min: Input should be a valid number``. A problem in a value a task inherits
(``extends:``) is reported at the file and line that wrote it. Duplicate keys and non-finite numbers (``.nan``,
``.inf``) are refused. Every path a task names (``extends``, a scenario file, ``workspace.sources``, a Docker
mount's host side, an eval's dataset) is relative to the file that names it; ``load_task`` makes them absolute.
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
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


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
    mounts: dict[str, str] = Field(default_factory=dict, description=(
        "host path -> path in the image, e.g. '{workspace}/sglang' -> /sgl-workspace/sglang; a relative host path is "
        "relative to the task file"))
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
    benchmark_timeout_s: float = Field(3600, gt=0, description=(
        "wall seconds one benchmark run may take; past it the run is stopped, and so is the server (a hung "
        "benchmark is usually a hung server): the next measurement launches it again"))
    env: dict[str, str] = {}


class Engines(Strict):
    sglang: EngineSpec | None = None  # the real SGLang ROCm image on an MI355X node
    twin: EngineSpec | None = None  # the MI355X digital twin (no GPU)


class TwinWorkspace(Strict):
    scenario: str = Field("glm52_mi355x", description=(
        "twin scenario name, or the path of a scenario YAML (relative to the task file) to materialise"))


class WorkspaceSpec(Strict):
    """The sources the agent may patch. For a real node, paths to an SGLang checkout and the checkpoint's
    config directory; for the twin, a scenario it materialises."""

    sources: dict[str, str] = {}  # name -> directory (relative to the task file)
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
    dataset: str = Field(description="JSON list of {question, answer} (path relative to the task file)")
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
    secret: bool | None = Field(None, description=(
        "whether the value is kept out of every file a run writes (masked, or named in scripts: agent/secrets.py); "
        "unset: yes for a value read from the environment (from_env) or a variable whose name names a secret "
        "(HF_TOKEN, *_API_KEY, *PASSWORD*), no otherwise"))

    @model_validator(mode="after")
    def _one_source(self) -> EnvVar:
        if (self.value is None) == (self.from_env is None):
            raise ValueError("give exactly one of 'value' or 'from_env'")
        return self

    def resolve(self) -> str | None:
        return self.value if self.value is not None else os.environ.get(self.from_env or "")

    def is_secret(self, name: str) -> bool:
        """Whether the variable ``name`` with this value is secret (see ``secret``)."""
        if self.secret is not None:
            return self.secret
        from agent.secrets import is_secret_key  # the one definition of a secret's name

        return self.from_env is not None or is_secret_key(name)


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
        "node-hours to spend after the targets are met; default: a quarter of budgets.node_hours (enough to measure "
        "the references that explain the win and still search); 0 stops at once"))
    benchmark_runs: int | None = Field(None, ge=0, description=(
        "benchmark runs to spend after the targets are met; default: no limit by count"))


class Budgets(Strict):
    trials: int = Field(60, gt=0)
    wall_minutes: float = Field(30, gt=0)
    node_hours: float = Field(24, gt=0, description="simulated on the twin, real on a node")
    llm_tokens: int = Field(2_000_000, ge=0)
    llm_requests: int = Field(500, gt=0, le=1_000_000, description=(
        "requests to the LLM endpoint a run may make, counted by the agent whatever usage the endpoint reports"))
    tool_calls: int = Field(2_000, gt=0, le=1_000_000, description=(
        "tool calls a run may make, whatever the policy (the default task's playbook run makes about 70)"))
    after_targets: AfterTargets = Field(default_factory=AfterTargets, description=(
        "the share of the budget that buys improvements beyond the targets"))

    def after_targets_node_hours(self) -> float:
        """Node-hours a run may spend after its targets are met."""
        n = self.after_targets.node_hours
        return self.node_hours / 4 if n is None else n


class ReportSpec(Strict):
    """Settings of the run report (``agent/report.py``); none changes what the agent does."""

    gpu_hour_usd: float | None = Field(
        None, gt=0, description="price of one GPU-hour in US dollars, for the report's cost per million output "
        "tokens; unset: the report states that the cost needs a price instead of assuming one")  # fmt: skip


class LLMSettings(Strict):
    """How the LLM policy talks to its endpoint; the command line's ``--llm-*`` options override these."""

    extra_body: dict[str, Any] = Field(default_factory=dict, description=(
        "server-specific request fields sent with every chat completion (e.g. a vLLM or llama.cpp sampler "
        "option); the openai SDK's extra_body"))
    timeout_s: float = Field(120, gt=0, allow_inf_nan=False, description=(
        "seconds to wait for one reply before it counts as a failed request (a hung endpoint)"))
    tool_results_as: Literal["tool", "user"] = Field("tool", description=(
        "how tool results go back: 'tool' messages (the OpenAI API), or one 'user' message per turn for servers "
        "whose chat template drops tool messages"))


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
    llm: LLMSettings = LLMSettings()  # optional: the LLM policy's endpoint settings

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
        """Values that must never reach a trace, log or report: those of the secret ``env`` variables
        (``EnvVar.is_secret``), resolved."""
        return [v for name, e in self.env.items() if e.is_secret(name) and (v := e.resolve())]

    def resolved_env(self) -> dict[str, str]:
        return {k: v for k, e in self.env.items() if (v := e.resolve()) is not None}


class TaskError(ValueError):
    """A task file that cannot be used. The message is one line: ``file:line: field: problem``."""


class _Source:
    """One file of a task (the task, or the task it extends): its path, parsed data and YAML node tree."""

    def __init__(self, path: Path, data: dict[str, Any], node: yaml.Node):
        self.path, self.data, self.node = path, data, node


def _duplicate_key(node: yaml.Node | None) -> yaml.Node | None:
    """The second occurrence of the first key a mapping repeats (PyYAML silently keeps the last one)."""
    if isinstance(node, yaml.MappingNode):
        seen: set[Any] = set()
        for key, value in node.value:
            if isinstance(key, yaml.ScalarNode) and key.tag != "tag:yaml.org,2002:merge":
                if key.value in seen:
                    return key
                seen.add(key.value)
            if (dup := _duplicate_key(key)) is not None or (dup := _duplicate_key(value)) is not None:
                return dup
    elif isinstance(node, yaml.SequenceNode):
        for item in node.value:
            if (dup := _duplicate_key(item)) is not None:
                return dup
    return None


def _read_yaml(p: Path) -> _Source:
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
    if (dup := _duplicate_key(node)) is not None:
        raise TaskError(f"{p}:{dup.start_mark.line + 1}: {dup.value}: duplicate key (YAML would keep only the last)")
    if not isinstance(data, dict) or node is None:
        raise TaskError(f"{p}:1: a task file is a mapping (name, model, hardware, engines, workloads, targets...)")
    return _Source(p, data, node)


def _is_path(value: str) -> bool:
    """A scenario given as a file (a YAML suffix or a directory part), not as a bundled scenario's name."""
    return value.endswith((".yaml", ".yml")) or "/" in value or os.sep in value


def _absolute(base: Path, value: Any, keep: Any = None) -> Any:
    """``value`` as an absolute path relative to ``base`` (strings only; ``keep(value)`` true: unchanged)."""
    if not isinstance(value, str) or not value or (keep is not None and keep(value)):
        return value
    return os.path.abspath(base / os.path.expanduser(value))


def _resolve_paths(data: dict[str, Any], file: Path) -> dict[str, Any]:
    """The paths ``data`` (one task file's own keys) names, made absolute relative to ``file``'s folder."""
    base = file.parent
    out = dict(data)

    def section(*keys: str) -> dict[str, Any] | None:
        d: Any = out
        for k in keys:
            d = d.get(k) if isinstance(d, dict) else None
        return d if isinstance(d, dict) else None

    def replace(keys: tuple[str, ...], new: dict[str, Any]) -> None:
        d = out
        for k in keys[:-1]:
            d[k] = dict(d[k])
            d = d[k]
        d[keys[-1]] = new

    if (twin := section("workspace", "twin")) is not None and isinstance(twin.get("scenario"), str):
        scenario = twin["scenario"]
        replace(("workspace", "twin"), {**twin, "scenario": _absolute(base, scenario, lambda v: not _is_path(v))})
    if (sources := section("workspace", "sources")) is not None:
        replace(("workspace", "sources"), {k: _absolute(base, v) for k, v in sources.items()})
    if (mounts := section("sandbox", "docker", "mounts")) is not None:  # '{workspace}/...' is the run's workspace
        replace(("sandbox", "docker", "mounts"),
                {_absolute(base, k, lambda v: v.startswith("{")): v for k, v in mounts.items()})  # fmt: skip
    if (evals := section("evals")) is not None:
        replace(("evals",), {name: {**e, "dataset": _absolute(base, e["dataset"])} if isinstance(e, dict) and
                             "dataset" in e else e for name, e in evals.items()})  # fmt: skip
    return out


def _merge(base: dict, over: dict) -> dict:
    out = dict(base)
    for k, v in over.items():
        out[k] = _merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def load_task(path: str | Path) -> TaskSpec:
    """Load and validate a task. ``extends: other.yaml`` (relative to the file) starts from another task and
    overrides it key by key (mappings merge, everything else is replaced)."""
    p = Path(path)
    child = _read_yaml(p)
    sources = [child]
    data = _resolve_paths(child.data, p)
    if "extends" in data:
        parent_name = data.pop("extends")
        line = next((k.start_mark.line + 1 for k, _ in child.node.value if k.value == "extends"), 1)
        if not isinstance(parent_name, str) or not parent_name:
            raise TaskError(f"{p}:{line}: extends: give the path of a task file (relative to this one)")
        base_path = p.parent / os.path.expanduser(parent_name)
        if not base_path.is_file():
            raise TaskError(f"{p}:{line}: extends: no task file {base_path}")
        parent = _read_yaml(base_path)
        if "extends" in parent.data:
            line = next((k.start_mark.line + 1 for k, _ in parent.node.value if k.value == "extends"), 1)
            raise TaskError(f"{base_path}:{line}: extends: a task can only extend a task that extends nothing")
        sources.append(parent)
        data = _merge(_resolve_paths(parent.data, base_path), data)
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
        loc = _data_loc(data, loc)
        file, line = _locate(sources, loc)
        field = _format_loc(loc) or "(top)"
        more = f" (and {len(exc.errors()) - 1} more)" if len(exc.errors()) > 1 else ""
        raise TaskError(f"{file}:{line}: {field}: {message}{more}") from None


def _data_loc(data: Any, loc: list[Any]) -> list[Any]:
    """``loc`` without the union member names pydantic adds (``params.x.float``): the keys the data holds."""
    out: list[Any] = []
    for part in loc:
        held = (isinstance(data, dict) and part in data) or (
            isinstance(data, list) and isinstance(part, int) and part < len(data))
        if held:
            data = data[part]
        elif isinstance(data, dict | list):
            out.append(part)  # a missing key or item: where it should be
            break
        else:
            break  # a scalar: the rest names the type pydantic tried
        out.append(part)
    return out


def _locate(sources: list[_Source], loc: list[Any]) -> tuple[Path, int]:
    """The file and line that wrote the value at ``loc`` after ``extends`` merged the files (``sources``: the task
    first, then the task it extends): mappings merge key by key, any other value comes from the first file that
    sets it. Falls back to the deepest node found along ``loc``."""
    live = [(s.path, s.node) for s in sources]
    line_of = {s.path: 1 for s in sources}
    for part in loc:
        nxt = []
        for path, node in live:
            line_of[path] = node.start_mark.line + 1
            if isinstance(node, yaml.MappingNode):
                value = next((v for k, v in node.value if k.value == part), None)
            elif isinstance(node, yaml.SequenceNode) and isinstance(part, int) and part < len(node.value):
                value = node.value[part]
            else:
                value = None
            if value is not None:
                nxt.append((path, value))
        if not nxt:
            path = live[0][0]
            return path, line_of[path]
        # the first file's value replaces the others' unless both are mappings (they merge)
        live = [nxt[0]] + ([x for x in nxt[1:] if isinstance(nxt[0][1], yaml.MappingNode)
                            and isinstance(x[1], yaml.MappingNode)])  # fmt: skip
    path, node = live[0]
    return path, node.start_mark.line + 1


def _format_loc(loc: list[Any]) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out
