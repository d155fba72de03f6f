"""Why the best won: each change from the bring-up configuration, its effect where two measured configurations
differ by exactly that change, and the configuration that would measure it where none does."""

from __future__ import annotations

from pathlib import Path

from agent.ablation import changes_from, explain, explain_best
from agent.search import Candidate, Measured
from agent.state import AgentState, Best, Trial
from tasks.spec import load_task

TASK = load_task(Path(__file__).resolve().parents[2] / "tasks" / "glm52_mi355x.yaml")
BRINGUP = Candidate(flags={"tp-size": 8})
SPEC = {"speculative-algorithm": "EAGLE", "speculative-num-steps": 3, "speculative-eagle-topk": 1,
        "speculative-num-draft-tokens": 4}  # fmt: skip
BEST = Candidate(flags={"tp-size": 8, "dp-size": 4, "enable-dp-attention": True, "kv-cache-dtype": "fp8_e4m3"},
                 env={"TUNED": "t.csv"})  # fmt: skip


def test_the_layout_and_speculative_decoding_are_one_change_each():
    spec = Candidate(flags={**BEST.flags, **SPEC}, env=BEST.env)
    assert changes_from(BRINGUP, spec) == ["layout", "speculative decoding", "kv-cache-dtype", "env TUNED"]


def test_a_measured_pair_isolates_a_change_and_the_rest_say_what_would():
    no_kv = Candidate(flags={"tp-size": 8, "dp-size": 4, "enable-dp-attention": True}, env=BEST.env)
    measured = [Measured(candidate=BRINGUP, value=1500.0), Measured(candidate=no_kv, value=3000.0),
                Measured(candidate=BEST, value=3100.0)]  # fmt: skip
    e = explain(BRINGUP, BEST, 3100.0, measured)
    by = {c.name: c for c in e.changes}
    assert e.baseline == 1500.0 and by["kv-cache-dtype"].effect == 100.0
    assert by["kv-cache-dtype"].measured_between == (3000.0, 3100.0)
    assert by["layout"].effect is None and by["layout"].without == Candidate(
        flags={"tp-size": 8, "kv-cache-dtype": "fp8_e4m3"}, env={"TUNED": "t.csv"})
    assert by["env TUNED"].effect is None and by["env TUNED"].without.env == {}
    assert e.unexplained == 3100.0 - 1500.0 - 100.0


def test_a_configuration_that_served_nothing_isolates_nothing():
    no_kv = Candidate(flags={"tp-size": 8, "dp-size": 4, "enable-dp-attention": True}, env=BEST.env)
    crashed = [Measured(candidate=no_kv, value=0.0, crashed=True), Measured(candidate=BEST, value=3100.0)]
    assert all(c.effect is None for c in explain(BRINGUP, BEST, 3100.0, crashed).changes)


def test_from_the_runs_trials():
    trials = [Trial(id=1, flags={"tp-size": 8}, status="up", metrics={"single_stream": 60.0}),
              Trial(id=2, flags={"tp-size": 8, **SPEC}, status="crashed"),
              Trial(id=3, flags={"tp-size": 8, **SPEC}, status="up", metrics={"single_stream": 160.0})]  # fmt: skip
    state = AgentState(run_id="r", task_path="t.yaml", trials=trials,
                       bests={"single_stream": Best(target="single_stream", value=160.0, trial=3, flags=trials[2].flags)})  # fmt: skip
    e = explain_best(state, TASK, "single_stream")
    assert [(c.name, c.effect) for c in e.changes] == [("speculative decoding", 100.0)]
    assert explain_best(state, TASK, "throughput") is None  # no best yet


def test_a_knee_search_that_held_no_rate_is_a_figure_a_probe_is_not():
    """The best without a change whose knee search went down to its resolution and held no rate isolates that
    change (0 is what it serves within the limits); a probe that only asked whether a known knee is beaten, or a
    search stopped by its allowance, records no figure."""
    from agent.outcomes import sustained_no_rate
    from agent.state import Observation

    no_env = Candidate(flags=BEST.flags)
    e = explain(BRINGUP, BEST, 3100.0, [Measured(candidate=no_env, value=0.0), Measured(candidate=BEST, value=3100.0)])
    assert {c.name: c.effect for c in e.changes}["env TUNED"] == 3100.0
    result = {"runs": [{"request_rate": 0.3}], "knee_rate": None, "first_failing_rate": 0.309}
    full = Observation(call_id="c", tool="find_knee", args={"workload": "throughput"}, ok=False, result=result)
    assert sustained_no_rate(full)
    assert not sustained_no_rate(full.model_copy(update={"args": {"workload": "throughput", "min_rate": 3.5}}))
    assert not sustained_no_rate(full.model_copy(update={"result": {**result, "stopped_by_budget": True}}))
    assert not sustained_no_rate(full.model_copy(update={"result": {**result, "first_failing_rate": None}}))
