"""Replay: answer each decision with the one a recorded trace made at that step.

The graph then executes the same tool calls again, so a run can be re-executed and audited; forking from a
step (replay up to it, then hand over to another policy) builds on this.
"""

from __future__ import annotations

from pathlib import Path

from agent.state import AgentState, Call
from agent.trace import read_trace

from .base import Decision, PolicyContext


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
