"""The best configuration the twin allows for a task's throughput target, and the agent's end value as a share of it.

    python -m tests.benchmarks.best_knee                                    # the default task
    python -m tests.benchmarks.best_knee --task tasks/qwen3_next_80b_fp8_mi355x.yaml --run runs/<id>

Every figure is simulated: the dayzero digital twin, not a real node.

Knees are measured the way the agent measures them, through the same tools on a served twin: ``launch_server``, then
``find_knee`` on the target's workload with the workload's ``knee_seeds`` at resolution 0.1 req/s. The agent's best
(from a finished run of the task: ``--run``, else a playbook run started here and reused afterwards) gets a full
knee search from 1 req/s; every other configuration is measured as the agent's search measures a candidate, from
just above the incumbent's knee rate (``min_rate``): one that does not sustain it costs one run and does not beat
it, one that does gets its own knee. The launches run on a copy of that run's workspace (its fixed sources and its
tuned MoE table), so a configuration serves here exactly as it would in the agent's run.

What it covers (the whole space is too large: the default task's holds some 10^6 configurations): a local search
over the space as ``agent.search.SearchSpace`` defines it (knobs, constraints, canonical form), from the agent's
best, that moves to the first configuration that beats the incumbent among

1. every one-knob change (the layout is one knob: every TP x DP split, with and without DP attention, so every
   layout is measured with the incumbent's other settings), then
2. every two-knob change (every pair of knobs, every pair of their values; speculative decoding's flags are knobs
   of their own, so a pair reaches every chain depth),

and starts over from it, until neither holds a better configuration. It ends at a configuration no one- or two-knob
change improves. What a three-knob change alone would reach is not covered. Measurements are cached in
``<out>/measured.json`` by configuration, so a second invocation measures only what is new.

Prints the best knee, its flags and environment, every improvement on the way, what it measured, and the agent's end
value as a share of the best; writes ``<out>/best.json``.
"""

from __future__ import annotations

import itertools
import json
import resource
import shutil
import time
from pathlib import Path
from typing import Annotated

import typer
from pydantic import BaseModel, Field
from rich.console import Console

from agent.search import Candidate, SearchSpace
from tasks.spec import TaskSpec, load_task

SIMULATED = "simulated: dayzero digital twin, not a real node"
RESOLUTION = 0.1  # req/s: the agent's knee resolution
GROWTH = 1.1  # the agent's growth when it starts near the knee
console = Console()


class Knee(BaseModel):
    """One configuration measured: its knee (None: it does not sustain ``floor``, or did not come up)."""

    candidate: Candidate
    up: bool
    knee_rate: float | None = None
    value: float = 0.0
    floor: float | None = None  # measured from just above this rate: no knee at or below it was looked for
    why: str = ""
    node_hours: float = 0.0


class Store(BaseModel):
    """What was measured, by configuration (``Candidate.key``)."""

    task: str
    seeds: list[int]
    knees: dict[str, Knee] = Field(default_factory=dict)


class Bench:
    """Launches and knee searches on a served twin, cached by configuration."""

    def __init__(self, task: TaskSpec, task_path: Path, run: Path, out: Path):
        from sandboxes.local import LocalSandbox
        from tools.context import ToolContext

        self.target = next(t for t in task.targets if t.metric == "throughput_at_knee")
        self.seeds = list(task.workloads[self.target.workload].knee_seeds)
        self.path = out / "measured.json"
        saved = Store.model_validate_json(self.path.read_text()) if self.path.exists() else None
        fresh = Store(task=task.name, seeds=self.seeds)
        self.store = saved if saved and (saved.task, saved.seeds) == (fresh.task, fresh.seeds) else fresh
        self.workspace = out / "workspace"
        if self.workspace.exists():
            shutil.rmtree(self.workspace)
        shutil.copytree(run / "workspace", self.workspace, symlinks=True,
                        ignore=shutil.ignore_patterns(".bench", ".dayzero-pristine", ".dayzero-servers.json"))  # fmt: skip
        self.sandbox = LocalSandbox(self.workspace.resolve(), run_id="best-knee")
        self.ctx = ToolContext(task=task, engine_name="twin", engine=task.engines.twin, sandbox=self.sandbox,
                               run_id="best-knee", run_dir=out.resolve(), task_path=str(task_path))  # fmt: skip
        self.launches = self.runs = 0
        self.node_hours = 0.0

    def knee(self, cand: Candidate, floor: float | None) -> Knee:
        """``cand``'s knee, or that it does not beat ``floor`` (None: a full search from 1 req/s)."""
        from tools.bench import KneeInput, find_knee
        from tools.server import LaunchInput, launch_server

        known = self.store.knees.get(cand.key())
        if known is not None and (not known.up or known.knee_rate is not None or
                                  (floor is not None and known.floor is not None and known.floor <= floor)):
            return known
        self.ctx.trial += 1
        launched = launch_server(self.ctx, LaunchInput(flags=cand.flags, env=cand.env))
        self.launches += 1
        cost = launched.cost.node_hours
        if launched.status != "up":
            why = launched.diagnosis.summary if launched.diagnosis else launched.summary
            result = Knee(candidate=cand, up=False, why=why[:200], node_hours=cost)
        else:
            start = round(floor + RESOLUTION, 3) if floor is not None else 1.0
            args = KneeInput(workload=self.target.workload, start_rate=start, resolution=RESOLUTION,
                             growth=GROWTH if floor is not None else 1.5,
                             min_rate=start if floor is not None else None)  # fmt: skip
            m = find_knee(self.ctx, args)
            self.runs += len(m.runs)
            cost += m.cost.node_hours
            result = Knee(candidate=cand, up=True, knee_rate=m.knee_rate if m.ok else None,
                          value=m.throughput_at_knee if m.ok else 0.0, floor=None if m.ok else floor,
                          why="" if m.ok else m.summary[:200], node_hours=cost)  # fmt: skip
        self.node_hours += cost
        self.store.knees[cand.key()] = result
        self.path.write_text(self.store.model_dump_json(indent=1))
        return result

    def close(self) -> None:
        if self.ctx.server is not None:
            self.sandbox.stop_server(self.ctx.server.handle)
        self.sandbox.close()
        shutil.rmtree(self.workspace, ignore_errors=True)  # the logs stay; the copy is large


def one_knob(space: SearchSpace, best: Candidate) -> list[Candidate]:
    """Every valid one-knob change of ``best``."""
    return [c for moves in space.knob_moves(best).values() for c in moves]


def two_knob(space: SearchSpace, best: Candidate) -> list[Candidate]:
    """Every valid change of two knobs of ``best`` at once (each to another value than the best's), each once."""
    settings = {k: space.settings(best, k) for k in space.knob_order()}
    seen = {best.key()}
    out = []
    for a, b in itertools.combinations(settings, 2):
        for sa in settings[a]:
            if (one := space.apply(best, sa)) is None or one.key() == best.key():
                continue
            for sb in settings[b]:
                cand = space.apply(best, sa, sb)
                alone = space.apply(best, sb)
                if cand is None or alone is None or alone.key() == best.key() or cand.key() in seen:
                    continue
                seen.add(cand.key())
                out.append(cand)
    return out


def local_search(bench: Bench, space: SearchSpace, start: Candidate) -> tuple[Knee, list[Knee]]:
    """First-improvement search over one-, then two-knob changes until neither improves; the best and the path."""
    best = bench.knee(start, None)
    path = [best]
    if best.knee_rate is None:
        raise SystemExit(f"error: the agent's best has no knee here ({best.why})")
    console.print(f"start: {best.value:.1f} tok/s at {best.knee_rate} req/s  {describe(best.candidate)}", highlight=False)
    improved = True
    while improved:
        improved = False
        for size, moves in (("one", one_knob), ("two", two_knob)):
            cands = moves(space, best.candidate)
            console.print(f"  {len(cands)} {size}-knob changes of the incumbent", highlight=False)
            for cand in cands:
                k = bench.knee(cand, best.knee_rate)
                if k.knee_rate is not None and k.knee_rate > best.knee_rate and k.value > best.value:
                    console.print(f"  better ({size}-knob): {k.value:.1f} tok/s at {k.knee_rate} req/s  "
                                  f"{describe(k.candidate, best.candidate)}", highlight=False)  # fmt: skip
                    best, improved = k, True
                    path.append(k)
                    break
            if improved:
                break
    return best, path


def describe(cand: Candidate, base: Candidate | None = None) -> str:
    """The flags and environment of ``cand`` (with ``base``: only what differs from it)."""
    base = base or Candidate()
    parts = [f"{k}={v}" for k, v in cand.flags.items() if base.flags.get(k) != v]
    parts += [f"no {k}" for k in base.flags if k not in cand.flags]
    parts += [f"{k}={cand.env.get(k) or '(unset)'}" for k in sorted({*cand.env, *base.env})
              if cand.env.get(k) != base.env.get(k)]  # fmt: skip
    return ", ".join(parts) or "(the same)"


def agent_best(run: Path) -> tuple[Candidate, float]:
    """A finished run's throughput best and its end value. The environment is the one its launch was given
    (``{workspace}`` placeholders as written: the summary holds them resolved to where the run was)."""
    summary = json.loads((run / "summary.json").read_text())
    best = summary["best_config"]
    env = best.get("env", {})
    for line in (run / "trace.jsonl").read_text().splitlines():
        event = json.loads(line)
        if event.get("kind") == "tool_call" and event.get("tool") == "launch_server" and \
                (event.get("input") or {}).get("flags") == best["flags"] and \
                set(event["input"].get("env") or {}) == set(env):  # fmt: skip
            env = event["input"]["env"]
    target = next(t for t in summary["targets"].values() if t["metric"] == "throughput_at_knee")
    return Candidate(flags=best["flags"], env=env), float(target["achieved"])


def _cpu() -> float:
    """CPU seconds of this process and of the twin's processes it waited for."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def main(
    task_path: Annotated[Path, typer.Option("--task", help="the task file")] = Path("tasks/glm52_mi355x.yaml"),
    run: Annotated[Path | None, typer.Option("--run", help="a finished agent run of the task (default: start one)")] = None,
    out: Annotated[Path, typer.Option("--out", help="where the cache, logs and best.json go")] = Path("runs/best_knee"),
) -> None:
    """Search for the best throughput knee the twin allows (simulated) and compare the agent's end value to it."""
    task = load_task(task_path)
    if not any(t.metric == "throughput_at_knee" for t in task.targets):
        console.print(f"error: {task_path} has no throughput_at_knee target")
        raise typer.Exit(2)
    if run is None:
        from tests.benchmarks.search_efficiency import run_agent

        run = run_agent(task_path, f"best-knee-{task.name}")
    start, agent_value = agent_best(run)
    out = out / task.name
    out.mkdir(parents=True, exist_ok=True)
    space = SearchSpace(task)
    bench = Bench(task, task_path, run, out)
    t0 = _cpu(), time.perf_counter()
    console.print(f"[bold]best knee[/] of {task.name} ({SIMULATED}); agent run {run}: {agent_value:.1f} tok/s")
    try:
        best, path = local_search(bench, space, start)
    finally:
        bench.close()
    cpu, wall = _cpu() - t0[0], time.perf_counter() - t0[1]
    share = agent_value / best.value
    console.print(f"best knee: {best.value:.1f} tok/s at {best.knee_rate} req/s ({SIMULATED})", highlight=False)
    console.print(f"  flags {best.candidate.flags}", highlight=False)
    console.print(f"  env {best.candidate.env}", highlight=False)
    console.print(f"the agent's best, measured here: {path[0].value:.1f} tok/s; its run ended at {agent_value:.1f} "
                  f"tok/s = {100 * share:.1f} % of the best (goal >= 98 %: {'met' if share >= 0.98 else 'NOT met'})",
                  highlight=False)  # fmt: skip
    measured = list(bench.store.knees.values())
    console.print(f"{len(measured)} configurations known ({sum(k.up for k in measured)} came up); this invocation "
                  f"launched {bench.launches}, {bench.runs} benchmark runs, {bench.node_hours:.1f} simulated "
                  f"node-hours, {wall:.0f} s wall, {cpu:.0f} s CPU (with the twin's processes)", highlight=False)  # fmt: skip
    (out / "best.json").write_text(json.dumps({
        "simulated": SIMULATED, "task": task.name, "best": best.model_dump(), "path": [k.model_dump() for k in path],
        "agent_run": str(run), "agent_value": agent_value, "agent_share": share}, indent=1))  # fmt: skip


if __name__ == "__main__":
    typer.run(main)
