"""Task specs: what the agent is asked to bring up, where, how it is measured, and what counts as done.

A task is a YAML file validated by the pydantic models below. ``load_task`` turns any problem into a
``TaskError`` whose message is one line naming the file, the line and the field, e.g.
``tasks/x.yaml:23: targets[0].min: Input should be a valid number``. A problem in a value a task inherits
(``extends:``) is reported at the file and line that wrote it. Duplicate keys and non-finite numbers (``.nan``,
``.inf``) are refused, and so is any number, text or list past its bound (``tasks/limits.py``: ``gpus: 1e30`` or
a 1 MB name does not start a run). A task file is read only when it is a regular file of at most 1 MiB, as YAML
whose aliases cannot expand it past ``MAX_YAML_NODES`` values (``sandboxes/twin/safe_input.py``); no message
quotes a file that is not a task. Every path a task names (``extends``, a scenario file, ``workspace.sources``, a
Docker mount's host side, an eval's dataset) is relative to the file that names it; ``load_task`` makes them
absolute. The files it names are checked before a run exists (``agent/run.py``: ``preflight``).
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from sandboxes.twin.safe_input import InputFileError, load_yaml, plain, read_text

from . import limits as L

Scalar = int | float | str | bool

# texts and lists, bounded (tasks/limits.py): a 1 MB name, a million-item argv are refused
Name = Annotated[str, Field(max_length=L.NAME)]
Text = Annotated[str, Field(max_length=L.TEXT)]
PathStr = Annotated[str, Field(max_length=L.PATH)]
Arg = Annotated[str, Field(max_length=L.ARG)]
EnvValue = Annotated[str, Field(max_length=L.ENV_VALUE)]
Argv = Annotated[list[Arg], Field(min_length=1, max_length=L.ARGV)]
Env = Annotated[dict[Name, EnvValue], Field(max_length=L.ENTRIES)]


def _within(bound: float) -> AfterValidator:
    """A scalar whose number is within +-``bound`` and whose text is at most ``L.ARG`` characters."""

    def check(v: Any) -> Any:
        if isinstance(v, str) and len(v) > L.ARG:
            raise ValueError(f"String should have at most {L.ARG} characters")
        if isinstance(v, int | float) and not isinstance(v, bool) and abs(v) > bound:
            raise ValueError(f"a number within +-{bound:.0e} is expected")
        return v

    return AfterValidator(check)


Param = Annotated[Scalar, _within(L.WORKLOAD_NUMBER)]
FlagValue = Annotated[Scalar, _within(L.FLAG_NUMBER)]


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


class ModelInfo(Strict):
    name: Name = Field(description=f"the checkpoint's name, e.g. a Hugging Face id (at most {L.NAME} characters)")
    architecture: Name
    quantization: Name = Field(description="weight format of the checkpoint, e.g. mxfp4")


class HardwareInfo(Strict):
    accelerator: Name
    gpus: int = Field(gt=0, le=L.GPUS, description=f"GPUs of the node (at most {L.GPUS})")
    gpu_memory_gb: float | None = Field(None, gt=0, le=L.GPU_MEMORY_GB, description=(
        f"memory of one GPU in GB (at most {L.GPU_MEMORY_GB})"))


class DockerSpec(Strict):
    """How containers are started. Defaults are AMD's recipe for the SGLang ROCm image; a task overrides any."""

    image: Arg = "lmsysorg/sglang:v0.5.12-rocm700-mi35x"
    engine: Literal["sglang", "twin"] = "sglang"  # which engine's argv templates run in this image
    devices: Annotated[list[PathStr], Field(max_length=L.ARGV)] = ["/dev/kfd", "/dev/dri"]
    group_add: Annotated[list[Name], Field(max_length=L.ARGV)] = ["video"]
    ipc_mode: Name | None = "host"
    shm_size: Name = "16g"
    cap_add: Annotated[list[Name], Field(max_length=L.ARGV)] = ["SYS_PTRACE"]
    security_opt: Annotated[list[Arg], Field(max_length=L.ARGV)] = ["seccomp=unconfined"]
    network: Literal["bridge", "host"] = "bridge"
    workspace_mount: PathStr = "/workspace"
    mounts: Annotated[dict[PathStr, PathStr], Field(max_length=L.ENTRIES)] = Field(default_factory=dict, description=(
        "host path -> path in the image, e.g. '{workspace}/sglang' -> /sgl-workspace/sglang, or '{cache}/NAME' (a "
        "folder of the per-user cache, $DAYZERO_CACHE or ~/.cache/dayzero) for what an engine caches across "
        "containers; a relative host path is relative to the task file"))
    env: Env = {}
    gpus: Annotated[list[Annotated[int, Field(ge=0, lt=L.GPUS)]], Field(max_length=L.GPUS)] | None = Field(
        None, description=f"a GPU subset for partial-node trials (HIP_VISIBLE_DEVICES; indices below {L.GPUS})")


class SandboxSpec(Strict):
    kind: Literal["auto", "local", "docker"] = "auto"
    docker: DockerSpec = DockerSpec()


class EngineSpec(Strict):
    """How to drive one engine, as argv templates.

    Placeholders: ``{python}`` (this interpreter), ``{workspace}`` (the workspace root), ``{host}``,
    ``{port}``, ``{base_url}``, ``{output_file}``. Benchmark and tuner arguments are appended as ``--flag value``.
    """

    launch: Argv = Field(description=(
        f"the launch command as argv: at most {L.ARGV} items of at most {L.ARG} characters (so are the others)"))
    benchmark: Argv
    tune_moe: Argv
    ready_line: Arg = "The server is fired up and ready to roll!"
    startup_timeout_s: float = Field(1800, gt=0, le=L.TIMEOUT_S, description=(
        f"wall seconds a launch may take to become ready (at most {L.TIMEOUT_S}, a week)"))
    benchmark_timeout_s: float = Field(3600, gt=0, le=L.TIMEOUT_S, description=(
        "wall seconds one benchmark run may take; past it the run is stopped, and so is the server (a hung "
        "benchmark is usually a hung server): the next measurement launches it again (at most a week)"))
    env: Env = {}


class Engines(Strict):
    sglang: EngineSpec | None = None  # the real SGLang ROCm image on an MI355X node
    twin: EngineSpec | None = None  # the MI355X digital twin (no GPU)


class TwinWorkspace(Strict):
    scenario: PathStr = Field("glm52_mi355x", description=(
        "twin scenario name, or the path of a scenario YAML (relative to the task file) to materialise; checked "
        "before a run exists: a regular file of at most 4 MiB that is a scenario"))


class WorkspaceSpec(Strict):
    """The sources the agent may patch. For a real node, paths to an SGLang checkout and the checkpoint's
    config directory; for the twin, a scenario it materialises."""

    sources: Annotated[dict[Name, PathStr], Field(max_length=L.ENTRIES)] = {}  # name -> directory (relative to the task file)
    twin: TwinWorkspace = TwinWorkspace()


class Workload(Strict):
    description: Text = ""
    dataset: Literal["random-ids", "random", "generated-shared-prefix"]
    params: Annotated[dict[Name, Param], Field(max_length=L.ENTRIES)] = Field(default_factory=dict, description=(
        f"bench_serving flags, without '--' (numbers within +-{L.WORKLOAD_NUMBER:.0e})"))
    request_rate: float | None = Field(None, gt=0, le=L.REQUEST_RATE, description=(
        f"requests per second (at most {L.REQUEST_RATE}); None: all at once (inf)"))
    max_concurrency: int | None = Field(None, gt=0, le=L.CONCURRENCY)
    duration_s: float | None = Field(None, gt=0, le=L.DURATION_S, description=(
        "rate runs: arrivals for this long (at most a week)"))
    ttft_limit_ms: float | None = Field(None, gt=0, le=L.TTFT_LIMIT_MS, description=(
        "the knee: highest rate with TTFT p50 <= this (at most a week)"))
    prefix_groups: int = Field(32, gt=0, le=L.PREFIX_GROUPS, description=(
        "generated-shared-prefix: how many distinct shared prefixes the prompts draw from. Fixed, so the workload "
        "keeps its shape (the prefixes a cache must hold) at every rate and run length; the prompts per group "
        f"follow from rate x duration (at most {L.PREFIX_GROUPS})"))
    knee_seeds: Annotated[list[Annotated[int, Field(ge=0, le=L.SEED)]], Field(min_length=1, max_length=L.SEEDS)] = Field(
        [1, 2], description=(
            "benchmark seeds (bench_serving --seed) a knee is measured with: a rate counts as sustained only when the "
            "run with every seed keeps TTFT p50 within the limit, and the figure reported is the lowest of them "
            f"(at most {L.SEEDS} seeds, each 0 to 2**32-1)"))


class Target(Strict):
    """What counts as done for one measured figure. A serving target may also bound interactivity (what one user
    sees: decode speed, time per output token), the way serving results are read as throughput against tok/s per
    user: a figure counts for the target only when the benchmark that measured it, at the target's load (the knee
    rate, for a knee), meets the bound; a faster configuration whose users wait longer per token does not win."""

    name: Name
    metric: Literal["throughput_at_knee", "decode_tok_s", "output_throughput", "accuracy_delta"]
    workload: Name | None = None
    min: float = Field(ge=-L.TARGET, le=L.TARGET)
    min_tok_s_per_user: float | None = Field(None, gt=0, le=L.TOK_S_PER_USER, description=(
        "interactivity bound: the decode speed one user must see at the target's load, 1000 / median TPOT in "
        f"tokens per second (at most {L.TOK_S_PER_USER}); for a knee, every seed at the knee must meet it"))
    max_tpot_ms: float | None = Field(None, gt=0, le=L.TPOT_MS, description=(
        "interactivity bound: the median time per output token (bench_serving's median_tpot_ms) at the target's "
        "load, in milliseconds (at most a week)"))

    def tpot_limit_ms(self) -> float | None:
        """The highest median TPOT the target's bounds allow (the stricter of the two), or None: no bound."""
        limits = [x for x in (self.max_tpot_ms, 1000.0 / self.min_tok_s_per_user if self.min_tok_s_per_user else None)
                  if x is not None]
        return min(limits) if limits else None

    def interactivity_miss(self, median_tpot_ms: float | None) -> str | None:
        """Why a run with this median TPOT does not count for the target (None: it meets every bound)."""
        limit = self.tpot_limit_ms()
        if limit is None:
            return None
        if not median_tpot_ms or median_tpot_ms <= 0:
            return "no TPOT was measured (no output token past the first)"
        if median_tpot_ms <= limit:
            return None
        per_user = 1000.0 / median_tpot_ms
        wanted = [f"at least {self.min_tok_s_per_user:g} tok/s per user" if self.min_tok_s_per_user else "",
                  f"TPOT p50 at most {self.max_tpot_ms:g} ms" if self.max_tpot_ms else ""]
        return (f"{per_user:.2f} tok/s per user (TPOT p50 {median_tpot_ms:.1f} ms) misses the bound "
                f"({' and '.join(w for w in wanted if w)})")


class EvalSpec(Strict):
    dataset: PathStr = Field(description=(
        "JSON list of {question, answer, solution} (path relative to the task file); checked before a run exists: a "
        "regular file of at most 64 MiB holding that list"))
    n: int = Field(200, gt=0, le=L.EVAL_QUESTIONS)
    max_tokens: int = Field(512, gt=0, le=L.EVAL_MAX_TOKENS)
    few_shot: int = Field(5, ge=0, le=L.FEW_SHOT)


class AccuracySpec(Strict):
    suite: Name
    baseline: Annotated[float, Field(ge=0, le=1)] | Literal["first"] = Field("first", description=(
        "the accuracy to hold (a fraction, 0 to 1), or 'first': the first measurement's"))
    max_drop: float = Field(0.02, ge=0, le=1, description="the accuracy a run may lose (a fraction, 0 to 1)")


class EnvVar(Strict):
    value: EnvValue | None = None
    from_env: Name | None = None
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
    flags: Annotated[dict[Name, Annotated[list[FlagValue | None], Field(max_length=L.VALUES)]],
                     Field(max_length=L.ENTRIES)] = {}  # None: the flag is left out  # fmt: skip
    env: Annotated[dict[Name, Annotated[list[Arg], Field(max_length=L.VALUES)]], Field(max_length=L.ENTRIES)] = {}

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

    node_hours: float | None = Field(None, ge=0, le=L.NODE_HOURS, description=(
        "node-hours to spend after the targets are met; default: a quarter of budgets.node_hours (enough to measure "
        "the references that explain the win and still search); 0 stops at once"))
    benchmark_runs: int | None = Field(None, ge=0, le=L.BENCHMARK_RUNS, description=(
        "benchmark runs to spend after the targets are met; default: no limit by count"))


class Budgets(Strict):
    trials: int = Field(60, gt=0, le=L.TRIALS, description=f"launches a run may make (at most {L.TRIALS})")
    wall_minutes: float = Field(30, gt=0, le=L.WALL_MINUTES, description="wall minutes (at most a week)")
    node_hours: float = Field(24, gt=0, le=L.NODE_HOURS, description=(
        f"simulated on the twin, real on a node (at most {L.NODE_HOURS})"))
    llm_tokens: int = Field(2_000_000, ge=0, le=L.LLM_TOKENS, description=f"at most {L.LLM_TOKENS:.0e}")
    llm_requests: int = Field(500, gt=0, le=L.LLM_REQUESTS, description=(
        "requests to the LLM endpoint a run may make, counted by the agent whatever usage the endpoint reports"))
    tool_calls: int = Field(2_000, gt=0, le=L.TOOL_CALLS, description=(
        "tool calls a run may make, whatever the policy (the default task's playbook run makes about 70)"))
    after_targets: AfterTargets = Field(default_factory=AfterTargets, description=(
        "the share of the budget that buys improvements beyond the targets"))

    def after_targets_node_hours(self) -> float:
        """Node-hours a run may spend after its targets are met."""
        n = self.after_targets.node_hours
        return self.node_hours / 4 if n is None else n


class ReportSpec(Strict):
    """Settings of the run report (``agent/inspector/report.py``); none changes what the agent does."""

    gpu_hour_usd: float | None = Field(
        None, gt=0, le=L.USD, description="price of one GPU-hour in US dollars, for the report's cost per million "
        "output tokens; unset: the report states that the cost needs a price instead of assuming one")  # fmt: skip


class LLMSettings(Strict):
    """How the LLM policy talks to its endpoint; the command line's ``--llm-*`` options override these."""

    extra_body: dict[Name, Any] = Field(default_factory=dict, description=(
        "server-specific request fields sent with every chat completion (e.g. a vLLM or llama.cpp sampler "
        f"option); the openai SDK's extra_body (at most {L.EXTRA_BODY} characters as JSON)"))
    timeout_s: float = Field(120, gt=0, le=L.TIMEOUT_S, allow_inf_nan=False, description=(
        "seconds to wait for one reply before it counts as a failed request (a hung endpoint; at most a week)"))
    tool_results_as: Literal["tool", "user"] = Field("tool", description=(
        "how tool results go back: 'tool' messages (the OpenAI API), or one 'user' message per turn for servers "
        "whose chat template drops tool messages"))

    @field_validator("extra_body")
    @classmethod
    def _small(cls, v: dict[str, Any]) -> dict[str, Any]:
        if len(json.dumps(v, default=str)) > L.EXTRA_BODY:
            raise ValueError(f"at most {L.EXTRA_BODY} characters as JSON")
        return v


class TaskSpec(Strict):
    name: Name
    description: Text = ""
    model: ModelInfo
    hardware: HardwareInfo
    sandbox: SandboxSpec = SandboxSpec()
    engines: Engines
    workspace: WorkspaceSpec = WorkspaceSpec()
    env: Annotated[dict[Name, EnvVar], Field(max_length=L.ENTRIES)] = {}
    workloads: Annotated[dict[Name, Workload], Field(max_length=L.SECTIONS)]
    targets: list[Target] = Field(min_length=1, max_length=L.SECTIONS)
    evals: Annotated[dict[Name, EvalSpec], Field(max_length=L.SECTIONS)] = {}
    accuracy: AccuracySpec | None = None
    search_space: SearchSpace = SearchSpace()
    budgets: Budgets = Budgets()
    report: ReportSpec = ReportSpec()  # optional: e.g. ``report: {gpu_hour_usd: 2.5}``
    llm: LLMSettings = LLMSettings()  # optional: the LLM policy's endpoint settings
    approvals: list[Literal["patches", "launches", "commits", "pushes"]] = Field(default_factory=list, max_length=4,
                                                                             description=(
        "actions the run holds until a person approves each (agent approve): patches to the engine, launches, "
        "commits, pushes of its branches (agent review --push); agent run --approve overrides it"))

    @model_validator(mode="after")
    def _references(self) -> TaskSpec:
        for i, t in enumerate(self.targets):
            if t.workload is not None and t.workload not in self.workloads:
                raise ValueError(f"targets[{i}].workload: unknown workload {t.workload!r} "
                                 f"(known: {', '.join(self.workloads)})")  # fmt: skip
            if t.tpot_limit_ms() is not None and (t.metric == "accuracy_delta" or t.workload is None):
                bound = "min_tok_s_per_user" if t.min_tok_s_per_user is not None else "max_tpot_ms"
                raise ValueError(f"targets[{i}].{bound}: an interactivity bound needs a target that serves a "
                                 "workload (throughput_at_knee, decode_tok_s or output_throughput, with its workload)")
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
    """One task file: a regular file of at most ``limits.TASK_FILE_BYTES``, YAML whose aliases stay within
    ``limits.MAX_YAML_NODES`` values, a mapping with no duplicate key and at least one task field. No message
    quotes the file (``agent run /etc/shadow`` does not print its first line)."""
    try:
        node, data = load_yaml(read_text(p, L.TASK_FILE_BYTES))
    except InputFileError as exc:
        raise TaskError(f"{p}{f':{exc.line}' if exc.line else ''}: {exc}") from None
    if (dup := _duplicate_key(node)) is not None:
        key = dup.value if plain(dup.value) else f"(a key of {len(str(dup.value))} characters)"
        raise TaskError(f"{p}:{dup.start_mark.line + 1}: {key}: duplicate key (YAML would keep only the last)")
    if not isinstance(data, dict) or node is None:
        raise TaskError(f"{p}:1: a task file is a mapping (name, model, hardware, engines, workloads, targets...)")
    if not set(data) & (set(TaskSpec.model_fields) | {"extends"}):
        raise TaskError(f"{p}:1: not a task file: none of its top-level keys is a task's field (name, model, "
                        "hardware, engines, workloads, targets...)")  # fmt: skip
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
    if (mounts := section("sandbox", "docker", "mounts")) is not None:  # '{workspace}/...', '{cache}/...' stay placeholders
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
        if not isinstance(parent_name, str) or not parent_name or len(parent_name) > L.PATH:
            raise TaskError(f"{p}:{line}: extends: give the path of a task file (relative to this one; at most "
                            f"{L.PATH} characters)")  # fmt: skip
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
    """``a.b[0].c``; a key that is not a plain name (a line of /etc/shadow, a 1 MB key) is described, not quoted."""
    out = ""
    for part in loc:
        if not isinstance(part, int) and not plain(part):
            part = f"(a key of {len(str(part))} characters)"
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out
