"""Turning tool results into the run's record: trials, patches, candidate bests, budget, when to stop, and
what the run's end means (:func:`classify`: the outcome and the exit code ``agent run`` ends with)."""

from __future__ import annotations

from enum import IntEnum
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel

from tasks.spec import TaskSpec

from .interactivity import Counted, measured, of_runs
from .state import AgentState, Best, Observation, Patch, Trial

if TYPE_CHECKING:
    from .run import Run

PATCH_TOOLS = ("edit_file", "apply_patch")


def _metric_updates(task: TaskSpec, obs: Observation) -> dict[str, Counted]:
    """target name -> what this observation measured for it (``agent/interactivity.py``: with its per-user
    figures, and why it does not count when it misses the target's interactivity bound)."""
    return {t.name: c for t in task.targets if (c := measured(t, obs)) is not None}


def apply_observations(state: AgentState, run: Run) -> dict[str, Any]:
    trials = [t.model_copy(deep=True) for t in state.trials]
    patches = [p.model_copy() for p in state.patches]
    candidates = dict(state.candidates)
    budget = state.budget
    history = list(state.history)
    server_flags, server_env = state.server_flags, dict(state.server_env)
    for obs in state.observations:
        cost = obs.result.get("cost") or {}
        budget = budget.model_copy(update={
            "wall_seconds": budget.wall_seconds + (cost.get("wall_seconds") or 0.0),
            "node_hours": budget.node_hours + (cost.get("node_hours") or 0.0),
            "simulated_seconds": budget.simulated_seconds + (cost.get("simulated_seconds") or 0.0),
            "tool_calls": budget.tool_calls + 1,
            "benchmark_runs": budget.benchmark_runs + benchmark_runs(obs),
        })  # fmt: skip
        history.append(Observation(call_id=obs.call_id, tool=obs.tool, args=obs.args, ok=obs.ok, error=obs.error,
                                   result={"summary": obs.result.get("summary", "")}, step=obs.step))  # fmt: skip
        if obs.tool == "launch_server" and obs.result.get("status"):
            diag = obs.result.get("diagnosis") or {}
            trials.append(Trial(id=len(trials) + 1, flags=obs.args.get("flags", {}), env=obs.args.get("env", {}),
                                status=obs.result["status"], diagnosis=diag.get("summary"),
                                category=diag.get("category"), excerpt=crash_excerpt(diag), pristine=obs.args.get("pristine", []),
                                step=obs.step))  # fmt: skip
            budget = budget.model_copy(update={"trials": budget.trials + 1})
            up = obs.result["status"] == "up"
            server_flags, server_env = (trials[-1].flags, trials[-1].env) if up else (None, {})
        elif obs.tool == "run_trials" and obs.ok:
            knee_targets = [t for t in run.task.targets if t.metric == "throughput_at_knee"]
            for o in obs.result.get("outcomes", []):
                trial = Trial(id=len(trials) + 1, flags=o["spec"]["flags"], env=o["spec"]["env"], status=o["status"],
                              diagnosis=o.get("diagnosis"), step=obs.step)  # fmt: skip
                inter = of_runs(o.get("at_value") or [])
                for t in knee_targets:
                    if o["status"] != "up" or o["spec"]["measure"] != "knee" or o["spec"]["workload"] != t.workload:
                        continue
                    if inter is not None:
                        trial.interactivity[t.name] = inter
                    if miss := t.interactivity_miss(inter.tpot_p50_ms if inter else None):
                        trial.bound_missed[t.name] = f"{o['value']:.1f}: {miss}"
                    elif o["value"] > 0:  # a knee that failed says nothing of why: no figure (as with find_knee)
                        trial.metrics[t.name] = o["value"]
                        if o.get("knee_is_lower_bound"):
                            trial.lower_bounds.append(t.name)
                trials.append(trial)
            budget = budget.model_copy(update={"trials": budget.trials + len(obs.result.get("outcomes", []))})
            server_flags, server_env = None, {}
        elif obs.tool == "stop_server" and obs.ok:
            server_flags, server_env = None, {}
        elif obs.tool in PATCH_TOOLS and obs.ok:
            _record_patch(state, patches, obs)
        elif obs.tool == "discard_changes" and obs.ok:
            gone = set(obs.result.get("files", []))
            for p in patches:
                if p.status == "applied" and set(p.files) <= gone:
                    p.status = "discarded"
        elif obs.tool in ("run_benchmark", "find_knee") and obs.result.get("server_lost") and trials:
            diag = obs.result.get("diagnosis") or {}  # the trial came up, then failed under the load
            trial = trials[-1]
            trial.serving_failure = f"{diag.get('category', 'unknown')}: {diag.get('summary') or obs.error or ''}"
            trial.excerpt = crash_excerpt(diag) if diag else trial.excerpt
            server_flags, server_env = None, {}
        elif obs.tool == "find_knee" and trials and trials[-1].status == "up" and sustained_no_rate(obs):
            # a figure, not a failure: nothing this configuration serves holds the limits (an ablation may read it)
            for t in run.task.targets:
                if t.metric == "throughput_at_knee" and t.workload == obs.args.get("workload"):
                    trials[-1].metrics.setdefault(t.name, 0.0)
        elif obs.ok and trials and trials[-1].status == "up":
            if obs.tool in ("run_benchmark", "find_knee"):
                trials[-1].served = True
                single = [r for r in obs.result.get("runs") or [] if r.get("max_concurrency") == 1]
                accepted = [r["accept_length"] for r in single if r.get("accept_length")]
                if accepted:
                    trials[-1].accept_length = max(accepted)
            for name, c in _metric_updates(run.task, obs).items():
                trial, value = trials[-1], c.value
                if c.miss is not None:  # recorded with why, never a best
                    trial.bound_missed[name] = f"{value:.1f}: {c.miss}"
                    if name not in trial.metrics and c.interactivity is not None:
                        trial.interactivity[name] = c.interactivity
                    continue
                if c.interactivity is not None and value >= trial.metrics.get(name, 0.0):
                    trial.interactivity[name] = c.interactivity
                if value >= trial.metrics.get(name, 0.0):  # the figure kept says whether it is a floor
                    floors = [n for n in trial.lower_bounds if n != name]
                    trial.lower_bounds = [*floors, name] if c.lower_bound else floors
                trial.metrics[name] = max(value, trial.metrics.get(name, 0.0))
                best = state.bests.get(name)
                cand = candidates.get(name)
                if (best is None or value > best.value) and (cand is None or value > cand.value):
                    candidates[name] = Best(target=name, value=value, trial=trial.id, flags=trial.flags, env=trial.env,
                                            rate=c.run.get("request_rate"), bench_command=c.run.get("command") or [],
                                            interactivity=c.interactivity, lower_bound=c.lower_bound)  # fmt: skip
    return {"trials": trials, "patches": patches, "candidates": candidates, "budget": budget, "history": history,
            "server_flags": server_flags, "server_env": server_env}  # fmt: skip


def sustained_no_rate(obs: Observation) -> bool:
    """Whether a knee search ran to its end and no rate held: searched down to its resolution (not a probe that
    only asked whether a known knee is beaten, ``min_rate``), not stopped by its allowance, the server not lost."""
    r = obs.result
    return (not obs.ok and bool(r.get("runs")) and r.get("knee_rate") is None and r.get("first_failing_rate") is not None
            and not r.get("stopped_by_budget") and not r.get("server_lost") and obs.args.get("min_rate") is None)  # fmt: skip


def benchmark_runs(obs: Observation) -> int:
    """How many benchmark runs a tool call made (a sweep's trials each report their own)."""
    if obs.tool == "run_trials":
        return sum(int(o.get("benchmark_runs") or 0) for o in obs.result.get("outcomes", []))
    runs = obs.result.get("runs")
    return len(runs) if isinstance(runs, list) else 0


def crash_excerpt(diagnosis: dict[str, Any]) -> list[str]:
    """The lines of a crash a reviewer needs: where it raised (the innermost frame) and what it said."""
    lines: list[str] = []
    frames = diagnosis.get("frames") or []
    if frames:
        f = frames[-1]
        lines.append(f'File "{f["file"]}", line {f["line"]}, in {f["function"]}')
        if f.get("code"):
            lines.append(f"    {f['code']}")
    lines += [ln for ln in diagnosis.get("evidence") or [] if ln.strip() not in (x.strip() for x in lines)]
    return lines[:8]


def answered_crash(trials: list[Trial], note: dict[str, Any]) -> Trial | None:
    """The trial whose crash a patch answers. A fix is not always made right after its crash: an engine fix is
    proposed with the config fix of a crash and applied once that config fix held, by when other trials may have
    crashed for other reasons (a compile error of the relaunch). So the policy's note names the trial it read the
    crash from (``crash_trial``; an LLM names it on the edit call, ``fixes_trial``); a note that does not is matched
    by its diagnosis' category (the latest crash of that category), and only a note with neither falls back to the
    latest crash."""
    crashed = [t for t in trials if t.status != "up"]
    named = note.get("crash_trial")
    if named is not None:
        found = next((t for t in crashed if t.id == named), None)
        if found is not None:
            return found
    category = note.get("category")
    if category:
        found = next((t for t in reversed(crashed) if t.category == category), None)
        if found is not None:
            return found
    return crashed[-1] if crashed else None


def _record_patch(state: AgentState, patches: list[Patch], obs: Observation) -> None:
    files = [obs.args["path"]] if obs.tool == "edit_file" else list(obs.result.get("files", []))
    diff = obs.result.get("diff") or obs.args.get("diff", "")
    note = state.annotations.get("patch", {})
    if obs.args.get("fixes_trial") is not None and note.get("crash_trial") is None:  # the LLM names it on the call
        note = {**note, "crash_trial": obs.args["fixes_trial"]}
    crash = answered_crash(state.trials, note)
    reason = crash.diagnosis if crash and crash.diagnosis else "(no failure recorded)"
    defect = note.get("defect") or note.get("category") or ""
    last = patches[-1] if patches else None
    if last and last.status == "applied" and last.defect == defect and last.category == note.get("category", last.category):
        # the same defect, one more instance of it (a relaunch revealed the next one): one patch
        last.files = sorted(set(last.files) | set(files))
        last.diff += diff
        if (approval := state.approvals.get(obs.call_id)) and approval not in last.approval:
            last.approval = "; ".join(filter(None, [last.approval, approval]))
        return
    patches.append(Patch(id=len(patches) + 1, files=files, diff=diff, reason=reason,
                         excerpt=list(crash.excerpt) if crash else [], crash_trial=crash.id if crash else None,
                         category=note.get("category", "unknown"), defect=defect,
                         title=note.get("title") or f"Patch {', '.join(files)}",
                         root_cause=note.get("root_cause") or state.rationale,
                         change=note.get("change") or f"edit {', '.join(files)}", step_applied=obs.step,
                         test=note.get("test"), approval=state.approvals.get(obs.call_id, "")))  # fmt: skip


def bests_met(state: AgentState, task: TaskSpec) -> bool:
    for t in task.targets:
        b = state.bests.get(t.name)
        if b is None or not b.verified or b.value < t.min:
            return False
    return True


def after_targets_spent(state: AgentState, task: TaskSpec) -> str | None:
    """Why the run stops improving once its targets are met (None while the after-targets budget lasts)."""
    met, b, after = state.targets_met, state.budget, task.budgets.after_targets
    if met is None:
        return None
    hours = task.budgets.after_targets_node_hours()
    if b.node_hours - met.node_hours >= hours:
        return f"the after-targets budget is spent ({b.node_hours - met.node_hours:.2f} of {hours:g} node-hours)"
    if after.benchmark_runs is not None and b.benchmark_runs - met.benchmark_runs >= after.benchmark_runs:
        return f"the after-targets budget is spent ({b.benchmark_runs - met.benchmark_runs} of {after.benchmark_runs} benchmark runs)"
    return None


def node_hours_left(state: AgentState, task: TaskSpec) -> float:
    """Node-hours the run may still spend: what is left of its budget and, once the targets are met, of the
    after-targets budget (a long measurement, e.g. a knee search, is given this as its allowance)."""
    left = task.budgets.node_hours - state.budget.node_hours
    if state.targets_met is not None:
        spent_after = state.budget.node_hours - state.targets_met.node_hours
        left = min(left, task.budgets.after_targets_node_hours() - spent_after)
    return max(left, 0.0)


def budget_exhausted(state: AgentState, run: Run) -> str | None:
    return _budget_spent(state, run.task, run.options.max_trials) or after_targets_spent(state, run.task)


# --- what the run's end means -------------------------------------------------------------------------------


class ExitCode(IntEnum):
    """``agent run`` / ``agent resume`` exit codes (docs/reliability.md). 1 is left to Python: an uncaught
    error, a bug in dayzero."""

    TARGETS_MET = 0
    BAD_INPUT = 2  # the task, a flag, a run id, the policy's settings: nothing was started
    TARGETS_MISSED = 3  # the run ended within its budget without meeting every target
    BUDGET_EXHAUSTED = 4  # a budget (trials, wall time, node-hours, LLM tokens or requests, tool calls) ran out first
    INFRASTRUCTURE = 5  # the engine, Docker, the LLM endpoint or the runs folder failed
    AWAITING_APPROVAL = 6  # stopped at an approval gate with no terminal to ask on: agent approve, agent resume
    INTERRUPTED = 130  # Ctrl-C (SIGINT): agent resume continues
    HUNG_UP = 129  # SIGHUP (the terminal went away): agent resume continues
    TERMINATED = 143  # SIGTERM (a scheduler, `docker stop`, `kill`): agent resume continues


OutcomeKind = Literal["targets_met", "targets_missed", "budget_exhausted", "infrastructure"]


class Outcome(BaseModel):
    """What a finished run's end means, in words and as the exit code."""

    kind: OutcomeKind
    exit_code: int
    words: str


# exception types (as the tool runner prefixes a raised error: ``Type: message``) that say the machinery, not the
# configuration, failed: the engine could not be started or reached, Docker failed, the disk or the network did
INFRA_EXCEPTIONS = ("DockerException", "APIError", "ImageNotFound", "ConnectionError", "ConnectionRefusedError",
                    "ConnectionResetError", "BrokenPipeError", "OSError", "PermissionError", "TimeoutError")  # fmt: skip
INFRA_SANDBOX = ("could not start", "could not run", "no Docker engine", "Docker image", "could not stop")
ENGINE_TOOLS = ("launch_server", "run_trials", "run_benchmark", "find_knee", "tune_moe", "run_eval", "stop_server")


def infrastructure_failure(state: AgentState) -> str | None:
    """Why the run ended on a failure of its infrastructure, or None: the policy's LLM endpoint failing at the
    end, or the last call that drives the engine failing because the engine could not be started or reached."""
    llm = state.memo.get("llm") if isinstance(state.memo.get("llm"), dict) else None
    if llm and llm.get("errors"):
        return f"the LLM endpoint failed ({llm['errors']} request(s) in a row): {llm.get('last_error') or 'no answer'}"
    last = next((o for o in reversed(state.history) if o.tool in ENGINE_TOOLS), None)
    if last is None or last.ok or not last.error:
        return None
    first = last.error.strip().splitlines()[0]
    kind, _, message = first.partition(": ")
    if kind in INFRA_EXCEPTIONS or (kind == "SandboxError" and message.startswith(INFRA_SANDBOX)):
        return f"the engine could not run ({last.tool}): {first}"
    return None


def classify(state: AgentState, task: TaskSpec, max_trials: int | None = None) -> Outcome:
    """The outcome of a finished run, from its state: every target met, else a budget spent, else an
    infrastructure failure, else the targets missed within the budget."""
    if bests_met(state, task):
        return Outcome(kind="targets_met", exit_code=ExitCode.TARGETS_MET, words="every target met")
    missed = [t.name for t in task.targets if not _met(state, t.name, t.min)]
    which = f"{len(missed)} of {len(task.targets)} target(s) missed ({', '.join(missed)})"
    if spent := _budget_spent(state, task, max_trials):
        return Outcome(kind="budget_exhausted", exit_code=ExitCode.BUDGET_EXHAUSTED, words=f"{which}: {spent}")
    if why := infrastructure_failure(state):
        return Outcome(kind="infrastructure", exit_code=ExitCode.INFRASTRUCTURE,
                       words=f"{which}: infrastructure failure: {why}")  # fmt: skip
    reason = state.finish_reason or "the policy finished"
    return Outcome(kind="targets_missed", exit_code=ExitCode.TARGETS_MISSED,
                   words=f"{which} within the budget: {reason}")  # fmt: skip


def _met(state: AgentState, name: str, floor: float) -> bool:
    b = state.bests.get(name)
    return b is not None and b.verified and b.value >= floor


def _budget_spent(state: AgentState, task: TaskSpec, max_trials: int | None) -> str | None:
    """Which budget the run spent (the after-targets budget aside: it only exists once the targets are met)."""
    b, limits = state.budget, task.budgets
    trials = max_trials or limits.trials
    if b.trials >= trials:
        return f"trial budget spent ({b.trials} of {trials})"
    if b.wall_seconds >= limits.wall_minutes * 60:
        return f"wall-time budget spent ({b.wall_seconds / 60:.1f} of {limits.wall_minutes} min)"
    if b.node_hours >= limits.node_hours:
        return f"node-hour budget spent ({b.node_hours:.2f} of {limits.node_hours})"
    if limits.llm_tokens and b.llm_tokens >= limits.llm_tokens:
        return f"LLM token budget spent ({b.llm_tokens} of {limits.llm_tokens})"
    if b.llm_requests >= limits.llm_requests:
        return f"LLM request budget spent ({b.llm_requests} of {limits.llm_requests} requests)"
    if b.tool_calls >= limits.tool_calls:
        return f"tool-call budget spent ({b.tool_calls} of {limits.tool_calls} calls)"
    return None
