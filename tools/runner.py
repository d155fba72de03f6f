"""Calling tools by name with untrusted arguments (from a policy or an LLM), recording every call.

Invalid arguments come back as a failed call carrying the validation error (an LLM can correct itself);
an exception inside a tool comes back as a failed call with the error text; nothing is raised to the caller
but :class:`~sandboxes.base.SandboxUnavailable` (the Docker engine gone) and failures of the storage under the
run (a full disk, a read-only or failing file system: :mod:`tools.infrastructure`), which stop the run: such a
call is not recorded, so a resumed run makes it again instead of taking the machine's failure for the engine's.
A transient OS error (a busy or stale file, an interrupted call) in a tool that is safe to run again is retried
a few times before it counts as a failure; the record keeps what was retried.
"""

from __future__ import annotations

import errno
import json
import time
import traceback
import uuid
from collections.abc import Callable
from typing import Any

from pydantic import BaseModel, ValidationError

from sandboxes.base import SandboxUnavailable

from . import infrastructure
from .base import Cost, Tool, all_tools
from .context import ToolContext

# errors that a moment later may not recur: a file busy or locked, an NFS handle gone stale, a call interrupted
TRANSIENT_ERRNOS = frozenset({errno.EAGAIN, errno.EINTR, errno.EBUSY, errno.ESTALE, errno.ETIMEDOUT, errno.ETXTBSY})
RETRY_DELAYS_S = (0.1, 0.5, 2.0)  # before each retry of a transient failure; then it counts as failed


def is_transient(exc: BaseException) -> bool:
    return isinstance(exc, OSError) and exc.errno in TRANSIENT_ERRNOS


class ToolCallRecord(BaseModel):
    call_id: str
    tool: str
    input: dict[str, Any]
    result: dict[str, Any]
    ok: bool
    error: str | None = None
    wall_seconds: float
    cost: Cost
    retried: list[str] = []  # the transient errors of earlier attempts, when it was run again

    def trace_fields(self) -> dict[str, Any]:
        """The fields of a ``tool_call`` trace event."""
        data = self.model_dump(mode="json", exclude={"cost"} | ({"retried"} if not self.retried else set()))
        return data | {"simulated_seconds": self.cost.simulated_seconds, "node_hours": self.cost.node_hours}


def _strings(value: Any) -> list[str]:
    """Every string inside a result, in order (a log tail's lines one by one)."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for v in value.values() for s in _strings(v)]
    if isinstance(value, list | tuple):
        return [s for v in value for s in _strings(v)]
    return []


class ToolRunner:
    def __init__(self, ctx: ToolContext, on_call: Callable[[ToolCallRecord], None] | None = None):
        self.ctx = ctx
        self.tools: dict[str, Tool] = all_tools()
        self.on_call = on_call

    def _infrastructure(self, error: str | None, result: dict[str, Any]) -> OSError | None:
        """Why a failed call failed, when it was the storage under the run: an error of it quoted in what the call
        returned (the engine's log tail, a benchmark's or git's message), or the run's file systems full."""
        said = infrastructure.quoted("\n".join([error or "", *_strings(result)]))
        paths = [self.ctx.run_dir, self.ctx.sandbox.root] if self.ctx is not None else []
        return said or infrastructure.full(paths)

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
        retried: list[str] = []
        tool = self.tools.get(name)
        try:
            if isinstance(raw, str):
                raw = json.loads(raw or "{}")
            if tool is None:
                raise LookupError(f"unknown tool {name!r}; tools: {', '.join(self.tools)}")
            args = tool.input_model.model_validate(raw)
            for delay in (*RETRY_DELAYS_S, None):
                try:
                    out = tool.fn(self.ctx, args)
                    break
                except OSError as exc:
                    if not (tool.idempotent and is_transient(exc)) or delay is None:
                        raise
                    retried.append(f"{type(exc).__name__}: {exc}")
                    time.sleep(delay)
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
        except SandboxUnavailable:  # Docker went away: the run stops (resumably); not this call's failure
            raise
        except OSError as exc:
            if infrastructure.is_infrastructure(exc):  # the disk, not the call: the run stops (resumably)
                raise
            error = f"{type(exc).__name__}: {exc}\n{traceback.format_exc(limit=3)}"
        except Exception as exc:  # a tool bug or an environment failure: reported, never raised into the loop
            error = f"{type(exc).__name__}: {exc}\n{traceback.format_exc(limit=3)}"
        if not ok and (why := self._infrastructure(error, result)):
            raise why
        wall = time.monotonic() - t0
        if cost.wall_seconds == 0:
            cost = cost.model_copy(update={"wall_seconds": wall})
        record = ToolCallRecord(call_id=call_id, tool=name, input=raw if isinstance(raw, dict) else {"raw": raw},
                                result=result, ok=ok, error=error, wall_seconds=wall, cost=cost,
                                retried=retried)  # fmt: skip
        if self.on_call:
            self.on_call(record)
        return record
