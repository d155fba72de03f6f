"""The search layer: valid configurations on the node, the best's neighbours ordered by its bottleneck, TPE
after them, crash regions and measured configurations never proposed again, and the same answer on resume."""

from __future__ import annotations

from pathlib import Path

from agent.search import Candidate, Measured, SearchSpace, in_crash_region, next_candidate
from tasks.spec import load_task

REPO = Path(__file__).resolve().parents[2]
SPACE = SearchSpace(load_task(REPO / "tasks" / "glm52_mi355x.yaml"))  # 8 GPUs
BEST = Candidate(flags={"tp-size": 8, "dp-size": 4, "enable-dp-attention": True}, env={"AITER_CONFIG_FMOE": "t.csv"})


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
