"""What a tool is: a plain typed function with a pydantic input model and a result model.

``@tool`` registers a function ``fn(ctx: ToolContext, args: SomeInput) -> SomeResult``; its JSON schema for
the LLM is derived from the input model, and its result model is what the trace records. Tools know nothing
about policies or the graph; they act through the context's sandbox.
"""

from __future__ import annotations

import inspect
import typing
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, Field


class ToolInput(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Cost(BaseModel):
    """What a call cost: wall time here, and simulated (twin) or real node time."""

    wall_seconds: float = 0.0
    simulated_seconds: float | None = None
    node_hours: float = 0.0


class ToolResult(BaseModel):
    ok: bool = True
    summary: str = Field("", description="one line a reader (or an LLM) can act on")
    cost: Cost = Cost()


class ToolFailure(RuntimeError):
    """A tool could not do what was asked (bad path, no server...); the message is for the caller."""


@dataclass(frozen=True)
class Tool:
    name: str
    description: str
    input_model: type[ToolInput]
    result_model: type[ToolResult]
    fn: Callable[..., ToolResult]
    idempotent: bool = False  # running it again after a failure part-way changes nothing more (safe to retry)

    def schema(self) -> dict[str, Any]:
        """The OpenAI function-calling description of this tool."""
        params = self.input_model.model_json_schema()
        params.pop("title", None)
        return {"type": "function", "function": {"name": self.name, "description": self.description,
                                                 "parameters": params}}  # fmt: skip


REGISTRY: dict[str, Tool] = {}


def tool(fn: Callable[..., ToolResult] | None = None, *, idempotent: bool = False):
    """Register ``fn(ctx, args: InputModel) -> ResultModel``; the docstring's first paragraph describes it.

    ``@tool(idempotent=True)`` marks a tool that may be run again after a transient failure (a file tool whose
    repeat finds its change made, a reader): the runner retries it; others fail on the first error."""

    def register(fn: Callable[..., ToolResult]) -> Callable[..., ToolResult]:
        hints = typing.get_type_hints(fn)
        params = list(inspect.signature(fn).parameters)
        input_model, result_model = hints[params[1]], hints["return"]
        description = inspect.cleandoc(fn.__doc__ or "").split("\n\n")[0].replace("\n", " ")
        REGISTRY[fn.__name__] = Tool(fn.__name__, description, input_model, result_model, fn, idempotent)
        return fn

    return register(fn) if fn is not None else register


def all_tools() -> dict[str, Tool]:
    """Every tool, with its module imported (registration happens at import)."""
    from . import bench, diagnose, evals, expert, git_ops, server, source, trials, tune  # noqa: F401

    return dict(REGISTRY)
