"""Calling tools by name with untrusted arguments (from a policy or an LLM), recording every call.

Invalid arguments come back as a failed call carrying the validation error (an LLM can correct itself);
an exception inside a tool comes back as a failed call with the error text; nothing is raised to the caller.
"""

from __future__ import annotations

import json
import time
import traceback
import uuid
from collections.abc import Callable
from typing import Any

from pydantic import BaseModel, ValidationError

from .base import Cost, Tool, all_tools
from .context import ToolContext


class ToolCallRecord(BaseModel):
    call_id: str
    tool: str
    input: dict[str, Any]
    result: dict[str, Any]
    ok: bool
    error: str | None = None
    wall_seconds: float
    cost: Cost

    def trace_fields(self) -> dict[str, Any]:
        """The fields of a ``tool_call`` trace event."""
        data = self.model_dump(mode="json", exclude={"cost"})
        return data | {"simulated_seconds": self.cost.simulated_seconds, "node_hours": self.cost.node_hours}


class ToolRunner:
    def __init__(self, ctx: ToolContext, on_call: Callable[[ToolCallRecord], None] | None = None):
        self.ctx = ctx
        self.tools: dict[str, Tool] = all_tools()
        self.on_call = on_call

    def schemas(self) -> list[dict[str, Any]]:
        return [t.schema() for t in self.tools.values()]

    def call(self, name: str, arguments: dict[str, Any] | str | None = None, call_id: str | None = None) -> ToolCallRecord:
        call_id = call_id or uuid.uuid4().hex[:12]
        t0 = time.monotonic()
        raw: Any = arguments or {}
        error = None
        result: dict[str, Any] = {}
        ok = False
        cost = Cost()
        tool = self.tools.get(name)
        try:
            if isinstance(raw, str):
                raw = json.loads(raw or "{}")
            if tool is None:
                raise LookupError(f"unknown tool {name!r}; tools: {', '.join(self.tools)}")
            args = tool.input_model.model_validate(raw)
            out = tool.fn(self.ctx, args)
            result = out.model_dump(mode="json")
            ok, cost = out.ok, out.cost
            if not ok:
                error = out.summary
        except ValidationError as exc:
            error = f"invalid arguments for {name}: " + "; ".join(
                f"{'.'.join(map(str, e['loc'])) or '(arguments)'}: {e['msg']}" for e in exc.errors())
        except json.JSONDecodeError as exc:
            error = f"invalid arguments for {name}: not valid JSON: {exc}"
        except LookupError as exc:
            error = str(exc)
        except Exception as exc:  # a tool bug or an environment failure: reported, never raised into the loop
            error = f"{type(exc).__name__}: {exc}\n{traceback.format_exc(limit=3)}"
        wall = time.monotonic() - t0
        if cost.wall_seconds == 0:
            cost = cost.model_copy(update={"wall_seconds": wall})
        record = ToolCallRecord(call_id=call_id, tool=name, input=raw if isinstance(raw, dict) else {"raw": raw},
                                result=result, ok=ok, error=error, wall_seconds=wall, cost=cost)  # fmt: skip
        if self.on_call:
            self.on_call(record)
        return record
