"""PR material for a run's patches: ``agent review RUN``.

Each workspace source tree (``runs/<id>/workspace/<tree>``, a git repository) holds the pristine source as its
root commit and one commit per patch on the run's branch ``dayzero/<run-id>``. This module reads those commits
(title, crash excerpt, root cause, change, evidence, trailers) together with the run's trace (which trial
launched what, and which benchmark measured it) and writes, under ``runs/<id>/review/``:

- ``<tree>/NNNN-<subject>.patch``: ``git format-patch`` against the pristine commit (``git am`` applies the
  series on the pristine tree, upstream);
- ``<tree>/NNNN-<subject>.PR.md``: one pull-request description per patch: crash excerpt, root cause in at
  most two sentences, the diff, evidence before and after (labelled simulated when the twin measured it), and
  the exact launch + benchmark commands that reproduce the check, fully rendered;
- ``PR.md``: the run's summary pull request (targets against results, every patch with links, the winning
  launch command), then the run report (:func:`agent.inspector.report.write_report`) beside it.

:func:`push` pushes each tree's run branch to one git remote as ``dayzero/<run-id>/<tree>``.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
from pathlib import Path
from typing import Any

import git
from jinja2 import Environment, FileSystemLoader, StrictUndefined
from pydantic import BaseModel, Field

from tasks.spec import EngineSpec, TaskError, TaskSpec, load_task
from tools.context import ENGINE_LOCALE, fill_placeholders, flags_to_argv
from tools.git_ops import run_branch
from tools.machine_paths import roots_of, strip_machine_paths

from ..interactivity import Interactivity, from_summary, per_user_text
from ..outcomes import ExitCode
from ..secrets import Redactor, configured_secrets, secret_references
from ..trace import ToolCallEvent, TraceError, read_trace
from .pr_routing import Defect, Destination, defects, destination
from .report import UNITS, ReportError, TargetResult, write_report
from .reproduce import EngineCommands, Reference, real_engine, workload_args

TEMPLATES = Path(__file__).parent / "templates"
SIMULATED_LABEL = "simulated: dayzero digital twin, not a real node"
REVIEW_DIR = "review"
MARKER = ".dayzero-review"  # written into every review folder: only such a folder is ever replaced
CHECK_PORT = 30000  # the port the reproduce commands use (the run's own ports were random free ones)
CHECK_OUTPUT = "bench.jsonl"  # where a reproduced benchmark writes its record
_PLACEHOLDER = re.compile(r"\{(\w+)\}")
_TRAILER = re.compile(r"^([A-Za-z][A-Za-z0-9-]*): (.*)$")
_FIELD = re.compile(r"^(What failed|Root cause|Change):\s+(.*)$", re.DOTALL)
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z(\"'`])")


class ReviewError(ValueError):
    """A run that cannot be reviewed or pushed; the message is one line."""


# ------------------------------------------------------------------------------------------- models


class Evidence(BaseModel):
    """What happened without the patch and with it, as the commit records it."""

    before: str
    after: str
    simulated: bool = Field(description="measured on the digital twin, not a real node")
    measured_after: list[str] = Field(default_factory=list,
                                      description="the benchmark summaries of the check trial, from the trace")  # fmt: skip


class PatchReview(BaseModel):
    """One commit of the run's branch in one source tree, with what a reviewer needs to judge it."""

    tree: str = Field(description="the workspace source tree (git repository) the commit is in")
    index: int = Field(description="1-based position in the tree's series (the NNNN of its patch file)")
    commit: str
    base: str = Field(description="the pristine (root) commit the series applies to")
    title: str
    patch_id: str | None = Field(None, description="the Dayzero-Patch trailer (the run's patch record)")
    approvals: list[str] = Field(default_factory=list, description=(
        "who approved the change and its commit at the run's gates (Dayzero-Approved trailers)"))
    crash_excerpt: list[str] = Field(
        default_factory=list, description="the crash's decisive log lines, verbatim"
    )
    what_failed: str = ""
    root_cause: str = Field("", description="at most two sentences")
    root_cause_detail: str = Field("", description="the rest: what the diagnosis inferred, further sentences")
    change: str = ""
    diff: str = Field(description="the commit's diff against its parent, paths as the tree names them")
    files: list[str] = Field(default_factory=list, description="paths in the tree")
    evidence: Evidence
    crash_trial: int | None = Field(None, description="the trial whose crash the patch answers")
    check_trial: int | None = Field(None, description="the trial that verified it (Dayzero-Trial)")
    trial_ids: list[int] = Field(default_factory=list, description="crash trial, then check trial")
    reproduce_command: str = Field(description="shell lines: the check trial's launch, then its benchmark")
    crash_command: str | None = Field(
        None, description="the crash trial's launch, on the tree before the patch"
    )
    patch_file: str | None = Field(None, description="relative to the review folder, once written")
    pr_file: str | None = Field(None, description="relative to the review folder, once written")
    unit_tests: list[str] = Field(default_factory=list, description="files of the commit in the tree's own tests")
    destination: Destination | None = Field(None, description="where this patch is sent")
    defect: Defect | None = Field(None, description="the crash it answers, with every fix of it in sending order")


class TreeReview(BaseModel):
    """One source tree: its pristine base, where it came from, and its patches."""

    tree: str
    branch: str
    base: str
    head: str
    upstream: list[str] = Field(default_factory=list, description="the pristine commit's Upstream-* trailers")
    patches: list[PatchReview] = Field(default_factory=list)
    destination: Destination | None = None


class Verdict(BaseModel):
    """Whether the reviewed run met its targets, in words, and the exit code ``agent review`` ends with: the run's
    own (0 only when every target was met; a run not finished yet is 3, its targets missed so far)."""

    met: bool
    words: str
    exit_code: int


def verdict(summary: dict[str, Any]) -> Verdict:
    """The verdict of a run from its ``summary.json`` (``{}``: not finished)."""
    if not summary:
        return Verdict(met=False, words="the run has not finished (no summary.json): no target is met yet",
                       exit_code=ExitCode.TARGETS_MISSED)  # fmt: skip
    targets = summary.get("targets") or {}
    met = bool(targets) and all(t.get("met") for t in targets.values())
    if outcome := summary.get("outcome"):
        code = int(outcome.get("exit_code", 0 if met else ExitCode.TARGETS_MISSED))
        return Verdict(met=met and code == 0, words=str(outcome.get("words", "")), exit_code=code)
    if met:
        return Verdict(met=True, words="every target met", exit_code=ExitCode.TARGETS_MET)
    return Verdict(met=False, words=f"targets missed: {summary.get('finish_reason') or 'no reason recorded'}",
                   exit_code=ExitCode.TARGETS_MISSED)  # fmt: skip


class ReviewResult(BaseModel):
    """What ``write_review`` wrote."""

    run_id: str
    verdict: Verdict
    out_dir: Path
    summary_pr: Path
    patch_files: list[Path] = Field(default_factory=list)
    pr_files: list[Path] = Field(default_factory=list)
    report_files: list[Path] = Field(default_factory=list, description="what agent.inspector.report.write_report wrote")
    report_error: str | None = Field(None, description="why the run report was not written")
    trees: list[TreeReview] = Field(default_factory=list)
    defects: list[Defect] = Field(default_factory=list, description="each crash, its fixes in sending order")


class PushedBranch(BaseModel):
    tree: str
    local_branch: str
    remote_ref: str
    sha: str


class PushResult(BaseModel):
    remote: str
    pushed: list[PushedBranch] = Field(default_factory=list)
    skipped: list[str] = Field(default_factory=list, description="trees without patches (nothing to push)")


# -------------------------------------------------------------------------------- the run's trials


class _Trial(BaseModel):
    """A trial as the trace shows it (numbered as agent/outcomes.py numbers them)."""

    id: int
    flags: dict[str, Any] = Field(default_factory=dict)
    env: dict[str, str] = Field(default_factory=dict)
    status: str
    launch_argv: list[str] | None = None  # as run (None: a trial of a parallel sweep, not launched here)
    pristine: list[str] = Field(default_factory=list)
    bench_commands: list[list[str]] = Field(default_factory=list)
    bench_summaries: list[str] = Field(default_factory=list)
    seq: int = 0  # the trace line that launched it


class _RunRecord(BaseModel):
    """What a review needs from the run's files."""

    run_id: str
    run_dir: Path
    summary: dict[str, Any] = Field(default_factory=dict)
    simulated: bool = False
    trials: list[_Trial] = Field(default_factory=list)
    commit_seq: dict[str, int] = Field(default_factory=dict)  # commit sha -> the trace line that made it
    placeholders: dict[str, str] = Field(
        default_factory=dict
    )  # {python}, {workspace}, {host} as the run had them
    task: TaskSpec | None = None
    engine: EngineSpec | None = None
    task_path: str | None = None
    applied_step: dict[str, int] = Field(default_factory=dict)  # commit sha -> the step its patch was applied at
    trial_step: dict[int, int] = Field(default_factory=dict)  # trial id -> the step it launched at


def _steps(run_dir: Path, run_id: str) -> tuple[dict[str, int], dict[int, int]]:
    """From the run's last checkpoint: when each committed patch was applied and each trial launched (what a
    trial ran with is every patch applied before it); empty for a run without checkpoints."""
    from ..graph import (
        saved_state,  # the graph's own reader of its checkpoints (imports LangGraph: only here)
    )

    try:
        state = saved_state(run_dir, run_id)
    except Exception:  # noqa: BLE001  (a run from another version: the review goes on without tree states)
        return {}, {}
    if state is None:
        return {}, {}
    return ({sha: p.step_applied for p in state.patches for sha in p.commits},
            {t.id: t.step for t in state.trials})  # fmt: skip


def _trials(events: list[Any]) -> tuple[list[_Trial], dict[str, int]]:
    trials: list[_Trial] = []
    commit_seq: dict[str, int] = {}
    for e in events:
        if not isinstance(e, ToolCallEvent):
            continue
        r = e.result
        if e.tool == "launch_server" and r.get("status"):
            trials.append(_Trial(id=len(trials) + 1, flags=e.input.get("flags", {}), env=e.input.get("env", {}),
                                 status=r["status"], launch_argv=r.get("argv") or None,
                                 pristine=e.input.get("pristine", []), seq=e.seq))  # fmt: skip
        elif e.tool == "run_trials" and e.ok:
            for o in r.get("outcomes", []):
                spec = o.get("spec", {})
                trials.append(_Trial(id=len(trials) + 1, flags=spec.get("flags", {}), env=spec.get("env", {}),
                                     status=o.get("status", "?"), seq=e.seq))  # fmt: skip
        elif e.tool in ("run_benchmark", "find_knee") and e.ok and trials and trials[-1].status == "up":
            trials[-1].bench_commands += [run["command"] for run in r.get("runs", []) if run.get("command")]
            if r.get("summary"):
                trials[-1].bench_summaries.append(f"{e.tool}: {r['summary']}")
        elif e.tool == "commit" and e.ok:
            for c in r.get("commits", []):
                commit_seq[c["sha"]] = e.seq
    return trials, commit_seq


def _match_template(template: list[str], argv: list[str]) -> dict[str, str]:
    """The placeholder values that rendered ``template`` into (the first parts of) ``argv``."""
    values: dict[str, str] = {}
    for part, rendered in zip(template, argv, strict=False):
        names = _PLACEHOLDER.findall(part)
        if not names:
            continue
        pattern, seen = "", set()
        for literal, name in zip(_PLACEHOLDER.split(part)[::2], [*names, None], strict=False):
            pattern += re.escape(literal)
            if name is not None:
                pattern += f"(?P={name})" if name in seen else f"(?P<{name}>.+?)"
                seen.add(name)
        m = re.fullmatch(pattern, rendered)
        if m:
            for name, value in m.groupdict().items():
                values.setdefault(name, value)
    return values


def _load_run(run_dir: Path) -> _RunRecord:
    run_dir = Path(run_dir)
    trace_path = run_dir / "trace.jsonl"
    if not trace_path.exists() or not (run_dir / "workspace").is_dir():
        raise ReviewError(f"{run_dir} is not a run (no trace.jsonl and workspace/ there)")
    try:
        events = read_trace(trace_path)
    except TraceError as exc:
        raise ReviewError(str(exc)) from None
    started = next((e for e in events if e.kind == "run_started"), None)
    summary = (
        json.loads((run_dir / "summary.json").read_text()) if (run_dir / "summary.json").exists() else {}
    )
    run_id = summary.get("run_id") or (started.run_id if started else run_dir.name)
    engine_name = summary.get("engine") or (started.engine if started else "")
    trials, commit_seq = _trials(events)
    applied, launched = _steps(run_dir, run_id)
    task = engine = None
    options = json.loads((run_dir / "run.json").read_text()) if (run_dir / "run.json").exists() else {}
    task_path = options.get("task_path") or (started.task_path if started else None)
    if task_path:
        try:
            task = load_task(Path(task_path))
            engine = getattr(task.engines, engine_name, None)
        except TaskError:
            task = None  # the task file moved: commands come from the trace alone
    placeholders: dict[str, str] = {}
    if engine is not None:
        plain = next((t for t in trials if t.launch_argv and not t.pristine), None)
        if plain is not None:
            placeholders = {
                k: v for k, v in _match_template(engine.launch, plain.launch_argv).items() if k != "port"
            }
    placeholders.setdefault("workspace", str((run_dir / "workspace").resolve()))
    return _RunRecord(run_id=run_id, run_dir=run_dir, summary=summary,
                      simulated=bool(summary.get("simulated", engine_name == "twin")), trials=trials,
                      commit_seq=commit_seq, placeholders=placeholders, task=task, engine=engine,
                      task_path=task_path, applied_step=applied, trial_step=launched)  # fmt: skip


# ------------------------------------------------------------------------------------ commands


_Ref = Reference  # a variable of the caller's own environment (``$HF_TOKEN``): a secret's stand-in


def _redactor(record: _RunRecord) -> Redactor:
    return Redactor(configured_secrets(record.task))


def _env_for(record: _RunRecord, trial: _Trial) -> dict[str, str]:
    """The environment the engine had for ``trial`` (as ``ToolContext.engine_env`` built it); secrets stay
    references to the caller's own environment (``"$HF_TOKEN"``, ``"$SOURCE"`` for a variable read from it), never
    their values (agent/secrets.py: ``secret_references``, as launch.sh has them)."""
    env: dict[str, str] = dict(ENGINE_LOCALE)
    if record.engine is not None:
        env.update(record.engine.env)
    if record.task is not None:
        env.update(record.task.resolved_env())
    env.update(trial.env)
    refs = secret_references(record.task, env, _redactor(record))
    return {k: _Ref(refs[k]) if k in refs else fill_placeholders(v, record.placeholders) for k, v in env.items()}


def _real_env(record: _RunRecord, trial: _Trial, real: EngineCommands) -> dict[str, str]:
    """The environment the real engine runs ``trial`` with: its own, the image's, the task's and the trial's
    variables (the run's engine's own, e.g. the twin's pacing, are not the real engine's); secrets as references."""
    env: dict[str, str] = dict(real.engine.env)
    if real.in_image:
        env.update(real.docker.env)
    if record.task is not None:
        env.update(record.task.resolved_env())
    env.update(trial.env)
    refs = secret_references(record.task, env, _redactor(record))
    return {k: Reference(refs[k]) if k in refs else v for k, v in env.items()}


# Where the task file is gone (no templates to go by), the flags SGLang's own commands use for each value.
_FLAG_OF = {"port": "--port", "base_url": "--base-url", "output_file": "--output-file"}


def _rerendered(template: list[str] | None, argv: list[str], values: dict[str, str]) -> list[str]:
    """``argv`` with the parts that ``template`` fills from ``values``' placeholders rendered again with
    ``values`` (the run's random port becomes the check's fixed one); without a template, the value after
    each such placeholder's flag."""
    out = list(argv)
    if template is None:
        for name, value in values.items():
            flag = _FLAG_OF.get(name)
            if flag in out[:-1]:
                out[out.index(flag) + 1] = value
        return out
    for i, part in enumerate(template[: len(out)]):
        if any(name in values for name in _PLACEHOLDER.findall(part)):
            out[i] = fill_placeholders(part, {**_match_template([part], [out[i]]), **values})
    return out


def _shell_line(env: dict[str, str], argv: list[str]) -> str:
    quoted = [f'{k}="{v}"' if isinstance(v, _Ref) else f"{k}={shlex.quote(v)}" for k, v in env.items()]
    return " ".join(["env", *quoted, shlex.join(argv)])


def _launch_argv(record: _RunRecord, trial: _Trial) -> list[str] | None:
    """The trial's launch as run (or, for a trial of a parallel sweep, as the engine template renders it),
    on the check's port."""
    port = {"port": str(CHECK_PORT)}
    template = record.engine.launch if record.engine else None
    if trial.launch_argv:
        return _rerendered(template, trial.launch_argv, port)
    if template is None:
        return None
    return [fill_placeholders(p, {**record.placeholders, **port}) for p in template + flags_to_argv(trial.flags)]


def _bench_argv(record: _RunRecord, command: list[str]) -> list[str]:
    """A benchmark command as run, pointed at the check's port and writing ``bench.jsonl``."""
    template = record.engine.benchmark if record.engine else None
    if template is not None:
        urls = [v for v in _match_template(template, command).values() if v.startswith("http")]
    else:
        urls = [command[command.index("--base-url") + 1]] if "--base-url" in command[:-1] else []
    url = re.sub(r":\d+(?=/|$)", f":{CHECK_PORT}", urls[0]) if urls else f"http://127.0.0.1:{CHECK_PORT}"
    return _rerendered(template, command, {"base_url": url, "output_file": CHECK_OUTPUT})


def _reproduce(record: _RunRecord, trial: _Trial | None) -> str:
    """Shell lines that relaunch ``trial``'s configuration on port 30000 and run the benchmark that measured
    it: with the task's real engine in its image when the task names one (:mod:`agent.inspector.reproduce`), else as the run
    launched it; from a folder laid out like the run's workspace, with no path of this machine."""
    if trial is None:
        return "# the check trial is not in the run's trace: nothing to reproduce"
    real = real_engine(record.task)
    if real is not None:
        return _reproduce_real(record, trial, real)
    argv = _launch_argv(record, trial)
    if argv is None:
        return f"# trial {trial.id} left no launch command in the trace and the task file is gone"
    env = _env_for(record, trial)
    ready = record.engine.ready_line if record.engine else "ready"
    sim = f" ({SIMULATED_LABEL})" if record.simulated else ""
    lines = [f"# 1. launch trial {trial.id}'s configuration{sim} and leave it running:",
             _shell_line(env, argv)]  # fmt: skip
    if trial.pristine:
        lines.insert(1, f"#    (this launch read {', '.join(trial.pristine)} as released, from the run's "
                        "pristine view of the workspace)")  # fmt: skip
    if trial.bench_commands:
        lines += [f"# 2. in another shell, once its log says {ready!r}, the benchmark that measured it:",
                  _shell_line(env, _bench_argv(record, trial.bench_commands[-1]))]  # fmt: skip
    else:
        lines.append("# (no benchmark ran on this trial: the check was that it came up)")
    return _local(record, "\n".join(lines))


def _reproduce_real(record: _RunRecord, trial: _Trial, real: EngineCommands) -> str:
    env = _real_env(record, trial, real)
    where = f"in {real.docker.image}" if real.in_image else "on the node"
    lines = [f"# 1. start trial {trial.id}'s configuration {where} and leave it running:"]
    if trial.pristine:
        trees = sorted({f.split("/", 1)[0] for f in trial.pristine})
        lines.append(f"#    ({', '.join(trial.pristine)} as released: before applying "
                     f"{', '.join(f'{t}/*.patch' for t in trees)})")
    lines += real.server_lines(trial.flags, env)
    if trial.bench_commands:
        template = record.engine.benchmark if record.engine else None
        args = workload_args(template, trial.bench_commands[-1])
        lines += [f"# 2. in another shell, once its log says {real.engine.ready_line!r}, the benchmark that "
                  "measured it:", real.bench_line(args, env)]  # fmt: skip
    else:
        lines.append("# (no benchmark ran on this trial: the check was that it came up)")
    return _local(record, "\n".join(lines))


def _crash_command(record: _RunRecord, trial: _Trial | None) -> str | None:
    if trial is None:
        return None
    real = real_engine(record.task)
    if real is not None:
        return _local(record, "\n".join(real.server_lines(trial.flags, _real_env(record, trial, real))))
    argv = _launch_argv(record, trial)
    return _local(record, _shell_line(_env_for(record, trial), argv)) if argv else None


def _machine_roots(record: _RunRecord) -> list[str]:
    """Where this run's files are, and were when it ran (a copied run's trace names its first folder)."""
    recorded = record.placeholders.get("workspace")
    return roots_of(record.run_dir / "workspace", record.run_dir, recorded,
                    str(Path(recorded).parent) if recorded else None)  # fmt: skip


def _local(record: _RunRecord, text: str) -> str:
    """``text`` with the run's folders (as they are and as they were) made relative: what is written for a
    maintainer names no path of this machine."""
    return strip_machine_paths(text, _machine_roots(record))


# ------------------------------------------------------------------------------- commit messages


class _Message(BaseModel):
    crash: list[str] = Field(default_factory=list)
    fields: dict[str, str] = Field(default_factory=dict)
    evidence_label: str = ""
    evidence: dict[str, str] = Field(default_factory=dict)
    trailers: dict[str, str] = Field(default_factory=dict)
    approvals: list[str] = Field(default_factory=list)  # the Dayzero-Approved trailers, in order


def _parse_message(message: str) -> _Message:
    """The sections ``tools.git_ops.message`` writes: crash excerpt, What failed / Root cause / Change,
    Evidence with before and after, trailers."""
    out = _Message()
    paragraphs = re.split(r"\n\s*\n", message.strip("\n"))[1:]
    i = 0
    while i < len(paragraphs):
        p = paragraphs[i]
        if p.strip() == "The crash:" and i + 1 < len(paragraphs):
            out.crash = [
                ln[4:] if ln.startswith("    ") else ln.strip() for ln in paragraphs[i + 1].splitlines()
            ]
            i += 2
            continue
        if m := _FIELD.match(p):
            out.fields[m.group(1)] = " ".join(m.group(2).split())
        elif p.startswith("Evidence"):
            head, _, rest = p.partition("\n")
            out.evidence_label = head.rstrip(":")
            for item in re.split(r"\n(?=- )", rest):
                key, _, value = item.lstrip("- ").partition(":")
                out.evidence[key.strip()] = " ".join(value.split())
        elif all(_TRAILER.match(ln) for ln in p.splitlines()):
            pairs = [_TRAILER.match(ln).groups() for ln in p.splitlines()]  # type: ignore[union-attr]
            out.trailers.update(pairs)
            out.approvals += [v for k, v in pairs if k == "Dayzero-Approved"]
        i += 1
    return out


def two_sentences(text: str) -> tuple[str, str]:
    """``text`` as (its first two sentences without bracketed asides, the rest): a root cause a reviewer reads
    in one go, and the detail behind it."""
    asides = re.findall(r"\s*\[([^\[\]]*)\]\s*(?=$|[.;])", text)
    main = re.sub(r"\s*\[[^\[\]]*\]\s*(?=$|[.;])", "", text).strip()
    sentences = _SENTENCE_END.split(main)
    head = " ".join(sentences[:2]).strip()
    if head and head[-1] not in ".!?":
        head += "."
    rest = " ".join(sentences[2:] + asides).strip()
    return head, rest


# ----------------------------------------------------------------------------------------- collecting


def _source_repos(run_dir: Path) -> dict[str, git.Repo]:
    """The workspace's own git repositories (a tree without ``.git`` is not a patchable source)."""
    ws = Path(run_dir) / "workspace"
    repos = {}
    for d in sorted(ws.iterdir()):
        if d.is_dir() and (d / ".git").exists():
            try:
                repos[d.name] = git.Repo(d)
            except git.GitError as exc:
                raise ReviewError(f"{d}: not a readable git repository ({type(exc).__name__})") from None
    return repos


def _tree(record: _RunRecord, name: str, repo: git.Repo) -> TreeReview | None:
    """The tree's review, or None when it has no run branch (raises ``ReviewError`` for a broken repository)."""
    try:
        return _read_tree(record, name, repo)
    except (git.GitCommandError, ValueError) as exc:
        why = _git_error(exc) if isinstance(exc, git.GitCommandError) else str(exc)
        raise ReviewError(f"workspace/{name}: cannot read the run branch: {why}") from None


def _read_tree(record: _RunRecord, name: str, repo: git.Repo) -> TreeReview | None:
    branch = run_branch(record.run_id)
    if branch not in repo.heads:
        return None
    head = repo.heads[branch].commit
    base = repo.git.rev_list("--max-parents=0", branch).split()[0]
    pristine = _parse_message(repo.commit(base).message)
    upstream = [f"{k}: {v}" for k, v in pristine.trailers.items() if k.startswith("Upstream")]
    tree = TreeReview(tree=name, branch=branch, base=base, head=head.hexsha, upstream=upstream)
    shas = repo.git.rev_list("--reverse", f"{base}..{branch}").split()
    by_id = {t.id: t for t in record.trials}
    for index, sha in enumerate(shas, start=1):
        c = repo.commit(sha)
        msg = _parse_message(c.message)
        check_id = _int(msg.trailers.get("Dayzero-Trial"))
        before = msg.evidence.get("before", "")
        crash_id = _int(m.group(1)) if (m := re.search(r"\btrial (\d+)\b", before)) else None
        if crash_id is None:  # the last crash the trace shows before the commit
            seq = record.commit_seq.get(sha, 1 << 62)
            crash_id = next((t.id for t in reversed(record.trials) if t.seq < seq and t.status != "up"), None)
        check = by_id.get(check_id) if check_id else None
        root, detail = two_sentences(msg.fields.get("Root cause", ""))
        tree.patches.append(PatchReview(
            tree=name, index=index, commit=sha, base=base, title=c.summary, patch_id=msg.trailers.get("Dayzero-Patch"),
            approvals=msg.approvals,
            crash_excerpt=msg.crash, what_failed=msg.fields.get("What failed", ""), root_cause=root,
            root_cause_detail=detail, change=msg.fields.get("Change", ""),
            diff=repo.git.diff(f"{sha}~1", sha, "--no-color", stdout_as_string=True) + "\n",
            files=sorted(c.stats.files), unit_tests=_unit_tests(sorted(c.stats.files)), crash_trial=crash_id,
            check_trial=check_id,
            trial_ids=[t for t in (crash_id, check_id) if t is not None],
            evidence=Evidence(before=before, after=msg.evidence.get("after", ""),
                              simulated="simulated" in msg.evidence_label.lower() or record.simulated,
                              measured_after=check.bench_summaries if check else []),
            reproduce_command=_reproduce(record, check),
            crash_command=_crash_command(record, by_id.get(crash_id) if crash_id else None),
        ))  # fmt: skip
    return tree


def _unit_tests(files: list[str]) -> list[str]:
    """The files of a commit that are tests of the tree (under a ``test``/``tests`` folder, or named ``test_*`` /
    ``*_test``): an engine fix may come with one, written in the engine's own test style."""
    out = []
    for f in files:
        parts = f.split("/")
        stem = parts[-1].rsplit(".", 1)[0]
        if any(p in ("test", "tests") for p in parts[:-1]) or stem.startswith("test_") or stem.endswith("_test"):
            out.append(f)
    return out


def trees_at(record: _RunRecord, trees: list[TreeReview], trial: int | None) -> str | None:
    """How each patched tree was when ``trial`` launched: which of this review's patches it had (a patch of another
    tree made later, e.g. the engine fix that makes a config fix unnecessary, must not be applied to reproduce the
    config fix's check). None when the run's checkpoints do not say."""
    step = record.trial_step.get(trial) if trial is not None else None
    if step is None:
        return None
    released = {f for t in record.trials if t.id == trial for f in t.pristine}  # launched as released
    parts = []
    for t in trees:
        if not t.patches:
            continue
        had = [p for p in t.patches if record.applied_step.get(p.commit, 1 << 62) < step
               and not {f"{t.tree}/{f}" for f in p.files} & released]  # fmt: skip
        if not had:
            parts.append(f"{t.tree}/ as released")
        elif len(had) == len(t.patches):
            parts.append(f"{t.tree}/ with all its patches")
        else:
            parts.append(f"{t.tree}/ with patch{'es' if len(had) > 1 else ''} "
                         f"{', '.join(f'{p.index:04d}' for p in had)} only")  # fmt: skip
    return f"# the trees as trial {trial} had them: {'; '.join(parts)}" if parts else None


def _with_tree_states(record: _RunRecord, trees: list[TreeReview]) -> None:
    """Each patch's commands headed by the state of the trees their trial ran on."""
    for t in trees:
        for p in t.patches:
            if line := trees_at(record, trees, p.check_trial):
                p.reproduce_command = f"{line}\n{p.reproduce_command}"
            if p.crash_command and (line := trees_at(record, trees, p.crash_trial)):
                p.crash_command = f"{line}\n{p.crash_command}"


def _route(record: _RunRecord, trees: list[TreeReview]) -> list[Defect]:
    """Where each tree's patches go and, crash by crash, in which order (:mod:`agent.inspector.pr_routing`)."""
    model = record.task.model.name if record.task else None
    for t in trees:
        t.destination = destination(t, model)
    found = defects(trees, {t.id: t.pristine for t in record.trials}, model)
    by_patch = {(f.tree, f.index): d for d in found for f in d.fixes}
    for t in trees:
        for p in t.patches:
            p.destination, p.defect = t.destination, by_patch.get((t.tree, p.index))
    return found


def _int(text: str | None) -> int | None:
    try:
        return int(text) if text is not None else None
    except ValueError:
        return None


def collect_trees(run_dir: Path) -> list[TreeReview]:
    """Every workspace source tree that has the run's branch, with its patches."""
    record = _load_run(Path(run_dir))
    trees = []
    for name, repo in _source_repos(record.run_dir).items():
        with repo:
            if (t := _tree(record, name, repo)) is not None:
                trees.append(t)
    _with_tree_states(record, trees)
    _route(record, trees)
    return trees


def collect_patches(run_dir: Path) -> list[PatchReview]:
    """The run's patches, tree by tree, each in branch order (commits on ``dayzero/<run-id>`` after the
    pristine root commit)."""
    return [p for t in collect_trees(run_dir) for p in t.patches]


# ------------------------------------------------------------------------------------------- writing


def _templates() -> Environment:
    env = Environment(loader=FileSystemLoader(TEMPLATES), autoescape=False, trim_blocks=True, lstrip_blocks=True,
                      keep_trailing_newline=True, undefined=StrictUndefined)  # fmt: skip
    env.filters["fence"] = _fence
    return env


def _fence(text: str) -> str:
    """A backtick fence longer than any run of backticks in ``text`` (a diff may hold Markdown)."""
    longest = max((len(m) for m in re.findall(r"`+", text)), default=0)
    return "`" * max(3, longest + 1)


def _prepare_out(out_dir: Path) -> None:
    """Empty ``out_dir`` for a fresh review: only a folder a review wrote (it holds the marker) is replaced."""
    if out_dir.exists():
        if not out_dir.is_dir():
            raise ReviewError(f"{out_dir} exists and is not a folder")
        if any(out_dir.iterdir()) and not (out_dir / MARKER).exists():
            raise ReviewError(f"{out_dir} holds files agent review did not write; choose another --out")
        shutil.rmtree(out_dir)
    out_dir.mkdir(parents=True)
    (out_dir / MARKER).write_text(
        "written by agent review; the whole folder is replaced when it runs again\n"
    )


def _format_patches(repo: git.Repo, tree: TreeReview, dest: Path) -> list[Path]:
    dest.mkdir(parents=True, exist_ok=True)
    names = repo.git.format_patch(
        f"--base={tree.base}", "-o", str(dest), f"{tree.base}..{tree.branch}"
    ).split("\n")
    return [Path(n) if Path(n).is_absolute() else Path(repo.working_dir) / n for n in names if n.strip()]


def _targets(summary: dict[str, Any]) -> list[TargetResult]:
    return [TargetResult(name=name, metric=t.get("metric", ""), unit=UNITS.get(t.get("metric", ""), ""),
                         goal=t.get("target", 0.0), achieved=t.get("achieved"), met=bool(t.get("met")),
                         trial=t.get("trial"), lower_bound=bool(t.get("lower_bound")))
            for name, t in summary.get("targets", {}).items()]  # fmt: skip


def _write_report(run_dir: Path, out_dir: Path, redactor: Redactor) -> tuple[list[Path], str | None]:
    """The run report beside the PR material: its files, or why there is none (a run not finished yet, a task
    file that moved): the patches are worth reviewing either way."""
    try:
        return list(write_report(run_dir, out_dir, redactor)), None
    except ReportError as exc:
        return [], str(exc)


def write_review(run_dir: Path, out_dir: Path | None = None) -> ReviewResult:
    """Write the run's PR material (see the module docstring) into ``out_dir`` (default ``<run_dir>/review``),
    replacing a previous review there, then the run report beside it."""
    run_dir = Path(run_dir).resolve()
    record = _load_run(run_dir)
    out_dir = Path(out_dir).resolve() if out_dir is not None else run_dir / REVIEW_DIR
    repos = _source_repos(run_dir)
    trees = [t for name, repo in repos.items() if (t := _tree(record, name, repo)) is not None]
    _with_tree_states(record, trees)
    _prepare_out(out_dir)
    env = _templates()
    redactor = _redactor(record)  # every file written here quotes the run: none holds a secret of it
    roots = _machine_roots(record) + roots_of(out_dir)

    def clean(text: str) -> str:  # nor a path of this machine
        return strip_machine_paths(redactor.text(text), roots)

    result = ReviewResult(run_id=record.run_id, verdict=verdict(record.summary), out_dir=out_dir,
                          summary_pr=out_dir / "PR.md", trees=trees)  # fmt: skip
    written: list[tuple[PatchReview, TreeReview, Path]] = []
    for tree in trees:
        if not tree.patches:
            continue
        files = _format_patches(repos[tree.tree], tree, out_dir / tree.tree)
        if len(files) != len(tree.patches):
            raise ReviewError(
                f"{tree.tree}: git format-patch wrote {len(files)} file(s) for {len(tree.patches)} commit(s)"
            )
        for patch, path in zip(tree.patches, files, strict=True):
            patch.patch_file = str(path.relative_to(out_dir))
            patch.pr_file = str(path.with_name(path.name.removesuffix(".patch") + ".PR.md").relative_to(out_dir))
            text = path.read_text(errors="surrogateescape")
            if (masked := clean(text)) != text:  # a commit from before the commit tool refused secrets and paths
                path.write_text(masked, errors="surrogateescape")
            written.append((patch, tree, path))
    result.defects = _route(record, trees)  # with the files' names: each PR links its companions
    winners = _winners(record, record.summary, trees)
    commands = "\n".join([p.reproduce_command + (p.crash_command or "") for p, _, _ in written] +
                         [w["command"] for w in winners])  # fmt: skip
    layout = _layout(record, trees, commands)
    real = real_engine(record.task)
    for patch, tree, path in written:
        pr = out_dir / str(patch.pr_file)
        pr.write_text(clean(env.get_template("pr_patch.md.j2").render(
            p=patch, tree=tree, run_id=record.run_id, simulated_label=SIMULATED_LABEL, patch_name=path.name,
            layout=layout, real=real)))  # fmt: skip
        result.patch_files.append(path)
        result.pr_files.append(pr)
    for repo in repos.values():
        repo.close()
    summary = record.summary
    result.report_files, result.report_error = _write_report(run_dir, out_dir, redactor)
    task_dir = os.path.dirname(record.task_path) if record.task_path else None
    for path in result.report_files:  # the run's report names the task file and the run's folders: as names here
        if path.suffix in (".md", ".html"):
            text = path.read_text()
            if (local := strip_machine_paths(text, roots + roots_of(task_dir))) != text:
                path.write_text(local)
    result.summary_pr.write_text(clean(env.get_template("pr_summary.md.j2").render(
        run_id=record.run_id, branch=run_branch(record.run_id), task=summary.get("task", record.task.name if record.task else "?"),
        finished=summary.get("finish_reason") or "not finished (no summary.json)", targets=_targets(summary),
        per_user=_per_user(summary), bounds={n: t["bound"] for n, t in summary.get("targets", {}).items() if t.get("bound")},
        trees=trees, defects=result.defects, simulated=record.simulated, simulated_label=SIMULATED_LABEL,
        winners=winners, layout=layout, real=real, verdict=result.verdict, finished_run=bool(summary),
        reports=[p.relative_to(out_dir) if p.is_relative_to(out_dir) else p for p in result.report_files],
        report_error=result.report_error, approvals=summary.get("approvals") or [])))  # fmt: skip
    return result


def _layout(record: _RunRecord, trees: list[TreeReview], commands: str) -> list[str]:
    """What the folder the commands run from holds: each source tree as its upstream has it, with this review's
    patches of it applied, and the run's own files that ``commands`` name (a tuned table)."""
    by_name = {t.tree: t for t in trees}
    lines = []
    ws = record.run_dir / "workspace"
    for d in sorted(p for p in ws.iterdir() if p.is_dir() and not p.name.startswith(".")) if ws.is_dir() else []:
        t = by_name.get(d.name)
        if t is not None and t.destination is not None:
            version = next((u.split(": ", 1)[1] for u in t.upstream if u.startswith("Upstream-Version: ")), None)
            what = t.destination.project.removeprefix("the engine, ") + (f" {version}" if version and
                                                                       t.destination.kind == "engine" else "")
            patched = (f", with this review's `{d.name}/*.patch` applied (`git am`) as far as each command's first "
                       "line says" if t.patches else ", as released")  # fmt: skip
            lines.append(f"`{d.name}/`: {what}{patched}")
        elif not re.search(rf"(?<![\w.-]){re.escape(d.name)}(?=/|\b)", commands.replace('"$PWD"', "")):
            continue  # not a source of the run's, and no command reads it
        elif (d / ".git").exists():
            lines.append(f"`{d.name}/`: as released (the run did not patch it)")
        else:
            lines.append(f"`{d.name}/`: the run's own files (its `workspace/{d.name}` folder)")
    return lines


def _load_text(i: Interactivity | None) -> str:
    """The load the per-user figures were measured at: a request rate, a concurrency cap, requests in flight."""
    if i is None:
        return ""
    parts = ([f"{i.request_rate:g} req/s"] if i.request_rate else []) + \
        ([f"max concurrency {i.max_concurrency}"] if i.max_concurrency else []) + \
        ([f"{i.concurrency:.1f} requests in flight on average"] if i.concurrency else [])  # fmt: skip
    return ", ".join(parts)


def _per_user(summary: dict[str, Any]) -> dict[str, str]:
    """target name -> what one user saw behind its best (the PR's targets table)."""
    return {name: per_user_text(i) for name, t in summary.get("targets", {}).items() if (i := from_summary(t))}


def _winners(record: _RunRecord, summary: dict[str, Any], trees: list[TreeReview]) -> list[dict[str, Any]]:
    """Each target's best trial and the commands that start and measure it (the real engine's when the task
    names one), for the summary PR."""
    by_id = {t.id: t for t in record.trials}
    out, seen = [], set()
    for name, t in summary.get("targets", {}).items():
        trial = by_id.get(t.get("trial")) if t.get("trial") is not None else None
        if trial is None or trial.id in seen or t.get("metric") == "accuracy_delta":
            continue
        seen.add(trial.id)
        inter = from_summary(t)
        out.append({"target": name, "trial": trial.id, "achieved": t.get("achieved"), "metric": t.get("metric", ""),
                    "met": bool(t.get("met")), "goal": t.get("target"), "bound": t.get("bound"),
                    "lower_bound": bool(t.get("lower_bound")),
                    "per_user": per_user_text(inter) if inter else None,
                    "load": _load_text(inter),
                    "command": "\n".join(x for x in (trees_at(record, trees, trial.id), _reproduce(record, trial)) if x)})  # fmt: skip
    return out


# ------------------------------------------------------------------------------------------- pushing


def remote_ref(run_id: str, tree: str) -> str:
    """The branch a tree's run branch becomes on the remote: ``dayzero/<run-id>/<tree>``."""
    return f"{run_branch(run_id)}/{tree}"


def push(run_dir: Path, remote: str) -> PushResult:
    """Push every tree's run branch that has patches to ``remote`` (a URL or a path to a repository, bare or
    not) as ``dayzero/<run-id>/<tree>``: one remote holds every tree, the tree name tells them apart.
    Raises ``ReviewError`` (one line) when the remote cannot be reached or refuses a push."""
    run_dir = Path(run_dir)
    run_id = _load_run(run_dir).run_id
    trees = collect_trees(run_dir)
    if not trees:
        raise ReviewError(f"{run_dir}: no workspace source tree has the run's branch {run_branch(run_id)}")
    env = {**os.environ, "GIT_TERMINAL_PROMPT": "0", "GIT_SSH_COMMAND": os.environ.get("GIT_SSH_COMMAND",
                                                                                       "ssh -o BatchMode=yes")}  # fmt: skip
    target = str(Path(remote).resolve()) if Path(remote).exists() else remote
    result = PushResult(remote=remote)
    repos = _source_repos(run_dir)
    try:
        first = repos[trees[0].tree]
        try:  # reach the remote once before pushing anything: no half-pushed run
            first.git.ls_remote(target, env=env)
        except git.GitCommandError as exc:
            raise ReviewError(f"cannot reach remote {remote!r}: {_git_error(exc)}") from None
        for tree in trees:
            if not tree.patches:
                result.skipped.append(tree.tree)
                continue
            ref = remote_ref(run_id, tree.tree)
            try:
                repos[tree.tree].git.push(target, f"{tree.head}:refs/heads/{ref}", env=env)
            except git.GitCommandError as exc:
                raise ReviewError(f"push of {tree.tree} to {remote!r} failed: {_git_error(exc)}") from None
            result.pushed.append(
                PushedBranch(tree=tree.tree, local_branch=tree.branch, remote_ref=ref, sha=tree.head)
            )
    finally:
        for repo in repos.values():
            repo.close()
    return result


def _git_error(exc: git.GitCommandError) -> str:
    lines = [ln.strip() for ln in str(exc.stderr or exc).splitlines() if ln.strip()]
    lines = [ln.removeprefix("stderr:").strip(" '") for ln in lines]
    useful = [ln for ln in lines if ln.lower().startswith(("fatal", "error", "remote:", "!"))] or lines
    return useful[0] if useful else "git failed"
