"""Starting, reading and stopping the engine's server, through the sandbox."""

from __future__ import annotations

import json
import re
import shutil
import urllib.request
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, field_validator

from . import flag_schema
from .base import Cost, ToolInput, ToolResult, tool
from .bench import known_failure
from .context import FlagValue, ServerState, ToolContext
from .diagnose import Diagnosis, MoEShape, classify, moe_fallbacks, workspace_relative
from .git_ops import pristine_text
from .infrastructure import is_infrastructure
from .weight_suspects import Suspects, suspects_in_workspace

# Variables that make a process load or run code other than the engine's (the dynamic loader's, interpreters'
# start-up hooks, shells' rc files), and the sandbox's own markers: never taken from a tool call. The task's own
# environment (engine and task ``env``) is not checked: it is the task author's.
REFUSED_ENV = frozenset({
    "PYTHONPATH", "PYTHONSTARTUP", "PYTHONHOME", "PYTHONUSERBASE", "PYTHONINSPECT", "PYTHONBREAKPOINT",
    "PYTHONEXECUTABLE", "PYTHONPLATLIBDIR", "PYTHONSAFEPATH", "PYTHONNOUSERSITE", "BASH_ENV", "ENV", "SHELLOPTS",
    "BASHOPTS", "PS4", "PROMPT_COMMAND", "IFS", "PATH", "PERL5OPT", "PERL5LIB", "PERLLIB", "RUBYOPT", "RUBYLIB",
    "NODE_OPTIONS", "GCONV_PATH", "HOSTALIASES", "LOCPATH", "NLSPATH", "MALLOC_CONF", "GLIBC_TUNABLES",
})  # fmt: skip
REFUSED_ENV_PREFIXES = ("LD_", "DYLD_", "BASH_FUNC_", "DAYZERO_")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


def check_env(env: dict[str, str]) -> dict[str, str]:
    """A tool call's environment variables, refused (ValueError, one clear line) where a name is malformed or
    would make the engine load or run other code (``LD_PRELOAD``, ``PYTHONPATH``, ``BASH_ENV``...)."""
    for name, value in env.items():
        if not _ENV_NAME.match(name):
            raise ValueError(f"{name!r} is not an environment variable name")
        if name.upper() in REFUSED_ENV or name.upper().startswith(REFUSED_ENV_PREFIXES):
            raise ValueError(f"{name} is refused: it would make the engine load or run code other than its own "
                             "(set engine variables such as SGLANG_*, HIP_*, or a tuning knob instead)")  # fmt: skip
        if "\0" in value:
            raise ValueError(f"{name}: a value cannot hold a NUL byte")
    return env


class LaunchInput(ToolInput):
    flags: dict[str, FlagValue] = Field(default_factory=dict,
                                        description="engine flags without '--', e.g. {'tp-size': 8}; true for "
                                                    "switches, null to leave a flag out")  # fmt: skip
    env: dict[str, str] = Field(default_factory=dict, description="extra environment variables")
    pristine: list[str] = Field(default_factory=list,
                                description="workspace files to launch as released (from the source's pristine "
                                            "commit), e.g. to check that an engine fix works without a config fix; "
                                            "the workspace itself is left as it is")  # fmt: skip

    @field_validator("env")
    @classmethod
    def _env_is_the_engines(cls, env: dict[str, str]) -> dict[str, str]:
        return check_env(env)


class LaunchResult(ToolResult):
    status: Literal["up", "crashed", "timeout"] | None = Field(None, description=(
        "how the launch ended; None: not launched (flags the engine's parser refuses)"))
    endpoint: str | None = None
    startup_seconds: float | None = Field(None, description="simulated on the twin, wall on a real node")
    simulated: bool = False
    exit_code: int | None = None
    argv: list[str] = []
    log_path: str = ""
    log_tail: list[str] = []
    diagnosis: Diagnosis | None = None
    suspects: Suspects | None = Field(None, description="for a weight-loading crash the log does not name: the "
                                                        "checkpoint tensors it can be, and how sure that is")  # fmt: skip
    moe_fallback_shapes: list[MoEShape] = []
    serving_config: dict[str, Any] = Field(default_factory=dict, description=(
        "the server arguments the engine runs with, as its /server_info reports them (defaults filled in, flags "
        "it adjusted or dropped applied); where it listens and what it loads left out"))
    known_failure: dict[str, Any] | None = Field(None, description=(
        "this exact serving configuration (as the engine runs it, whatever flags produced it) already failed under a "
        "benchmark in this run: why, the workload and the rate. A failure the configuration causes (out of memory "
        "while serving, a collective) comes back the same way: change what it calls for first; a crashed worker may "
        "have been the node's"))


# /server_info keys that say where a server listens or what it loads, not how it serves
_NOT_SERVING = {"host", "port", "model_path", "tokenizer_path", "sglang_root", "served_model_name", "version",
                "simulated", "log_level"}  # fmt: skip


def serving_config(info: dict[str, Any]) -> dict[str, Any]:
    """How a server serves, from its /server_info: the scalar server arguments, minus address and paths."""
    return {k: v for k, v in info.items() if k not in _NOT_SERVING and (v is None or isinstance(v, (str, int, float, bool)))}


def _get_json(url: str) -> dict[str, Any]:
    with urllib.request.urlopen(url, timeout=10) as resp:
        return json.loads(resp.read())


def _stop_current(ctx: ToolContext) -> None:
    if ctx.server is not None:
        ctx.sandbox.stop_server(ctx.server.handle)
        ctx.server = None


def refused_flags(ctx: ToolContext, flags: dict[str, FlagValue]) -> list[str]:
    """What the engine's argument parser (read from its source in the workspace) would refuse in ``flags``."""
    parser = flag_schema.find_parser(list(ctx.repos.values()))
    schema = flag_schema.load_schema(parser) if parser else None
    return flag_schema.problems(schema, flags) if schema else []


@tool
def launch_server(ctx: ToolContext, args: LaunchInput) -> LaunchResult:
    """Start the engine with these flags and environment (stopping any server this run started) and wait
    until it is ready, has crashed, or timed out. A crash comes back with its log tail and a diagnosis. Flags
    the engine's own argument parser would refuse are refused before anything starts."""
    if refused := refused_flags(ctx, args.flags):
        return LaunchResult(ok=False, summary="not launched: " + "; ".join(refused))
    _stop_current(ctx)
    ctx.sandbox.trial = ctx.trial + 1
    port = ctx.sandbox.free_port()
    argv = ctx.launch_argv(args.flags, port=port)
    env = ctx.engine_env(args.env)
    n = ctx.next_id()
    if args.pristine:
        try:
            argv = _with_pristine(ctx, argv, args.pristine, n)
        except (ValueError, OSError) as exc:
            if is_infrastructure(exc):  # the disk under the view, not the files asked for: the run stops
                raise
            return LaunchResult(ok=False, status="crashed", summary=f"cannot launch with pristine files: {exc}")
    log = ctx.run_dir / "logs" / f"server-{n:03d}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    handle = ctx.sandbox.start_server(argv, env, log, port)
    ready = ctx.sandbox.wait_ready(handle, ctx.engine.ready_line, ctx.engine.startup_timeout_s)
    ctx.last_log = log
    text = log.read_text(errors="replace")
    tail = text.splitlines()[-30:]
    fallbacks = moe_fallbacks(text)
    rel = str(log.relative_to(ctx.run_dir))
    if ready.state == "ready":
        info = _get_json(handle.base_url + "/server_info")
        ctx.server = ServerState(handle=handle, flags=dict(args.flags), env=dict(args.env), info=info,
                                 pristine=list(args.pristine))  # fmt: skip
        twin = info.get("twin") or {}
        simulated = bool(info.get("simulated"))
        startup = twin.get("startup_seconds_simulated") if simulated else ready.wall_seconds
        known = known_failure(ctx, info, dict(args.env))
        return LaunchResult(
            status="up", endpoint=handle.base_url, startup_seconds=startup, simulated=simulated, argv=argv,
            log_path=rel, log_tail=tail[-5:], moe_fallback_shapes=fallbacks, serving_config=serving_config(info),
            known_failure=known,
            summary=f"up at {handle.base_url} after {startup:.0f} s" + (" (simulated)" if simulated else "")
            + (f"; {len(fallbacks)} MoE shape(s) on the untuned fallback path" if fallbacks else "")
            + (f"; this serving configuration already failed under load in this run ({known['why']})" if known else ""),
            cost=_startup_cost(ctx, startup or 0.0, simulated, ready.wall_seconds),
        )  # fmt: skip
    if ready.state == "timeout":
        code = ctx.sandbox.stop_server(handle)
        diagnosis = classify(log.read_text(errors="replace"), timed_out=True, draft=loads_draft(args.flags))
        return LaunchResult(ok=False, status="timeout", exit_code=code, argv=argv, log_path=rel, log_tail=tail,
                            diagnosis=diagnosis, summary=f"timed out after {ready.wall_seconds:.0f} s: {diagnosis.summary}",
                            cost=_failed_cost(ctx, args.flags, log.read_text(errors="replace"), ready.wall_seconds))  # fmt: skip
    ctx.sandbox.stop_server(handle)
    diagnosis = _outside_views(workspace_relative(ctx, classify(text, draft=loads_draft(args.flags))))
    suspects = _suspects(ctx, diagnosis) if diagnosis.category == "weight_shape_mismatch" else None
    return LaunchResult(ok=False, status="crashed", exit_code=ready.exit_code, argv=argv, log_path=rel,
                        log_tail=tail, diagnosis=diagnosis, suspects=suspects, moe_fallback_shapes=fallbacks,
                        summary=f"crashed (exit {ready.exit_code}): {diagnosis.summary}",
                        cost=_failed_cost(ctx, args.flags, text, ready.wall_seconds))  # fmt: skip


def loads_draft(flags: dict[str, FlagValue]) -> bool:
    """Whether a launch builds a draft model: speculative decoding by any algorithm but n-gram lookup (which drafts
    from the prompt's own tokens, with no model)."""
    algorithm = flags.get("speculative-algorithm")
    return algorithm is not None and str(algorithm).upper() != "NGRAM"


# SGLang's start-up phases report their own durations ("Init torch distributed ends. elapsed=1.20 s", "Load weight
# end. elapsed=41.30 s", "Capture cuda graph end. Time elapsed: 38.40 s"); the twin prints them in simulated time.
_PHASE_ELAPSED = re.compile(r"\belapsed[=:]\s*([0-9]+(?:\.[0-9]+)?)\s*s\b", re.IGNORECASE)


def phase_seconds(log_text: str) -> float:
    """The start-up time a launch's log accounts for: the sum of the phase durations it printed."""
    return sum(float(m.group(1)) for m in _PHASE_ELAPSED.finditer(log_text))


def _failed_cost(ctx: ToolContext, flags: dict[str, FlagValue], log_text: str, wall: float) -> Cost:
    """A launch that crashed or timed out still held its GPUs until then: on a real engine for the wall time it
    ran, on the twin for the simulated time its log accounts for (the phases it finished before failing)."""
    simulated = ctx.engine_name == "twin"
    held = phase_seconds(log_text) if simulated else wall
    return Cost(wall_seconds=wall, simulated_seconds=held if simulated else None,
                node_hours=held / 3600 * ctx.node_fraction(flags))  # fmt: skip


_VIEW = re.compile(r"^\.dayzero-pristine/[0-9]+/")


def _outside_views(d: Diagnosis) -> Diagnosis:
    """A crash of a launch from a pristine view names the view's copies; the tools read the workspace's own."""
    d.file = _VIEW.sub("", d.file) if d.file else d.file
    d.model_file = _VIEW.sub("", d.model_file) if d.model_file else d.model_file
    return d


def _suspects(ctx: ToolContext, diagnosis: Diagnosis) -> Suspects | None:
    def read(path: str) -> str | None:
        try:
            return ctx.sandbox.read_file(path)
        except Exception:  # missing, outside the workspace, unreadable: nothing to learn from it
            return None

    for name in ctx.repos:
        text = read(f"{name}/config.json")
        if text and "quantization_config" in text:
            return suspects_in_workspace(diagnosis, read, f"{name}/config.json")
    return None


def _with_pristine(ctx: ToolContext, argv: list[str], files: list[str], n: int) -> list[str]:
    """``argv`` pointing at a view of the workspace in which ``files`` are as released: the sources holding them
    are copied under ``.dayzero-pristine/<n>/`` with those files taken from the pristine commit, and the rest of
    the workspace is linked, so the engine finds everything where it expects it."""
    by_source: dict[str, list[str]] = {}
    for f in files:
        name, _, rel = f.partition("/")
        if name not in ctx.repos or not rel:
            raise ValueError(f"{f!r} is not a file of a workspace source ({', '.join(ctx.repos)})")
        by_source.setdefault(name, []).append(rel)
    root = ctx.sandbox.root
    views = root / ".dayzero-pristine"
    view = views / f"{n:03d}"
    if views.exists():  # one view at a time: the server of an earlier one was stopped before this launch
        shutil.rmtree(views)
    view.mkdir(parents=True)
    for entry in root.iterdir():
        if entry.name in by_source:
            shutil.copytree(entry, view / entry.name, ignore=shutil.ignore_patterns(".git"), symlinks=True)
            for rel in by_source[entry.name]:
                (view / entry.name / rel).write_text(pristine_text(ctx.repos[entry.name], rel))
        elif entry.name != ".dayzero-pristine":
            (view / entry.name).symlink_to(Path("..", "..", entry.name))
    inside = ctx.sandbox.command_root.rstrip("/")
    moved = {f"{inside}/{name}": f"{inside}/.dayzero-pristine/{n:03d}/{name}" for name in by_source}
    out = []
    for a in argv:
        for old, new in moved.items():
            if a == old or a.startswith(old + "/"):
                a = new + a[len(old):]
        out.append(a)
    return out


def _startup_cost(ctx: ToolContext, startup_s: float, simulated: bool, wall: float) -> Cost:
    return Cost(wall_seconds=wall, simulated_seconds=startup_s if simulated else None,
                node_hours=startup_s / 3600 * ctx.node_fraction())  # fmt: skip


class StopInput(ToolInput):
    pass


class StopResult(ToolResult):
    exit_code: int | None = None


@tool
def stop_server(ctx: ToolContext, args: StopInput) -> StopResult:
    """Stop the server this run started (gracefully, then by force)."""
    if ctx.server is None:
        return StopResult(summary="no server running")
    code = ctx.sandbox.stop_server(ctx.server.handle)
    ctx.server = None
    return StopResult(exit_code=code, summary=f"stopped (exit {code})")


class ReadLogInput(ToolInput):
    log_path: str | None = Field(None, description="a log under the run directory; default: the last server log")
    tail: int | None = Field(40, ge=1, le=2000, description="last N lines (ignored with grep)")
    grep: str | None = Field(None, description="regular expression; matching lines with context")
    context: int = Field(2, ge=0, le=50)
    max_lines: int = Field(200, ge=1, le=5000)


class ReadLogResult(ToolResult):
    log_path: str = ""
    lines: list[str] = []
    total_lines: int = 0


@tool(idempotent=True)
def read_log(ctx: ToolContext, args: ReadLogInput) -> ReadLogResult:
    """Read the server log: its last lines, or the lines matching a regex with context."""
    path = ctx.run_dir / args.log_path if args.log_path else ctx.last_log
    if path is None or not path.exists():
        return ReadLogResult(ok=False, summary="no such log")
    if args.log_path and ctx.run_dir.resolve() not in path.resolve().parents:
        return ReadLogResult(ok=False, summary="logs are read from the run directory only")
    lines = path.read_text(errors="replace").splitlines()
    rel = str(path.relative_to(ctx.run_dir))
    if args.grep:
        try:
            pattern = re.compile(args.grep)
        except re.error as exc:
            return ReadLogResult(ok=False, summary=f"bad regex: {exc}", log_path=rel)
        keep: set[int] = set()
        for i, ln in enumerate(lines):
            if pattern.search(ln):
                keep.update(range(max(0, i - args.context), min(len(lines), i + args.context + 1)))
        out = [f"{i + 1}: {lines[i]}" for i in sorted(keep)][: args.max_lines]
        return ReadLogResult(lines=out, total_lines=len(lines), log_path=rel,
                             summary=f"{len(out)} line(s) around matches of {args.grep!r}")  # fmt: skip
    start = max(0, len(lines) - (args.tail or 40))
    out = [f"{i + 1}: {lines[i]}" for i in range(start, len(lines))][-args.max_lines :]
    return ReadLogResult(lines=out, total_lines=len(lines), log_path=rel, summary=f"last {len(out)} line(s)")
