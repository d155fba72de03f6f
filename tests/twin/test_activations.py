"""The memory a forward pass takes outside the static pool (``sandboxes/twin/engine/activations.py``): a prefill
chunk's activations and the graphs' pool follow the model's layers, the TP degree, the chunk and the captured
batch, not a constant; and a published configuration that really ran starts."""

from __future__ import annotations

import dataclasses

import pytest

from sandboxes.twin.engine import activations as act
from sandboxes.twin.engine.memory import OutOfMemory, plan_memory
from sandboxes.twin.models.arch import MoE
from sandboxes.twin.perf.cost_model import CostModel
from sandboxes.twin.perf.serving_config import ServingConfig
from sandboxes.twin.scenario import load

GIB = 1024**3


@pytest.fixture(scope="module")
def moe_model():
    return load("glm52_mi355x")  # MLA attention, routed and shared experts


@pytest.fixture(scope="module")
def dense_model():
    return load("lyra_mi355x")


def test_a_prefill_token_holds_its_residual_stream_and_the_larger_of_its_mixer_and_mlp(moe_model):
    arch = moe_model.model.arch
    per_token = act.per_token_bytes(arch, 8)
    moe = next(la.mlp for la in arch.layers if isinstance(la.mlp, MoE))
    # every routed copy of a token keeps a hidden-size row until the top-k sum: that alone is k x hidden x 2 bytes
    assert per_token >= act.ACTIVATION_BYTES * (3 * arch.hidden_size + moe.top_k * arch.hidden_size)
    # more experts per token, more rows
    wider = dataclasses.replace(arch, layers=tuple(
        dataclasses.replace(la, mlp=dataclasses.replace(la.mlp, top_k=la.mlp.top_k * 2))
        if isinstance(la.mlp, MoE) else la for la in arch.layers))  # fmt: skip
    assert act.per_token_bytes(wider, 8) > per_token


def test_tp_shrinks_what_is_split_over_heads_and_shards_but_not_the_residual_stream(moe_model, dense_model):
    for sc in (moe_model, dense_model):
        arch = sc.model.arch
        one, eight = act.per_token_bytes(arch, 1), act.per_token_bytes(arch, 8)
        assert eight < one
        assert eight > act.ACTIVATION_BYTES * 3 * arch.hidden_size


def test_a_chunk_costs_its_tokens_plus_the_releases_constant_metadata(dense_model):
    arch, cfg = dense_model.model.arch, ServingConfig(tp_size=4)
    small, large = act.prefill_bytes(arch, cfg, 4096), act.prefill_bytes(arch, cfg, 8192)
    assert large - small == pytest.approx(4096 * act.per_token_bytes(arch, 4))
    assert small - 4096 * act.per_token_bytes(arch, 4) == act.CONSTANT_METADATA_BYTES


def test_the_graph_pool_grows_with_the_largest_batch_and_its_draft_tokens(moe_model):
    arch, vocab = moe_model.model.arch, moe_model.model.vocab_size
    pool = {
        bs: act.graph_pool_bytes(arch, ServingConfig(tp_size=8, cuda_graph_max_bs=bs), vocab)
        for bs in (64, 512)
    }
    assert pool[512] > pool[64] > act.GRAPH_POOL_OVERHEAD_BYTES
    # the logits of every row of the largest batch, bf16 gathered and fp32, are in it
    assert pool[512] - pool[64] >= 448 * vocab * act.LOGIT_BYTES
    spec = ServingConfig(
        tp_size=8, cuda_graph_max_bs=64, speculative_algorithm="EAGLE", speculative_num_draft_tokens=4
    )
    assert act.graph_pool_bytes(arch, spec, vocab) > pool[64]
    assert act.graph_pool_bytes(arch, ServingConfig(tp_size=8, disable_cuda_graph=True), vocab) == 0.0


def test_a_scenarios_own_measured_activations_still_decide(dense_model):
    cfg = ServingConfig(tp_size=8, chunked_prefill_size=16384)
    derived = plan_memory(CostModel(dense_model, cfg))
    measured = dataclasses.replace(
        dense_model, calibration=dataclasses.replace(dense_model.calibration, activation_gb_per_gpu=12.0)
    )
    plan = plan_memory(CostModel(measured, cfg))
    assert plan.activation_bytes == pytest.approx(12.0 * GIB) != derived.activation_bytes
    assert plan.activation_per_token == pytest.approx(12.0 * GIB / 16384)


def test_graphs_that_do_not_fit_beside_the_static_pool_fail_at_capture(moe_model):
    # all but 0.5 % of the memory static: not even the graphs' pool fits
    with pytest.raises(OutOfMemory, match="HIP out of memory"):
        plan_memory(CostModel(moe_model, ServingConfig(tp_size=8, mem_fraction_static=0.995)))


def test_a_published_cell_that_ran_with_a_large_chunk_starts():
    """SGLang's cookbook benchmarks GLM-5.1-FP8 on 8 x MI300X with ``--tp 8 --chunked-prefill-size 131072
    --mem-fraction-static 0.8`` (sgl-project/sglang#30812); the twin refused it when it reserved 6 GB per 16k chunk
    tokens and 24 MB per captured batch (60 GB against the 38 GB outside the static pool). GLM-5-FP8's scenario has
    GLM-5.1-FP8's architecture and dimensions (``scenarios/configs/zai-org--GLM-5``), on an MI300X here."""
    sc = load("glm5_fp8_mi355x")
    sc = dataclasses.replace(sc, hardware=load("kimi_k2_fp8_mi300x").hardware)
    assert sc.hardware.memory_gb == 192
    plan = plan_memory(CostModel(sc, ServingConfig(tp_size=8, chunked_prefill_size=131072, mem_fraction_static=0.8)))
    assert plan.free_bytes > 0 and plan.activation_bytes > 8 * GIB  # a 131072-token chunk is not free either
