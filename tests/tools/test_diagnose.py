"""diagnose_crash classifies by the mechanisms' own messages and extracts the entities."""

from __future__ import annotations

import pytest

from tools.diagnose import classify, moe_fallbacks

# SGLang's own loader messages (model_loader/weight_utils.py default_weight_loader, layers/linear.py
# ReplicatedLinear.weight_loader); real logs of every form are in test_diagnose_real.py
SHAPE = """[2026 TP0] Load weight begin. avail mem=283.68 GB
[2026 TP0] Scheduler hit an exception: Traceback (most recent call last):
  File "/ws/sglang/python/sglang/srt/models/deepseek_nextn.py", line 160, in load_weights
    super().load_weights(weights, is_nextn=True)
  File "/ws/sglang/python/sglang/srt/model_loader/weight_utils.py", line 1047, in default_weight_loader
    assert param.size() == loaded_weight.size(), (
AssertionError: Attempted to load weight (torch.Size([4096, 1024])) into parameter (torch.Size([4096, 512]))
"""
REPLICATED = """  File "/ws/sglang/python/sglang/srt/layers/linear.py", line 290, in weight_loader
    assert param.size() == loaded_weight.size(), (
AssertionError: param.shape=torch.Size([4096, 512]) param.dtype=torch.uint8 loaded_weight.shape=torch.Size([4096, 1024]) loaded_weight.dtype=torch.bfloat16
"""
# two ranks' tracebacks interleaved line by line, as vLLM's multiproc executor prints them
_W0 = "(Worker_TP0 pid=11) ERROR 04-28 07:10:22 [multiproc_executor.py:857]"
_W3 = "(Worker_TP3 pid=14) ERROR 04-28 07:10:22 [multiproc_executor.py:857]"
INTERLEAVED = f"""{_W0}   File "/v/vllm/model_executor/models/some_moe.py", line 500, in load_weights
{_W3}   File "/v/vllm/v1/spec_decode/eagle.py", line 1239, in _get_model
{_W0}     weight_loader(param, loaded_weight)
{_W3}     model = get_model(
{_W0}   File "/v/vllm/model_executor/layers/fused_moe/layer.py", line 1222, in weight_loader
{_W0}     expert_data.copy_(loaded_weight)
{_W0} RuntimeError: The size of tensor a (3072) must match the size of tensor b (6144) at non-singleton dimension 1
"""
COMPILE = "/ws/sglang/sgl-kernel/csrc/a.cuh:12:10: fatal error: cuda_fp16.h: No such file or directory\ncompilation terminated.\n"
OOM = "torch.OutOfMemoryError: HIP out of memory. Tried to allocate 20.00 GiB. GPU 0 has a total capacity of 287.98 GiB\n"
SMALL = "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static. Current value: 0.2\n"
ARGPARSE = "usage: python3 -m sglang.launch_server [-h]\nlaunch_server: error: argument --kv-cache-dtype: invalid choice: 'fp3'\n"
UNKNOWN_FLAG = "launch_server: error: unrecognized arguments: --turbo\n"
LAYOUT = "[TP0] Scheduler hit an exception: ValueError: tp_size * dp_size = 16 GPUs requested but only 8 are visible\n"
RCCL = "RuntimeError: NCCL error in: ProcessGroupNCCL.cpp:1970, unhandled system error, ncclSystemError\n"


@pytest.mark.parametrize(
    "log,category,fields",
    [
        (SHAPE, "weight_shape_mismatch", {"checkpoint_shape": [4096, 1024], "engine_shape": [4096, 512],
                                          "loader": "/ws/sglang/python/sglang/srt/model_loader/weight_utils.py:1047 "
                                                    "default_weight_loader",
                                          "model_file": "/ws/sglang/python/sglang/srt/models/deepseek_nextn.py",
                                          "draft_model": True}),
        (REPLICATED, "weight_shape_mismatch", {"engine_shape": [4096, 512], "engine_dtype": "torch.uint8",
                                               "checkpoint_shape": [4096, 1024], "checkpoint_dtype": "torch.bfloat16"}),
        (INTERLEAVED, "weight_shape_mismatch", {"engine_shape": [3072], "checkpoint_shape": [6144],
                                                "model_file": "/v/vllm/model_executor/models/some_moe.py",
                                                "draft_model": False}),
        (COMPILE, "compile_error", {"header": "cuda_fp16.h", "line": 12, "file": "/ws/sglang/sgl-kernel/csrc/a.cuh"}),
        (OOM, "out_of_memory", {}),
        (SMALL, "out_of_memory", {}),
        (ARGPARSE, "invalid_flag", {"flag": "--kv-cache-dtype"}),
        (UNKNOWN_FLAG, "invalid_flag", {"flag": "--turbo"}),
        (LAYOUT, "invalid_flag", {}),
        (RCCL, "collective_error", {}),
        ("all fine\nnothing here\n", "unknown", {}),
    ],
)  # fmt: skip
def test_classify(log, category, fields):
    d = classify(log)
    assert d.category == category, d
    for k, v in fields.items():
        assert getattr(d, k) == v
    assert d.summary


def test_hang_when_timed_out_without_an_error():
    assert classify("[TP0] Capture cuda graph begin.\n", timed_out=True).category == "hang_timeout"


def test_moe_fallback_shapes_are_deduplicated():
    line = ("[aiter] [fused_moe] using 2stage default for (256, {t}, 4096, 1024, 64, 4, 'ActivationType.Silu', "
            "'torch.bfloat16', 'torch.float8_e4m3fn', 'torch.float8_e4m3fn', 'QuantType.per_Token', True, False)\n")
    shapes = moe_fallbacks("".join(line.format(t=t) for t in (1, 64, 1024)))
    assert len(shapes) == 1
    assert (shapes[0].model_dim, shapes[0].inter_dim, shapes[0].expert, shapes[0].topk) == (4096, 1024, 64, 4)
    assert shapes[0].q_dtype_w == "torch.float8_e4m3fn"
