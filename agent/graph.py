"""The agent loop as a LangGraph ``StateGraph``: decide -> act -> assess -> verify -> commit -> (decide | finish).

Nodes are plain functions of the state (``AgentState``) and the run's live objects (``Run``): the policy
proposes tool calls (decide), the tools run them (act), trials, bests and the budget are updated (assess), a
patch counts once a relaunch and a benchmark confirm it and a best once the accuracy check passes (verify),
verified patches become commits (commit). State is checkpointed to SQLite after every node, durably.
"""

from __future__ import annotations

import json
import sqlite3
import time
from pathlib import Path
from typing import Any

from langgraph.graph import END, START, StateGraph
from pydantic import ValidationError

from tools.git_ops import Evidence
from tools.server import LaunchInput

from .approvals import Answer, Gate, describe
from .checkpoints import ItemSaver, ItemSerializer
from .outcomes import after_targets_spent, apply_observations, bests_met, budget_exhausted
from .run import Run
from .secrets import Redactor
from .state import AgentState, Best, Observation, TargetsMet

RECURSION_LIMIT = 100_000


class AwaitingApproval(Exception):  # noqa: N818 - a state the run is in, not a failure
    """The run stopped at a gate (``agent/approvals.py``) that has no answer yet: its checkpoint holds the step."""

    def __init__(self, gate: Gate, run_id: str) -> None:
        super().__init__(gate.what)
        self.gate, self.run_id = gate, run_id

    def line(self) -> str:
        """What the person is told: the gate, and the commands that answer it and go on."""
        g, r = self.gate, self.run_id
        return (f"run {r} waits for approval of {g.kind} gate {g.id}: {g.what}; see agent approvals {r}, answer with "
                f"agent approve {r} {g.id} --yes (or --no --reason TEXT), then agent resume {r}")


def build_graph(run: Run):
    def decide(state: AgentState) -> dict[str, Any]:
        if reason := budget_exhausted(state, run):
            return {"done": True, "finish_reason": reason, "pending": []}
        decision = run.policy.decide(state, run.policy_ctx)
        step = state.step + 1
        calls = []
        for i, call in enumerate(decision.calls):  # ids fixed before acting: a resumed act reuses results
            calls.append(call.model_copy(update={"call_id": call.call_id or f"s{step}c{i}"}))
        run.trace.emit("decision", step=step, policy=run.policy.name, stage=decision.stage,
                       rationale=decision.rationale, proposed_calls=[{"tool": c.tool, "input": c.args} for c in calls],
                       annotations=decision.annotations)  # fmt: skip
        budget = state.budget.model_copy(update={"llm_tokens": state.budget.llm_tokens + decision.llm_tokens,
                                                 "llm_requests": state.budget.llm_requests + decision.llm_requests,
                                                 "wall_seconds": state.budget.wall_seconds + decision.wall_seconds})
        update: dict[str, Any] = {"pending": calls, "rationale": decision.rationale, "stage": decision.stage,
                                  "memo": decision.memo, "step": step, "budget": budget,
                                  "annotations": decision.annotations}  # fmt: skip
        if decision.done:
            update.update(done=True, finish_reason=decision.rationale or "the policy finished")
        return update

    def held(state: AgentState, call_id: str, tool: str, args: dict[str, Any]) -> Answer | None:
        """The answer to the gate holding this action back, if the run holds it (the graph stops here while
        none is given); None when no gate holds it."""
        if run.gates is None or not run.gates.holds(tool):
            return None
        gate = describe(call_id, tool, args, step=state.step, why=state.rationale, ctx=run.ctx, state=state)
        return run.gates.hold(gate)

    def act(state: AgentState) -> dict[str, Any]:
        observations = []
        approvals = dict(state.approvals)
        rejected: str | None = None
        for call in state.pending:
            record = run.recorded(call.call_id)
            if call.tool == "commit" and "approvals" in call.args:  # who approved is the run's to say, never a policy's
                call = call.model_copy(update={"args": {k: v for k, v in call.args.items() if k != "approvals"}})
            if record is None:
                args = call.args.get("__raw_arguments__", call.args) if isinstance(call.args, dict) else call.args
                answer = None if rejected else held(state, call.call_id, call.tool, args)
                if answer is not None:
                    approvals[call.call_id] = answer.words()
                if rejected or (answer is not None and not answer.approved):
                    # a rejection is the action's outcome: the policy reads it as it reads a failure; the calls
                    # after it in the same decision are not made (they were decided with it)
                    error = f"not run: {rejected}" if rejected else f"{call.tool} {answer.words()}"
                    rejected = rejected or f"{call.tool} ({call.call_id}) before it in this decision was rejected"
                    observations.append(Observation(call_id=call.call_id, tool=call.tool, args=call.args, ok=False,
                                                    error=error, step=state.step,
                                                    result={"rejected": answer.model_dump() if answer else None}))
                    continue
                record = run.call(call)
            elif record.tool == "launch_server" and record.ok and not serves(run.ctx.server, record.input):
                # killed after this launch was recorded: its server went with the old process, and the calls
                # after it need one (the trace keeps the first launch's figures, the relaunch is its own call).
                # The server up may be another: the one the state had before this step, launched again on resume
                # (``_server_again``); the calls after this launch must not measure that one
                run.call(call.model_copy(update={"call_id": run.resumed_id(call.call_id)}))
            observations.append(Observation(call_id=record.call_id, tool=record.tool, args=record.input,
                                            ok=record.ok, error=record.error, result=record.result,
                                            step=state.step))  # fmt: skip
        return {"observations": observations, "pending": [], "approvals": approvals}

    def assess(state: AgentState) -> dict[str, Any]:
        update = apply_observations(state, run)
        if update["trials"]:
            run.ctx.trial = update["trials"][-1].id  # commits name the trial that verified them
        return update  # bests change only in verify, which decides whether the targets are met

    def verify(state: AgentState) -> dict[str, Any]:
        patches = [p.model_copy() for p in state.patches]
        trial = state.current_trial()
        for p in patches:
            # verified by a launch of the configuration that crashed (so the fix was exercised) that came up and
            # served a benchmark
            crashed = next((t for t in state.trials if t.id == p.crash_trial), None)
            if (p.status == "applied" and trial and trial.step > p.step_applied and trial.status == "up"
                    and (crashed is None or crashed.flags == trial.flags)
                    and (trial.metrics or trial.served)):  # fmt: skip
                metric = ", ".join(f"{k} {v:.1f}" for k, v in trial.metrics.items()) or "served the benchmark"
                how = f" with {', '.join(trial.pristine)} as released" if trial.pristine else ""
                p.status, p.after = "verified", f"trial {trial.id} launched{how} and benchmarked: {metric}"
        update: dict[str, Any] = {"patches": patches}
        candidates = dict(state.candidates)
        bests = dict(state.bests)
        trials = [t.model_copy() for t in state.trials]
        if candidates and trial and trial.status == "up" and run.task.accuracy:
            current = trials[-1]
            if current.accuracy is None and any(c.trial == current.id for c in candidates.values()):
                budget = state.budget
                if state.server_flags != trial.flags or run.ctx.server is None:
                    # a resumed run (killed between the benchmark and this check) or a policy that stopped the
                    # server: the candidate is still checked, on its own configuration launched again
                    cid = f"s{state.step}relaunch{trial.id}"
                    if run.recorded(cid) is not None and run.ctx.server is None:
                        cid = run.resumed_id(cid)  # killed after this relaunch: its server went with the process
                    rec = run.call_tool("launch_server", {"flags": trial.flags, "env": trial.env,
                                                          "pristine": trial.pristine}, call_id=cid)  # fmt: skip
                    budget = run.charge(budget, rec)
                    if rec.ok:
                        update.update(server_flags=trial.flags, server_env=trial.env)
                rec = run.call_tool("run_eval", {"suite": run.task.accuracy.suite}, call_id=f"s{state.step}eval")
                current.accuracy = rec.result.get("accuracy")
                current.accuracy_ok = bool(rec.ok and rec.result.get("within_tolerance"))
                update["budget"] = run.charge(budget, rec)
                if current.accuracy is not None:
                    delta = rec.result.get("delta")
                    if delta is not None:
                        acc = Best(target="accuracy", value=delta, trial=current.id, flags=current.flags,
                                   env=current.env, verified=current.accuracy_ok)  # fmt: skip
                        for t in run.task.targets:
                            if t.metric == "accuracy_delta" and (t.name not in bests or delta < bests[t.name].value):
                                bests[t.name] = acc.model_copy(update={"target": t.name})
            for name, cand in list(candidates.items()):
                owner = next((t for t in trials if t.id == cand.trial), None)
                if owner is None or owner.accuracy_ok is None:
                    continue
                if owner.accuracy_ok:
                    bests[name] = cand.model_copy(update={"verified": True})
                del candidates[name]
        update.update(candidates=candidates, bests=bests, trials=trials)
        merged = state.model_copy(update=update)
        if not merged.done and bests_met(merged, run.task):
            if merged.targets_met is None:  # the targets are a floor: note what reaching them cost, go on
                b = merged.budget
                met = TargetsMet(step=merged.step, node_hours=b.node_hours, benchmark_runs=b.benchmark_runs,
                                 trials=b.trials, values={k: v.value for k, v in merged.bests.items()})  # fmt: skip
                update["targets_met"] = met
                merged = merged.model_copy(update={"targets_met": met})
            if spent := after_targets_spent(merged, run.task):
                update.update(done=True, finish_reason="all targets met", stopped_because=spent)
        return update

    def commit(state: AgentState) -> dict[str, Any]:
        patches = [p.model_copy() for p in state.patches]
        approvals = dict(state.approvals)
        for p in patches:  # one commit per verified patch, with its own files and evidence
            if p.status != "verified":
                continue
            before = f"trial {p.crash_trial} crashed: {p.reason}" if p.crash_trial else p.reason
            args = {"title": p.title[:72], "what_failed": p.reason, "root_cause": p.root_cause,
                    "change": p.change, "excerpt": p.excerpt, "diff": p.diff or None,
                    "evidence": Evidence(before=before, after=p.after or "").model_dump(),
                    "patch_id": f"{run.run_id}/{p.id}", "files": sorted(p.files)}  # fmt: skip
            cid = f"s{state.step}commit{p.id}"
            if p.approval:
                args["approvals"] = [f"the change {p.approval}"]
            if run.recorded(cid) is None and (answer := held(state, cid, "commit", args)) is not None:
                approvals[cid] = answer.words()
                if not answer.approved:  # the patch stays in the workspace, verified, and is never committed
                    p.status, p.after = "rejected", f"{p.after or ''}; its commit was {answer.words()}".lstrip("; ")
                    continue
                args["approvals"] = [*args.get("approvals", []), f"the commit {answer.words()}"]
            rec = run.call_tool("commit", args, call_id=cid)
            if rec.ok:
                p.status, p.commits = "committed", [c["sha"] for c in rec.result.get("commits", [])]
        return {"patches": patches, "approvals": approvals}

    def finish(state: AgentState) -> dict[str, Any]:
        update: dict[str, Any] = {"done": True}
        if bests_met(state, run.task) and state.finish_reason != "all targets met":
            # met, then kept improving until the policy or the after-targets budget stopped
            update.update(finish_reason="all targets met", stopped_because=state.finish_reason)
            state = state.model_copy(update=update)
        run.finish(state)
        return update

    g = StateGraph(AgentState)
    for name, fn in (("decide", decide), ("act", act), ("assess", assess), ("verify", verify),
                     ("commit", commit), ("finish", finish)):  # fmt: skip
        g.add_node(name, fn)
    g.add_edge(START, "decide")
    g.add_conditional_edges("decide", lambda s: "finish" if s.done and not s.pending else "act")
    g.add_edge("act", "assess")
    g.add_edge("assess", "verify")
    g.add_edge("verify", "commit")
    g.add_conditional_edges("commit", lambda s: "finish" if s.done else "decide")
    g.add_edge("finish", END)
    return g


# The state's types, registered with LangGraph's serializer: a checkpoint names them, and a later LangGraph loads
# only the types it was told about (unregistered ones are deserialized with a warning today, refused tomorrow).
_STATE_TYPES = ("AgentState", "Budget", "Best", "Call", "Interactivity", "Observation", "Patch", "TargetsMet", "Trial")


def serializer(conn: sqlite3.Connection | None = None, redactor: Redactor | None = None) -> ItemSerializer:
    """LangGraph's serializer, allowed to rebuild exactly the state's own types, storing the items of the
    state's growing collections once in ``conn`` (``agent/checkpoints.py``), masking ``redactor``'s secrets."""
    return ItemSerializer(conn, redactor, allowed_msgpack_modules=[("agent.state", name) for name in _STATE_TYPES])


def checkpointer(run_dir: Path, redactor: Redactor | None = None) -> ItemSaver:
    """The run's checkpoints (``checkpoints.sqlite``); with ``redactor``, no secret of it is stored."""
    conn = sqlite3.connect(run_dir / "checkpoints.sqlite", check_same_thread=False)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=FULL")
    return ItemSaver(conn, serde=serializer(conn, redactor))


def saved_states(run_dir: Path, run_id: str) -> list[AgentState]:
    """Every state the run checkpointed, oldest first, read from ``checkpoints.sqlite`` without opening it for
    writing or running anything (empty when there is none)."""
    path = run_dir / "checkpoints.sqlite"
    if not path.exists():
        return []
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, check_same_thread=False)
    try:
        saver = ItemSaver(conn, serde=serializer(conn))
        history = list(saver.list({"configurable": {"thread_id": run_id}}))
    finally:
        conn.close()
    values = [h.checkpoint["channel_values"] for h in reversed(history)]
    return [AgentState.model_validate(v) for v in values if "run_id" in v]


def saved_state(run_dir: Path, run_id: str, step: int | None = None) -> AgentState | None:
    """The last state the run checkpointed, or with ``step`` the last one of that step (after its commit node,
    or its finish); None when there is none."""
    states = saved_states(run_dir, run_id)
    if step is not None:
        states = [s for s in states if s.step == step]
    return states[-1] if states else None


def serves(server: Any, launch: dict[str, Any]) -> bool:
    """Whether ``server`` (the run's, or None) is what the recorded ``launch_server`` input started: the same flags,
    environment and files launched as released."""
    if server is None:
        return False
    try:
        asked = LaunchInput.model_validate(launch)
    except ValidationError:  # not a launch this run could have made: launch it again
        return False
    return (server.flags, server.env, list(server.pristine)) == (dict(asked.flags), dict(asked.env), list(asked.pristine))


def _server_again(run: Run, state: AgentState) -> dict[str, Any]:
    """The state's server on resume. The previous process may have died with a server up: it went with the
    process, so the configuration that is up by the state (its observations not yet assessed included) is
    launched again, as it was launched (flags, environment, files as released), as the run's own call (not a
    trial: the state already counts it). If that fails, the state forgets the server and the policy decides from
    there."""
    # killed between act and assess: the last calls' results are in the state, not yet what they mean
    unassessed = bool(state.observations) and [h.call_id for h in state.history[-len(state.observations):]] != \
        [o.call_id for o in state.observations]  # fmt: skip
    after = apply_observations(state, run) if unassessed else \
        {"server_flags": state.server_flags, "server_env": state.server_env, "trials": state.trials}
    flags, env = after["server_flags"], after["server_env"]
    if flags is None or run.ctx.server is not None:
        return {}
    trial = next((t for t in reversed(after["trials"]) if t.status == "up" and t.flags == flags and t.env == env), None)
    args = {"flags": flags, "env": env, "pristine": trial.pristine if trial else []}
    rec = run.runner.call("launch_server", args, call_id=run.resumed_id(f"s{state.step}server"))
    update: dict[str, Any] = {"budget": run.charge(state.budget, rec)}
    if not rec.ok and not unassessed:  # (unassessed, the assessment to come would set it again)
        update.update(server_flags=None, server_env={})
    return update


def execute(run: Run, resume: bool = False, on_step=None) -> AgentState:
    """Run (or resume) the graph to the end; ``on_step(state)`` after every node, for progress display."""
    saver = checkpointer(run.run_dir, run.redactor)
    graph = build_graph(run).compile(checkpointer=saver)
    config = {"configurable": {"thread_id": run.run_id}, "recursion_limit": RECURSION_LIMIT}
    start = None
    if not resume or graph.get_state(config).values in (None, {}):
        start = AgentState(run_id=run.run_id, task_path=str(run.task_path))
    # stopped at a gate, what waits launches, patches or commits: it needs no server up
    elif not graph.get_state(config).interrupts and (
            update := _server_again(run, AgentState.model_validate(graph.get_state(config).values))):
        graph.update_state(config, update)
    t0 = time.monotonic()
    final: dict[str, Any] = {}
    for values in graph.stream(start, config, stream_mode="values", durability="sync"):
        final = values if isinstance(values, dict) else values.model_dump()
        if "__interrupt__" in final:  # a gate with no answer: the step is checkpointed, the run stops here
            raise AwaitingApproval(Gate.model_validate(final["__interrupt__"][0].value), run.run_id)
        if on_step:
            on_step(AgentState.model_validate(final), time.monotonic() - t0)
    return AgentState.model_validate(final)


def state_json(state: AgentState) -> str:
    return json.dumps(state.model_dump(mode="json"), indent=2)
