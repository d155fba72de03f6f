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


# --- out of memory: which memory ran out, from SGLang's own messages -----------------------------------------------
# Templates copied from the SGLang release sources (the f-strings' text, values filled in below); no public log of the
# first two with a traceback was found, so the logs around them are built here the way SGLang prints them.
# sglang 0.5.14-0.5.23, _profile_available_bytes: srt/model_executor/model_runner_kv_cache_mixin.py (0.5.14, 0.5.15),
# srt/mem_cache/kv_cache_configurator.py (0.5.16 on); raised as a ValueError that names --mem-fraction-static
WEIGHTS_LEAVE_NO_KV = ("Loaded weights leave no GPU memory for the KV cache under --mem-fraction-static={fraction}. "
                       "Raise --mem-fraction-static above {suggested:.3f} (minimum viable = 1 - available/pre = "
                       "{minimum:.4f}). If using speculative decoding, draft weights are now counted.")  # fmt: skip
# sglang 0.5.12-0.5.23 srt/model_executor/pool_configurator.py, MemoryPoolConfig.__post_init__ (a RuntimeError)
NOT_ENOUGH = ("Not enough memory. Please try to increase --mem-fraction-static. Current value: "
              "mem_fraction_static={fraction}")
# sglang 0.5.23 srt/model_executor/runner/decode_cuda_graph_runner.py: f"Capture cuda graph failed: {e}\n{CUDA_GRAPH_
# CAPTURE_FAILED_MSG}" (runner_backend_utils/__init__.py), any RuntimeError of the capture
CAPTURE_FAILED = ("Exception: Capture cuda graph failed: {error}\nPossible solutions:\n"
                  "1. set --mem-fraction-static to a smaller value (e.g., 0.8 or 0.7)\n"
                  "2. set --cuda-graph-max-bs-decode to a smaller value (e.g., 16)\n"
                  "3. disable decode CUDA graph by --cuda-graph-backend-decode=disabled. (Not recommended. Huge "
                  "performance loss)\nOpen an issue on GitHub https://github.com/sgl-project/sglang/issues/new/choose \n")
# sglang 0.5.23 srt/mem_cache/allocation.py (srt/mem_cache/common.py in 0.5.12/0.5.13)
PREFILL_OOM = "RuntimeError: Prefill out of memory. Try to lower your batch size.\nTry to allocate {n} tokens.\n"
HIP_OOM = ("torch.OutOfMemoryError: HIP out of memory. Tried to allocate 4.78 GiB. GPU 0 has a total capacity of "
           "287.98 GiB of which 1.20 GiB is free.")  # fmt: skip
SCHEDULER = "[2026-05-01 10:00:00 TP0] Scheduler hit an exception: Traceback (most recent call last):\n"


def test_weights_leaving_no_kv_cache_is_a_startup_oom_not_a_flag_problem():
    message = WEIGHTS_LEAVE_NO_KV.format(fraction=0.8, suggested=0.853, minimum=0.8521)  # ceil(minimum, 3)
    log = (SCHEDULER + '  File "/sgl-workspace/sglang/python/sglang/srt/mem_cache/kv_cache_configurator.py", line 3051, '
           "in _profile_available_bytes\n    raise ValueError(\nValueError: " + message + "\n")  # fmt: skip
    d = classify(log)
    assert (d.category, d.memory_phase, d.flag) == ("out_of_memory", "startup_kv", None)
    assert (d.mem_fraction_static, d.min_mem_fraction_static) == (0.8, 0.853)
    assert d.summary == f"out of memory: ValueError: {message}"


def test_the_older_kv_pool_check_names_the_fraction():
    d = classify(SCHEDULER + "RuntimeError: " + NOT_ENOUGH.format(fraction=0.85) + "\n")
    assert (d.category, d.memory_phase, d.mem_fraction_static) == ("out_of_memory", "startup_kv", 0.85)
    assert d.min_mem_fraction_static is None


def test_a_graph_capture_oom_is_a_runtime_oom_and_another_capture_failure_is_none():
    d = classify("[TP0] Capture cuda graph begin. This can take up to several minutes. avail mem=20.00 GB\n"
                 + CAPTURE_FAILED.format(error=HIP_OOM.removeprefix("torch.OutOfMemoryError: ")))
    assert (d.category, d.memory_phase) == ("out_of_memory", "runtime")
    assert d.summary.startswith("out of memory: Exception: Capture cuda graph failed: HIP out of memory.")
    other = classify(CAPTURE_FAILED.format(error="HIP error: operation not permitted when stream is capturing"))
    assert other.category != "out_of_memory"


def test_an_allocator_oom_while_loading_weights_needs_more_gpus():
    log = ("[TP0] Load weight begin. avail mem=283.68 GB\n" + SCHEDULER
           + '  File "/sgl-workspace/sglang/python/sglang/srt/model_executor/model_runner.py", line 901, in load_model\n'
           "    self.model = self.loader.load_model(\n" + HIP_OOM + "\n")  # fmt: skip
    assert classify(log).memory_phase == "weights"
    no_frames = "[TP0] Load weight begin. avail mem=283.68 GB\n" + HIP_OOM + "\n"  # by the phase the log announced
    assert classify(no_frames).memory_phase == "weights"
    after = "[TP0] Load weight end. elapsed=20.1 s\n[TP0] KV Cache is allocated.\n" + HIP_OOM + "\n"
    assert classify(after).memory_phase == "runtime"


def test_the_engines_own_pools_running_dry_while_serving():
    d = classify(PREFILL_OOM.format(n=8192))
    assert (d.category, d.memory_phase) == ("out_of_memory", "kv_pool")
    assert d.summary == "out of memory: RuntimeError: Prefill out of memory. Try to lower your batch size."


def test_the_fraction_in_use_comes_from_the_server_args_when_the_message_does_not_name_it():
    log = ("[2026-05-01 09:59:00] server_args=ServerArgs(model_path='/m', tp_size=8, mem_fraction_static=0.88, "
           "chunked_prefill_size=16384)\n[TP0] Capture cuda graph begin.\n" + HIP_OOM + "\n")  # fmt: skip
    d = classify(log)
    assert (d.memory_phase, d.mem_fraction_static) == ("runtime", 0.88)
    unset = log.replace("mem_fraction_static=0.88", "mem_fraction_static=None")
    assert classify(unset).mem_fraction_static is None


def test_the_template_is_the_releases_own_when_a_release_is_cached():
    from sandboxes.twin.workspace.release import cached

    trees = [t for v in ("0.5.23", "0.5.22", "0.5.16", "0.5.14") if (t := cached(v)) is not None]
    if not trees:
        pytest.skip("no SGLang release with this check (0.5.14+) in the cache")
    pieces = ["Loaded weights leave no GPU memory for the KV cache under ", "Raise --mem-fraction-static above ",
              "(minimum viable = 1 - available/pre = ", "decoding, draft weights are now counted."]  # fmt: skip
    for tree in trees:
        files = [tree.package / "srt/mem_cache/kv_cache_configurator.py",
                 tree.package / "srt/model_executor/model_runner_kv_cache_mixin.py"]  # fmt: skip
        source = "".join(f.read_text() for f in files if f.is_file())
        assert all(p in source for p in pieces), tree.describe()


def test_a_main_model_failure_under_a_folder_named_for_speculation_is_the_main_models():
    """Issue 43: the folders a checkout or a run lives in (``runs/mtp-sweep/...``, ``eagle3-tests/``) are not the
    engine's code: only the engine-side tail of a frame's path and its function say the draft raised."""
    log = SHAPE.replace("/ws/sglang/", "/home/u/eagle3-tests/runs/mtp-sweep/sglang/").replace(
        "deepseek_nextn.py", "deepseek_v2.py")
    d = classify(log)
    assert d.category == "weight_shape_mismatch" and d.draft_model is False and d.component == "main_model"
    assert "the main model's parameter" in d.summary and "draft" not in d.summary
    assert classify(SHAPE).component == "draft_model"  # the draft's own model file raised


def test_a_launch_without_a_draft_never_fails_in_the_draft():
    d = classify(SHAPE, draft=False)
    assert d.draft_model is False and d.component == "main_model" and "the main model's" in d.summary
    assert classify(SHAPE, draft=True).draft_model is True


def test_only_speculation_with_a_draft_model_loads_one():
    from tools.server import loads_draft

    assert loads_draft({"speculative-algorithm": "EAGLE", "tp-size": 8})
    assert not loads_draft({"tp-size": 8}) and not loads_draft({"speculative-algorithm": "NGRAM"})
