"""How fast the agent's search reaches the targets, against Optuna TPE and random search over the same space.

    python -m tests.benchmarks.search_efficiency                                  # 3 tasks x 5 seeds (hours)
    python -m tests.benchmarks.search_efficiency --tasks tasks/glm52_mi355x.yaml --seeds 2 --trials 25

Every figure is simulated: the runs use the dayzero digital twin, not a real node.

For each task and seed it measures three methods and reports, per performance target (every target whose
metric is ``throughput_at_knee`` or ``decode_tok_s``), the benchmark runs, launches and node-hours spent until
the target was first met ("not met" counts as the whole budget spent), and the best value at the end:

- **agent**: ``agent run <task copy> --policy playbook`` (a run is reused when ``runs/<run id>/summary.json``
  exists). A target counts as met at the first checkpointed state whose *verified* best reaches it (the graph's
  verify node: bests become verified once ``run_eval`` passes); the spend is that state's budget, and its end
  values are its verified bests. Its best-so-far curve is what it had measured (verified or not).
- **tpe**: Optuna's TPE sampler over the task's ``search_space`` as :class:`agent.search.SearchSpace` defines it
  (its distributions, sampling and canonical form, so the constraints are the agent's).
- **random**: uniform draws over the same space, in the same canonical form.

The black-box methods start from the *patched* workspace: a copy of the same seed's agent run workspace (its
sources at the fixed branch, its tuned MoE table under ``tuning/``). Each trial launches one configuration on the
twin and, when it comes up, measures both performance targets on that server: the knee of the throughput
workload the way the agent does (``find_knee`` with the workload's ``knee_seeds``, start 1 req/s, resolution
0.1) and one ``run_benchmark`` of the single-stream workload (``decode_tok_s``). TPE maximises one scalar,
``sum_i min(v_i / target_i, 1) + 0.1 * sum_i v_i / target_i``: reaching every target counts most, and beyond
that it keeps improving both. Each target's best so far is the best of that metric over all trials, whichever
trial measured it. A crashed launch counts as a launch and costs what the tool charges it, with value 0.
Invalid draws (the space's constraints) and configurations already measured are drawn again and not counted.
The accuracy target is not evaluated for the black-box methods (they run no eval).

A **seed** ``s`` is one task copy (``<out>/tasks/<task>-s<s>.yaml``, ``extends:`` the task) whose throughput
workload has ``knee_seeds: [2s+1, 2s+2]`` (seed 0 is the task as written): the benchmark samples (prompts and
arrival times) every method's knee searches see. The same seed also seeds TPE's and random search's samplers.
The twin and the playbook are otherwise deterministic, and the single-stream benchmark uses its default seed.

"Best known" per task, seed and target is the best end value any method reached in this measurement on that
task and seed (the same benchmark samples); the table gives each end value as a share of it. Outputs under ``--out`` (default ``runs/search_efficiency/``): ``results.json``
(every measurement), ``table.txt`` (the printed table) and ``best_so_far.png`` (best-so-far throughput against
benchmark runs, the median over seeds per method).

Goals (issue 12): on the default task the agent meets the targets in at most 30 benchmark runs and 3 node-hours,
with at least 3x fewer runs than TPE's median; every method's end value within 2 % of the best known.
"""

from __future__ import annotations

import random
import shutil
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Annotated, Any

import optuna
import typer
from pydantic import BaseModel, Field
from rich.console import Console
from rich.table import Table

from agent.search import MAX_ASKS, SPEC_DEPENDENT, SPECULATIVE, Candidate, SearchSpace
from tasks.spec import TaskSpec, load_task

SIMULATED = "simulated: dayzero digital twin, not a real node"
METHODS = ("agent", "tpe", "random")
DEFAULT_TASKS = ["tasks/glm52_mi355x.yaml", "tasks/orion_mi300x.yaml", "tasks/vega_mi355x.yaml"]
PERF_METRICS = ("throughput_at_knee", "decode_tok_s")
BONUS = 0.1  # weight of the uncapped normalised sum in the black-box objective
console = Console()


class Spend(BaseModel):
    """What a method had spent at one moment."""

    benchmark_runs: int = 0
    launches: int = 0
    node_hours: float = 0.0


class Point(BaseModel):
    """The spend after one step of a method and each target's best so far then."""

    spend: Spend
    best: dict[str, float] = Field(default_factory=dict)  # target name -> best so far (0: nothing yet)
    config: Candidate | None = None  # a black-box trial: the configuration it launched
    values: dict[str, float] = Field(default_factory=dict)  # a black-box trial: what it measured (0: crashed)


class MethodRun(BaseModel):
    """One method on one task and seed: its course, when each target was met, and where it ended."""

    method: str
    task: str
    seed: int
    targets: dict[str, float]  # performance target name -> its minimum
    metrics: dict[str, str] = Field(default_factory=dict)  # performance target name -> its metric
    points: list[Point] = Field(default_factory=list)
    met_at: dict[str, Spend | None] = Field(default_factory=dict)  # target -> spend when first met (None: never)
    total: Spend = Spend()
    final: dict[str, float] = Field(default_factory=dict)
    run_id: str | None = None  # the agent run, or the agent run whose workspace a black-box method used
    note: str = ""

    def until(self, target: str) -> Spend:
        """The spend until ``target`` was met; the whole budget when it never was."""
        return self.met_at.get(target) or self.total


class Results(BaseModel):
    simulated: str = SIMULATED
    trials_per_seed: int
    runs: list[MethodRun] = Field(default_factory=list)


# --- tasks and seeds ----------------------------------------------------------------------------------------------


def perf_targets(task: TaskSpec) -> dict[str, tuple[str, str, float]]:
    """target name -> (metric, workload, minimum) of the targets a benchmark measures."""
    return {t.name: (t.metric, t.workload, t.min) for t in task.targets if t.metric in PERF_METRICS and t.workload}


def seeded_task(task_path: Path, seed: int, out: Path) -> Path:
    """A copy of the task whose knee-measured workloads use benchmark seeds ``2s+1, 2s+2``."""
    task = load_task(task_path)
    knee = {t.workload for t in task.targets if t.metric == "throughput_at_knee"}
    lines = [f"# search_efficiency seed {seed} ({SIMULATED})", f"extends: {task_path.resolve()}"]
    if knee:
        lines += ["workloads:"] + [f"  {w}: {{knee_seeds: [{2 * seed + 1}, {2 * seed + 2}]}}" for w in sorted(knee)]
    path = out / "tasks" / f"{task.name}-s{seed}.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n")
    return path


# --- the agent ----------------------------------------------------------------------------------------------------


def run_agent(task_copy: Path, run_id: str) -> Path:
    """The playbook agent's run of ``task_copy`` (reused when it finished before)."""
    run_dir = Path("runs") / run_id
    if (run_dir / "summary.json").exists():
        console.print(f"  agent: reusing {run_dir}")
        return run_dir
    if run_dir.exists():
        raise SystemExit(f"error: {run_dir} exists but has no summary.json (an unfinished run): remove it")
    console.print(f"  agent: agent run {task_copy} --policy playbook --run-id {run_id}")
    cmd = [sys.executable, "-c", "from agent.cli import app; app()", "run", str(task_copy), "--policy", "playbook",
           "--run-id", run_id]  # fmt: skip
    done = subprocess.run(cmd, capture_output=True, text=True)
    if not (run_dir / "summary.json").exists():
        tail = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no output"]
        raise SystemExit(f"error: agent run {run_id} failed (exit {done.returncode}): {tail[0]}")
    return run_dir


def agent_course(task: TaskSpec, run_dir: Path, run_id: str, seed: int) -> MethodRun:
    """The agent's course from its checkpoints: after every step its spend and the best it had measured (the
    curve); a target is met at the first state whose *verified* best reaches it, and the end values are its
    verified bests (what it would hand over)."""
    from agent.graph import saved_states

    targets = {name: m for name, (_, _, m) in perf_targets(task).items()}
    result = MethodRun(method="agent", task=task.name, seed=seed, targets=targets, run_id=run_id,
                       metrics={n: m for n, (m, _, _) in perf_targets(task).items()})  # fmt: skip
    for state in saved_states(run_dir, run_id):
        b = state.budget
        spend = Spend(benchmark_runs=b.benchmark_runs, launches=b.trials, node_hours=b.node_hours)
        verified = {n: state.bests[n].value if n in state.bests and state.bests[n].verified else 0.0 for n in targets}
        measured = {n: max([t.metrics.get(n, 0.0) for t in state.trials] + [verified[n]]) for n in targets}
        for n, minimum in targets.items():
            if result.met_at.get(n) is None and verified[n] >= minimum:
                result.met_at[n] = spend
        point = Point(spend=spend, best=measured)
        if not result.points or result.points[-1].model_dump() != point.model_dump():
            result.points.append(point)
        result.total, result.final = spend, verified
    for n in targets:
        result.met_at.setdefault(n, None)
    return result


# --- the black-box methods ----------------------------------------------------------------------------------------


class Sampler:
    """Draws configurations of the space: TPE (told every measurement) or uniform random."""

    def __init__(self, method: str, space: SearchSpace, seed: int):
        self.method, self.space, self.rng = method, space, random.Random(seed)
        self.study = optuna.create_study(direction="maximize", sampler=optuna.samplers.TPESampler(seed=seed))
        self.known: dict[str, float] = {}  # canonical key -> the objective measured there
        self.trial: optuna.Trial | None = None

    def _uniform(self) -> Candidate:
        flags: dict[str, Any] = {}
        for k, values in self.space.flags.items():
            if k in SPEC_DEPENDENT and not flags.get(SPECULATIVE):
                continue
            flags[k] = self.rng.choice(values)
        return Candidate(flags=flags, env={k: self.rng.choice(v) for k, v in self.space.env.items()})

    def next(self) -> Candidate | None:
        """A valid configuration not measured yet (None: none found in ``MAX_ASKS`` draws)."""
        for _ in range(MAX_ASKS):
            if self.method == "tpe":
                trial = self.study.ask()
                cand = self.space.canonical(self.space._sample(trial))
                if cand is None or cand.key() in self.known:  # not counted: TPE hears what it would get
                    self.study.tell(trial, 0.0 if cand is None else self.known[cand.key()])
                    continue
                self.trial = trial
                return cand
            cand = self.space.canonical(self._uniform())
            if cand is not None and cand.key() not in self.known:
                return cand
        return None

    def tell(self, cand: Candidate, value: float) -> None:
        self.known[cand.key()] = value
        if self.method == "tpe" and self.trial is not None:
            self.study.tell(self.trial, value)
            self.trial = None


def objective(values: dict[str, float], targets: dict[str, float]) -> float:
    """The black-box methods' scalar: each target's share reached (capped at 1), plus a little of the uncapped."""
    shares = [values.get(n, 0.0) / m for n, m in targets.items() if m > 0]
    return sum(min(s, 1.0) for s in shares) + BONUS * sum(shares)


def measure(ctx, cand: Candidate, targets: dict[str, tuple[str, str, float]]) -> tuple[dict[str, float], Spend]:
    """Launch ``cand`` and measure every performance target on it: its values and what it cost."""
    from tools.bench import BenchInput, KneeInput, find_knee, run_benchmark
    from tools.server import LaunchInput, launch_server

    launched = launch_server(ctx, LaunchInput(flags=cand.flags, env=cand.env))
    spend = Spend(launches=1, node_hours=launched.cost.node_hours)
    values = {n: 0.0 for n in targets}
    if launched.status != "up":
        return values, spend
    for name, (metric, workload, _) in targets.items():
        if metric == "throughput_at_knee":
            m = find_knee(ctx, KneeInput(workload=workload, start_rate=1.0, resolution=0.1))
            values[name] = m.throughput_at_knee if m.ok else 0.0
        else:
            m = run_benchmark(ctx, BenchInput(workload=workload))
            values[name] = max((r.decode_tok_s for r in m.runs), default=0.0) if m.ok else 0.0
        spend.benchmark_runs += len(m.runs)
        spend.node_hours += m.cost.node_hours
    return values, spend


def black_box(method: str, task_copy: Path, task: TaskSpec, seed: int, agent_run: Path, trials: int,
              out: Path) -> MethodRun:  # fmt: skip
    """``trials`` launches chosen by ``method`` on a copy of the agent run's (patched) workspace."""
    from sandboxes.local import LocalSandbox
    from tools.context import ToolContext

    targets = perf_targets(task)
    mins = {n: m for n, (_, _, m) in targets.items()}
    result = MethodRun(method=method, task=task.name, seed=seed, targets=mins, run_id=agent_run.name,
                       metrics={n: m for n, (m, _, _) in targets.items()})  # fmt: skip
    run_dir = out / "blackbox" / f"{method}-{task.name}-s{seed}"
    if run_dir.exists():
        shutil.rmtree(run_dir)
    workspace = run_dir / "workspace"
    shutil.copytree(agent_run / "workspace", workspace, symlinks=True,
                    ignore=shutil.ignore_patterns(".bench", ".dayzero-pristine", ".dayzero-servers.json"))  # fmt: skip
    sampler = Sampler(method, SearchSpace(task), seed)
    job = f"se-{method}-s{seed}"
    sandbox = LocalSandbox(workspace.resolve(), run_id=job)
    ctx = ToolContext(task=task, engine_name="twin", engine=task.engines.twin, sandbox=sandbox, run_id=job,
                      run_dir=run_dir.resolve(), task_path=str(task_copy))  # fmt: skip
    spent, best = Spend(), {n: 0.0 for n in targets}
    result.points.append(Point(spend=spent, best=dict(best)))
    try:
        for i in range(trials):
            cand = sampler.next()
            if cand is None:
                result.note = f"the space held nothing new after {i} trials"
                break
            ctx.trial = i
            values, cost = measure(ctx, cand, targets)
            sampler.tell(cand, objective(values, mins))
            spent = Spend(benchmark_runs=spent.benchmark_runs + cost.benchmark_runs,
                          launches=spent.launches + cost.launches, node_hours=spent.node_hours + cost.node_hours)  # fmt: skip
            best = {n: max(best[n], values[n]) for n in targets}
            for n, minimum in mins.items():
                if result.met_at.get(n) is None and best[n] >= minimum:
                    result.met_at[n] = spent
            result.points.append(Point(spend=spent, best=dict(best), config=cand, values=values))
            shown = ", ".join(f"{n} {values[n]:.0f}" for n in targets)
            console.print(f"  {method} s{seed} #{i + 1}/{trials}: {shown}  (best {', '.join(f'{best[n]:.0f}' for n in best)})",
                          highlight=False)  # fmt: skip
    finally:
        if ctx.server is not None:
            sandbox.stop_server(ctx.server.handle)
        sandbox.close()
        shutil.rmtree(workspace, ignore_errors=True)  # the logs stay; the copy is large
    result.total, result.final = spent, best
    for n in mins:
        result.met_at.setdefault(n, None)
    return result


# --- the report ---------------------------------------------------------------------------------------------------


def _median_range(values: list[float], fmt: str) -> str:
    if not values:
        return "-"
    med = statistics.median(values)
    if min(values) == max(values):
        return format(med, fmt)
    return f"{format(med, fmt)} [{format(min(values), fmt)}-{format(max(values), fmt)}]"


def of_best_known(results: Results) -> dict[tuple[str, str, int, str], float]:
    """(task, method, seed, target) -> the run's end value as a share of the best any method reached on that
    task and seed (the same benchmark samples)."""
    known: dict[tuple[str, int, str], float] = {}
    for r in results.runs:
        for n, v in r.final.items():
            known[(r.task, r.seed, n)] = max(known.get((r.task, r.seed, n), 0.0), v)
    return {(r.task, r.method, r.seed, n): v / (known[(r.task, r.seed, n)] or 1.0)
            for r in results.runs for n, v in r.final.items()}  # fmt: skip


def table(results: Results) -> Table:
    """Method x task: per target the median [range] over seeds of the spend until met, and the end value."""
    share = of_best_known(results)
    t = Table(title=f"Search efficiency ({SIMULATED}); median \\[min-max] over seeds; not met = the whole budget",
              show_lines=True)  # fmt: skip
    for col in ("task", "method", "seeds", "target", "met", "runs until met", "launches until met",
                "node-h until met", "best at end", "of best known"):  # fmt: skip
        t.add_column(col, justify="left" if col in ("task", "method", "target") else "right")
    groups: dict[tuple[str, str], list[MethodRun]] = {}
    for r in results.runs:
        groups.setdefault((r.task, r.method), []).append(r)
    for (task, method), runs in sorted(groups.items(), key=lambda kv: (kv[0][0], METHODS.index(kv[0][1]))):
        for n in runs[0].targets:
            until = [r.until(n) for r in runs]
            met = sum(r.met_at.get(n) is not None for r in runs)
            t.add_row(task, method, str(len(runs)), f"{n} >= {runs[0].targets[n]:g}", f"{met}/{len(runs)}",
                      _median_range([s.benchmark_runs for s in until], ".0f"),
                      _median_range([s.launches for s in until], ".0f"),
                      _median_range([s.node_hours for s in until], ".2f"),
                      _median_range([r.final.get(n, 0.0) for r in runs], ".1f"),
                      _median_range([100 * share[(task, method, r.seed, n)] for r in runs], ".1f") + " %")  # fmt: skip
    return t


def goals(results: Results, default_task: str) -> list[str]:
    """The issue's goals, checked on what was measured."""
    lines = []
    agent = [r for r in results.runs if r.method == "agent" and r.task == default_task]
    tpe = [r for r in results.runs if r.method == "tpe" and r.task == default_task]
    if agent:
        def all_met(r: MethodRun) -> Spend:
            spends = [r.until(n) for n in r.targets]
            return Spend(benchmark_runs=max(s.benchmark_runs for s in spends), launches=max(s.launches for s in spends),
                         node_hours=max(s.node_hours for s in spends))  # fmt: skip

        runs = statistics.median(all_met(r).benchmark_runs for r in agent)
        hours = statistics.median(all_met(r).node_hours for r in agent)
        met = all(all(r.met_at.get(n) for n in r.targets) for r in agent)
        ok = met and runs <= 30 and hours <= 3
        lines.append(f"agent on {default_task}: every target met in {runs:.0f} runs, {hours:.2f} node-h (median; "
                     f"goal <= 30 runs and <= 3 node-h): {'met' if ok else 'NOT met'}")  # fmt: skip
        if tpe:
            tpe_runs = statistics.median(all_met(r).benchmark_runs for r in tpe)
            ratio = tpe_runs / runs if runs else float("inf")
            tpe_met = sum(all(r.met_at.get(n) for n in r.targets) for r in tpe)
            bound = "" if tpe_met == len(tpe) else f"; TPE met them in {tpe_met} of {len(tpe)} seeds: a lower bound"
            lines.append(f"TPE's median runs until every target met: {tpe_runs:.0f} (not met = its budget), "
                         f"{ratio:.1f}x the agent's{bound} (goal >= 3x): {'met' if ratio >= 3 else 'NOT met'}")  # fmt: skip
    share = of_best_known(results)
    for task in sorted({r.task for r in results.runs}):
        for method in METHODS:
            mine = [v for k, v in share.items() if k[0] == task and k[1] == method]
            if mine:
                worst = min(mine)
                lines.append(f"{method} on {task}: every end value within {100 * (1 - worst):.1f} % of the best known "
                             f"(goal <= 2 %): {'met' if worst >= 0.98 else 'NOT met'}")  # fmt: skip
    return lines


def plot(results: Results, path: Path) -> None:
    """Best-so-far throughput against benchmark runs, the median over seeds per method, one panel per task."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    tasks = sorted({r.task for r in results.runs})
    fig, axes = plt.subplots(1, len(tasks), figsize=(max(7.5, 6 * len(tasks)), 5), squeeze=False)
    for ax, task in zip(axes[0], tasks, strict=True):
        runs = [r for r in results.runs if r.task == task]
        target = next((n for n, m in runs[0].metrics.items() if m == "throughput_at_knee"), None)
        if target is None:
            continue
        for method in METHODS:
            mine = [r for r in runs if r.method == method]
            if not mine:
                continue
            grid = list(range(max(r.total.benchmark_runs for r in mine) + 1))  # each method up to its own budget
            curves = [[max((p.best.get(target, 0.0) for p in r.points if p.spend.benchmark_runs <= x), default=0.0)
                       for x in grid] for r in mine]  # fmt: skip
            ax.step(grid, [statistics.median(c[i] for c in curves) for i in range(len(grid))], where="post",
                    label=f"{method} ({len(mine)} seed(s))")  # fmt: skip
        ax.axhline(runs[0].targets[target], color="grey", linestyle="--", linewidth=1, label="target")
        ax.set(title=task, xlabel="benchmark runs", ylabel=f"best {target} so far (tok/s, median over seeds)")
        ax.legend(loc="lower right")
    fig.suptitle(f"Best-so-far throughput at the knee against benchmark runs\n{SIMULATED}")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


# --- the command --------------------------------------------------------------------------------------------------


def main(
    tasks: Annotated[list[Path] | None, typer.Option("--tasks", help="a task file (repeat; default: 3 tasks)")] = None,
    seeds: Annotated[int, typer.Option("--seeds", min=1, help="seeds per task")] = 5,
    first_seed: Annotated[int, typer.Option("--first-seed", min=0, help="the first seed (split a measurement)")] = 0,
    trials: Annotated[int, typer.Option("--trials", min=1, help="launches per seed for each black-box method")] = 60,
    methods: Annotated[str, typer.Option("--methods", help="comma-separated: agent,tpe,random")] = ",".join(METHODS),
    out: Annotated[Path, typer.Option("--out", help="where results, table and plot go")] = Path("runs/search_efficiency"),
    report_only: Annotated[bool, typer.Option("--report-only", help="redo table and plot from <out>/results.json")] = False,
    include: Annotated[list[Path] | None, typer.Option("--include", help="with --report-only: add the runs of "
                                                       "another measurement's folder (repeat)")] = None,  # fmt: skip
) -> None:
    """Measure the agent's, TPE's and random search's spend until each target is met (simulated)."""
    if report_only:
        merged: Results | None = None
        for folder in [out, *(include or [])]:
            saved = folder / "results.json"
            if not saved.exists():
                console.print(f"error: no {saved}: run the measurement first")
                raise typer.Exit(2)
            part = Results.model_validate_json(saved.read_text())
            if merged is not None and part.trials_per_seed != merged.trials_per_seed:
                console.print(f"error: {saved} has {part.trials_per_seed} trials per seed, {out} has "
                              f"{merged.trials_per_seed}: not one measurement")  # fmt: skip
                raise typer.Exit(2)
            merged = part if merged is None else Results(trials_per_seed=merged.trials_per_seed,
                                                         runs=merged.runs + part.runs)  # fmt: skip
        # one run per method, task and seed: a later folder's measurement replaces an earlier one's
        latest = {(r.method, r.task, r.seed): r for r in merged.runs}
        if len(latest) < len(merged.runs):
            console.print(f"{len(merged.runs) - len(latest)} run(s) measured again in a later folder: the later kept")
        report(Results(trials_per_seed=merged.trials_per_seed, runs=list(latest.values())), out)
        return
    chosen = [m.strip() for m in methods.split(",") if m.strip()]
    if bad := [m for m in chosen if m not in METHODS]:
        console.print(f"error: unknown method(s) {', '.join(bad)} (known: {', '.join(METHODS)})")
        raise typer.Exit(2)
    paths = [Path(p) for p in (tasks or DEFAULT_TASKS)]
    if missing := [str(p) for p in paths if not p.exists()]:
        console.print(f"error: no such task file: {', '.join(missing)}")
        raise typer.Exit(2)
    out.mkdir(parents=True, exist_ok=True)
    results = Results(trials_per_seed=trials)
    console.print(f"[bold]search efficiency[/] ({SIMULATED}): {len(paths)} task(s) x {seeds} seed(s), "
                  f"{trials} launches per black-box seed, methods {', '.join(chosen)}")  # fmt: skip
    for path in paths:
        base = load_task(path)
        for seed in range(first_seed, first_seed + seeds):
            task_copy = seeded_task(path, seed, out)
            task = load_task(task_copy)
            console.print(f"[bold]{base.name}[/] seed {seed} (knee seeds {2 * seed + 1}, {2 * seed + 2})")
            run_id = f"se-{base.name}-s{seed}"
            agent_dir = run_agent(task_copy, run_id)  # the black-box methods start from its patched workspace
            for method in chosen:
                r = (agent_course(task, agent_dir, run_id, seed) if method == "agent"
                     else black_box(method, task_copy, task, seed, agent_dir, trials, out))  # fmt: skip
                results.runs.append(r)
                met = ", ".join(f"{n}: {'met at ' + str(s.benchmark_runs) + ' runs' if s else 'not met'}"
                                for n, s in r.met_at.items())  # fmt: skip
                console.print(f"  {method}: {met}; end {', '.join(f'{n} {v:.1f}' for n, v in r.final.items())}")
                (out / "results.json").write_text(results.model_dump_json(indent=1))
    report(results, out)


def report(results: Results, out: Path) -> None:
    """Print the table and the goals; write them and the plot under ``out``. The first task measured is the
    default one the goals name."""
    if not results.runs:
        console.print("nothing measured")
        return
    rendered = table(results)
    Console(width=max(console.width, 170)).print(rendered)
    lines = goals(results, results.runs[0].task)
    for line in lines:
        console.print(line, highlight=False)
    with (out / "table.txt").open("w") as fh:
        Console(file=fh, width=200).print(rendered)
        fh.write("\n".join(lines) + "\n")
    plot(results, out / "best_so_far.png")
    console.print(f"wrote {out / 'results.json'}, {out / 'table.txt'}, {out / 'best_so_far.png'}")


if __name__ == "__main__":
    typer.run(main)
