"""A run's timeline read from its trace: each decision with the tool calls it led to, their results and cost.

``agent show RUN`` and ``agent replay RUN`` print it (:func:`render_timeline`): one line a step by default (what
was decided, which calls it made, what came of it, what it cost), every call with its input and whole result with
``--full``; configurations always as flags (``--tp-size 4``), never as dicts. It reads only ``trace.jsonl`` and
runs nothing.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel
from rich.console import Group
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from ..approvals import Answer
from ..flag_text import dicts_as_flags, input_text
from ..stages import stage_name
from ..trace import DecisionEvent, NoteEvent, RunFinishedEvent, ToolCallEvent, read_trace


class TimelineCall(BaseModel):
    """One tool call as the trace recorded it."""

    tool: str
    ok: bool
    result: str  # the tool's one-line summary, or its error
    wall_seconds: float
    node_hours: float = 0.0
    input: dict[str, Any] = {}
    call_id: str = ""
    output: dict[str, Any] = {}  # the whole result as recorded (``agent ui`` shows it; the files it names are linked)


class TimelineStep(BaseModel):
    """One decision of the policy and what came of it."""

    step: int | None
    stage: str | None
    decision: str
    calls: list[TimelineCall] = []
    notes: list[str] = []


    @property
    def node_hours(self) -> float:
        return sum(c.node_hours for c in self.calls)

    @property
    def outcome(self) -> str:
        """What came of the step, in one cell: the first failed call's error, else the first call's summary (what
        the step was for: a launch, a measurement; the checks and commits after it are in --full)."""
        failed = next((c for c in self.calls if not c.ok), None)
        first = failed or (self.calls[0] if self.calls else None)
        return first.result if first else ""


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
    asked: dict[str, str] = {}  # gate id -> what it holds back
    for e in events:
        if e.kind == "approval_requested":
            asked[e.gate["id"]] = e.gate.get("what", "")
        elif e.kind == "approval_answered":
            a = Answer.model_validate(e.answer)
            same = f" (as at {e.same_as})" if e.same_as else ""
            current.notes.append(f"approval: {a.gate} ({asked.pop(a.gate, '') or e.what}) {a.words()}{same}")
        if isinstance(e, DecisionEvent):
            current = TimelineStep(step=e.step, stage=e.stage, decision=e.rationale)
            timeline.steps.append(current)
        elif isinstance(e, ToolCallEvent):
            summary = str(e.result.get("summary") or "") if e.ok else f"error: {e.error or e.result.get('summary')}"
            current.calls.append(TimelineCall(tool=e.tool, ok=e.ok, result=summary, wall_seconds=e.wall_seconds,
                                              node_hours=e.node_hours or 0.0, input=e.input, call_id=e.call_id,
                                              output=e.result))  # fmt: skip
        elif isinstance(e, NoteEvent) and e.level != "debug":
            current.notes.append(f"{e.level}: {e.message}")
        elif isinstance(e, RunFinishedEvent):
            timeline.finished = e.status
    for gate, what in asked.items():  # asked, never answered (yet)
        current.notes.append(f"approval: waiting at {gate} ({what}): agent approve {timeline.run_id} {gate}")
    if not timeline.steps[0].calls and not timeline.steps[0].notes:
        timeline.steps.pop(0)
    return timeline


SIMULATED_LABEL = "simulated: dayzero digital twin, not a real node"


def _totals(timeline: Timeline) -> Text:
    sim = "simulated " if timeline.simulated else ""
    return Text(f"total: {timeline.wall_seconds:.1f} s in tools, {timeline.node_hours:.3f} {sim}node-hours"
                + (f" ({SIMULATED_LABEL})" if timeline.simulated else ""))  # fmt: skip


def _calls_cell(st: TimelineStep) -> Text:
    """The step's first call by tool, then how many more (a failed call in red with a cross, first)."""
    if not st.calls:
        return Text("")
    failed = next((c for c in st.calls if not c.ok), None)
    shown = failed or st.calls[0]
    cell = Text(shown.tool if shown.ok else f"{shown.tool} ✗", style=None if shown.ok else "red")
    if len(st.calls) > 1:
        cell.append(f" +{len(st.calls) - 1}", style="dim")
    return cell


def _stage(st: TimelineStep) -> str:
    """The step's stage by its display name (``knee``: draft-tree search and refinement), as the report names it."""
    return stage_name(st.stage) if st.stage else ""


def render_timeline(timeline: Timeline, full: bool = False) -> Group:
    """The timeline for rich, then a line of totals. By default one line a step (step, decision, calls, outcome,
    node-hours; a cell too long for the terminal ends in an ellipsis), a line naming the stage where a new one
    begins (its display name, which is too long to repeat in a column of every line); ``full``: every call on
    its own rows with its input and its whole result, and the cost of each."""
    if full:
        return _render_full(timeline)
    title = f"{timeline.run_id}: {timeline.task}, policy {timeline.policy}, {timeline.finished or 'unfinished'}"
    table = Table(title=escape(title), caption="one line a step; every call, its input and whole result: --full",
                  expand=True)  # fmt: skip
    for col, style, ratio in (("step", "dim", None), ("decision", "", 5), ("calls", "bold", None),
                              ("outcome", "", 5), ("node-h", "dim", None)):  # fmt: skip
        table.add_column(col, style=style or None, no_wrap=True, overflow="ellipsis", ratio=ratio,
                         justify="right" if col in ("step", "node-h") else "left")  # fmt: skip
    stage = None
    for st in timeline.steps:
        if st.stage and st.stage != stage and st.step is not None:
            table.add_row("", Text.assemble(("stage: ", "dim"), (_stage(st), "bold cyan")), "", "", "")
        stage = st.stage or stage
        outcome = Text(st.outcome, style="red" if any(not c.ok for c in st.calls) else None)
        table.add_row(str(st.step) if st.step is not None else "", Text(dicts_as_flags(st.decision)),
                      _calls_cell(st), outcome, f"{st.node_hours:.3f}" if st.calls else "")  # fmt: skip
        for n in st.notes:
            if not n.startswith("info:"):  # warnings and errors keep a line of their own
                table.add_row("", Text(dicts_as_flags(n), style="yellow"), "", "", "")
    return Group(table, _totals(timeline))


def _render_full(timeline: Timeline) -> Group:
    title = f"{timeline.run_id}: {timeline.task}, policy {timeline.policy}, {timeline.finished or 'unfinished'}"
    table = Table(title=escape(title), show_lines=False)
    for col, style in (("step", "dim"), ("stage", "cyan"), ("decision", ""), ("tool and input", "bold"),
                       ("result", ""), ("wall s", "dim"), ("node-h", "dim")):  # fmt: skip
        table.add_column(col, style=style or None, overflow="fold")
    for st in timeline.steps:
        first = True
        for c in st.calls or [None]:
            head = (str(st.step) if st.step is not None else "", _stage(st),
                    Text(dicts_as_flags(st.decision))) if first else ("", "", "")  # fmt: skip
            if c is None:
                call = ("", "", "", "")
            else:
                tool = Text(c.tool)
                if args := input_text(c.input, limit=None):
                    tool.append("\n" + args, style="not bold")
                call = (tool, Text(dicts_as_flags(c.result), style=None if c.ok else "red"), f"{c.wall_seconds:.1f}",
                        f"{c.node_hours:.3f}")  # fmt: skip
            table.add_row(*head, *call)
            first = False
        for n in st.notes:
            table.add_row("", "", Text(dicts_as_flags(n), style="yellow"), "", "", "", "")
    return Group(table, _totals(timeline))
