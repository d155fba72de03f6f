"""Replay: answer each decision with the one a recorded trace made at that step.

The graph then executes the same tool calls again, so a run can be re-executed and audited
(:class:`ReplayPolicy`); a fork replays a run's decisions up to a step, then hands over to another policy
with the state the recorded run had reached there (:class:`ForkPolicy`).
"""

from __future__ import annotations

import hashlib
import os
import stat
from pathlib import Path
from typing import TYPE_CHECKING

from agent.state import AgentState, Call
from agent.trace import read_trace

from .base import Decision, Policy, PolicyContext

if TYPE_CHECKING:
    from agent.run import ParentRef


def check_replay_trace(
    trace_path: Path, task_path: Path, force: bool = False, subject: str | None = None
) -> str | None:
    """Refuse a trace recorded for another task: its decisions name another model's files, flags and
    numbers, and re-running them here would commit another task's patches. Returns the note a forced replay
    records, None when the trace is this task's; raises ValueError with one line otherwise. ``subject`` names
    the trace in the messages (default ``--replay TRACE``)."""
    subject = subject or f"--replay {trace_path}"
    try:
        if not stat.S_ISREG(os.stat(trace_path).st_mode):  # /dev/zero, a FIFO: never read (it would not end)
            raise ValueError("is not a regular file")
        started = next((e for e in read_trace(trace_path) if e.kind == "run_started"), None)
    except (OSError, ValueError) as exc:  # TraceError and a malformed event are ValueErrors
        raise ValueError(f"{subject}: not a readable trace ({exc})") from None
    if started is None:
        raise ValueError(f"{subject}: the trace has no run_started event (not a dayzero trace?)")
    sha = hashlib.sha256(Path(task_path).read_bytes()).hexdigest()
    if started.task_sha256 == sha:
        return None
    what = (f"{subject} was recorded for task {started.task!r} ({started.task_path}, sha256 "
            f"{started.task_sha256[:12]}), not {task_path} (sha256 {sha[:12]})")  # fmt: skip
    if not force:
        raise ValueError(f"{what}: its decisions belong to that task (--force replays them anyway, recorded)")
    return f"forced replay: {what}"


class ReplayPolicy:
    name = "replay"

    def __init__(self, trace_path: Path):
        self.decisions = [e for e in read_trace(trace_path) if e.kind == "decision"]

    def decide(self, state: AgentState, ctx: PolicyContext) -> Decision:
        index = state.step  # decision k (0-based) is the run's step k + 1
        if index >= len(self.decisions):
            return Decision(calls=[], rationale="end of the recorded trace", stage="replay", memo=state.memo, done=True)
        d = self.decisions[index]
        calls = [Call(tool=c.tool, args=dict(c.input)) for c in d.proposed_calls]
        return Decision(calls=calls, rationale=d.rationale, stage=d.stage or "replay", memo=state.memo,
                        done=not calls, annotations=dict(d.annotations))  # fmt: skip


class ForkPolicy:
    """A fork of a recorded run at ``step``: decisions 1..step are the recorded ones (so the tools rebuild the
    workspace, trials and commits in this run's own sandbox), then ``then`` decides, starting from the policy
    memo the recorded run had after that step (read from its checkpoints)."""

    def __init__(self, trace_path: Path, step: int, then: Policy, handover: AgentState | None = None):
        self.replay = ReplayPolicy(trace_path)
        self.step = step
        self.then = then
        self.handover = handover  # the recorded run's state after step ``step``
        self.name = then.name  # "replay" while replaying (the trace's decisions say which was which)
        self._checked = False

    @classmethod
    def from_parent(cls, parent: ParentRef, then: Policy) -> ForkPolicy:
        from agent.graph import saved_state

        handover = saved_state(Path(parent.run_dir), parent.run_id, parent.step) if parent.step else None
        return cls(Path(parent.trace), parent.step, then, handover)

    def decide(self, state: AgentState, ctx: PolicyContext) -> Decision:
        if state.step < self.step:
            self.name = "replay"
            decision = self.replay.decide(state, ctx)
            if state.step + 1 == self.step and self.handover is not None:
                decision.memo = dict(self.handover.memo)  # what the recorded policy knew after that step
            return decision
        if not self._checked:
            self._checked = True
            if ctx.trace is not None and self.handover is not None:
                level, message = handover_note(state, self.handover, self.then.name)
                ctx.trace.emit("note", level=level, step=state.step, message=message)
        self.name = self.then.name
        return self.then.decide(state, ctx)


def handover_note(state: AgentState, recorded: AgentState, policy: str) -> tuple[str, str]:
    """Whether the replayed state at the fork's step is the one the recorded run had there (trials, patches,
    bests), as a trace note: (level, message)."""
    differences = []
    mine = [(t.id, t.status, t.flags) for t in state.trials]
    theirs = [(t.id, t.status, t.flags) for t in recorded.trials]
    if mine != theirs:
        differences.append(f"trials {len(mine)} vs {len(theirs)} recorded")
    patches = [(p.id, p.title, p.status) for p in state.patches]
    if patches != [(p.id, p.title, p.status) for p in recorded.patches]:
        differences.append("patches differ")
    if {k: b.value for k, b in state.bests.items()} != {k: b.value for k, b in recorded.bests.items()}:
        differences.append("bests differ")
    at = f"handover to {policy} at step {state.step}"
    if differences:
        return "warning", f"{at}: the replay did not reach the recorded state ({'; '.join(differences)})"
    counts = f"{len(state.trials)} trial(s), {len(state.patches)} patch(es), {len(state.bests)} best(s)"
    return "info", f"{at}: replayed state matches the recorded one ({counts})"
