"""Why the best configuration won: each change from the bring-up configuration and what it moved.

The changes are grouped as a user reads them: the parallel layout (TP, DP, DP attention) is one change, speculative
decoding (algorithm, depth, width, draft tokens) another, every other flag and every environment variable one each. A change's effect is read off two measured configurations that
differ by exactly that change (the trace's own ablation); a change no such pair isolates is listed as not measured,
with the configuration that would measure it (the best without it). Nothing here runs anything.
"""

from __future__ import annotations

from pydantic import BaseModel

from tasks.spec import TaskSpec

from .search import LAYOUT, SPEC_DEPENDENT, SPECULATIVE, Candidate, Measured, SearchSpace, measured_on
from .state import AgentState

GROUPS = {"layout": LAYOUT, "speculative decoding": (SPECULATIVE, *SPEC_DEPENDENT)}

# a knee search that ran to its end and sustained no rate is a figure (0: ``outcomes.sustained_no_rate``); crashes
# and probes that only asked whether a known knee is beaten are not (they record no figure, or ``crashed``)
MIN_PAIR_VALUE = 0.0


class Change(BaseModel):
    """One change from the bring-up configuration to the best."""

    name: str  # "layout", a flag name, or "env NAME"
    before: str
    after: str
    effect: float | None = None  # the metric with the change minus without it, where a pair isolates it
    measured_between: tuple[float, float] | None = None  # (without, with)
    without: Candidate  # the best without this change: what would measure it


class Explanation(BaseModel):
    """The best against the bring-up configuration, change by change."""

    baseline: float | None  # the bring-up configuration's own figure, if measured
    best: float
    changes: list[Change]

    @property
    def unexplained(self) -> float | None:
        """What the measured effects leave of the total gain (None without a baseline)."""
        if self.baseline is None:
            return None
        return self.best - self.baseline - sum(c.effect or 0.0 for c in self.changes)


def _groups(c: Candidate) -> dict[str, str]:
    """A configuration as named changes: the groups (layout, speculative decoding) as one each, every other flag
    and variable by itself. An absent group reads "(off)"."""
    grouped = {k for keys in GROUPS.values() for k in keys}
    out = {name: ", ".join(f"{k}={c.flags[k]}" for k in keys if k in c.flags) or "(off)" for name, keys in GROUPS.items()}
    out.update({k: str(v) for k, v in c.flags.items() if k not in grouped})
    out.update({f"env {k}": v for k, v in c.env.items() if v})
    return out


def _without(best: Candidate, bringup: Candidate, name: str) -> Candidate:
    """The best with one change put back as it was at bring-up."""
    flags, env = dict(best.flags), dict(best.env)
    if name in GROUPS:
        for k in GROUPS[name]:
            flags.pop(k, None)
            if k in bringup.flags:
                flags[k] = bringup.flags[k]
    elif name.startswith("env "):
        key = name[4:]
        env.pop(key, None)
        if bringup.env.get(key):
            env[key] = bringup.env[key]
    else:
        flags.pop(name, None)
        if name in bringup.flags:
            flags[name] = bringup.flags[name]
    return Candidate(flags=flags, env=env)


def changes_from(bringup: Candidate, best: Candidate) -> list[str]:
    """The names of the changes from ``bringup`` to ``best``."""
    a, b = _groups(bringup), _groups(best)
    return [k for k in {**a, **b} if a.get(k) != b.get(k)]


def explain(bringup: Candidate, best: Candidate, best_value: float, measured: list[Measured]) -> Explanation:
    """Each change from ``bringup`` to ``best`` with its effect where two measured configurations isolate it.
    ``measured`` holds canonical configurations (as ``agent.search.SearchSpace.canonical`` gives them)."""
    value = {m.candidate.key(): m.value for m in measured if not m.crashed and m.value >= MIN_PAIR_VALUE}
    a, b = _groups(bringup), _groups(best)
    changes = []
    for name in changes_from(bringup, best):
        change = Change(name=name, before=a.get(name, "(unset)"), after=b.get(name, "(unset)"),
                        without=_without(best, bringup, name))  # fmt: skip
        for m in measured:  # any measured pair that differs by exactly this change, the best's own first
            if m.candidate.key() not in value:
                continue
            other = _groups(m.candidate)
            if other.get(name) != b.get(name):
                continue
            twin = _without(m.candidate, bringup, name)
            if twin.key() in value and changes_from(twin, m.candidate) == [name]:
                with_, without = value[m.candidate.key()], value[twin.key()]
                if change.effect is None or m.candidate.key() == best.key():
                    change.effect, change.measured_between = with_ - without, (without, with_)
        changes.append(change)
    return Explanation(baseline=value.get(bringup.key()), best=best_value, changes=changes)


def explain_best(state: AgentState, task: TaskSpec, target: str) -> Explanation | None:
    """The explanation of a target's best from the run's trials: the bring-up configuration is the first that
    came up, the measurements are every trial's figure for that target (None: no best yet)."""
    best = state.bests.get(target)
    bringup = next((t for t in state.trials if t.status == "up"), None)
    if best is None or bringup is None:
        return None
    space = SearchSpace(task)

    def canonical(cand: Candidate) -> Candidate:
        return space.canonical(cand) or cand

    measured = [m.model_copy(update={"candidate": canonical(m.candidate)}) for m in measured_on(state.trials, target)]
    return explain(canonical(Candidate(flags=bringup.flags, env=bringup.env)),
                   canonical(Candidate(flags=best.flags, env=best.env)), best.value, measured)  # fmt: skip
