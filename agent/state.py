"""The agent's state: plain data, JSON-serialisable, checkpointed after every graph node.

What the run has tried (trials), changed (patches), achieved (bests per target) and spent (budget), plus the
observations of the last actions and the policy's own memo. Nothing here refers to a live process: a resumed
run rebuilds its tools around this state.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field


class Call(BaseModel):
    """A tool call a policy proposes."""

    tool: str
    args: dict[str, Any] = Field(default_factory=dict)
    call_id: str | None = None  # an LLM's id for the call, echoed back to it


class Observation(BaseModel):
    """What one tool call returned (the result as the trace recorded it)."""

    call_id: str
    tool: str
    args: dict[str, Any]
    ok: bool
    error: str | None = None
    result: dict[str, Any] = Field(default_factory=dict)
    step: int = 0


class Interactivity(BaseModel):
    """What one user saw in the benchmark behind a figure (``agent/interactivity.py`` derives and formats it):
    bench_serving's per-request latencies at that load. At a knee measured with several seeds, the slowest seed's."""

    workload: str = ""
    request_rate: float | None = None  # the load: requests per second (None: all at once, or one at a time)
    tpot_p50_ms: float
    tpot_p99_ms: float = 0.0
    itl_p50_ms: float = 0.0
    itl_p99_ms: float = 0.0
    tok_s_per_user: float  # 1000 / TPOT p50: one user's decode speed
    concurrency: float | None = None  # requests in flight on average (bench_serving's 'concurrency')
    max_concurrency: int | None = None  # the benchmark's cap (--max-concurrency), if any
    seeds: int = 1  # benchmark runs at this load the figures are the slowest of


class Trial(BaseModel):
    """One configuration launched, and what was measured on it."""

    id: int
    flags: dict[str, Any]
    env: dict[str, str] = Field(default_factory=dict)
    status: Literal["up", "crashed", "timeout"]
    diagnosis: str | None = None
    category: str | None = None  # the diagnosis' category (what a patch answering this crash is matched by)
    excerpt: list[str] = Field(default_factory=list)  # a crash's decisive log lines (the diagnosis' evidence)
    pristine: list[str] = Field(default_factory=list)  # workspace files launched as released (unpatched)
    metrics: dict[str, float] = Field(default_factory=dict)  # target metric name -> value
    served: bool = False  # a benchmark ran to completion on it (whether or not it measured a target)
    accept_length: float | None = None  # draft tokens accepted per verify step, as its single-stream benchmark said
    serving_failure: str | None = None  # it came up, then died or hung under a benchmark: "<category>: <summary>"
    accuracy: float | None = None
    accuracy_ok: bool | None = None
    step: int = 0
    # target name -> what one user saw in the benchmark behind its figure (a checkpoint from before: empty)
    interactivity: dict[str, Interactivity] = Field(default_factory=dict)
    # target name -> why a figure it served does not count for the target (its interactivity bound)
    bound_missed: dict[str, str] = Field(default_factory=dict)
    # the targets whose figure in metrics is a floor: its knee search saw no rate fail above the knee ("at least")
    lower_bounds: list[str] = Field(default_factory=list)


class Patch(BaseModel):
    """A change to the workspace, from the edit to its commit. Consecutive edits answering one defect
    (each relaunch revealing the next instance of it) are one patch; another defect is another patch."""

    id: int
    files: list[str]
    diff: str
    reason: str = Field(description="the failure it answers (the diagnosis summary)")
    excerpt: list[str] = Field(default_factory=list, description="the crash's decisive log lines")
    crash_trial: int | None = None  # the trial whose crash it answers
    category: str = "unknown"  # the diagnosis category
    defect: str = ""  # names the defect (e.g. header and file); edits with the same one are one patch
    title: str = ""
    root_cause: str = ""
    change: str = ""
    step_applied: int = 0
    # rejected: verified, and its commit rejected at an approval gate (it stays in the workspace, uncommitted)
    status: Literal["applied", "verified", "committed", "discarded", "rejected"] = "applied"
    after: str | None = None  # evidence once verified
    commits: list[str] = Field(default_factory=list)
    approval: str = ""  # who approved the change at its gate, when and how (a run with patch approvals)
    # an engine fix's unit test in the engine's own style, {"path": ..., "content": ...} (path from the engine
    # repository's root): fails before the fix, passes after it
    test: dict[str, str] | None = None


class Best(BaseModel):
    target: str
    value: float
    trial: int
    flags: dict[str, Any]
    env: dict[str, str] = Field(default_factory=dict)
    verified: bool = False  # accuracy checked on this configuration
    rate: float | None = None  # the request rate the value was measured at (the knee's, for a knee target)
    bench_command: list[str] = Field(default_factory=list)  # the benchmark command that measured it, argv
    interactivity: Interactivity | None = None  # what one user saw in that benchmark
    # the value is a floor: its knee search saw no rate fail above the knee, so it is written "at least" (a
    # checkpoint from before: False)
    lower_bound: bool = False


class Budget(BaseModel):
    trials: int = 0
    wall_seconds: float = 0.0
    node_hours: float = 0.0
    simulated_seconds: float = 0.0
    llm_tokens: int = 0
    llm_requests: int = 0  # requests the policy sent to its LLM endpoint, counted by the agent
    tool_calls: int = 0
    benchmark_runs: int = 0  # bench_serving runs, screening and knee searches included


class TargetsMet(BaseModel):
    """When every target was first met: what had been spent, and the values then (what the rest bought is the
    difference to the end)."""

    step: int
    node_hours: float
    benchmark_runs: int
    trials: int
    values: dict[str, float]  # target name -> its best then


class AgentState(BaseModel):
    run_id: str
    task_path: str
    stage: str = "start"
    step: int = 0
    pending: list[Call] = Field(default_factory=list)
    observations: list[Observation] = Field(default_factory=list)  # of the last act
    history: list[Observation] = Field(default_factory=list)  # compact record of every call
    trials: list[Trial] = Field(default_factory=list)
    patches: list[Patch] = Field(default_factory=list)
    bests: dict[str, Best] = Field(default_factory=dict)
    candidates: dict[str, Best] = Field(default_factory=dict)  # bests waiting for the accuracy check
    budget: Budget = Field(default_factory=Budget)
    memo: dict[str, Any] = Field(default_factory=dict)  # the policy's own working state
    rationale: str = ""
    annotations: dict[str, Any] = Field(default_factory=dict)  # of the last decision
    targets_met: TargetsMet | None = None  # set once, when every target is first met
    done: bool = False
    finish_reason: str = ""
    stopped_because: str = ""  # a run that met its targets: what ended the improving after them
    server_flags: dict[str, Any] | None = None  # configuration of the server that is up, if any
    server_env: dict[str, str] = Field(default_factory=dict)
    approvals: dict[str, str] = Field(default_factory=dict)  # call id -> the answer at its gate, in words

    def current_trial(self) -> Trial | None:
        return self.trials[-1] if self.trials else None
