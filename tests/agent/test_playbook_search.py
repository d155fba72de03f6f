"""The playbook's search beyond the first configuration that works: the draft tree's local search (depth,
width, draft tokens), launches that would change nothing, and configurations the engine already served."""

from __future__ import annotations

from pathlib import Path

from agent.policies import playbook
from agent.policies.playbook import TREE_SEARCH_RUNS, PlaybookPolicy
from agent.search import tree_neighbours, tree_of
from tasks.spec import TaskSpec, load_task
from tools.server import serving_config

REPO = Path(__file__).resolve().parents[2]
TASK = load_task(REPO / "tasks" / "glm52_mi355x.yaml")  # search space: top-k 1/2/4, draft tokens 2..8


def _task_with(**flags: list) -> TaskSpec:
    """The default task with other allowed speculative values (a scenario the playbook has not seen)."""
    space = TASK.search_space.model_copy(update={"flags": {**TASK.search_space.flags, **flags}})
    return TASK.model_copy(update={"search_space": space})


def _spec(tree: tuple[int, int, int]) -> dict:
    steps, topk, draft = tree
    return {"speculative-algorithm": "EAGLE", "speculative-num-steps": steps, "speculative-eagle-topk": topk,
            "speculative-num-draft-tokens": draft}  # fmt: skip


def _tree_search(task: TaskSpec, objective, start: tuple[int, int, int]) -> tuple[tuple, list[tuple]]:
    """Run the playbook's draft tree search against ``objective`` (tree -> single-stream tok/s) the way its plan
    does: each proposed tree is measured, and kept as the best when it beats it. Returns (best, proposed)."""
    memo: dict = {"best": {"single": {"flags": {"tp-size": 8, **_spec(start)}, "value": objective(start)}}}
    item = {"label": "draft tree search", "tree_search": True, "from": "single", "measure": "single",
            "keep_as": "single", "feature": "speculative decoding"}  # fmt: skip
    proposed = []
    while (step := PlaybookPolicy._tree_item(task, memo, memo["best"]["single"], item)) is not None:
        assert step["feature"] is None and not step["tree_search"]  # one tree's crash does not end the search
        tree = tree_of(step["set"])
        proposed.append(tree)
        value = objective(tree)
        if value > memo["best"]["single"]["value"]:
            flags = {**memo["best"]["single"]["flags"], **step["set"]}
            memo["best"]["single"] = {"flags": flags, "value": value}
    return tree_of(memo["best"]["single"]["flags"]), proposed


def _bowl(peak: tuple[int, int, int]):
    """A single-stream speed with one peak, the width weighing most."""
    return lambda t: 300.0 - (t[0] - peak[0]) ** 2 - 5 * (t[1] - peak[1]) ** 2 - (t[2] - peak[2]) ** 2


def test_the_tree_search_follows_the_task_allowed_values():
    task = _task_with(**{"speculative-num-steps": [1, 2, 4, 8], "speculative-eagle-topk": [1, 3],
                         "speculative-num-draft-tokens": [2, 4, 7, 10, 13]})  # fmt: skip
    moves = dict((move, tree) for tree, move in reversed(tree_neighbours(task.search_space.flags, (4, 1, 5))))
    assert moves["deeper"] == (8, 1, 9) and moves["shallower"] == (2, 1, 3)
    assert moves["wider"] == (4, 3, 13)  # depth 4 at width 3: 13 tokens, allowed here
    best, proposed = _tree_search(task, _bowl((4, 3, 10)), (2, 1, 3))
    assert best == (4, 3, 10) and len(proposed) == len(set(proposed)) <= TREE_SEARCH_RUNS
    assert all(t[1] == 1 or t[2] in [2, 4, 7, 10, 13] for t in proposed)


def test_the_tree_search_climbs_to_a_pruned_tree_and_stops_when_no_neighbour_improves(monkeypatch):
    monkeypatch.setattr(playbook, "TREE_SEARCH_RUNS", 100)  # the stopping rule alone, not the run bound
    peak = (4, 2, 6)  # a top-2 tree of depth 4 pruned to 6 draft tokens (a full one has 9)
    best, proposed = _tree_search(TASK, _bowl(peak), (3, 1, 4))
    assert best == peak and len(proposed) == len(set(proposed))
    # it stopped because every neighbour of the peak was measured and none beat it
    around = [t for t, _ in tree_neighbours(TASK.search_space.flags, peak)]
    assert around and set(around) <= set(proposed) and proposed[-1] in around
    # a start no neighbour of which improves: each neighbour once, then done
    best, proposed = _tree_search(TASK, _bowl((3, 1, 4)), (3, 1, 4))
    around = [t for t, _ in tree_neighbours(TASK.search_space.flags, (3, 1, 4))]
    assert best == (3, 1, 4) and sorted(proposed) == sorted(around)


def test_the_tree_search_is_bounded_in_runs():
    best, proposed = _tree_search(TASK, _bowl((4, 2, 6)), (3, 1, 4))
    assert len(proposed) == TREE_SEARCH_RUNS and _bowl((4, 2, 6))(best) > _bowl((4, 2, 6))((3, 1, 4))


def test_the_deepest_chain_wins_when_depth_pays_and_wider_trees_are_tried_once():
    def chain_pays(t):  # deeper always pays, a wider tree costs more than it accepts
        steps, topk, draft = t
        return 100.0 + 10 * min(steps, (draft - 1) // topk) - 5 * topk - draft

    best, proposed = _tree_search(TASK, chain_pays, (3, 1, 4))
    assert best == (6, 1, 7)
    assert proposed[:3] == [(4, 1, 5), (5, 1, 6), (6, 1, 7)]  # deeper while it pays
    assert proposed[3:] == [(3, 2, 7), (6, 2, 8)]  # then the wider trees around the best, and done


def test_nothing_to_search_without_speculation():
    memo: dict = {"best": {"single": {"flags": {"tp-size": 8}, "value": 50.0}}}
    item = {"label": "x", "tree_search": True}
    assert PlaybookPolicy._tree_item(TASK, memo, memo["best"]["single"], item) is None


def test_a_value_the_engine_already_serves_is_not_launched():
    serving = {"chunked_prefill_size": 16384, "kv_cache_dtype": "bfloat16", "cuda_graph_max_bs": 512}
    base = {"flags": {"tp-size": 8}, "serving": serving}
    knob = {"from": "throughput", "keep_as": "throughput"}
    why = PlaybookPolicy._already_served(base, {**knob, "set": {"chunked-prefill-size": 16384}})
    assert why == "the engine already serves chunked-prefill-size=16384"
    assert PlaybookPolicy._already_served(base, {**knob, "set": {"chunked-prefill-size": 8192}}) is None
    assert PlaybookPolicy._already_served(base, {**knob, "set": {"kv-cache-dtype": "fp8_e4m3"}}) is None
    assert PlaybookPolicy._already_served(base, {**knob, "set": {"max-running-requests": 64}}) is None  # not reported
    assert PlaybookPolicy._already_served({"flags": {}}, {**knob, "set": {"chunked-prefill-size": 16384}}) is None
    # a base measured for another objective (single stream) says nothing about this one (throughput)
    other = {"from": "none", "keep_as": "throughput", "set": {"chunked-prefill-size": 16384}}
    assert PlaybookPolicy._already_served(base, other) is None


def test_two_launches_that_serve_alike_share_one_measurement():
    served = {"tp_size": 8, "dp_size": 8, "chunked_prefill_size": 2048}
    a = {"measure": "knee", "serving": served, "env": {"X": "1"}}
    b = {"measure": "knee_full", "serving": dict(served), "env": {"X": "1"}}
    assert PlaybookPolicy._served_key(a) == PlaybookPolicy._served_key(b)
    assert PlaybookPolicy._served_key({**a, "env": {"X": "2"}}) != PlaybookPolicy._served_key(a)  # env is not served
    assert PlaybookPolicy._served_key({**a, "measure": "single"}) != PlaybookPolicy._served_key(a)
    assert PlaybookPolicy._served_key({**a, "measure": "check"}) is None  # a patch's check is never skipped


def test_the_serving_configuration_leaves_out_address_and_paths():
    info = {"host": "127.0.0.1", "port": 30000, "model_path": "/m", "version": "0.5.12", "tp_size": 4,
            "chunked_prefill_size": 8192, "speculative_algorithm": None, "internal_states": [{}], "twin": {}}  # fmt: skip
    assert serving_config(info) == {"tp_size": 4, "chunked_prefill_size": 8192, "speculative_algorithm": None}



def test_the_best_knee_s_settings_are_tried_on_the_runner_up_layout():
    env = {"AITER_CONFIG_FMOE": "t.csv"}
    runner_up = {"flags": {"tp-size": 8, "dp-size": 4, "enable-dp-attention": True}, "env": env,
                 "serving": {"attention_backend": "triton", "kv_cache_dtype": "auto"}}  # fmt: skip
    best = {"flags": {"tp-size": 2, "dp-size": 4}, "env": env, "value": 5000.0,
            "serving": {"attention_backend": "aiter", "kv_cache_dtype": "auto"}}  # fmt: skip
    winner = dict(best)
    memo: dict = {"best": {"throughput": best}, "confirmed": [winner, runner_up], "measured": []}
    # right after the screen: the runner-up lost with the backend the engine picked for it, not the winner's
    [item] = PlaybookPolicy._runner_up_items(TASK, memo)
    assert item["set"] == {"tp-size": 8, "dp-size": 4, "enable-dp-attention": True, "attention-backend": "aiter"}
    assert item["env"] == env and item["exact"] and item["keep_as"] == "throughput"
    assert "TP8 x DP4 with DP attention" in item["label"] and "attention-backend=aiter" in item["label"]
    # measured already: not again
    memo["measured"].append({"candidate": item["candidate"], "value": 3000.0})
    assert PlaybookPolicy._runner_up_items(TASK, memo) == []
    # a change that raised the best knee later is carried along with it
    best["flags"] = {**best["flags"], "kv-cache-dtype": "fp8_e4m3"}
    best["serving"] = {**best["serving"], "kv_cache_dtype": "fp8_e4m3"}
    [item] = PlaybookPolicy._runner_up_items(TASK, memo)
    assert item["set"] == {"tp-size": 8, "dp-size": 4, "enable-dp-attention": True, "attention-backend": "aiter",
                           "kv-cache-dtype": "fp8_e4m3"}  # fmt: skip
    # where the engine served both alike there is nothing to set, and the same configuration is not measured again
    runner_up["serving"]["attention_backend"] = "aiter"
    best["flags"].pop("kv-cache-dtype")
    best["serving"]["kv_cache_dtype"] = "auto"
    memo["measured"].append({"candidate": {"flags": runner_up["flags"], "env": env}, "value": 3000.0})
    assert PlaybookPolicy._runner_up_items(TASK, memo) == []


def test_a_failed_accuracy_check_without_a_figure_is_worded_not_crashed():
    """An eval that failed outright (its server died under it) leaves no accuracy: the configuration is abandoned
    with words, where formatting the missing figure once raised a TypeError that ended the run."""
    from agent.policies.playbook import accuracy_failure
    from agent.state import Trial

    failed = Trial(id=1, flags={}, status="up", accuracy=None, accuracy_ok=False)
    assert accuracy_failure(failed) == "the accuracy check did not complete (no accuracy measured)"
    outside = Trial(id=2, flags={}, status="up", accuracy=0.5, accuracy_ok=False)
    assert accuracy_failure(outside) == "accuracy 0.500 is outside the tolerance"


# --- a knee that is only a lower bound (issue 40) -------------------------------------------------------------------


def _measured_knee(tput: float, failing: float | None) -> tuple[dict, dict]:
    """The playbook's memo after it measured a candidate's knee (``failing``: the rate seen failing above it,
    None: none was) against a best of 3000 tok/s; a queued item deeper along the candidate's axis."""
    from agent.policies.base import PolicyContext
    from agent.state import AgentState, Observation

    cur = {"label": "deeper", "flags": {"tp-size": 8}, "env": {}, "measure": "knee", "keep_as": "throughput",
           "step": "measuring", "group": "g"}  # fmt: skip
    memo = {"phase": "layout", "queue": [{"label": "deeper still", "group": "g"}], "current": cur,
            "best": {"throughput": {"flags": {"tp-size": 4}, "env": {}, "value": 3000.0}}}  # fmt: skip
    result = {"knee_rate": 3.1, "throughput_at_knee": tput, "runs": [], "first_failing_rate": failing}
    obs = Observation(call_id="k", tool="find_knee", args={"workload": "throughput"}, ok=True, result=result)
    state = AgentState(run_id="r", task_path="t", observations=[obs], memo=memo)
    PlaybookPolicy()._work_on(state, PolicyContext(task=TASK, workspace=None, tool_schemas=[], run_id="r"), memo,
                              cur, obs)  # fmt: skip
    return memo, memo["best"]["throughput"]


def test_a_lower_bound_below_the_best_is_not_taken_as_proof_it_is_worse():
    memo, best = _measured_knee(2900.0, failing=None)
    assert best["value"] == 3000.0 and memo["tried"][-1].endswith(
        "not kept: at least 2900.0 vs 3000.0 (a lower bound, not shown to be worse)")
    assert [q["label"] for q in memo["queue"]] == ["deeper still"]  # its axis is not given up on a floor
    memo, best = _measured_knee(2900.0, failing=3.2)  # a measured knee below the best: the axis is done
    assert memo["tried"][-1].endswith("not kept: 2900.0 vs 3000.0") and memo["queue"] == []


def test_a_lower_bound_above_the_best_still_beats_it_and_stays_a_lower_bound():
    memo, best = _measured_knee(3100.0, failing=None)
    assert best["value"] == 3100.0 and best["lower_bound"] and memo["tried"][-1].endswith("kept: at least 3100.0 (was 3000.0)")
    memo, best = _measured_knee(3100.0, failing=3.2)
    assert best["value"] == 3100.0 and "lower_bound" not in best and memo["tried"][-1].endswith("kept: 3100.0 (was 3000.0)")
