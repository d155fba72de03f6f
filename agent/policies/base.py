"""One interface for every policy: look at the state, propose tool calls (or finish)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

from agent.state import AgentState, Call
from tasks.spec import TaskSpec


@dataclass
class Decision:
    calls: list[Call]
    rationale: str
    stage: str
    memo: dict[str, Any] = field(default_factory=dict)
    done: bool = False
    llm_tokens: int = 0
    llm_requests: int = 0  # requests sent to the LLM endpoint for this decision (usage reported or not)
    wall_seconds: float = 0.0  # time spent deciding (waiting on an LLM endpoint): counted in the wall budget
    # what the policy says about its calls, for the record (e.g. "patch": title, root cause, change)
    annotations: dict[str, Any] = field(default_factory=dict)


class WorkspaceView(Protocol):
    """Read-only access to the workspace (what a policy may look at without acting)."""

    def read_file(self, path: str) -> str: ...

    def exists(self, path: str) -> bool: ...

    def glob(self, pattern: str) -> list[str]: ...


@dataclass
class PolicyContext:
    task: TaskSpec
    workspace: WorkspaceView
    tool_schemas: list[dict[str, Any]]
    run_id: str
    trace: Any = None  # the run's TraceWriter: LLM requests and responses are recorded through it
    prior: list[Any] = field(default_factory=list)  # agent.prior.PriorRun: earlier runs' measurements (--prior)


class Policy(Protocol):
    name: str

    def decide(self, state: AgentState, ctx: PolicyContext) -> Decision: ...
