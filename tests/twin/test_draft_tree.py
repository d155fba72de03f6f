"""The twin's draft trees verify what SGLang's do: the best ``num_draft_tokens - 1`` of the candidates the draft
scored (``eagle_utils.organize_draft_results``), so a wide tree pruned to a small budget keeps its likeliest path."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sandboxes.twin.perf.cost_model import (
    ALTERNATIVE_HIT,
    candidate_probabilities,
    expected_accept_length,
    scored_draft_tokens,
)

trees = st.tuples(st.integers(1, 7), st.sampled_from([1, 2, 3, 4]), st.integers(2, 24))
rates = st.floats(0.3, 0.95)
decays = st.sampled_from([1.0, 0.9, 0.72])


def monte_carlo(alpha: float, decay: float, steps: int, topk: int, draft_tokens: int, n: int = 20_000) -> float:
    """Accepted tokens per verify step, by drawing what the target writes: at depth i it is the draft's best
    candidate with probability a (a = alpha * decay**i), else its rank-j one (j >= 1) with probability h (1 - h)**(j-1)
    (h = ALTERNATIVE_HIT), and the step accepts the longest drafted path that matches. The verified nodes are chosen as SGLang does: beams of the ``topk`` likeliest paths, the
    best ``draft_tokens - 1`` of all scored candidates."""
    scored: list[tuple[float, tuple[int, ...]]] = []
    beams: list[tuple[float, tuple[int, ...]]] = [(1.0, ())]
    for i in range(steps):
        ranked = candidate_probabilities(alpha * decay**i, topk)
        widened = sorted(((p * q, path + (j,)) for p, path in beams for j, q in enumerate(ranked)), reverse=True)
        scored += widened
        beams = widened[:topk]
    verified = {path for _, path in sorted(scored, reverse=True)[: draft_tokens - 1]}
    rng = random.Random(1)
    total = 0
    for _ in range(n):
        path: tuple[int, ...] = ()
        accepted = 1  # the target's own token
        for i in range(steps):
            rank = 0
            if rng.random() > alpha * decay**i:  # the best candidate is wrong: which runner-up is right
                rank = 1
                while rng.random() > ALTERNATIVE_HIT:
                    rank += 1
            path += (rank,)
            if path not in verified:
                break
            accepted += 1
        total += accepted
    return total / n


@pytest.mark.parametrize("steps,topk,draft", [(3, 1, 4), (6, 2, 8), (3, 2, 7), (2, 4, 8), (4, 3, 10)])
@pytest.mark.parametrize("decay", [1.0, 0.72])
def test_the_formula_is_what_drawing_the_target_gives(steps, topk, draft, decay):
    assert expected_accept_length(0.82, decay, steps, topk, draft) == pytest.approx(
        monte_carlo(0.82, decay, steps, topk, draft), rel=0.02
    )


@settings(max_examples=60, deadline=None)
@given(tree=trees, alpha=rates, decay=decays)
def test_a_chain_accepts_each_position_in_turn(tree, alpha, decay):
    steps = tree[0]
    chain = 1.0 + sum(
        _product(alpha * decay**i for i in range(depth + 1)) for depth in range(steps)
    )  # fmt: skip
    assert expected_accept_length(alpha, decay, steps, 1, steps + 1) == pytest.approx(chain)


def _product(values) -> float:
    out = 1.0
    for v in values:
        out *= v
    return out


@settings(max_examples=80, deadline=None)
@given(tree=trees, alpha=rates, decay=decays)
def test_a_wider_tree_with_the_same_budget_never_accepts_less(tree, alpha, decay):
    """Its draft scores the chain's candidates and more; the verify step keeps the best of them."""
    steps, topk, draft = tree
    draft = min(draft, scored_draft_tokens(steps, topk) + 1)
    chain = expected_accept_length(alpha, decay, steps, 1, min(draft, steps + 1))
    assert expected_accept_length(alpha, decay, steps, topk, draft) >= chain - 1e-12


@settings(max_examples=80, deadline=None)
@given(tree=trees, alpha=rates, decay=decays)
def test_more_budget_or_depth_never_accepts_less(tree, alpha, decay):
    steps, topk, draft = tree
    base = expected_accept_length(alpha, decay, steps, topk, draft)
    assert expected_accept_length(alpha, decay, steps, topk, draft + 1) >= base - 1e-12
    assert expected_accept_length(alpha, decay, steps + 1, topk, draft) >= base - 1e-12


def test_a_budget_beyond_what_the_draft_scored_verifies_nothing_more():
    # 2 steps of top-2 score 2 + 4 candidates: a verify budget of 7 is all of them, 9 would be more than exist
    assert scored_draft_tokens(2, 2) == 6 and scored_draft_tokens(6, 1) == 6 and scored_draft_tokens(1, 4) == 4
    assert expected_accept_length(0.8, 1.0, 2, 2, 9) == expected_accept_length(0.8, 1.0, 2, 2, 7)


def test_pruning_keeps_the_likeliest_path_deep():
    """Top-2 over 6 steps pruned to 8 tokens verifies the whole top-1 chain and the likeliest side branch, not
    three levels of both branches (the twin's old reading of a pruned tree)."""
    chain = expected_accept_length(0.82, 1.0, 6, 1, 7)
    pruned = expected_accept_length(0.82, 1.0, 6, 2, 8)
    assert pruned == pytest.approx(chain + 0.18 * ALTERNATIVE_HIT)  # the runner-up at the first position


def _spec(steps: int, topk: int, draft: int) -> list[str]:
    return ["--tp-size", "8", "--speculative-algorithm", "EAGLE", "--speculative-num-steps", str(steps),
            "--speculative-eagle-topk", str(topk), "--speculative-num-draft-tokens", str(draft)]  # fmt: skip


def test_a_budget_beyond_the_scored_candidates_fails_the_draft_graph_capture(fixed_workspace, tmp_path):
    """2 steps of top-2 score 6 candidates; 8 draft tokens ask torch.topk for 7: the draft's CUDA-graph capture
    fails at start-up, in the real call chain and with the runner's own advice."""
    from tests.twin.conftest import LaunchFailed, start_server

    with pytest.raises(LaunchFailed) as failed:
        start_server(fixed_workspace, tmp_path / "server.log", _spec(2, 2, 8))
    log = failed.value.log
    assert "Capture draft cuda graph begin." in log
    assert "RuntimeError: selected index k out of range" in log
    assert "During handling of the above exception, another exception occurred:" in log
    assert "Exception: Capture cuda graph failed: selected index k out of range" in log
    assert "1. set --mem-fraction-static to a smaller value" in log
    assert "eagle_utils.py" in log and "in organize_draft_results" in log
    assert "The server is fired up and ready to roll!" not in log


def test_an_eager_draft_fails_on_the_warm_up_request(fixed_workspace, tmp_path):
    """One draft step is not captured in a graph: the same topk fails on the first decode, the warm-up request,
    after the HTTP server came up."""
    from tests.twin.conftest import LaunchFailed, start_server

    with pytest.raises(LaunchFailed) as failed:
        start_server(fixed_workspace, tmp_path / "server.log", _spec(1, 4, 6))
    log = failed.value.log
    assert log.index("Uvicorn running on") < log.index("Scheduler hit an exception")
    assert "in event_loop_normal" in log and "in organize_draft_results" in log
    assert "RuntimeError: selected index k out of range" in log and "Capture cuda graph failed" not in log
    assert "The server is fired up and ready to roll!" not in log


def test_a_pruned_wide_tree_serves(fixed_workspace, tmp_path):
    from tests.twin.conftest import running

    with running(fixed_workspace, tmp_path / "server.log", _spec(6, 2, 8)) as server:
        assert "The server is fired up and ready to roll!" in server.log.read_text()
