"""A run's timeline read from its trace: each decision with the tool calls it led to, their results and cost.

``agent show RUN`` prints it; it reads only ``trace.jsonl`` and runs nothing.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel

from .trace import DecisionEvent, NoteEvent, RunFinishedEvent, ToolCallEvent, read_trace


class TimelineCall(BaseModel):
    """One tool call as the trace recorded it."""

    tool: str
    ok: bool
    result: str  # the tool's one-line summary, or its error
    wall_seconds: float
    node_hours: float = 0.0


class TimelineStep(BaseModel):
    """One decision of the policy and what came of it."""

    step: int | None
    stage: str | None
    decision: str
    calls: list[TimelineCall] = []
    notes: list[str] = []


class Timeline(BaseModel):
    run_id: str
    task: str
    policy: str
    simulated: bool  # the run's figures came from the digital twin
    steps: list[TimelineStep] = []
    finished: str | None = None  # how the run ended, if it did

    @property
    def wall_seconds(self) -> float:
        return sum(c.wall_seconds for s in self.steps for c in s.calls)

    @property
    def node_hours(self) -> float:
        return sum(c.node_hours for s in self.steps for c in s.calls)


def read_timeline(trace_path: Path) -> Timeline:
    """The timeline of the run that wrote ``trace_path``."""
    events = read_trace(trace_path)
    started = next((e for e in events if e.kind == "run_started"), None)
    if started is None:
        raise ValueError(f"{trace_path}: no run_started event (not a dayzero trace?)")
    timeline = Timeline(run_id=started.run_id, task=started.task, policy=started.policy,
                        simulated=started.engine == "twin")  # fmt: skip
    current = TimelineStep(step=None, stage="start", decision="run started")
    timeline.steps.append(current)
    for e in events:
        if isinstance(e, DecisionEvent):
            current = TimelineStep(step=e.step, stage=e.stage, decision=e.rationale)
            timeline.steps.append(current)
        elif isinstance(e, ToolCallEvent):
            summary = str(e.result.get("summary") or "") if e.ok else f"error: {e.error or e.result.get('summary')}"
            current.calls.append(TimelineCall(tool=e.tool, ok=e.ok, result=summary, wall_seconds=e.wall_seconds,
                                              node_hours=e.node_hours or 0.0))  # fmt: skip
        elif isinstance(e, NoteEvent) and e.level != "debug":
            current.notes.append(f"{e.level}: {e.message}")
        elif isinstance(e, RunFinishedEvent):
            timeline.finished = e.status
    if not timeline.steps[0].calls and not timeline.steps[0].notes:
        timeline.steps.pop(0)
    return timeline
