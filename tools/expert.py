"""The expert's fixes as tools: each reads the last crash the way the playbook does and proposes the fix, with
its rationale, without applying it.

A model gets the reasoning the agent's expert has (the playbook's, given to the tools as ``ToolContext.expert`` by
the agent: tools never import the agent), so it does not have to rediscover it: the exclude entries an engine's
module names need (a checkpoint that names a layer one way, an engine that builds it under another), the ROCm
guard a CUDA-only include needs, and the way the memory flags must move for the memory that ran out. A proposal is data: the call to make (``edit_file`` with path, old and new; or the flags to
relaunch with) and why. The model checks it and acts; nothing here changes the workspace or the server.

The crash is read from the last server log (or ``log_path``), classified by ``tools.diagnose`` and, for a weight
mismatch the log does not name, narrowed by ``tools.weight_suspects``, as ``launch_server`` reports it.
"""

from __future__ import annotations

from typing import Any, Protocol

from pydantic import Field

from .base import ToolInput, ToolResult, tool
from .context import ToolContext
from .diagnose import classify, workspace_relative
from .server import _suspects


class Expert(Protocol):
    """The reasoning behind the ``propose_*`` tools, supplied by the agent (``agent/policies/expert.py`` adapts the
    playbook's). ``view`` has ``task`` and a read-only ``workspace`` (``read_file``, ``exists``, ``glob``); ``diag``
    is a diagnosis as :func:`tools.diagnose.classify` reports it; ``cur`` holds the launch's ``flags``, moved in
    place by the memory fixes."""

    def exclude_fix(self, view: Any, diag: dict) -> tuple[Any, dict] | None: ...

    def guard_fix(self, view: Any, diag: dict) -> tuple[Any, dict] | None: ...

    def memory_fix(self, task: Any, cur: dict, diag: dict) -> bool: ...

    def serving_memory_fix(self, task: Any, cur: dict, diag: dict) -> str | None: ...

    def allreduce_fix(self, cur: dict, diag: dict) -> str | None: ...


def _expert(ctx: ToolContext) -> Expert:
    if ctx.expert is None:
        raise RuntimeError("this run's tools were given no expert reasoning (ToolContext.expert): the agent supplies "
                           "it; a caller building its own context passes agent.policies.expert.PlaybookExpert()")
    return ctx.expert


class _Workspace:
    """The read-only workspace view the playbook's reasoning reads through (``PolicyContext.workspace``)."""

    def __init__(self, ctx: ToolContext) -> None:
        self.sandbox = ctx.sandbox

    def read_file(self, path: str) -> str:
        return self.sandbox.read_file(path)

    def exists(self, path: str) -> bool:
        try:
            return self.sandbox.resolve(path).exists()
        except Exception:  # outside the workspace: not there for the reasoning
            return False

    def glob(self, pattern: str) -> list[str]:
        return [e.path for e in self.sandbox.list_files(".", pattern) if not e.is_dir]


class _View:
    def __init__(self, ctx: ToolContext) -> None:
        self.task = ctx.task
        self.workspace = _Workspace(ctx)


class ProposeInput(ToolInput):
    log_path: str | None = Field(None, description="a server log under the run directory; default: the last one")


class Proposal(ToolResult):
    category: str = Field("", description="the diagnosis category the proposal answers")
    title: str = ""
    rationale: str = Field("", description="the root cause, as the expert reasons it out")
    change: str = Field("", description="what the proposed change does, in one sentence")
    call: dict[str, Any] | None = Field(None, description="the call that applies it: {tool, args}")
    upstream: dict[str, Any] | None = Field(None, description="the same fix in the engine, as a diff (optional)")


def _diagnosis(ctx: ToolContext, log_path: str | None) -> tuple[dict[str, Any] | None, str]:
    path = ctx.run_dir / log_path if log_path else ctx.last_log
    if path is None or not path.exists():
        return None, "no server log yet: launch first"
    d = workspace_relative(ctx, classify(path.read_text(errors="replace")))
    suspects = _suspects(ctx, d) if d.category == "weight_shape_mismatch" else None
    return {**d.model_dump(), "suspects": suspects.model_dump() if suspects else None}, ""


def _not_this(diag: dict[str, Any], wanted: str, tool_name: str) -> Proposal:
    return Proposal(ok=False, category=diag["category"],
                    summary=f"the last crash is {diag['category']} ({diag['summary'][:200]}), not {wanted}: "
                            f"{tool_name} has nothing to propose")  # fmt: skip


def _edit_proposal(edit: tuple[Any, dict[str, Any]] | None, diag: dict[str, Any], what: str) -> Proposal:
    if edit is None:
        return Proposal(ok=False, category=diag["category"],
                        summary=f"no {what} could be worked out from the diagnosis and the workspace "
                                f"({diag['summary'][:200]}): read the source and fix it by hand")  # fmt: skip
    call, note = edit
    upstream = note.pop("upstream", None)
    return Proposal(summary=f"proposed: {note['title']} - apply with edit_file, then relaunch the same configuration",
                    category=note["category"], title=note["title"], rationale=note["root_cause"],
                    change=note["change"], call={"tool": call.tool, "args": call.args},
                    upstream={"file": upstream["file"], "diff": upstream["diff"], "rationale": upstream["note"]["root_cause"]}
                    if upstream else None)  # fmt: skip


@tool(idempotent=True)
def propose_exclude_fix(ctx: ToolContext, args: ProposeInput) -> Proposal:
    """For a weight shape mismatch at load time: propose the quantization exclude entries under the engine's module
    names (the checkpoint names a layer one way, the engine builds it under another), with the rationale and the
    edit_file call that applies it."""

    diag, why = _diagnosis(ctx, args.log_path)
    if diag is None:
        return Proposal(ok=False, summary=why)
    if diag["category"] != "weight_shape_mismatch":
        return _not_this(diag, "a weight shape mismatch", "propose_exclude_fix")
    return _edit_proposal(_expert(ctx).exclude_fix(_View(ctx), diag), diag, "exclude-list fix")


@tool(idempotent=True)
def propose_include_guard(ctx: ToolContext, args: ProposeInput) -> Proposal:
    """For a ROCm compile error in a CUDA-born source -- a CUDA-only header not found, or an identifier only a CUDA
    header declares -- propose the port: the include guarded with #ifndef USE_ROCM (inside the file's existing
    USE_ROCM block when it has one) with the HIP header, and the HIP spellings of the CUDA names the file uses
    (hipify's mapping), as one edit_file call with its rationale. What HIP lacks is declined by name and file:line."""

    diag, why = _diagnosis(ctx, args.log_path)
    if diag is None:
        return Proposal(ok=False, summary=why)
    if diag["category"] != "compile_error" or not (diag.get("header") or diag.get("symbol")):
        return _not_this(diag, "a missing CUDA header or CUDA-only identifier", "propose_include_guard")
    edit = _expert(ctx).guard_fix(_View(ctx), diag)
    if edit is None and diag.get("declined"):
        return Proposal(ok=False, category="compile_error", summary=diag["summary"])
    return _edit_proposal(edit, diag, "include guard")


class MemoryInput(ProposeInput):
    flags: dict[str, Any] = Field(description="the server flags of the launch that ran out of memory")


@tool(idempotent=True)
def propose_memory_fix(ctx: ToolContext, args: MemoryInput) -> Proposal:
    """For an out-of-memory crash: propose the flags to relaunch with, moved the way the memory that ran out says
    (more static memory when the KV cache had no room, less then smaller graph batches for a runtime allocation,
    fewer running requests when the engine's pools ran dry, more GPUs per rank when the weights do not fit)."""

    diag, why = _diagnosis(ctx, args.log_path)
    if diag is None:
        return Proposal(ok=False, summary=why)
    if diag["category"] != "out_of_memory":
        return _not_this(diag, "out of memory", "propose_memory_fix")
    cur = {"flags": dict(args.flags)}
    phase = diag.get("memory_phase") or "unknown"
    if phase == "serving":  # a forward pass under load: from the engine's own figures
        why = _expert(ctx).serving_memory_fix(ctx.task, cur, diag)
        if why is None:
            return Proposal(ok=False, category="out_of_memory",
                            summary="out of memory while serving, and no allowed value of --mem-fraction-static or "
                                    "--max-running-requests is left below what failed: this configuration does not "
                                    "serve this load")  # fmt: skip
        return Proposal(summary=f"proposed: relaunch with {why}", category="out_of_memory",
                        title="Leave room for the steps under load", rationale=diag["summary"], change=why,
                        call={"tool": "launch_server", "args": {"flags": cur["flags"]}})  # fmt: skip
    if _expert(ctx).memory_fix(ctx.task, cur, diag):
        changed = {k: v for k, v in cur["flags"].items() if args.flags.get(k) != v}
        change = ", ".join(f"{k} {args.flags.get(k, '(default)')} -> {v}" for k, v in changed.items())
        return Proposal(summary=f"proposed: relaunch with {change}", category="out_of_memory",
                        title=f"Move the memory flags for {phase}", rationale=diag["summary"],
                        change=f"{change} (memory phase: {phase})",
                        call={"tool": "launch_server", "args": {"flags": cur["flags"]}})  # fmt: skip
    tp = int(args.flags.get("tp-size", 1) or 1)
    wider = sorted(v for v in ctx.task.search_space.flags.get("tp-size", []) if v and v > tp)
    if wider and tp * 2 <= ctx.task.hardware.gpus:
        flags = {**args.flags, "tp-size": wider[0]}
        return Proposal(summary=f"proposed: more GPUs per rank, tp-size {tp} -> {wider[0]}", category="out_of_memory",
                        title="Spread the weights over more GPUs", rationale=diag["summary"],
                        change=f"tp-size {tp} -> {wider[0]}: no allowed memory flag is left to move for {phase}",
                        call={"tool": "launch_server", "args": {"flags": flags}})  # fmt: skip
    return Proposal(ok=False, category="out_of_memory",
                    summary=f"no allowed value of the memory flags is left to move for {phase}, and no larger "
                            "tp-size: this configuration does not fit")  # fmt: skip


class AllReduceInput(ProposeInput):
    flags: dict[str, Any] = Field(description="the server flags of the launch whose collective failed or hung")


@tool(idempotent=True)
def propose_allreduce_fix(ctx: ToolContext, args: AllReduceInput) -> Proposal:
    """For a collective that failed or hung while serving (an RCCL error or a ProcessGroupNCCL timeout, or the
    scheduler watchdog ending a forward that stopped): propose the flags that move the all-reduce to another path of
    the engine's dispatch (no aiter fusion, --disable-custom-all-reduce, or the custom all-reduce again)."""

    diag, why = _diagnosis(ctx, args.log_path)
    if diag is None:
        return Proposal(ok=False, summary=why)
    if diag["category"] not in ("collective_error", "hang_timeout"):
        return _not_this(diag, "a collective failure or hang", "propose_allreduce_fix")
    cur: dict[str, Any] = {"flags": dict(args.flags)}
    change = _expert(ctx).allreduce_fix(cur, diag)
    if change is None:
        return Proposal(ok=False, category=diag["category"],
                        summary="no other all-reduce path is left for these flags (or the TP group has one GPU): "
                                "this configuration does not serve on this node")  # fmt: skip
    return Proposal(summary=f"proposed: relaunch with {change}", category=diag["category"],
                    title="Move the all-reduce to another path", rationale=diag["summary"], change=change,
                    call={"tool": "launch_server", "args": {"flags": cur["flags"]}})  # fmt: skip
