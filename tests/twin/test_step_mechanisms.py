"""Issue 28's step mechanisms, on the cost model alone (no server, well under a second each): the fixed GPU cost of
a step follows the model's own kernels, the overlap scheduler hides the CPU's per-step work, and attention is
charged by kernel class, so a small or shallow model steps in a few milliseconds while GLM-5 keeps its calibrated
step."""

from __future__ import annotations

import pytest

from sandboxes.twin.models.arch import GQA, MLA, DenseMLP, Layer, LinearAttention, MoE
from sandboxes.twin.perf import kernels
from sandboxes.twin.perf.cost_model import CostModel
from sandboxes.twin.perf.serving_config import ServingConfig
from sandboxes.twin.scenario import load

GLM5 = load("glm5_fp8_mi355x")
GPT_OSS = load("gpt_oss_120b_mi355x")


def test_a_layers_kernels_are_counted_from_its_modules():
    """GLM-5's layer (MLA with a q LoRA, the DSA indexer, MoE with a shared expert) launches 31 kernels; the same
    layer without the indexer 22; GPT-OSS's (GQA with sinks, MoE without shared experts) 12; a Gated DeltaNet layer
    with a gated shared expert 19."""
    mla = MLA(num_heads=64, kv_lora_rank=512, qk_nope_head_dim=192, qk_rope_head_dim=64, v_head_dim=256,
              q_lora_rank=2048)  # fmt: skip
    dsa = MLA(**{**mla.__dict__, "index_topk": 2048, "index_heads": 32, "index_head_dim": 128})
    moe_shared = MoE(num_experts=256, top_k=8, intermediate_size=2048, shared_intermediate_size=2048)
    assert kernels.layer_kernels(Layer(dsa, moe_shared)) == 2 + 11 + 9 + 9
    assert kernels.layer_kernels(Layer(mla, moe_shared)) == 22
    assert kernels.layer_kernels(Layer(mla, DenseMLP(18432))) == 2 + 11 + 3
    gqa = GQA(num_heads=64, num_kv_heads=8, head_dim=64, sliding_window=128, sinks=True)
    assert kernels.layer_kernels(Layer(gqa, MoE(num_experts=128, top_k=4, intermediate_size=2880))) == 12
    linear = LinearAttention(num_key_heads=16, num_value_heads=64, key_head_dim=128, value_head_dim=128,
                             conv_kernel=4)  # fmt: skip
    qwen_moe = MoE(num_experts=512, top_k=10, intermediate_size=1024, shared_intermediate_size=1024,
                   shared_expert_gate=True)  # fmt: skip
    assert kernels.layer_kernels(Layer(linear, qwen_moe)) == 2 + 7 + 10


def test_fixed_costs_scale_with_the_models_layers_and_kernels():
    """The launches of a step are the model's kernels times the engine's per-kernel cost: GPT-OSS (36 layers of 12
    kernels) pays less than a fifth of GLM-5's (78 layers of ~31), and a draft step pays its one layer's."""
    cfg = ServingConfig(tp_size=8)
    glm, oss = CostModel(GLM5, cfg), CostModel(GPT_OSS, cfg)
    assert oss.model_kernels == 36 * 12 and glm.model_kernels == sum(kernels.layer_kernels(layer)
                                                                     for layer in GLM5.model.arch.layers)  # fmt: skip
    per_kernel = GLM5.calibration.kernel_overhead_us * 1e-6
    assert oss.kernel_overhead(4) == pytest.approx(432 * per_kernel)
    assert oss.kernel_overhead(4) < glm.kernel_overhead(4) / 5
    assert glm.kernel_overhead(4, layers=1) == pytest.approx(kernels.draft_layer_kernels(GLM5.model.arch) * per_kernel)
    # above the captured graphs' batch every kernel is launched eagerly
    eager = CostModel(GPT_OSS, ServingConfig(tp_size=8, cuda_graph_max_bs=2))
    assert eager.kernel_overhead(4) == pytest.approx(432 * per_kernel * GPT_OSS.calibration.eager_overhead_factor)


def test_a_small_model_steps_in_a_few_milliseconds_under_the_overlap_scheduler():
    """GPT-OSS-120B alone on one GPU: its GPU work per step is ~2 ms (weights of 4 experts a layer, 432 kernels), so
    the step is the CPU's per-step work, hidden under nothing: single-digit ms. Without the overlap loop, the CPU's
    work adds to the GPU's."""
    on = CostModel(GPT_OSS, ServingConfig(tp_size=1))
    off = CostModel(GPT_OSS, ServingConfig(tp_size=1, disable_overlap_schedule=True))
    t = on.decode_terms(1, 2000)
    gpu = max(t["weight_reads"] + t["kv_reads"], t["compute"]) + t["communication"] + t["kernel_launch"]
    assert gpu < t["scheduler"] < 0.010
    assert on.decode(1, 2000).total == pytest.approx(t["scheduler"])
    assert off.decode(1, 2000).total == pytest.approx(gpu + t["scheduler"])


def test_glm5s_step_is_its_gpu_work_with_or_without_the_cpus_hidden_share():
    """GLM-5's step is far longer than the CPU's work: the overlap loop hides all of it, and the step is the sum of
    its GPU terms (the sparse kernels' latency floor included), as calibrated."""
    model = CostModel(GLM5, ServingConfig(tp_size=4, kv_cache_dtype="fp8_e4m3", moe_tuned=True))
    t = model.decode_terms(4, 4 * 9000)
    gpu = max(t["weight_reads"] + t["kv_reads"], t["compute"]) + t["communication"] + t["kernel_launch"]
    assert gpu > 2 * t["scheduler"]
    assert model.decode(4, 4 * 9000).total == pytest.approx(gpu)
    floor = 78 * GLM5.calibration.sparse_attention_latency_us * 1e-6
    assert t["kernel_launch"] == pytest.approx(model.kernel_overhead(4) + floor)


def test_dense_attention_runs_at_its_kernel_class_rate():
    """Dense attention (MHA/GQA prefill, MLA in MHA form) runs at the dense kernels' efficiency, the sparse-MLA
    and indexer kernels at the sparse one (the gfx950 kernel sheet's, fitted on GLM-5): a DSA model's attention is
    not charged at FlashAttention's rate, nor a dense model's at GLM-5's sparse kernels'."""
    from sandboxes.twin.perf import kernel_sheet

    cal = GLM5.calibration
    sparse = kernel_sheet.load(GLM5.hardware.gfx_arch).sparse_mla_efficiency
    model = CostModel(GLM5, ServingConfig(tp_size=8))
    assert model.dense_attn_flops / model.attn_flops == pytest.approx(cal.dense_attention_efficiency / sparse)
    assert all(model.attention_flops(g) == model.attn_flops for g in model.attention)
    oss = CostModel(GPT_OSS, ServingConfig(tp_size=8))
    assert all(oss.attention_flops(g) == oss.dense_attn_flops for g in oss.attention)
