"""Approval gates: a person says yes or no before the run patches the engine, launches it, or commits.

A run started with ``--approve patches,launches,commits`` (or a task's ``approvals:``) holds each such action back
at a *gate* until an explicit answer for that gate exists. What a gate shows (``Gate``) is built from the action
itself: the diff and the crash behind a patch, the full command, GPUs and expected node-hours of a launch, the
message of a commit. An answer (``Answer``: yes or no, who, when, how, why) is one file per gate under
``runs/<run-id>/approvals/``, written whole or not at all; nothing else approves: not another message, a timeout,
a resumed process, the policy (it has no tool that answers) or another run's answers. A re-execution of a run
(``agent replay --execute``) is the one reader of recorded answers, and a fork (``--from-step N``) for the steps it
replays: past its step, a fork asks again.

A gate with no answer stops the graph at a LangGraph ``interrupt``: the run's checkpoint holds the step, the trace
an ``approval_requested`` event. When the answer is there, ``agent resume`` runs the step again: the calls before
the gate come back from the trace (``Run.recorded``), none is made twice, and the gate finds its answer.

An answer decides one action, known by what it does (``Gate.digest``: the tool and its input), wherever the run
proposes it again: an approved configuration relaunched (after a fix, for its accuracy check, after a resume) needs
no second answer, and a rejected change proposed again is refused with the same words. A rejection is data: the action's observation fails with the answer's words, and the
policy decides from it (another fix, another configuration, or a stop with the reason).
"""

from __future__ import annotations

import datetime as dt
import difflib
import getpass
import hashlib
import json
import re
import socket
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field, ValidationError

GateKind = Literal["patches", "launches", "commits", "pushes"]
KINDS: tuple[str, ...] = ("patches", "launches", "commits", "pushes")
# the tools each gate holds back (discard_changes puts files back as committed: never held)
TOOLS: dict[str, str] = {"edit_file": "patches", "apply_patch": "patches", "launch_server": "launches",
                         "run_trials": "launches", "commit": "commits"}  # fmt: skip
Via = Literal["terminal", "cli", "ui", "replay"]


class ApprovalError(ValueError):
    """An answer that cannot be given (no such gate, answered already, a bad list of kinds): one line."""


def parse_kinds(text: str | Iterable[str]) -> list[str]:
    """``"patches,launches"`` (or a list) as the gate kinds, in their documented order; ApprovalError names an
    unknown one."""
    items = [p.strip() for p in (text.split(",") if isinstance(text, str) else text)]
    unknown = [p for p in items if p and p not in KINDS]
    if unknown:
        raise ApprovalError(f"unknown approval kind {unknown[0]!r} (known: {', '.join(KINDS)})")
    return [k for k in KINDS if k in items]


class Gate(BaseModel):
    """One action held back until a person answers: what it will do and why."""

    id: str = Field(description="the id of the call it holds back (one gate per call)")
    kind: GateKind
    tool: str
    digest: str = Field(description="what the action does (the tool and its input): an answer approves this only")
    step: int
    what: str = Field(description="one line: what happens on yes")
    why: str = Field("", description="the policy's reason")
    details: dict[str, Any] = Field(default_factory=dict, description=(
        "patch: diff, crash, excerpt; launch: commands, gpus, expected_node_hours; commit: message, files; "
        "push: remote, branches"))


class Answer(BaseModel):
    """A person's answer to one gate."""

    gate: str
    digest: str
    approved: bool
    reason: str = ""
    by: str
    at: str
    via: Via

    def words(self) -> str:
        verdict = "approved" if self.approved else "rejected"
        return f"{verdict} by {self.by} ({self.via}, {self.at})" + (f": {self.reason}" if self.reason else "")


# what names the run rather than the action (a commit's patch id is ``<run-id>/<n>``; its approvals are the gates')
_NOT_THE_ACTION = {"commit": ("patch_id", "approvals")}


def digest(tool: str, args: dict[str, Any]) -> str:
    """What an action does, as a short hash: the tool and its input, less what only names the run (a re-execution
    of a run makes the same actions under another run id)."""
    kept = {k: v for k, v in args.items() if k not in _NOT_THE_ACTION.get(tool, ())}
    return hashlib.sha256(json.dumps([tool, kept], sort_keys=True, default=str).encode()).hexdigest()[:16]


def who() -> str:
    """The person answering: the login and the machine."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):  # no name for this uid (a container)
        user = "unknown"
    return f"{user}@{socket.gethostname()}"


def now() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="seconds")


# ------------------------------------------------------------------------------------------- the answers


_SAFE = re.compile(r"[A-Za-z0-9._-]{1,100}\Z")


def folder(run_dir: Path) -> Path:
    return run_dir / "approvals"


def _path(run_dir: Path, gate_id: str) -> Path:
    name = gate_id if _SAFE.match(gate_id) and not gate_id.startswith(".") else hashlib.sha256(gate_id.encode()).hexdigest()[:32]
    return folder(run_dir) / f"{name}.json"


def answer_of(run_dir: Path, gate: Gate) -> Answer | None:
    """The answer given to ``gate`` (for the action it shows now: an answer to another digest is none)."""
    try:
        answer = Answer.model_validate_json(_path(run_dir, gate.id).read_text())
    except (OSError, ValidationError):  # none yet (a torn file cannot exist: answers are written whole)
        return None
    return answer if answer.gate == gate.id and answer.digest == gate.digest else None


def write_answer(run_dir: Path, answer: Answer) -> Path:
    """Keep ``answer`` (whole or not at all, ``fsync``-ed: a power cut leaves the answer or none); an answer is
    final, so a gate answered already is an ApprovalError."""
    import os

    from sandboxes.twin.cache_files import tmp_name

    path = _path(run_dir, answer.gate)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = tmp_name(path)
    with open(tmp, "x") as f:
        f.write(answer.model_dump_json(indent=2))
        f.flush()
        os.fsync(f.fileno())
    try:
        os.link(tmp, path)  # never over an answer given already (two people answering at once: the first stands)
    except FileExistsError:
        raise ApprovalError(f"gate {answer.gate} was answered already: "
                            f"{Answer.model_validate_json(path.read_text()).words()}") from None
    finally:
        tmp.unlink(missing_ok=True)
    fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    return path


def requested(events: Iterable[Any]) -> list[Gate]:
    """The gates a run's trace asked, in order (the last asking of each)."""
    gates: dict[str, Gate] = {}
    for e in events:
        if getattr(e, "kind", None) == "approval_requested":
            gates[e.gate["id"]] = Gate.model_validate(e.gate)
    return list(gates.values())


def asked(run_dir: Path, events: Iterable[Any]) -> list[Gate]:
    """Every gate the run asked: those its trace asked, then those asked after it ended (a push of its branches,
    ``asked_after``)."""
    return requested(events) + asked_after(run_dir)


def pending(run_dir: Path, events: Iterable[Any]) -> list[Gate]:
    """The gates of the run still waiting for an answer."""
    return [g for g in asked(run_dir, events) if answer_of(run_dir, g) is None]


def asked_after(run_dir: Path) -> list[Gate]:
    """The gates asked of a finished run (its trace is closed: they are files of their own)."""
    out = []
    for path in sorted((folder(run_dir) / "asked").glob("*.json")):
        try:
            out.append(Gate.model_validate_json(path.read_text()))
        except (OSError, ValidationError):
            continue
    return out


def ask_after(run_dir: Path, gate: Gate) -> None:
    """Keep ``gate`` as asked of the finished run (``agent approvals`` lists it)."""
    from sandboxes.twin.cache_files import write_atomic

    path = folder(run_dir) / "asked" / _path(run_dir, gate.id).name
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, gate.model_dump_json(indent=2))


def push_gate(run_id: str, remote: str, branches: dict[str, str]) -> Gate:
    """The gate of a push of the run's branches (``{tree: head sha}``) to ``remote``: a push of other heads, or to
    another remote, is another gate."""
    args = {"remote": remote, "branches": dict(sorted(branches.items()))}
    d = digest("push", args)
    return Gate(id=f"push-{d[:10]}", kind="pushes", tool="push", digest=d, step=0,
                what=f"push {', '.join(f'{t}@{h[:10]}' for t, h in sorted(branches.items()))} to {remote} as "
                     f"dayzero/{run_id}/<tree>", details={"remote": remote, "branches": args["branches"]})  # fmt: skip


def recorded_answers(events: Iterable[Any]) -> dict[str, Answer]:
    """The answers a run's trace recorded, by gate (what ``agent replay --execute`` reproduces)."""
    return {e.answer["gate"]: Answer.model_validate(e.answer) for e in events
            if getattr(e, "kind", None) == "approval_answered"}  # fmt: skip


# ------------------------------------------------------------------------------------------- describing


def unified(path: str, old: str, new: str) -> str:
    """An edit as the unified diff a reviewer reads."""
    lines = difflib.unified_diff(old.splitlines(True), new.splitlines(True), f"a/{path}", f"b/{path}")
    return "".join(line if line.endswith("\n") else line + "\n" for line in lines)


def describe(call_id: str, tool: str, args: dict[str, Any], *, step: int, why: str, ctx: Any, state: Any) -> Gate:
    """The gate for one action: ``ctx`` the run's tool context (commands, GPUs), ``state`` the agent's state (the
    crash behind a patch, what launches cost so far)."""
    kind = TOOLS[tool]
    details: dict[str, Any] = {}
    if kind == "patches":
        diff = unified(args.get("path", ""), args.get("old", ""), args.get("new", "")) if tool == "edit_file" \
            else str(args.get("diff", ""))  # fmt: skip
        files = sorted(set(re.findall(r"^\+\+\+ b/(\S+)", diff, re.M))) or [args.get("path", "")]
        trial = state.current_trial()
        details = {"diff": diff, "files": files}
        if trial is not None and trial.status != "up":
            details.update(crash=f"trial {trial.id}: {trial.diagnosis or trial.status}", excerpt=list(trial.excerpt))
        what = f"change {', '.join(files)}"
    elif kind == "launches":
        configs = [args] if tool == "launch_server" else list(args.get("trials") or [])
        launches = []
        for c in configs:
            flags = dict(c.get("flags") or {})
            gpus = round(ctx.node_fraction(flags) * ctx.task.hardware.gpus)
            launches.append({"command": ctx.launch_argv(flags, port="PORT"), "env": dict(c.get("env") or {}),
                             "pristine": list(c.get("pristine") or []), "gpus": gpus})  # fmt: skip
        hours, basis = expected_node_hours(state, ctx, configs)
        details = {"launches": launches, "expected_node_hours": hours, "node_hours_basis": basis,
                   "node_gpus": ctx.task.hardware.gpus}  # fmt: skip
        gpus = max((la["gpus"] for la in launches), default=0)
        what = (f"launch the engine on {gpus} of {ctx.task.hardware.gpus} GPUs" if tool == "launch_server" else
                f"launch {len(launches)} configuration(s) on up to {gpus} GPUs each") + f", ~{hours:.3f} node-hours"
    else:
        from tools.git_ops import CommitInput, message

        try:
            text = message(CommitInput.model_validate(args), ctx.run_id, ctx.trial, simulated=ctx.engine_name == "twin")
        except ValidationError:
            text = str(args.get("title", ""))
        details = {"message": text, "files": list(args.get("files") or []), "branch": f"dayzero/{ctx.run_id}"}
        what = f"commit {args.get('title', '')!s} on dayzero/{ctx.run_id}"
    return Gate(id=call_id, kind=kind, tool=tool, digest=digest(tool, args), step=step, what=what, why=why,
                details=details)  # fmt: skip


def expected_node_hours(state: Any, ctx: Any, configs: list[dict[str, Any]]) -> tuple[float, str]:
    """What the launches will cost: the node-hours the run's launches and the measurements after them have taken
    per trial so far, else the task's start-up timeout on the configuration's share of the node (the most a launch
    can take before it is called hung)."""
    trials = state.budget.trials
    if trials:
        per = state.budget.node_hours / trials
        return per * max(1, len(configs)), f"{per:.4f} node-hours per trial so far in this run ({trials} trials)"
    startup = float(ctx.engine.startup_timeout_s) / 3600
    most = sum(startup * ctx.node_fraction(dict(c.get("flags") or {})) for c in configs)
    return most, "no launch yet: at most the start-up timeout on the configuration's share of the node"


# ------------------------------------------------------------------------------------------- holding


def answers(run_dir: Path) -> list[Answer]:
    """Every answer given in the run."""
    out = []
    for path in sorted(folder(run_dir).glob("*.json")):
        try:
            out.append(Answer.model_validate_json(path.read_text()))
        except (OSError, ValidationError):
            continue
    return out


class Gates:
    """The run's gates: which kinds it holds (``kinds``), what it asked and was told (from its trace), and, for a
    re-execution of another run, that run's recorded answers (``replayed``)."""

    def __init__(self, run_dir: Path, kinds: Iterable[str], trace: Any, events: Iterable[Any] = (),
                 replayed: dict[str, Answer] | None = None, replayed_until: int | None = None) -> None:  # fmt: skip
        self.run_dir, self.kinds, self.trace = run_dir, set(kinds), trace
        self.replayed_until = replayed_until  # a fork: the recorded answers hold for the steps it replays only
        events = list(events)
        self._asked = {g.id: g.digest for g in requested(events)}
        self._told = {(a.gate, a.digest) for a in recorded_answers(events).values()}
        self.replayed = replayed or {}

    def holds(self, tool: str) -> bool:
        return TOOLS.get(tool) in self.kinds

    def answer(self, gate: Gate) -> Answer | None:
        """The answer that decides ``gate``: its own; else the answer to the same action given at another gate of
        this run (a relaunch of an approved configuration runs; a rejected change proposed again is refused again);
        else, re-executing another run, that run's answer."""
        if (own := answer_of(self.run_dir, gate)) is not None:
            return own
        same = next((a for a in answers(self.run_dir) if a.digest == gate.digest), None)
        if same is not None:  # the same action proposed again: as it was answered (a rejection keeps refusing it)
            return same
        theirs = self.replayed.get(gate.id)
        replaying = self.replayed_until is None or gate.step <= self.replayed_until
        if theirs is not None and theirs.digest == gate.digest and replaying:
            return theirs.model_copy(update={"via": "replay"})
        return None

    def hold(self, gate: Gate) -> Answer:
        """The answer to ``gate``; with none, the graph stops here (a LangGraph interrupt carrying the gate), the
        trace saying what waits. Call it only inside a graph node, before the action's side effects."""
        from langgraph.types import interrupt

        answer = self.answer(gate)
        if answer is None:
            if self._asked.get(gate.id) != gate.digest:
                self.trace.emit("approval_requested", step=gate.step, gate=gate.model_dump(mode="json"))
                self._asked[gate.id] = gate.digest
            interrupt(gate.model_dump(mode="json"))  # raises: the run stops here until an answer exists
            answer = self.answer(gate)  # (resumed with a LangGraph value instead: only a kept answer counts)
            if answer is None:
                raise ApprovalError(f"gate {gate.id} was resumed without an answer")
        if (gate.id, gate.digest) not in self._told:
            told = answer.model_copy(update={"gate": gate.id}) if answer.gate != gate.id else answer
            self.trace.emit("approval_answered", step=gate.step, answer=told.model_dump(mode="json"), what=gate.what,
                            same_as=answer.gate if answer.gate != gate.id else None)  # fmt: skip
            self._told.add((gate.id, gate.digest))
        return answer
