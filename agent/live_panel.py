"""What ``agent run`` shows while a run works: a panel as wide as the terminal, and a line for each event worth
keeping (a crash, a fix applied, verified, committed or dropped, a serving failure, a new best) printed above it as
it happens, so the terminal's scrollback holds the run's story after the panel is gone.

:class:`LiveView` compares each state the graph reports with the one before: the events are what changed (a
resumed run's first state retells what happened before the interruption, as a recap). The
panel shows, per target, its goal, its best (and whether accuracy was checked on it, or is pending), the last
figure measured for it and the best's configuration as flags; then what was spent against the budget, and what
the policy is doing now.
"""

from __future__ import annotations

from typing import Any

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from tasks.spec import TaskSpec

from .flag_text import dicts_as_flags, flags_text
from .interactivity import per_user_text
from .stages import stage_name
from .state import AgentState, Best, Trial

ACCURACY = "accuracy_delta"  # the target metric an eval measures, not a benchmark
EVENT_CHARS = 300  # an event line's bound (a diagnosis can run to a paragraph: the trace has it whole)


def config_text(flags: dict[str, Any], env: dict[str, str] | None = None) -> str:
    """A configuration as its flags first (what differs between trials), then its environment."""
    env = {k: v for k, v in (env or {}).items() if v}
    return flags_text(flags) + (f" with {flags_text({}, env)}" if env else "")


def _short(text: str, limit: int = EVENT_CHARS) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


class LiveView:
    """The live panel of one run, and the events between two of its states (see the module docstring)."""

    def __init__(self, task: TaskSpec, trials_budget: int | None = None, redact=None) -> None:  # noqa: ANN001
        self.task = task
        self.trials_budget = trials_budget or task.budgets.trials
        self._redact = redact or (lambda text: text)
        self._trials: dict[int, tuple[str, str | None]] = {}  # id -> (status, serving failure) seen
        self._patches: dict[int, str] = {}  # id -> status seen
        self._bests: dict[str, tuple[float, bool]] = {}  # target -> (value, verified) seen
        self._missed: dict[tuple[int, str], str] = {}  # (trial, target) -> why its figure does not count, seen

    # --- events -----------------------------------------------------------------------------------------

    def events(self, state: AgentState) -> list[Text]:
        """What happened since the last state: one styled line each, in the order the run did it."""
        out: list[Text] = []
        for t in state.trials:
            seen = self._trials.get(t.id)
            now = (t.status, t.serving_failure)
            if seen == now:
                continue
            self._trials[t.id] = now
            if t.status in ("crashed", "timeout") and (seen is None or seen[0] != t.status):
                what = "crashed" if t.status == "crashed" else "timed out starting"
                out.append(self._line("✗", "red", f"trial {t.id} {what}: {t.diagnosis or 'no diagnosis'}",
                                      f"({flags_text(t.flags)})"))  # fmt: skip
            if t.serving_failure and (seen is None or seen[1] != t.serving_failure):
                out.append(self._line("✗", "red", f"trial {t.id} failed under a benchmark: {t.serving_failure}"))
        for t in state.trials:  # a figure its target's interactivity bound does not let count
            for name, why in t.bound_missed.items():
                if self._missed.get((t.id, name)) != why:
                    self._missed[(t.id, name)] = why
                    out.append(self._line("✗", "yellow", f"trial {t.id}'s {name} {why}; it does not count"))
        for p in state.patches:
            if self._patches.get(p.id) == p.status:
                continue
            self._patches[p.id] = p.status
            title = p.title or p.reason
            crash = f" (trial {p.crash_trial}'s crash)" if p.crash_trial is not None else ""
            if p.status == "verified":  # its commit follows at once: one line for the two
                continue
            words = {"applied": ("fix applied", "yellow"), "committed": ("fix verified and committed", "green"),
                     "discarded": ("fix dropped", "red"),
                     "rejected": ("fix verified, its commit rejected", "red")}[p.status]  # fmt: skip
            commit = f" {p.commits[-1][:10]}" if p.status == "committed" and p.commits else ""
            out.append(self._line("⚒", words[1], f"{words[0]}{commit}{crash}: {title}", f"[{', '.join(p.files)}]"))
        for name, best in state.bests.items():
            seen = self._bests.get(name)
            if seen == (best.value, best.verified):
                continue
            self._bests[name] = (best.value, best.verified)
            if seen is None or best.value != seen[0]:
                target = next((t for t in self.task.targets if t.name == name), None)
                goal = f" (goal {target.min:g}{', met' if best.value >= target.min else ''})" if target else ""
                check = "" if best.verified else ", accuracy not checked yet"
                user = f", {per_user_text(best.interactivity)}" if best.interactivity else ""
                out.append(self._line("★", "green", f"new best {name} {best.value:.5g}{goal}, trial {best.trial}"
                                                    f"{user}{check}", f"({config_text(best.flags, best.env)})"))  # fmt: skip
        return out

    def _line(self, mark: str, style: str, text: str, detail: str = "") -> Text:
        line = Text.assemble((mark + " ", style), _short(self._redact(text)))
        if detail:
            line.append(" " + _short(self._redact(detail), 200), style="dim")
        return line

    # --- the panel --------------------------------------------------------------------------------------

    @staticmethod
    def _last_cell(trials: list[Trial], target: str, metric: str) -> str:
        """The last figure measured for ``target``: a benchmark's, or for the accuracy delta (which no benchmark
        measures), the last accuracy checked."""
        if trial := next((t for t in reversed(trials) if target in t.metrics), None):
            return f"{trial.metrics[target]:.3f} (trial {trial.id})"
        if metric == ACCURACY and (trial := next((t for t in reversed(trials) if t.accuracy is not None), None)):
            return f"accuracy {trial.accuracy:.3f} (trial {trial.id})"
        return "-"

    def panel(self, state: AgentState, elapsed: float) -> RenderableType:
        """The panel for ``state``, ``elapsed`` seconds into the run: as wide as the console it is printed on."""
        title = Text.assemble((self.task.name, "bold"), f" - stage {stage_name(state.stage)} - step {state.step} - ",
                              f"{elapsed:.0f} s")  # fmt: skip
        table = Table(title=title, expand=True)
        table.add_column("target", no_wrap=True)
        table.add_column("goal", justify="right", no_wrap=True)
        table.add_column("best", justify="right", no_wrap=True)
        table.add_column("last measured", justify="right", no_wrap=True)
        table.add_column("best's configuration", ratio=1, overflow="ellipsis", no_wrap=True)
        for t in self.task.targets:
            best, pending = state.bests.get(t.name), state.candidates.get(t.name)
            table.add_row(t.name, f"{t.min:g}", self._best_cell(best, pending, t.min),
                          self._last_cell(state.trials, t.name, t.metric),
                          Text(self._redact(config_text(best.flags, best.env)) if best else "-", style="dim"))  # fmt: skip
        return Group(table, self._spent(state), self._now(state))

    def _best_cell(self, best: Best | None, pending: Best | None, goal: float) -> Text:
        cell = Text()
        if best is not None:
            cell.append(f"{best.value:.3f}")
            if best.verified and best.value >= goal:
                cell.append(" met", style="green")
            elif not best.verified:
                cell.append(" unchecked", style="yellow")
        if pending is not None and (best is None or pending.value != best.value):
            cell.append(("  " if best else "") + f"{pending.value:.3f} awaits accuracy", style="yellow")
        return cell if cell.plain else Text("-")

    def _spent(self, state: AgentState) -> Text:
        b, budgets = state.budget, self.task.budgets
        crashed = sum(t.status != "up" for t in state.trials)
        fixes: dict[str, int] = {}
        for p in state.patches:
            fixes[p.status] = fixes.get(p.status, 0) + 1
        fixed = ", ".join(f"{n} {s}" for s, n in fixes.items()) or "none"
        return Text(f"trials {b.trials}/{self.trials_budget} ({crashed} crashed) | fixes: {fixed} | node-hours "
                    f"{b.node_hours:.2f}/{budgets.node_hours:g} | benchmark runs {b.benchmark_runs}")  # fmt: skip

    def _now(self, state: AgentState) -> Text:
        now = dicts_as_flags(self._redact(state.rationale or ""))
        return Text.assemble(("now: ", "bold"), now or "-", overflow="ellipsis", no_wrap=True)

    def update(self, state: AgentState, elapsed: float, print_line: Any) -> RenderableType:
        """Print the events since the last state (through ``print_line``), and return the panel."""
        for line in self.events(state):
            print_line(line)
        return self.panel(state, elapsed)
