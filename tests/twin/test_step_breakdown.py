"""The decode-step breakdown (``perf.breakdown``) is the cost model's own step, split: its components add up to
``CostModel.decode_terms`` term by term, for a hybrid linear-attention model under speculation and for GLM-5."""

from __future__ import annotations

import pytest

from sandboxes.twin.perf.breakdown import decode_components, paid
from sandboxes.twin.perf.cost_model import CostModel
from sandboxes.twin.scenario import load
from tests.benchmarks.cost_fingerprint import serving_config

SPEC = ["--speculative-algorithm", "EAGLE", "--speculative-num-steps", "3", "--speculative-eagle-topk", "1",
        "--speculative-num-draft-tokens", "4"]  # fmt: skip


@pytest.mark.parametrize(
    ("scenario", "flags", "tokens"),
    [
        ("qwen35_397b_mxfp4_mi355x", ["--tp-size", "2", *SPEC], 4),
        ("glm5_fp8_mi355x", ["--tp-size", "4", "--kv-cache-dtype", "fp8_e4m3"], 1),
        ("qwen35_397b_mxfp4_mi355x", ["--tp-size", "4", "--attention-backend", "triton"], 1),  # a measured KV stream
    ],
)
def test_components_add_up_to_the_terms(scenario: str, flags: list[str], tokens: int) -> None:
    sc = load(scenario)
    model = CostModel(sc, serving_config(sc, flags, tuned=False))
    batch, context = 16, 7834.0
    terms = model.decode_terms(batch, batch * context, tokens)
    comps = decode_components(model, batch, context, tokens)
    for term in ("weight_reads", "kv_reads", "state_reads", "compute", "communication", "kernel_launch", "scheduler",
                 "draft"):
        assert sum(c.seconds for c in comps if c.term == term) == pytest.approx(terms[term], rel=1e-9), term
    assert {c.term for c in comps} >= {"weight_reads", "compute", "communication"}
    # per kernel class, no class's FLOPs hide under another's bytes: never less than the cost model's lump
    memory = terms["weight_reads"] + terms["kv_reads"] + terms["state_reads"]
    assert paid(comps) >= max(memory, terms["compute"]) * (1 - 1e-9)
    # the routed experts' component says how many tokens each touched expert sees (the MoE kernel's regime)
    experts = next(c for c in comps if c.name.startswith("routed experts"))
    assert "tok/expert" in experts.detail and experts.bytes > 0
