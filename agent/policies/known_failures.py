"""What the playbook learned from launches that failed, so that it neither repeats one nor gives up more than failed.

Two lessons, both kept in the policy's memo as data:

- **A launch that failed at start-up fails again** while nothing it depends on changed: the same flags and
  environment, launched against the same workspace (``launch_key``: a failed launch's key, with the count of
  workspace changes the policy has made so far). Relaunching it costs a trial and teaches nothing.
- **A kernel the agent cannot fix blocks only the configurations that build it** (``KernelBlock``). A JIT kernel is
  compiled when the engine reaches the code that loads it, and that code sits under the engine's own condition on its
  arguments (``if self.speculative_num_steps > 3:``). The crash's traceback names the call site; the enclosing
  ``if`` tests there, read from the workspace's source, are the trigger (``trigger_at``), kept while every launch
  agrees with it. Without one (or once a launch disagrees), what crashed bounds what will: a configuration that
  goes at least as far as a crashed one in every flag that crashed one changed is predicted to build the kernel too
  (a deeper chain than a crashed chain), anything else is launched and teaches the block more.
"""

from __future__ import annotations

import ast
import json
import operator
from typing import Any, Literal

from pydantic import BaseModel, Field

from agent.search import shared_flags, within
from tools.parsed import python_ast

Op = Literal[">", ">=", "<", "<=", "==", "!="]
_OPS: dict[type[ast.cmpop], Op] = {ast.Gt: ">", ast.GtE: ">=", ast.Lt: "<", ast.LtE: "<=", ast.Eq: "==", ast.NotEq: "!="}
_EVAL = {">": operator.gt, ">=": operator.ge, "<": operator.lt, "<=": operator.le, "==": operator.eq, "!=": operator.ne}
_MIRROR: dict[Op, Op] = {">": "<", ">=": "<=", "<": ">", "<=": ">=", "==": "==", "!=": "!="}
_NEGATE: dict[Op, Op] = {">": "<=", ">=": "<", "<": ">=", "<=": ">", "==": "!=", "!=": "=="}
# the start-up failures a relaunch with nothing changed repeats (a crashed worker or a hang may be the node's): the
# configuration's, and what the engine runs on (a kernel, a quantization, an op, a graph capture, the tokenizer)
DETERMINISTIC = ("weight_shape_mismatch", "compile_error", "out_of_memory", "invalid_flag", "kernel_unavailable",
                 "unsupported_quantization", "missing_op", "graph_capture_error", "tokenizer_error")  # fmt: skip


def launch_key(flags: dict[str, Any], env: dict[str, str], workspace_changes: int) -> str:
    """A launch as far as its outcome goes: its flags, its environment and the workspace it ran against."""
    return json.dumps([flags, env, workspace_changes], sort_keys=True, default=str)


def fails_again(category: str | None, memory_phase: str | None = None) -> bool:
    """Whether a start-up failure of this kind repeats when the same launch is made again unchanged."""
    return category in DETERMINISTIC and memory_phase != "serving"


class Condition(BaseModel):
    """One comparison of an engine argument the kernel's call site is guarded by: ``flag op value``."""

    flag: str = Field(description="the server flag, as the task names it (speculative-num-steps)")
    op: Op
    value: Any

    def holds(self, flags: dict[str, Any]) -> bool | None:
        """Whether a configuration satisfies it (None: the flag is left to the engine, whose value is unknown)."""
        got = flags.get(self.flag)
        if got is None:
            return None
        try:
            return bool(_EVAL[self.op](got, self.value))
        except TypeError:
            return None

    def __str__(self) -> str:
        return f"--{self.flag} {self.op} {self.value}"


def _argument(node: ast.expr) -> str | None:
    """The engine argument an expression reads: ``self.x``, ``server_args.x``, ``x`` -> ``x``."""
    if isinstance(node, ast.Attribute):
        return node.attr
    if isinstance(node, ast.Name):
        return node.id
    return None


def _conditions(test: ast.expr, flags: set[str], negate: bool) -> list[Condition] | None:
    """The comparisons of ``test`` on known flags, when ``test`` is one or an ``and`` of them (None: something the
    configuration cannot decide, e.g. an environment variable or an ``or``)."""
    if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And) and not negate:
        parts = [_conditions(v, flags, False) for v in test.values]
        known = [c for p in parts if p for c in p]
        return known or None  # the parts not on flags hold for every launch that crashed (it reached the call)
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        return _conditions(test.operand, flags, not negate)
    if not (isinstance(test, ast.Compare) and len(test.ops) == 1 and type(test.ops[0]) in _OPS):
        return None
    left, right, op = test.left, test.comparators[0], _OPS[type(test.ops[0])]
    if isinstance(left, ast.Constant) and not isinstance(right, ast.Constant):
        left, right, op = right, left, _MIRROR[op]
    name = _argument(left)
    if name is None or not isinstance(right, ast.Constant):
        return None
    flag = name.replace("_", "-")
    if flag not in flags:
        return None
    return [Condition(flag=flag, op=_NEGATE[op] if negate else op, value=right.value)]


def trigger_at(source: str, line: int, flags: set[str]) -> list[Condition]:
    """The conditions on ``flags`` under which the statement at ``line`` of ``source`` runs: the tests of every
    ``if`` around it (its ``else`` branch negated), as far as they compare an argument with a constant. Empty when
    there is none, or the source does not parse."""
    try:
        tree = python_ast(source)
    except (SyntaxError, ValueError):
        return []
    found: list[Condition] = []

    def visit(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            start, end = getattr(child, "lineno", None), getattr(child, "end_lineno", None)
            if start is None or end is None or not start <= line <= end:
                if start is None:
                    visit(child)
                continue
            if isinstance(child, ast.If):
                in_body = any(s.lineno <= line <= (s.end_lineno or s.lineno) for s in child.body)
                in_else = any(s.lineno <= line <= (s.end_lineno or s.lineno) for s in child.orelse)
                if in_body or in_else:
                    found.extend(_conditions(child.test, flags, negate=in_else) or [])
            visit(child)

    visit(tree)
    return found


class KernelBlock(BaseModel):
    """A kernel that failed to build and that no fix made build: which launches reach it, as far as known."""

    signature: str = Field(description="what identifies the failure: its category and the file, header or symbol")
    why: str = Field(description="the diagnosis' summary, or what the fix could not do")
    feature: str | None = Field(None, description="the plan's feature whose configurations build it")
    trigger: list[Condition] = Field(default_factory=list, description="the call site's conditions (empty: unknown)")
    crashed: list[dict[str, Any]] = Field(
        default_factory=list, description="each configuration that crashed on it: its flags and what it changed")
    launched: list[dict[str, Any]] = Field(
        default_factory=list, description="flags of the configurations of the feature that launched without it")

    def _trigger_agrees(self) -> bool:
        if not self.trigger:
            return False
        crashed_ok = all(all(c.holds(x["flags"]) is not False for c in self.trigger) for x in self.crashed)
        launched_ok = all(any(c.holds(f) is False for c in self.trigger) for f in self.launched)
        return crashed_ok and launched_ok

    def region(self) -> dict[str, Any] | None:
        """After two or more configurations crashed on it, the flag values they all share, when no configuration
        with those values launched: the knobs they varied do not decide the crash (None: not known yet)."""
        if len({json.dumps(x["flags"], sort_keys=True, default=str) for x in self.crashed}) < 2:
            return None
        shared = shared_flags([x["flags"] for x in self.crashed])
        if not shared or any(within(f, shared) for f in self.launched):
            return None
        return shared

    def builds(self, flags: dict[str, Any]) -> bool:
        """Whether a configuration is predicted to build the kernel (and so to crash the same way)."""
        if self._trigger_agrees():
            return all(c.holds(flags) is not False for c in self.trigger)
        if (shared := self.region()) is not None:
            return within(flags, shared)
        return any(_at_least(flags, x["flags"], x["changed"]) for x in self.crashed)

    def explain(self) -> str:
        """The rule in force, in words."""
        if self._trigger_agrees():
            return "built when " + " and ".join(map(str, self.trigger)) + " (the call site's condition)"
        if (shared := self.region()) is not None:
            varied = sorted({k for x in self.crashed for k in {*x["flags"], *shared} if x["flags"].get(k) != shared.get(k)})
            return (f"{len(self.crashed)} configurations crashed the same way whatever their {', '.join(varied)}: "
                    "predicted for every configuration with " + ", ".join(f"{k}={v}" for k, v in shared.items()))
        return "predicted for configurations at least as deep as one that crashed"


def _at_least(flags: dict[str, Any], crashed: dict[str, Any], changed: list[str]) -> bool:
    """``flags`` goes as far as ``crashed`` in every flag ``crashed`` changed: numbers at least as large, anything
    else the same."""
    for k in changed:
        mine, theirs = flags.get(k), crashed.get(k)
        if isinstance(mine, bool) or isinstance(theirs, bool) or not isinstance(mine, int | float) \
                or not isinstance(theirs, int | float):  # fmt: skip
            if mine != theirs:
                return False
        elif mine < theirs:
            return False
    return True


def changed_flags(flags: dict[str, Any], base: dict[str, Any]) -> list[str]:
    """The flags a configuration sets differently from the one it was derived from."""
    return sorted(k for k in {*flags, *base} if flags.get(k) != base.get(k))


def accepted_per_step(alpha: float, steps: int) -> float:
    """Tokens a top-1 draft chain of ``steps`` yields per verify step when each draft token is accepted with
    probability ``alpha`` independently of the ones before it: 1 + alpha + ... + alpha^steps."""
    return sum(alpha**i for i in range(steps + 1))


def acceptance_rate(accept_length: float, steps: int) -> float | None:
    """The per-token acceptance rate a measured accept length at ``steps`` implies (bisection; None: no solution)."""
    if steps < 1 or not 1.0 <= accept_length <= steps + 1:
        return None
    lo, hi = 0.0, 1.0
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if accepted_per_step(mid, steps) < accept_length else (lo, mid)
    return (lo + hi) / 2


def would_give(block: KernelBlock, flags: dict[str, Any], value: float, accept_length: float | None,
               allowed_steps: list[Any]) -> dict[str, Any] | None:  # fmt: skip
    """What the deepest chain ``block`` keeps out would have given, estimated from the best chain measured
    without it (``flags``, its figure ``value``, its ``accept_length``): the accept length implies the draft's
    per-token acceptance rate, which gives the deeper chain's accept length; the figure scales by their ratio. An
    upper bound (the extra draft steps' cost is not counted). None: the best does not speculate with a top-1 chain,
    nothing deeper is blocked, or the accept length is unknown."""
    if not flags.get("speculative-algorithm") or int(flags.get("speculative-eagle-topk") or 1) != 1 or not accept_length:
        return None
    steps = int(flags.get("speculative-num-steps") or 1)
    blocked = [int(v) for v in allowed_steps if v and int(v) > steps
               and block.builds({**flags, "speculative-num-steps": int(v), "speculative-num-draft-tokens": int(v) + 1})]
    alpha = acceptance_rate(float(accept_length), steps)
    if not blocked or alpha is None:
        return None
    deepest = max(blocked)
    ratio = accepted_per_step(alpha, deepest) / accepted_per_step(alpha, steps)
    return {"steps": deepest, "at_most": round(value * ratio, 1), "accept_length": round(accepted_per_step(alpha, deepest), 2),
            "measured": {"steps": steps, "value": round(value, 1), "accept_length": accept_length,
                         "acceptance": round(alpha, 3)}}  # fmt: skip
