"""The search layer: valid configurations on the node, the best's neighbours ordered by its bottleneck, TPE
after them, crash regions and measured configurations never proposed again, the same answer on resume, and the
draft trees one move from a speculative configuration."""

from __future__ import annotations

from pathlib import Path

from agent.search import (
    LAYOUT,
    Candidate,
    Measured,
    SearchSpace,
    in_crash_region,
    max_draft_tokens,
    next_candidate,
    tree_neighbours,
    tree_of,
)
from tasks.spec import load_task

REPO = Path(__file__).resolve().parents[2]
SPACE = SearchSpace(load_task(REPO / "tasks" / "glm52_mi355x.yaml"))  # 8 GPUs
BEST = Candidate(flags={"tp-size": 8, "dp-size": 4, "enable-dp-attention": True}, env={"AITER_CONFIG_FMOE": "t.csv"})


def spec(tree: tuple[int, int, int]) -> dict:
    steps, topk, draft = tree
    return {"speculative-algorithm": "EAGLE", "speculative-num-steps": steps, "speculative-eagle-topk": topk,
            "speculative-num-draft-tokens": draft}  # fmt: skip


def changed(c: Candidate) -> list[str]:
    """The knobs a candidate changes from the best (flags and environment)."""
    return [k for k in {**c.flags, **BEST.flags} if c.flags.get(k) != BEST.flags.get(k)] + \
        [k for k in {**c.env, **BEST.env} if c.env.get(k) != BEST.env.get(k)]  # fmt: skip


def test_only_layouts_that_fit_the_node():
    assert SPACE.canonical(Candidate(flags={"tp-size": 8, "dp-size": 2})) is None  # 16 GPUs
    assert SPACE.canonical(Candidate(flags={"tp-size": 4, "dp-size": 8, "enable-dp-attention": True})) is None
    ok = SPACE.canonical(Candidate(flags={"tp-size": 4, "dp-size": 2}))
    assert ok is not None and ok.flags == {"tp-size": 4, "dp-size": 2}
    # DP attention means nothing with one DP rank: the engine runs the same thing without it
    assert SPACE.canonical(Candidate(flags={"tp-size": 8, "dp-size": 1, "enable-dp-attention": True})).flags == {"tp-size": 8}


def test_speculative_settings_as_the_engine_takes_them():
    c = SPACE.canonical(Candidate(flags={"tp-size": 8, "speculative-algorithm": "EAGLE", "speculative-num-draft-tokens": 2}))
    assert c.flags == {"tp-size": 8, "speculative-algorithm": "EAGLE", "speculative-num-steps": 1,
                       "speculative-eagle-topk": 1, "speculative-num-draft-tokens": 2}  # fmt: skip
    no_alg = SPACE.canonical(Candidate(flags={"tp-size": 8, "speculative-num-steps": 3}))
    assert no_alg.flags == {"tp-size": 8}
    too_wide = {"speculative-algorithm": "EAGLE", "speculative-num-steps": 1, "speculative-eagle-topk": 2,
                "speculative-num-draft-tokens": 8}  # fmt: skip
    assert SPACE.canonical(Candidate(flags={"tp-size": 8, **too_wide})) is None


def test_a_task_with_a_draft_checkpoint_speculates_with_it_and_only_then():
    """A separate draft (EAGLE3) is named whenever the algorithm is set, and never without it."""
    space = SearchSpace(load_task(REPO / "tasks" / "kimi_k2_fp8_mi300x.yaml"))
    c = space.canonical(Candidate(flags={"tp-size": 8, "speculative-algorithm": "EAGLE3", "speculative-num-steps": 3}))
    assert c.flags["speculative-draft-model-path"] == "{workspace}/draft"
    off = space.canonical(Candidate(flags={"tp-size": 8, "speculative-draft-model-path": "{workspace}/draft"}))
    assert off.flags == {"tp-size": 8}
    assert "speculative-draft-model-path" not in SPACE.canonical(Candidate(flags=spec((3, 1, 4)))).flags  # none given


def test_the_bottleneck_orders_the_neighbours():
    prefill = SPACE.neighbours(BEST, {"prefill_attention": 0.5, "decode": 0.1, "communication": 0.05})
    decode = SPACE.neighbours(BEST, {"decode": 0.6, "prefill_attention": 0.1})
    assert changed(prefill[0]) == ["chunked-prefill-size"] and changed(decode[0]) == ["kv-cache-dtype"]
    # every neighbour is valid; each knob gets its first value before any gets its second
    assert all(SPACE.canonical(c) == c for c in prefill)
    firsts = [changed(c)[0] for c in prefill[:5]]
    assert len(set(firsts)) == 5


def test_measured_and_crashing_configurations_are_not_proposed_again():
    history = [Measured(candidate=BEST, value=3000.0)]
    first = next_candidate(SPACE, history, BEST, {"decode": 1.0})
    history.append(Measured(candidate=first, value=0.0, crashed=True, crash_category="out_of_memory"))
    second = next_candidate(SPACE, history, BEST, {"decode": 1.0})
    assert second.key() not in {first.key(), BEST.key()}
    oom = Measured(candidate=Candidate(flags={**BEST.flags, "mem-fraction-static": 0.9}), value=0.0, crashed=True,
                   crash_category="out_of_memory")  # fmt: skip
    more = Candidate(flags={**BEST.flags, "mem-fraction-static": 0.93})
    less = Candidate(flags={**BEST.flags, "mem-fraction-static": 0.85})
    assert in_crash_region(more, [oom]) and not in_crash_region(less, [oom])


def test_tpe_takes_over_when_the_neighbours_are_spent_and_answers_the_same_on_resume():
    history = [Measured(candidate=BEST, value=3000.0)]
    history += [Measured(candidate=c, value=2000.0) for c in SPACE.neighbours(BEST)]
    a = next_candidate(SPACE, history, BEST, seed=len(history))
    b = next_candidate(SPACE, history, BEST, seed=len(history))  # a resumed run rebuilds the study: same answer
    assert a is not None and a == b and SPACE.canonical(a) == a
    assert a.key() not in {m.candidate.key() for m in history}


def test_a_value_the_best_is_already_served_with_is_no_neighbour():
    best = Candidate(flags={"tp-size": 4, "dp-size": 2})
    # the engine reports how the best is served: kv cache "auto" and chunks of 8192 are what it runs already
    serving = {"kv_cache_dtype": "auto", "chunked_prefill_size": 8192, "tp_size": 4}
    plain = SPACE.neighbours(best, {"decode": 1.0})
    served = SPACE.neighbours(best, {"decode": 1.0}, serving)
    kv = [c.flags.get("kv-cache-dtype") for c in plain if "kv-cache-dtype" in c.flags]
    assert kv[0] == "auto"  # without the serving configuration the default is proposed as if it were a change
    assert [c.flags["kv-cache-dtype"] for c in served if "kv-cache-dtype" in c.flags] == ["fp8_e4m3"]
    assert not any(c.flags.get("chunked-prefill-size") == 8192 for c in served)
    assert served[0].flags.get("kv-cache-dtype") == "fp8_e4m3"  # the decode share's first knob, a real change
    assert next_candidate(SPACE, [], best, {"decode": 1.0}, serving=serving) == served[0]


def test_the_engine_prunes_a_draft_tree_to_its_draft_tokens_and_verifies_no_more_than_it_scored():
    # SGLang 0.5.12: topk candidates at the first step, topk*topk at each later one, the best draft-1 of them kept
    assert [max_draft_tokens(s, k) for s, k in [(3, 1), (1, 2), (3, 2), (2, 4)]] == [4, 3, 11, 21]
    pruned = SPACE.canonical(Candidate(flags={"tp-size": 8, **spec((6, 2, 5))}))  # 5 < 2*6+1: pruned, valid
    assert pruned is not None and tree_of(pruned.flags) == (6, 2, 5)
    # more than two branches at a level (the draft scored 2 + 2 * 4 candidates)
    bushy = SPACE.canonical(Candidate(flags={"tp-size": 8, **spec((3, 2, 8))}))
    assert bushy is not None and tree_of(bushy.flags) == (3, 2, 8)
    assert SPACE.canonical(Candidate(flags={"tp-size": 8, **spec((1, 2, 4))})) is None  # scored only 2
    assert tree_of(SPACE.canonical(Candidate(flags=spec((4, 1, 8)))).flags) == (4, 1, 5)  # top-1: a chain


def test_a_wider_tree_from_the_deepest_chain_is_proposed_pruned_and_as_a_full_tree_the_budget_holds():
    # the task allows at most 8 draft tokens: top-2 at depth 6 (13 tokens) does not fit
    wider = [t for t, move in tree_neighbours(SPACE.flags, (6, 1, 7)) if move == "wider"]
    # the deepest full top-2 tree in 8 tokens, then depth 6 pruned to 8
    assert wider == [(3, 2, 7), (6, 2, 8)]
    steps, topk, draft = wider[1]
    assert draft < topk * steps + 1
    # every neighbour is one the engine runs as proposed, with values the task allows
    flags = SPACE.flags
    for center in [(3, 1, 4), (6, 1, 7), (3, 2, 7), (2, 4, 8), (1, 2, 3)]:
        for tree, _ in tree_neighbours(flags, center):
            assert tree != center and SPACE.canonical(Candidate(flags=spec(tree))).flags == spec(tree)
            assert tree[0] in flags["speculative-num-steps"] and tree[1] in flags["speculative-eagle-topk"]
            assert tree[1] == 1 or tree[2] in flags["speculative-num-draft-tokens"]
    # the move that led to the center comes first
    assert tree_neighbours(flags, (3, 2, 7), "fewer draft tokens")[0] == ((3, 2, 6), "fewer draft tokens")


def test_the_layout_is_one_knob_and_whole_node_splits_come_first():
    best = Candidate(flags={"tp-size": 2, "dp-size": 4, "kv-cache-dtype": "fp8_e4m3"})
    layouts = SPACE.layouts()
    used = [s["tp-size"] if s.get("enable-dp-attention") else s["tp-size"] * s.get("dp-size", 1) for s in layouts]
    assert used == sorted(used, reverse=True) and used[0] == 8 and {"tp-size": 1, "dp-size": 8} in layouts
    moves = [c for c in SPACE.neighbours(best, {"prefill_attention": 1.0})
             if {k: c.flags.get(k) for k in LAYOUT} != {k: best.flags.get(k) for k in LAYOUT}]
    # a split that keeps every GPU busy changes TP and DP together, and keeps the other knobs
    assert moves[0].flags == {"tp-size": 1, "dp-size": 8, "kv-cache-dtype": "fp8_e4m3"}
    first_half_node = next(i for i, c in enumerate(moves) if c.flags.get("tp-size") * c.flags.get("dp-size", 1) < 8
                           and not c.flags.get("enable-dp-attention"))  # fmt: skip
    assert all(SPACE.canonical(c) == c for c in moves) and first_half_node >= 6  # the other six whole-node splits first


def test_a_transplant_sets_what_the_engine_picked_for_the_best_but_not_for_the_other_layout():
    best = Candidate(flags={"tp-size": 2, "dp-size": 4, "kv-cache-dtype": "fp8_e4m3", "chunked-prefill-size": 8192},
                     env={"A": "1"})  # fmt: skip
    other = Candidate(flags={"tp-size": 1, "dp-size": 8}, env={"A": "1"})
    served = {"attention_backend": "aiter", "mem_fraction_static": 0.774, "kv_cache_dtype": "fp8_e4m3",
              "chunked_prefill_size": 8192}  # fmt: skip
    other_served = {"attention_backend": "triton", "mem_fraction_static": 0.911, "kv_cache_dtype": "auto",
                    "chunked_prefill_size": 8192}  # fmt: skip
    moved = SPACE.transplant(best, other, served, other_served)
    # the backend: an allowed value the engine chose differently (0.774 is no value the space offers); the
    # chunk size: what the other layout ran with anyway, no change
    assert moved.flags == {"tp-size": 1, "dp-size": 8, "kv-cache-dtype": "fp8_e4m3", "attention-backend": "aiter"}
    assert moved.env == {"A": "1"}
    # without the engines' reports: the best's flags on the other layout, as they are
    assert SPACE.transplant(best, other).flags == {"tp-size": 1, "dp-size": 8, "kv-cache-dtype": "fp8_e4m3",
                                                   "chunked-prefill-size": 8192}  # fmt: skip
    # a transplant that changes nothing the other layout was served with is that configuration itself
    assert SPACE.transplant(best, other, served, {**served, "kv_cache_dtype": "fp8_e4m3"}).key() == \
        Candidate(flags={"tp-size": 1, "dp-size": 8}, env={"A": "1"}).key()  # fmt: skip
    assert SPACE.transplant(best, Candidate(flags={"tp-size": 8, "dp-size": 8})) is None  # 64 GPUs


def test_a_crash_that_repeats_unchanged_rules_out_what_its_launches_shared():
    """Issue 43: a speculation crash that never changes is not retried on every other value of the knobs it does not
    depend on: after two identical crashes, what their configurations shared is a crash region."""
    from agent.search import crash_signature, repeated_crash_regions

    why = crash_signature("unknown", "AttributeError: set_embed_and_head (raised in eagle_worker.py:161 at 0x7f3a12)")
    eagle = {"tp-size": 8, "speculative-algorithm": "EAGLE"}
    crashed = [Measured(candidate=Candidate(flags={**eagle, "speculative-num-steps": n}), value=0.0, crashed=True,
                        crash_category="unknown", crash_signature=why) for n in (3, 5)]  # fmt: skip
    served = Measured(candidate=Candidate(flags={"tp-size": 8}), value=2000.0)
    history = [served, *crashed]
    assert repeated_crash_regions(history) == [eagle]
    assert in_crash_region(Candidate(flags={**eagle, "speculative-num-steps": 4}), history)
    assert not in_crash_region(Candidate(flags={"tp-size": 4, "speculative-algorithm": "EAGLE"}), history)
    assert not in_crash_region(Candidate(flags={"tp-size": 8, "chunked-prefill-size": 8192}), history)
    # one crash, or two different ones, is no region; nor is one a configuration was served in
    assert repeated_crash_regions(history[:2]) == []
    other = crashed[1].model_copy(update={"crash_signature": crash_signature("compile_error", "x.cuh:3: missing")})
    assert repeated_crash_regions([served, crashed[0], other]) == []
    up = Measured(candidate=Candidate(flags={**eagle, "speculative-num-steps": 2}), value=150.0)
    assert repeated_crash_regions([*history, up]) == []
    assert crash_signature("unknown", "port 31337 at 0xdeadbeef") == crash_signature("unknown", "port 40001 at 0xabc")
