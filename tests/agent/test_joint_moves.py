"""Two knobs changed together where the engine ties them (agent/policies/joint_moves.py): a flag the engine scales
is set again so that it serves what was meant, and once single moves from the best stall, the search pairs a move
with the knob the engine re-derived for it, or the two moves that came closest. Figures are made up; the serving
configurations have the shape of the twin's /server_info (SGLang divides the prefill chunk among DP attention
ranks, and sizes the static memory fraction from the chunk)."""

from __future__ import annotations

from pathlib import Path

from agent.policies.joint_moves import flag_for, pair_moves, rescale_to_meant
from agent.policies.playbook import PlaybookPolicy
from agent.search import Candidate, Measured, SearchSpace
from tasks.spec import load_task

REPO = Path(__file__).resolve().parents[2]
TASK = load_task(REPO / "tasks" / "glm52_mi355x.yaml")  # chunked-prefill-size 4096..32768, mem 0.8..0.93
ENV = {"AITER_CONFIG_FMOE": "{workspace}/tuning/tuned_fmoe.csv"}
DP4 = {"tp-size": 8, "dp-size": 4, "enable-dp-attention": True, "kv-cache-dtype": "fp8_e4m3"}
DP8 = {**DP4, "dp-size": 8}
BEST_SERVING = {"tp_size": 8, "dp_size": 4, "chunked_prefill_size": 4096, "mem_fraction_static": 0.877}


def _measured(flags: dict, near: float, **serving) -> Measured:
    """A single move that did not sustain the best's knee rate, served ``near`` tok/s there, and was served so."""
    return Measured(candidate=Candidate(flags=flags, env=ENV), value=0.0, near=near,
                    serving={**BEST_SERVING, **serving})  # fmt: skip


def test_a_flag_the_engine_scales_is_set_to_the_allowed_value_it_serves_as_meant():
    allowed = [4096, 8192, 16384, 32768]
    assert flag_for(allowed, 4096, 512, 4096) == 32768  # divided among 8 ranks: 8x the flag
    assert flag_for(allowed, 4096, 1024, 2048) == 8192
    assert flag_for(allowed, 4096, 4096, 2048) is None  # served as given: not a scale, a different value
    assert flag_for(allowed, 4096, 256, 4096) is None  # 65536 is not allowed
    assert flag_for(["aiter", "triton"], "aiter", "nsa", "aiter") is None  # not a number
    cur = {"label": "runner-up", "flags": {**DP8, "chunked-prefill-size": 4096, "kv-cache-dtype": "fp8_e4m3"},
           "candidate": {"flags": {**DP8, "chunked-prefill-size": 4096}, "env": ENV},
           "serving": {"chunked_prefill_size": 512, "kv_cache_dtype": "fp8_e4m3"},
           "meant": {"chunked-prefill-size": 4096, "kv-cache-dtype": "fp8_e4m3"}}  # fmt: skip
    change = rescale_to_meant(TASK.search_space.flags, cur)
    assert change is not None and change.startswith("--chunked-prefill-size 32768")
    assert cur["flags"]["chunked-prefill-size"] == cur["candidate"]["flags"]["chunked-prefill-size"] == 32768
    # served as meant after the relaunch, or once changed: nothing more to change
    cur["serving"]["chunked_prefill_size"] = 4096
    assert rescale_to_meant(TASK.search_space.flags, cur) is None


def test_the_runner_up_layout_means_the_best_s_served_values():
    best = {"flags": DP4, "env": ENV, "value": 3260.0, "serving": BEST_SERVING}
    runner_up = {"flags": DP8, "env": ENV, "serving": {**BEST_SERVING, "dp_size": 8, "chunked_prefill_size": 2048}}
    memo: dict = {"best": {"throughput": best}, "confirmed": [best, runner_up], "measured": []}
    [item] = PlaybookPolicy._runner_up_items(TASK, memo)
    assert item["set"]["chunked-prefill-size"] == 4096 and item["meant"]["chunked-prefill-size"] == 4096


def test_stalled_single_moves_are_paired_with_the_knob_the_engine_re_derived_then_with_each_other():
    space = SearchSpace(TASK)
    best = Candidate(flags=DP4, env=ENV)
    chunk = _measured({**DP4, "chunked-prefill-size": 32768}, 3333.0, chunked_prefill_size=8192,
                      mem_fraction_static=0.793)  # the engine took memory from the KV cache for the chunk
    layout = _measured(DP8, 3403.0, dp_size=8, chunked_prefill_size=2048, mem_fraction_static=0.845)
    memory = _measured({**DP4, "mem-fraction-static": 0.93}, 3236.0, mem_fraction_static=0.93)
    assert pair_moves(space, best, BEST_SERVING, [layout]) == []  # one single move is no stall yet
    pairs = pair_moves(space, best, BEST_SERVING, [chunk, layout, memory])
    flags = [c.flags for c, _, _ in pairs]
    # the layout came closest: with the chunk the best prefills per rank (a flag the launch rescales if need be)
    first, meant, why = pairs[0]
    assert first.flags == {**DP8, "chunked-prefill-size": 4096} and meant == {"chunked-prefill-size": 4096}
    assert "re-derived" in why and first.env == ENV
    # the larger chunk with the memory fraction held where the best has it (0.877: 0.9 is the nearest allowed)
    assert {**DP4, "chunked-prefill-size": 32768, "mem-fraction-static": 0.9} in flags
    # the two closest single moves together
    assert {**DP8, "chunked-prefill-size": 32768} in flags
    assert len({c.key() for c, _, _ in pairs}) == len(pairs)
    # measured pairs are not proposed again
    tried = [Measured(candidate=c, value=0.0, near=1.0) for c, _, _ in pairs[:2]]
    again = pair_moves(space, best, BEST_SERVING, [chunk, layout, memory, *tried])
    assert [c.key() for c, _, _ in again] == [c.key() for c, _, _ in pairs[2:]]


def test_the_search_after_the_targets_proposes_a_pair_once_single_moves_stall():
    best = {"flags": DP4, "env": ENV, "value": 3260.0, "serving": BEST_SERVING, "shares": None}
    measured = [m.model_dump() for m in (
        _measured({**DP4, "chunked-prefill-size": 32768}, 3333.0, chunked_prefill_size=8192, mem_fraction_static=0.793),
        _measured({**DP4, "mem-fraction-static": 0.93}, 3236.0, mem_fraction_static=0.93))]  # fmt: skip
    memo: dict = {"best": {"throughput": best}, "measured": measured}
    item = PlaybookPolicy._search_item(TASK, memo)
    assert item["set"] == {**DP4, "chunked-prefill-size": 32768, "mem-fraction-static": 0.9}
    assert item["meant"] == {"mem-fraction-static": 0.877} and item["exact"]
    assert any("pair move" in t for t in memo["tried"])
