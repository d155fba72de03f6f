"""A run's timeline read from its trace: each decision with the tool calls it led to, their results and cost.

``agent show RUN`` and ``agent replay RUN`` print it (:func:`render_timeline`); it reads only ``trace.jsonl``
and runs nothing.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel
from rich.console import Group
from rich.markup import escape
from rich.table import Table
from rich.text import Text

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


SIMULATED_LABEL = "simulated: dayzero digital twin, not a real node"


def render_timeline(timeline: Timeline) -> Group:
    """The timeline as a table (step, stage, decision, tool, result, cost) and a line of totals, for rich."""
    title = f"{timeline.run_id}: {timeline.task}, policy {timeline.policy}, {timeline.finished or 'not finished'}"
    table = Table(title=escape(title), show_lines=False)
    for col, style in (("step", "dim"), ("stage", "cyan"), ("decision", ""), ("tool", "bold"), ("result", ""),
                       ("wall s", "dim"), ("node-h", "dim")):  # fmt: skip
        table.add_column(col, style=style or None, overflow="fold")
    for st in timeline.steps:
        first = True
        for c in st.calls or [None]:
            head = (str(st.step) if st.step is not None else "", st.stage or "", escape(st.decision)) if first else ("", "", "")
            call = (c.tool, escape(c.result) if c.ok else f"[red]{escape(c.result)}[/]", f"{c.wall_seconds:.1f}",
                    f"{c.node_hours:.3f}") if c else ("", "", "", "")  # fmt: skip
            table.add_row(*head, *call)
            first = False
        for n in st.notes:
            table.add_row("", "", f"[yellow]{escape(n)}[/]", "", "", "", "")
    sim = "simulated " if timeline.simulated else ""
    total = (f"total: {timeline.wall_seconds:.1f} s in tools, {timeline.node_hours:.3f} {sim}node-hours"
             + (f" ({SIMULATED_LABEL})" if timeline.simulated else ""))  # fmt: skip
    return Group(table, Text(total))
