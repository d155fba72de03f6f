"""One run's live objects and files: ``runs/<run-id>/`` with its options, trace, workspace and reports.

``Run.create`` starts a run from a task file; ``Run.open`` rebuilds the same objects for ``agent resume``.
Both check everything a run needs first (:func:`preflight`: the run id, the task, its scenario, eval datasets
and prior runs, the policy and its replay trace or API key (an LLM's endpoint asked once), the Docker engine
and image, a writable runs folder with free space): a problem is a :class:`RunError` of one line and nothing is created. The graph's state lives
in ``checkpoints.sqlite``; this module holds what cannot be checkpointed (the sandbox, the tools, the policy, the
trace writer) and writes the end-of-run reports, the outcome among them (``summary.json``'s ``outcome``: words
and the exit code).

Every file of the run goes through the run's one :class:`~agent.secrets.Redactor` (the task's secrets, the LLM
key): the trace, the checkpoints, run.json, summary.json, the hand-over scripts (which name a secret variable
instead of holding its value), the tools' own files; the files engines write themselves (server logs) are
swept after every tool call (:class:`~agent.secrets.LogScrubber`).
"""

from __future__ import annotations

import contextlib
import copy
import datetime as dt
import json
import os
import re
import shlex
import shutil
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from sandboxes.base import Sandbox, SandboxError
from sandboxes.select import SandboxChoice, choose, open_workspace
from tasks import limits
from tasks.spec import TaskError, TaskSpec, load_task
from tools.context import ToolContext
from tools.runner import ToolCallRecord, ToolRunner

from .approvals import Gates, recorded_answers
from .interactivity import bound_text
from .outcomes import ExitCode, classify
from .policies.base import Policy, PolicyContext
from .policies.expert import PlaybookExpert
from .secrets import LogScrubber, Redactor, configured_secrets, secret_references
from .state import AgentState, Best, Budget, Call
from .trace import TraceWriter, iter_trace, read_trace

RUNS_DIR = Path("runs")
MIN_FREE_MB_ENV = "DAYZERO_MIN_FREE_MB"  # free space the runs folder needs before a run starts (default below)
MIN_FREE_MB = 1024
RUN_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")


class RunError(ValueError):
    """A run that cannot start or resume. The message is one line; ``exit_code`` says whose the problem is:
    ``BAD_INPUT`` (the task, a flag, the run id) or ``INFRASTRUCTURE`` (Docker, the runs folder)."""

    def __init__(self, message: str, exit_code: int = ExitCode.BAD_INPUT):
        super().__init__(message)
        self.exit_code = int(exit_code)


def check_run_id(run_id: str) -> str:
    """A run id is a plain name: letters, digits, ``.``, ``_``, ``-``; no separator, no ``..``; at most 128."""
    if not RUN_ID.fullmatch(run_id or "") or ".." in run_id:
        raise RunError(f"run id {run_id!r}: use a plain name (letters, digits, '.', '_', '-'; no '/' and no '..')")
    return run_id


class ParentRef(BaseModel):
    """The run a fork branched from: its decisions 1..``step`` are replayed, then the fork's policy
    decides."""

    run_id: str
    step: int
    run_dir: str  # where its trace and checkpoints are
    trace: str  # its trace.jsonl


class RunOptions(BaseModel):
    """How the run was started; saved as run.json so that resume rebuilds the same run."""

    run_id: str
    task_path: str
    sandbox: str | None = None
    policy: str = "auto"
    llm_model: str | None = None
    llm_base_url: str | None = None
    llm_extra_body: dict[str, Any] | None = None  # --llm-extra-body: over the task's llm.extra_body
    llm_timeout_s: float | None = None  # --llm-timeout: over the task's llm.timeout_s
    llm_tool_results: str | None = None  # --llm-tool-results: over the task's llm.tool_results_as
    max_trials: int | None = None
    replay_trace: str | None = None
    replay_note: str | None = None  # a forced replay of another task's trace: recorded in the run's trace
    replay_of: str | None = None  # agent replay RUN --execute: the run whose decisions this one re-executes
    parent: ParentRef | None = None  # agent replay RUN --from-step N: the run and step this one forked from
    executor: str = "inline"
    ray_address: str | None = None
    prior: list[str] = []  # --prior: earlier runs of the task whose measurements warm-start the search
    approvals: list[str] | None = None  # --approve: the gates the run holds (None: the task's ``approvals``)
    created: str = ""


def new_run_id(task: TaskSpec) -> str:
    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%d-%H%M%S")
    return f"{task.name}-{stamp}-{uuid.uuid4().hex[:4]}"


class _View:
    """The read-only workspace view policies get."""

    def __init__(self, sandbox: Sandbox):
        self.sandbox = sandbox

    def read_file(self, path: str) -> str:
        return self.sandbox.read_file(path)

    def exists(self, path: str) -> bool:
        try:
            return self.sandbox.resolve(path).exists()
        except Exception:
            return False

    def glob(self, pattern: str) -> list[str]:
        return [e.path for e in self.sandbox.list_files(".", pattern) if not e.is_dir]


@dataclass
class Run:
    options: RunOptions
    task: TaskSpec
    task_path: Path
    run_dir: Path
    choice: SandboxChoice
    sandbox: Sandbox
    ctx: ToolContext
    runner: ToolRunner
    trace: TraceWriter
    policy: Policy
    policy_ctx: PolicyContext
    _recorded: dict[str, ToolCallRecord]
    redactor: Redactor = field(default_factory=Redactor)  # every sink of the run masks its secrets
    scrubber: LogScrubber | None = None  # masks them in what engines write under the run folder
    gates: Gates | None = None  # the approvals the run waits for (agent/approvals.py)

    @property
    def run_id(self) -> str:
        return self.options.run_id

    # --- setting up -------------------------------------------------------------------------------------

    @classmethod
    def create(cls, options: RunOptions, runs_dir: Path = RUNS_DIR) -> Run:
        """A new run: everything checked first (:func:`preflight`), then ``runs/<run-id>/``. A failure while
        setting it up (a full disk while the workspace is written) removes the folder again."""
        task = preflight(options, runs_dir, fresh=True)
        run_dir = runs_dir.resolve() / options.run_id
        try:
            run_dir.mkdir(parents=True, exist_ok=False)
        except FileExistsError:
            raise RunError(f"run {options.run_id} exists; use: agent resume {options.run_id}") from None
        except OSError as exc:
            raise RunError(f"cannot create {run_dir}: {exc.strerror or exc}", ExitCode.INFRASTRUCTURE) from None
        try:
            options.created = dt.datetime.now(dt.UTC).isoformat()
            options_json = Redactor(configured_secrets(task))(options.model_dump(mode="json"))
            (run_dir / "run.json").write_text(json.dumps(options_json, indent=2))
            return cls._build(options, run_dir, fresh=True)
        except BaseException as exc:  # nothing ran yet: leave no half-created run behind
            shutil.rmtree(run_dir, ignore_errors=True)
            raise _as_run_error(exc, f"run {options.run_id} could not be set up") from None

    @classmethod
    def open(cls, run_id: str, runs_dir: Path = RUNS_DIR) -> Run:
        """The run ``run_id`` rebuilt to continue (``agent resume``); a run that cannot continue is a
        :class:`RunError` saying why (see :func:`resumable`)."""
        options = resumable(run_id, runs_dir)
        preflight(options, runs_dir, fresh=False)
        try:
            return cls._build(options, runs_dir.resolve() / run_id, fresh=False)
        except BaseException as exc:
            raise _as_run_error(exc, f"run {run_id} cannot resume") from None

    @classmethod
    def _build(cls, options: RunOptions, run_dir: Path, fresh: bool) -> Run:
        from .policies.factory import make_policy

        task_path = Path(options.task_path)
        task = load_task(task_path)
        choice = choose(task, options.sandbox)
        sandbox, repos = open_workspace(task, choice, run_dir / "workspace", options.run_id)
        if hasattr(sandbox, "reap_stale"):
            sandbox.reap_stale()
        from .draft_available import withheld_speculation

        # a model with no draft (no MTP layer, no draft checkpoint) is never searched for speculation; what the run
        # found when it started holds for its resumes
        decided_at = run_dir / "speculation.json"
        try:
            decided = json.loads(decided_at.read_text())["withheld"] if not fresh else None
        except (OSError, ValueError, KeyError, TypeError):
            decided = None
        if decided is None:
            task, no_draft = withheld_speculation(task, _View(sandbox))
            with contextlib.suppress(OSError):
                decided_at.write_text(json.dumps({"withheld": [no_draft]}))
        else:
            task, no_draft = withheld_speculation(task, _View(sandbox), decided=decided[0])
        engine = task.engines.twin if choice.engine == "twin" else task.engines.sglang
        from sandboxes.executors import make_executor

        executor = make_executor(options.executor, options.ray_address, resource=_gpu_resource(task),
                                 node_gpus=task.hardware.gpus)  # fmt: skip
        redactor = Redactor(configured_secrets(task))  # the policy's key joins it below
        scrubber = LogScrubber(run_dir, redactor)
        if not fresh:  # what a killed process's engines wrote after its last sweep
            scrubber.sweep()
        ctx = ToolContext(task=task, engine_name=choice.engine, engine=engine, sandbox=sandbox, run_id=options.run_id,
                          run_dir=run_dir, repos=repos, task_path=str(task_path.resolve()), executor=executor,
                          redactor=redactor, expert=PlaybookExpert())  # fmt: skip
        trace = TraceWriter(run_dir / "trace.jsonl", options.run_id, redactor=redactor)
        recorded: dict[str, ToolCallRecord] = {}
        events = [] if fresh else read_trace(run_dir / "trace.jsonl")
        if not fresh:
            for event in events:
                if event.kind == "tool_call":
                    recorded[event.call_id] = ToolCallRecord(
                        call_id=event.call_id, tool=event.tool, input=event.input, result=event.result, ok=event.ok,
                        error=event.error, wall_seconds=event.wall_seconds,
                        cost={"wall_seconds": event.wall_seconds, "simulated_seconds": event.simulated_seconds,
                              "node_hours": event.node_hours or 0.0})  # fmt: skip
        def on_call(rec: ToolCallRecord) -> None:
            scrubber.sweep()  # what the engine printed during the call
            trace.emit("tool_call", **rec.trace_fields())
            # a node run again in this process (after an approval) takes it from here, as a resumed process would
            recorded[rec.call_id] = rec

        runner = ToolRunner(ctx, on_call=on_call)
        policy = make_policy(options, task)
        for value in getattr(policy, "secret_values", list)():  # the LLM's key
            redactor.add(value)
        if options.parent is not None:
            from .policies.replay import ForkPolicy

            policy = ForkPolicy.from_parent(options.parent, then=policy)
        from .prior import load_prior

        # a resumed run whose memo already holds them does not need its priors any more; one still there is read
        prior = [load_prior(Path(p), task, task_path) for p in options.prior if fresh or Path(p).exists()]
        pctx = PolicyContext(task=task, workspace=_View(sandbox), tool_schemas=runner.schemas(), run_id=options.run_id,
                             trace=trace, prior=prior)  # fmt: skip
        if fresh:
            trace.emit("run_started", task=task.name, task_path=str(task_path), task_sha256=_sha256(task_path),
                       policy=policy.name, sandbox=choice.kind, engine=choice.engine, choice_reason=choice.reason)  # fmt: skip
            if no_draft:
                trace.emit("note", level="info", message=f"speculative decoding not searched: {no_draft}")
            if options.replay_note:
                trace.emit("note", level="warning", message=options.replay_note)
            for p in prior:
                trace.emit("note", level="info", message=p.describe())
            if options.replay_of:
                what = f"re-execution of run {options.replay_of}'s recorded decisions (agent replay --execute)"
                trace.emit("note", level="info", message=what)
            if options.parent is not None:
                p = options.parent
                trace.emit("note", level="info", message=f"forked from run {p.run_id} at step {p.step}: its "
                           f"decisions 1..{p.step} replayed, then policy {policy.name}")  # fmt: skip
        else:
            trace.emit("note", level="info", message=f"resumed: {len(recorded)} recorded tool call(s) will not be redone")
        # the gates: the run's own, or (re-executing a run) the recorded run's, answered as it was answered
        kinds = options.approvals if options.approvals is not None else list(task.approvals)
        replayed, until = None, None
        if options.replay_of and options.replay_trace:
            replayed = recorded_answers(read_trace(Path(options.replay_trace)))
        elif options.parent is not None:  # a fork: the parent's answers for the steps it replays, then asked again
            replayed, until = recorded_answers(read_trace(Path(options.parent.trace))), options.parent.step
        gates = Gates(run_dir, kinds, trace, events, replayed=replayed, replayed_until=until)
        return cls(options, task, task_path, run_dir, choice, sandbox, ctx, runner, trace, policy, pctx, recorded,
                   redactor, scrubber, gates)  # fmt: skip

    # --- acting -------------------------------------------------------------------------------------------

    def recorded(self, call_id: str | None) -> ToolCallRecord | None:
        """A call the trace already holds (a resumed run does not redo it)."""
        return self._recorded.get(call_id) if call_id else None

    def resumed_id(self, call_id: str) -> str:
        """The id of a launch made again after a resume, for the recorded launch ``call_id`` whose server went with
        the killed process: ``<id>-resumed``, or ``<id>-<n>-resumed`` when an earlier resume made that one too (the
        trace holds every call once, however often a run is killed at the same point)."""
        cid, n = f"{call_id}-resumed", 1
        while self.recorded(cid) is not None:
            n += 1
            cid = f"{call_id}-{n}-resumed"
        return cid

    def call(self, call: Call) -> ToolCallRecord:
        args = call.args.get("__raw_arguments__", call.args) if isinstance(call.args, dict) else call.args
        return self.runner.call(call.tool, args, call_id=call.call_id)

    def call_tool(self, tool: str, args: dict[str, Any], call_id: str) -> ToolCallRecord:
        return self.recorded(call_id) or self.runner.call(tool, args, call_id=call_id)

    @staticmethod
    def charge(budget: Budget, rec: ToolCallRecord) -> Budget:
        cost = rec.cost
        return budget.model_copy(update={
            "wall_seconds": budget.wall_seconds + rec.wall_seconds,
            "node_hours": budget.node_hours + (cost.node_hours or 0.0),
            "simulated_seconds": budget.simulated_seconds + (cost.simulated_seconds or 0.0),
            "tool_calls": budget.tool_calls + 1,
        })  # fmt: skip

    # --- the end --------------------------------------------------------------------------------------------

    def finish(self, state: AgentState) -> dict[str, Any]:
        if self.ctx.server is not None:  # (killed after its stop was recorded: this process's server, its own call)
            cid = f"s{state.step}stop"
            self.runner.call("stop_server", {}, call_id=self.resumed_id(cid) if self.recorded(cid) else cid)
        summary = self.redactor(summarize(self, state))
        (self.run_dir / "summary.json").write_text(json.dumps(summary, indent=2))
        for name, script in (("launch.sh", launch_script), ("bench.sh", bench_script)):
            (self.run_dir / name).write_text(self.redactor.text(script(self, state)))
            (self.run_dir / name).chmod(0o755)  # runnable as ./launch.sh, as the README says
        # once per run: a run killed after this line and before the graph's last checkpoint finishes again on resume
        if not any(e.kind == "run_finished" for e in iter_trace(self.run_dir / "trace.jsonl")):
            self.trace.emit("run_finished", status=state.finish_reason or "finished", summary=summary)
        self.sandbox.close()
        self.ctx.executor.close()
        self.sweep()
        return summary

    def sweep(self) -> None:
        """Mask the secrets engines wrote under the run folder since the last sweep (servers stopped since)."""
        if self.scrubber is not None:
            self.scrubber.sweep()

    def close(self) -> None:
        self.sandbox.close()
        self.ctx.executor.close()
        self.sweep()
        self.trace.close()


def preflight(options: RunOptions, runs_dir: Path = RUNS_DIR, fresh: bool = True) -> TaskSpec:
    """Everything a run needs, checked before anything is created: the run id, the task file, the sandbox
    and executor asked for, the twin scenario (or the sources on a real node), the eval datasets, the prior runs
    (``--prior``), the policy with its replay trace or API key, the Docker engine and image, a runs folder that
    is writable with free space, and last an LLM policy's endpoint (one request: it answers and takes the key,
    :mod:`agent.llm_endpoint`). Every file is read with bounds and never quoted (``tasks/limits.py``,
    ``sandboxes/twin/safe_input.py``). Returns the task; raises :class:`RunError` (one line) otherwise."""
    check_run_id(options.run_id)
    if fresh and (runs_dir / options.run_id).exists():
        raise RunError(f"run {options.run_id} exists; use: agent resume {options.run_id}")
    if options.max_trials is not None and not 0 < options.max_trials <= limits.TRIALS:
        raise RunError(f"--max-trials {options.max_trials}: give 1 to {limits.TRIALS}")
    if options.llm_timeout_s is not None and not 0 < options.llm_timeout_s <= limits.TIMEOUT_S:
        raise RunError(f"--llm-timeout {options.llm_timeout_s:g}: give a number of seconds up to {limits.TIMEOUT_S} "
                       "(a week)")  # fmt: skip
    task_path = Path(options.task_path)
    try:
        task = load_task(task_path)
    except TaskError as exc:
        raise RunError(str(exc)) from None
    if options.sandbox not in (None, "auto", "local", "docker"):
        raise RunError(f"--sandbox {options.sandbox}: choose auto, local or docker")
    if options.executor not in ("inline", "ray"):
        raise RunError(f"--executor {options.executor}: choose inline or ray")
    if options.executor == "ray":
        import importlib.util

        if importlib.util.find_spec("ray") is None:
            raise RunError("--executor ray needs Ray installed (pip install ray)")
    if (options.sandbox or task.sandbox.kind) == "docker":
        from sandboxes.docker import docker_available

        if why := docker_available():
            raise RunError(f"the task runs in Docker, but {why}", ExitCode.INFRASTRUCTURE)
    try:
        choice = choose(task, options.sandbox)
    except SandboxError as exc:
        raise RunError(str(exc)) from None
    if choice.kind == "docker":
        _check_image(task.sandbox.docker.image)
    if choice.engine == "twin":
        from sandboxes.twin.scenario import ScenarioError, load

        try:
            load(task.workspace.twin.scenario)
        except (ScenarioError, OSError) as exc:
            raise RunError(f"{task_path}: workspace.twin.scenario: {exc}") from None
    else:
        for name, path in task.workspace.sources.items():
            if not Path(path).is_dir():
                raise RunError(f"{task_path}: workspace.sources.{name}: {path} is not a directory")
    from tools.evals import DatasetError, load_dataset

    for name, suite in task.evals.items():  # read whole only when the eval runs: found bad here, not then
        try:
            load_dataset(suite.dataset, suite.few_shot)
        except DatasetError as exc:
            raise RunError(f"{task_path}: evals.{name}.dataset: {exc}") from None
    from .prior import PriorError, load_prior

    for p in options.prior:  # a resumed run whose memo holds them does not need its priors any more
        if fresh or Path(p).exists():
            try:
                load_prior(Path(p), task, task_path)
            except PriorError as exc:
                raise RunError(str(exc)) from None
    from .policies.factory import PolicyError, make_policy

    try:
        policy = make_policy(options, task)
    except PolicyError as exc:
        raise RunError(str(exc)) from None
    check_runs_folder(runs_dir)
    if policy.name == "llm":  # last (the one check over the network): a run that cannot ask its LLM never begins
        from .llm_endpoint import CHECK_TIMEOUT_S, EndpointError, check_endpoint

        try:
            check_endpoint(policy.client, policy.base_url, policy.model, policy.secret_values(),
                           timeout_s=min(policy.timeout_s, CHECK_TIMEOUT_S))  # fmt: skip
        except EndpointError as exc:
            raise RunError(str(exc), exc.exit_code) from None
    return task


def _check_image(image: str) -> None:
    import docker
    from docker.errors import DockerException, ImageNotFound

    try:
        docker.from_env().images.get(image)
    except ImageNotFound:
        raise RunError(f"Docker image {image!r} is not here (for the twin: agent twin image)",
                       ExitCode.INFRASTRUCTURE) from None  # fmt: skip
    except DockerException as exc:
        raise RunError(f"no Docker engine: {str(exc).splitlines()[0][:160]}", ExitCode.INFRASTRUCTURE) from None


def check_runs_folder(runs_dir: Path) -> None:
    """The runs folder (or, before the first run, the folder it will be made in) is writable and has
    ``$DAYZERO_MIN_FREE_MB`` (default 1024) MB free."""
    existing = runs_dir.resolve()
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        raise RunError(f"runs folder {runs_dir}: {existing} is not a directory", ExitCode.INFRASTRUCTURE)
    read_only = bool(os.statvfs(existing).f_flag & os.ST_RDONLY)
    if read_only or not os.access(existing, os.W_OK | os.X_OK):
        why = "is on a read-only file system" if read_only else "is not writable"
        raise RunError(f"runs folder {runs_dir}: {existing} {why}", ExitCode.INFRASTRUCTURE)
    try:
        need = float(os.environ.get(MIN_FREE_MB_ENV) or MIN_FREE_MB)
    except ValueError:
        raise RunError(f"{MIN_FREE_MB_ENV}={os.environ[MIN_FREE_MB_ENV]!r}: give a number of MB") from None
    free = shutil.disk_usage(existing).free / 2**20
    if free < need:
        raise RunError(f"runs folder {runs_dir}: {free:.0f} MB free on {existing}, a run needs {need:.0f} MB "
                       f"({MIN_FREE_MB_ENV} sets it)", ExitCode.INFRASTRUCTURE)  # fmt: skip


def resumable(run_id: str, runs_dir: Path = RUNS_DIR) -> RunOptions:
    """The options of a run ``agent resume`` can continue, or a :class:`RunError` saying why it cannot: no
    such run, an unreadable run.json, a run that never started, or a task file that is gone or changed."""
    check_run_id(run_id)
    run_dir = runs_dir / run_id
    if not (run_dir / "run.json").exists():
        raise RunError(f"no run {run_id!r} under {runs_dir}/ (see: agent runs)")
    try:
        options = RunOptions.model_validate_json((run_dir / "run.json").read_text())
    except (OSError, ValueError) as exc:
        raise RunError(f"run {run_id} cannot resume: its run.json is unreadable ({str(exc).splitlines()[0]})") from None
    started = None
    if (run_dir / "trace.jsonl").exists():
        started = next((e for e in read_trace(run_dir / "trace.jsonl") if e.kind == "run_started"), None)
    if started is None:
        raise RunError(f"run {run_id} cannot resume: it never started (it failed while being set up); remove "
                       f"{run_dir} and start it again with agent run")  # fmt: skip
    task_path = Path(options.task_path)
    if not task_path.is_file():
        raise RunError(f"run {run_id} cannot resume: its task file {task_path} is not there"
                       + ("" if task_path.is_absolute() else " (resume from the folder the run was started in)"))
    if started.task_sha256 and _sha256(task_path) != started.task_sha256:
        raise RunError(f"run {run_id} cannot resume: its task file {task_path} changed since the run started "
                       "(sha256 differs); start a new run")  # fmt: skip
    return options


def _as_run_error(exc: BaseException, what: str) -> BaseException:
    """A failure while building a run as a one-line :class:`RunError` (KeyboardInterrupt and bugs unchanged)."""
    from sandboxes.twin.scenario import ScenarioError

    from .policies.factory import PolicyError
    from .prior import PriorError

    if isinstance(exc, RunError):
        return exc
    if isinstance(exc, TaskError | ScenarioError | PolicyError | PriorError):
        return RunError(f"{what}: {exc}")
    if isinstance(exc, OSError):
        where = f" ({exc.filename})" if exc.filename else ""
        return RunError(f"{what}: {exc.strerror or exc}{where}", ExitCode.INFRASTRUCTURE)
    if isinstance(exc, SandboxError) or type(exc).__module__.startswith("docker"):
        return RunError(f"{what}: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}",
                        ExitCode.INFRASTRUCTURE)  # fmt: skip
    return exc


def _gpu_resource(task: TaskSpec) -> str:
    """The Ray custom resource a trial holds per GPU, named after the accelerator (``mi355x_gpu``)."""
    return "".join(ch for ch in task.hardware.accelerator.lower() if ch.isalnum()) + "_gpu"


def _sha256(path: Path) -> str:
    import hashlib

    return hashlib.sha256(path.read_bytes()).hexdigest()


def summarize(run: Run, state: AgentState) -> dict[str, Any]:
    targets = {}
    for t in run.task.targets:
        best = state.bests.get(t.name)
        value = best.value if best else None
        targets[t.name] = {"metric": t.metric, "target": t.min, "achieved": value,
                           "met": value is not None and value >= t.min and best.verified,
                           "trial": best.trial if best else None, "flags": best.flags if best else None,
                           # what one user saw in the benchmark behind the figure, and the bound it had to meet
                           "interactivity": best.interactivity.model_dump() if best and best.interactivity else None,
                           "bound": bound_text(t) or None,
                           # the figure is a floor (its knee search saw no rate fail above the knee): "at least"
                           "lower_bound": bool(best and best.lower_bound)}  # fmt: skip
    simulated = run.choice.engine == "twin"
    best = _winning(run, state)
    commits = [{"patch": p.id, "title": p.title, "commits": p.commits, "files": p.files} for p in state.patches
               if p.status == "committed"]  # fmt: skip
    return {
        "run_id": run.run_id,
        "task": run.task.name,
        "engine": run.choice.engine,
        "simulated": simulated,
        "finish_reason": state.finish_reason,
        "targets": targets,
        "trials": [t.model_dump(mode="json") for t in state.trials],
        "commits": commits,
        "branch": f"dayzero/{run.run_id}",
        ("simulated_node_hours" if simulated else "node_hours"): round(state.budget.node_hours, 4),
        "wall_seconds_in_tools": round(state.budget.wall_seconds, 1),
        "llm_tokens": state.budget.llm_tokens,
        "best_config": best,
        # features the policy could not bring up: why, the configuration that showed it, what it did not retry
        "blocked": _blocked(run, state),
        "after_targets": _after_targets(run, state),
        "explain": _explain(run, state),
        # every answer at the run's approval gates: what was held back, and who said yes or no, when and why
        "approvals": _approvals(run),
        # what the end means, in words, and the exit code agent run / agent resume end with
        "outcome": classify(state, run.task, run.options.max_trials).model_dump(mode="json"),
    }


def _approvals(run: Run) -> list[dict[str, Any]]:
    return [{"gate": e.answer["gate"], "what": e.what, "approved": e.answer["approved"], "by": e.answer["by"],
             "at": e.answer["at"], "via": e.answer["via"], "reason": e.answer.get("reason", ""), "same_as": e.same_as}
            for e in iter_trace(run.run_dir / "trace.jsonl") if e.kind == "approval_answered"]  # fmt: skip


def _blocked(run: Run, state: AgentState) -> dict[str, Any]:
    """The features the policy could not bring up; for a kernel that blocked the deeper speculative chains, what
    the deepest of them would have given, estimated from the final single-stream best (its measured acceptance)."""
    from .policies.known_failures import KernelBlock, would_give

    out = copy.deepcopy(dict(state.memo.get("blocked", {})))
    blocks = {b.signature.partition(":")[2]: b for b in map(KernelBlock.model_validate,
                                                             state.memo.get("kernel_blocks", {}).values())}  # fmt: skip
    single = next((t for t in run.task.targets if t.metric == "decode_tok_s"), None)
    best = state.bests.get(single.name) if single else None
    trial = next((t for t in state.trials if best is not None and t.id == best.trial), None)
    allowed = run.task.search_space.flags.get("speculative-num-steps", [])
    for entry in out.values():
        block = blocks.get(entry.get("kernel", ""))
        if block is None or best is None or trial is None:
            continue
        if would := would_give(block, best.flags, best.value, trial.accept_length, allowed):
            entry["would_give"] = would
    return out


def _explain(run: Run, state: AgentState) -> dict[str, Any]:
    """Per target with a best: each change from the bring-up configuration and what it moved, where measured."""
    from .ablation import explain_best

    out = {}
    for t in run.task.targets:
        if t.metric == "accuracy_delta" or (e := explain_best(state, run.task, t.name)) is None:
            continue
        out[t.name] = {"bring_up": e.baseline, "best": e.best, "unexplained": e.unexplained,
                       "changes": [c.model_dump(mode="json") for c in e.changes]}  # fmt: skip
    return out


def _after_targets(run: Run, state: AgentState) -> dict[str, Any] | None:
    """What the budget spent after the targets were met bought (None: they were not met)."""
    met, b = state.targets_met, state.budget
    if met is None:
        return None
    return {
        "met_at_step": met.step,
        "budget_node_hours": run.task.budgets.after_targets_node_hours(),
        "spent": {"node_hours": round(b.node_hours - met.node_hours, 4),
                  "benchmark_runs": b.benchmark_runs - met.benchmark_runs, "trials": b.trials - met.trials},
        "bought": {name: {"at_targets_met": met.values.get(name), "final": best.value}
                   for name, best in state.bests.items()},
        "stopped_because": state.stopped_because,
    }  # fmt: skip


def _winning(run: Run, state: AgentState) -> dict[str, Any] | None:
    """The configuration of the first throughput-like target's best (else any best)."""
    for t in run.task.targets:
        if t.metric != "accuracy_delta" and t.name in state.bests:
            b = state.bests[t.name]
            env = {k: run.ctx.render_value(v) for k, v in b.env.items()}  # rendered, as launch.sh holds it
            return {"target": t.name, "flags": b.flags, "env": env, "trial": b.trial}
    return None


PORT = "${PORT:-30000}"
PORT_URL = f"http://127.0.0.1:{PORT}"
OUT_FILE = "${OUT:-bench.jsonl}"


def _shell(env: dict[str, str], argv: list[str], refs: dict[str, str] | None = None) -> str:
    """``env K=V ... argv`` for a script, with the PORT and OUT placeholders left for the shell to expand, and the
    variables of ``refs`` given as the shell references it names (``K="$SOURCE"``) rather than their values."""
    refs = refs or {}
    command = " ".join(f'{k}="{refs[k]}"' if k in refs else f"{k}={shlex.quote(v)}" for k, v in env.items())
    command += " " + shlex.join(argv)
    for placeholder in (PORT, PORT_URL, OUT_FILE):
        command = command.replace(f"'{placeholder}'", f'"{placeholder}"')
    return command


def _script(run: Run, state: AgentState, header: list[str], argv_of: Callable[[Best], list[str] | None]) -> str:
    """A hand-over script: per target with a best (accuracy aside), what it reached and the command
    ``argv_of`` gives for that best, rendered with the engine's environment; the first runs, the rest are
    comments (each needs its own configuration)."""
    lines = ["#!/usr/bin/env bash", *header]
    body: list[str] = []
    needs: set[str] = set()
    first = True
    for t in run.task.targets:
        b = state.bests.get(t.name)
        argv = argv_of(b) if b is not None and t.metric != "accuracy_delta" else None
        if argv is None:
            continue
        at = f" at {b.rate:g} req/s" if b.rate else ""
        floor = "at least " if b.lower_bound else ""  # no rate was seen failing above the knee
        body.append(f"# {t.name}: {floor}{b.value:.1f} ({t.metric}{at}, target {t.min}), trial {b.trial}")
        # rendered: a {workspace} left in AITER_CONFIG_FMOE would serve the untuned path
        env = run.ctx.engine_env(b.env)
        refs = secret_references(run.task, env, run.redactor)  # secrets by name: the script never holds one
        needs |= {ref[1:] for ref in refs.values()}
        body.append(("exec env " if first else "# env ") + _shell(env, argv, refs))
        body.append("")
        first = False
    if needs:
        lines.append(f"# secrets are not written here: set {', '.join(sorted(needs))} in the environment first")
    lines += ["set -euo pipefail", "", *body]
    if first:  # no target has a measured best: a script that says so instead of doing nothing
        lines += ["echo 'dayzero run " + run.run_id + ": no configuration reached a measured best; nothing to run' >&2",
                  "exit 1", ""]  # fmt: skip
    return "\n".join(lines) + "\n"


def launch_script(run: Run, state: AgentState) -> str:
    """The winning command of the first target, runnable; the other targets' winners as comments."""
    header = [f"# dayzero run {run.run_id}: the winning launch command and environment.",
              f"# engine: {run.choice.engine} ({run.choice.reason})"]  # fmt: skip
    return _script(run, state, header, lambda b: run.ctx.launch_argv(b.flags, port=PORT))


def bench_script(run: Run, state: AgentState) -> str:
    """The benchmark command that measured each target's best, runnable against ``launch.sh``'s server."""
    template = run.ctx.render(run.ctx.engine.benchmark, base_url=PORT_URL, output_file=OUT_FILE)
    header = [f"# dayzero run {run.run_id}: the benchmark behind each reported figure.",
              "# Start the winning server first (PORT=30000 ./launch.sh), then run this with the same PORT;",
              "# OUT names the result file (JSON lines, bench_serving's record)."]  # fmt: skip
    # the run's URL and output file replaced, the workload and rate kept
    return _script(run, state, header,
                   lambda b: template + b.bench_command[len(template):] if b.bench_command else None)  # fmt: skip
