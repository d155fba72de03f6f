"""The gfx950 kernel sheet (``data/hardware/kernels/gfx950.yaml``): its fused-MoE curve is aiter's measured tuned
kernels, and the cost model charges every MoE model's experts from it, whatever the scenario's lumped GEMM
constant says."""

from __future__ import annotations

import math

import pytest

from sandboxes.twin.perf import kernel_sheet
from sandboxes.twin.perf.cost_model import CostModel
from sandboxes.twin.perf.serving_config import ServingConfig
from sandboxes.twin.scenario import load
from sandboxes.twin.scenario.hardware import sheet

BYTES_PER_PARAM = kernel_sheet.BYTES_PER_PARAM


def test_the_moe_curve_reproduces_aiters_measured_kernels():
    """Every row the sheet carries (GLM-5 and Qwen3.5 FP8, Qwen3.5 and DeepSeek-R1 MXFP4, two intermediate sizes),
    from 16 tokens: the sheet's larger-of(bytes, FLOPs) is within 15 % rms of the tuned kernels' measured time and
    never off by more than 1.5x, over decode and prefill batches alike."""
    gpu = sheet("mi355x")
    moe = kernel_sheet.load("gfx950").fused_moe
    assert moe is not None and len(moe.measured) >= 6
    errors = []
    for row in moe.measured:
        for tokens, us in row["us_by_tokens"].items():
            if int(tokens) < 16:  # below, the kernels' latency floor
                continue
            t = kernel_sheet.layer_seconds(moe, row, int(tokens), gpu["peak_tflops"], gpu["memory_bandwidth_tbs"],
                                           BYTES_PER_PARAM[row["dtype"]])  # fmt: skip
            errors.append(math.log(t * 1e6 / us))
    rms = math.sqrt(sum(e * e for e in errors) / len(errors))
    assert len(errors) >= 60 and rms <= 0.16
    assert max(abs(e) for e in errors) <= math.log(1.5)


def test_an_intermediate_size_between_measured_ones_interpolates_and_outside_takes_the_nearest():
    moe = kernel_sheet.load("gfx950").fused_moe
    low, high = moe.compute_efficiency("mxfp4", 256), moe.compute_efficiency("mxfp4", 512)
    assert low < moe.compute_efficiency("mxfp4", 362) < high
    assert moe.compute_efficiency("mxfp4", 128) == low and moe.compute_efficiency("mxfp4", 2048) == high
    assert moe.compute_efficiency("fp8", 512) == moe.compute_efficiency("fp8", 256)
    assert moe.compute_efficiency("bf16", 256) is None  # no measurement: the calibration's constant applies


@pytest.mark.parametrize("scenario", ["qwen35_397b_mxfp4_mi355x", "deepseek_r1_mxfp4_mi355x", "glm5_fp8_mi355x"])
def test_every_moe_model_on_gfx950_takes_its_experts_from_the_sheet(scenario):
    """The routed experts stream at the sheet's share of the HBM peak and compute at its share of the dtype's peak
    for the model's own per-GPU expert size, tuned; an untuned selection at the sheet's untuned share of that."""
    sc = load(scenario)
    moe = kernel_sheet.load("gfx950").fused_moe
    fmt = sc.quantization.weight_format
    for tp in (2, 4, 8):
        tuned = CostModel(sc, ServingConfig(tp_size=tp, moe_tuned=True))
        untuned = CostModel(sc, ServingConfig(tp_size=tp, moe_tuned=False))
        eff = moe.compute_efficiency(fmt, sc.model.moe.intermediate_size / tp)
        assert tuned.moe_bw == pytest.approx(sc.hardware.memory_bandwidth_tbs * 1e12 * moe.bandwidth)
        assert tuned.moe_flops == pytest.approx(sc.hardware.peak_tflops[fmt] * 1e12 * eff)
        assert untuned.moe_flops == pytest.approx(tuned.moe_flops * moe.untuned_share)


def _experts_layer_us(model: CostModel, tokens: int) -> float:
    """One MoE layer's routed experts at ``tokens`` tokens as the cost model charges them (the larger of their
    bytes and FLOPs, as the sheet's curve is built)."""
    s, spec = model.sizes, model.scenario.model
    bw, rate = model.moe_rates(tokens)
    memory = model.experts_touched(tokens) * model.expert_bytes / model.moe_g / bw
    compute = 2 * tokens * spec.moe.top_k * s.expert_params / model.flop_g / rate
    return max(memory, compute) * 1e6


def test_a_shape_the_tables_list_costs_its_measured_time_and_any_other_the_curve():
    """Qwen3.5-397B MXFP4 at TP2 runs its 512 routed experts (top 10; the shared expert beside them) at 512
    intermediate columns a GPU: aiter's table lists that very shape (FlyDSL's MXMoE kernels from 16 to 128 tokens),
    so its decode experts cost the measured 190.3 us a layer at 64 tokens, not the curve's 243; between listed counts
    log-linear, under 16 tokens and beyond the last listed count the curve. GLM-5's 256 experts (top 8) appear in the
    tables only with the shared expert fused (257, top 9): the curve."""
    moe = kernel_sheet.load("gfx950").fused_moe
    qwen = CostModel(load("qwen35_397b_mxfp4_mi355x"), ServingConfig(tp_size=2, moe_tuned=True))
    assert _experts_layer_us(qwen, 64) == pytest.approx(190.3, rel=0.01)
    assert _experts_layer_us(qwen, 256) == pytest.approx(278.2, rel=0.01)
    between = _experts_layer_us(qwen, 96)
    assert 190.3 < between < 239.6
    assert qwen.moe_rates(8) == (qwen.moe_bw, qwen.moe_flops)  # the latency floor: the curve's rates
    assert qwen.moe_rates(65536) == (qwen.moe_bw, qwen.moe_flops)  # beyond the row
    curve_row = {"model_dim": 4096, "inter_dim": 512, "experts": 512, "top_k": 10, "dtype": "mxfp4"}
    gpu = sheet("mi355x")
    curve = kernel_sheet.layer_seconds(moe, curve_row, 64, gpu["peak_tflops"], gpu["memory_bandwidth_tbs"],
                                       BYTES_PER_PARAM["mxfp4"]) * 1e6  # fmt: skip
    assert curve > 230  # what the fit alone would charge
    glm = CostModel(load("glm5_fp8_mi355x"), ServingConfig(tp_size=8, moe_tuned=True))
    for tokens in (16, 64, 512, 4096):
        assert glm.moe_rates(tokens) == (glm.moe_bw, glm.moe_flops)
