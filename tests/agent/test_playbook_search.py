"""The playbook's search beyond the first configuration that works: wider draft trees, launches that would
change nothing, and configurations the engine already served."""

from __future__ import annotations

from pathlib import Path

from agent.policies.playbook import PlaybookPolicy
from tasks.spec import load_task
from tools.server import serving_config

REPO = Path(__file__).resolve().parents[2]
TASK = load_task(REPO / "tasks" / "glm52_mi355x.yaml")  # search space: top-k 1/2/4, draft tokens 2..8
SPEC = {"speculative-algorithm": "EAGLE", "speculative-num-steps": 6, "speculative-eagle-topk": 1,
        "speculative-num-draft-tokens": 7}  # fmt: skip


def test_a_wider_draft_tree_is_as_deep_as_the_largest_allowed_tree_reaches():
    base = {"flags": {"tp-size": 8, **SPEC}}
    two = PlaybookPolicy._widened(TASK, base, {"label": "draft tree top-2", "widen": 2})
    assert two["set"] == {"speculative-eagle-topk": 2, "speculative-num-steps": 3, "speculative-num-draft-tokens": 7}
    four = PlaybookPolicy._widened(TASK, base, {"label": "draft tree top-4", "widen": 4})
    assert four["set"] == {"speculative-eagle-topk": 4, "speculative-num-steps": 1, "speculative-num-draft-tokens": 5}
    shallow = {"flags": {**SPEC, "speculative-num-steps": 2, "speculative-num-draft-tokens": 3}}
    assert PlaybookPolicy._widened(TASK, shallow, {"label": "x", "widen": 2})["set"]["speculative-num-steps"] == 2


def test_nothing_to_widen_without_speculation():
    assert PlaybookPolicy._widened(TASK, {"flags": {"tp-size": 8}}, {"label": "x", "widen": 2}) is None


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
