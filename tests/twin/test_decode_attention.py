"""A dense layer's decode attention streams its KV at the speed of the kernel the flags select (perf/decode_attention.py):
SGLang's Triton backend and aiter's Triton unified attention at their measured 2.2 TB/s on MI355X, aiter's HIP paged
attention and MLA's kernels at the calibrated stream; aiter's unified attention rereads the KV for every verify token."""

from __future__ import annotations

import dataclasses

import pytest

from sandboxes.twin.perf.cost_model import CostModel
from sandboxes.twin.perf.serving_config import with_engine_environment
from sandboxes.twin.scenario import load
from tests.benchmarks.cost_fingerprint import serving_config

QWEN = "qwen35_397b_mxfp4_mi355x"  # 15 GQA (head_dim 256) + 45 Gated DeltaNet layers
SPEC = ["--speculative-algorithm", "EAGLE", "--speculative-num-steps", "3", "--speculative-eagle-topk", "1",
        "--speculative-num-draft-tokens", "4"]  # fmt: skip
BATCH, CONTEXT = 64, 8000


def kv_reads(scenario: str, flags: list[str], env: dict[str, str] | None = None, tokens: int = 1) -> float:
    sc = load(scenario)
    cfg = with_engine_environment(serving_config(sc, flags, tuned=True), env or {})
    return CostModel(sc, cfg).decode_terms(BATCH, BATCH * CONTEXT, tokens)["kv_reads"]


def test_the_triton_backend_streams_gqa_kv_at_its_measured_bandwidth() -> None:
    sc = load(QWEN)
    aiter = kv_reads(QWEN, ["--tp-size", "4"])
    triton = kv_reads(QWEN, ["--tp-size", "4", "--attention-backend", "triton"])
    # the calibrated stream (hbm_efficiency of the peak) against 2.2 TB/s of the 8.0 TB/s peak
    assert triton / aiter == pytest.approx(sc.calibration.hbm_efficiency / 0.275, rel=1e-9)
    # the same bytes: 15 layers x 8000 keys x one KV head of 256 in bf16 (K and V) per sequence
    assert triton == pytest.approx(BATCH * 15 * CONTEXT * 2 * 256 * 2 / (sc.hardware.memory_bandwidth_tbs * 1e12 * 0.275))


def test_aiter_unified_attention_is_the_environment_s_choice_and_rereads_kv_per_verify_token() -> None:
    paged = kv_reads(QWEN, ["--tp-size", "2"])
    unified = kv_reads(QWEN, ["--tp-size", "2"], {"SGLANG_USE_AITER_UNIFIED_ATTN": "1"})
    assert unified > 2.5 * paged
    assert kv_reads(QWEN, ["--tp-size", "2"], {"SGLANG_USE_AITER_UNIFIED_ATTN": "0"}) == paged
    # a verify of 4 tokens: four reads through unified attention, sqrt(4) through the kernels that share a KV tile
    env = {"SGLANG_USE_AITER_UNIFIED_ATTN": "1"}
    assert kv_reads(QWEN, ["--tp-size", "2", *SPEC], env, 4) == pytest.approx(4 * kv_reads(QWEN, ["--tp-size", "2", *SPEC], env, 1))
    assert kv_reads(QWEN, ["--tp-size", "2", *SPEC], None, 4) == pytest.approx(2 * kv_reads(QWEN, ["--tp-size", "2", *SPEC], None, 1))


def test_mla_keeps_its_own_kernels_whatever_the_dense_backend() -> None:
    flags = ["--tp-size", "4", "--kv-cache-dtype", "fp8_e4m3"]
    base = kv_reads("glm5_fp8_mi355x", flags)
    assert kv_reads("glm5_fp8_mi355x", flags, {"SGLANG_USE_AITER_UNIFIED_ATTN": "1"}) == base


def test_the_engine_environment_sets_what_the_flags_do_not() -> None:
    sc = load(QWEN)
    cfg = serving_config(sc, ["--tp-size", "2"], tuned=True)
    assert with_engine_environment(cfg, {}) is cfg
    env = with_engine_environment(cfg, {"SGLANG_USE_AITER_UNIFIED_ATTN": "true", "SGLANG_MAMBA_SSM_DTYPE": "bfloat16"})
    assert env == dataclasses.replace(cfg, aiter_unified_attention=True, mamba_ssm_dtype="bfloat16")
    # the bf16 state halves the recurrent state's traffic (configs/mamba_utils.py reads the variable first)
    half = CostModel(sc, env).decode_terms(BATCH, BATCH * CONTEXT)["state_reads"]
    full = CostModel(sc, cfg).decode_terms(BATCH, BATCH * CONTEXT)["state_reads"]
    assert half < 0.55 * full



def test_the_launcher_reads_the_engine_environment() -> None:
    """A launched server serves with what its environment sets: the same flags with and without the variable."""
    from sandboxes.twin.engine import server_args
    from sandboxes.twin.launch_server import config_from_args
    from tests.benchmarks.cost_fingerprint import build_config

    sc = load(QWEN)
    config = build_config(sc)
    args = server_args.parse(["--model-path", "/nonexistent", "--tp-size", "2"])
    server_args.resolve(args, server_args.ModelInfo.from_config(config, args.context_length),
                        server_args.Platform.from_hardware(sc.hardware), env={})  # fmt: skip
    fmt = sc.quantization.weight_format
    plain = config_from_args(args, fmt, config, True, environ={})
    unified = config_from_args(args, fmt, config, True, environ={"SGLANG_USE_AITER_UNIFIED_ATTN": "1"})
    assert not plain.aiter_unified_attention and unified.aiter_unified_attention
