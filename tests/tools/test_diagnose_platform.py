"""classify on the failure classes a bring-up meets below the engine's configuration (issue 43): PyTorch's
load_state_dict mismatches, compiler-driver errors, refused server arguments, kernel libraries without a kernel,
quantization schemes, missing ops, graph-capture refusals and tokenizer failures.

The logs here are short forms of the mechanisms' own messages; the real public logs of every class are scored in
test_diagnose_real.py (data/real_logs/SOURCES.yaml, logs 87 on)."""

from __future__ import annotations

from tools.diagnose import classify

_MISMATCH = ("size mismatch for {name}: copying a param with shape torch.Size([{ckpt}]) from checkpoint, the shape in "
             "current model is torch.Size([{engine}]).")  # fmt: skip


def test_a_state_dict_mismatch_names_the_parameter_and_both_shapes():
    log = "\n".join(["RuntimeError: Error(s) in loading state_dict for Model:",
                     "\t" + _MISMATCH.format(name="lm_head.weight", ckpt="32000, 4096", engine="128256, 4096"),
                     "\t" + _MISMATCH.format(name="norm.weight", ckpt="4096", engine="2048")])  # fmt: skip
    d = classify(log)
    assert d.category == "weight_shape_mismatch"
    assert (d.parameter, d.checkpoint_shape, d.engine_shape) == ("lm_head.weight", [32000, 4096], [128256, 4096])
    assert "lm_head.weight" in d.summary


def test_a_state_dict_mismatch_without_its_header_and_behind_a_rank_prefix():
    d = classify("[rank3]:        " + _MISMATCH.format(name="model.layers.0.mlp.gate_proj.weight", ckpt="1024, 512",
                                                        engine="2048, 512"))  # fmt: skip
    assert d.category == "weight_shape_mismatch"
    assert (d.parameter, d.checkpoint_shape, d.engine_shape) == ("model.layers.0.mlp.gate_proj.weight", [1024, 512],
                                                                 [2048, 512])  # fmt: skip


def test_a_driver_error_is_a_compile_error_for_its_gfx_target():
    for line, target in [("clang-14: error: invalid target ID 'gfx1201'; format is a processor name ...", "gfx1201"),
                         ("/opt/rocm/llvm/bin/clang++: error: unsupported CUDA gpu architecture: gfx90a", "gfx90a"),
                         ("c++: error: unrecognized command line option '--offload-arch=gfx942'", "gfx942"),
                         ("clang: error: cannot find ROCm device library; provide its path via '--rocm-path'", None)]:
        d = classify(f"[ 10%] Building HIP object k.hip.o\n{line}\nmake[2]: *** [build.make:76: k.hip.o] Error 1\n")
        assert (d.category, d.target, d.file, d.header) == ("compile_error", target, None, None), line
        assert line.split("error: ", 1)[1][:30] in d.summary


def test_a_source_position_wins_over_the_driver_and_the_error_count():
    log = ("/ws/k.cu:12:10: fatal error: 'cuda_fp8.h' file not found\n1 error generated when compiling for gfx950.\n"
           "clang++: error: clang frontend command failed with exit code 1\n")
    d = classify(log)
    assert (d.category, d.file, d.line, d.header) == ("compile_error", "/ws/k.cu", 12, "cuda_fp8.h")


def test_an_error_count_whose_errors_were_cut_names_the_target():
    d = classify("4 errors generated when compiling for gfx1100.\nmake[2]: *** [build.make:245: a.cpp.o] Error 1\n")
    assert (d.category, d.target) == ("compile_error", "gfx1100")
    assert "not in the log" in d.summary
    assert classify("2 errors generated.\n").target is None


# --- a refused server argument: the flag, or the value the message refuses -----------------------------------------
def test_an_assertion_of_the_argument_checks_is_a_refused_flag():
    log = ('  File "/sgl-workspace/sglang/python/sglang/srt/server_args.py", line 1203, in _handle_attention_backend\n'
           '    assert self.speculative_algorithm is None, (\n'
           "AssertionError: --speculative-algorithm is not supported with --attention-backend torch_native\n")
    d = classify(log)
    assert (d.category, d.flag) == ("invalid_flag", "--speculative-algorithm")


def test_a_backend_refused_by_its_enum_value_names_the_argument_that_chose_it():
    d = classify("ValueError: Selected backend AttentionBackendEnum.ROCM_ATTN is not valid for this configuration. "
                 "Reason: ['sink setting not supported']\n")
    assert (d.category, d.flag, d.value) == ("invalid_flag", "--attention-backend", "ROCM_ATTN")
    # an enum value a message merely mentions is no refusal
    assert classify("ValueError: AttentionBackendEnum.TRITON_ATTN selected, but the KV cache is empty\n").category \
        == "unknown"


def test_a_message_over_several_lines_blames_the_parameter_it_advises_to_change():
    d = classify("AssertionError: Aiter MLA only supports 16 or 128 number of heads.\nProvided 8 number of heads.\n"
                 "Try adjusting tensor_parallel_size value.\n")
    assert (d.category, d.flag) == ("invalid_flag", "--tensor-parallel-size")
    assert "Try adjusting tensor_parallel_size" in d.summary
    # the next record of the log is no part of the message
    d = classify("AssertionError: nhead=8 not supported\nINFO 10-10 server.py:12] set tensor_parallel_size to 8\n")
    assert d.category == "unknown"


# --- what the engine runs on ---------------------------------------------------------------------------------------
def test_an_op_the_kernel_library_lacks():
    d = classify("AttributeError: '_OpNamespace' 'sgl_kernel' object has no attribute 'awq_dequantize'\n")
    assert (d.category, d.library, d.symbol) == ("missing_op", "sgl_kernel", "awq_dequantize")
    d = classify("NotImplementedError: Could not run 'aiter::rmsnorm2d_fwd' with arguments from the 'CPU' backend.\n")
    assert (d.category, d.library, d.symbol) == ("missing_op", "aiter", "rmsnorm2d_fwd")


def test_a_quantization_scheme_the_gpu_or_the_release_cannot_run():
    for line, scheme in [("ValueError: The quantization method fp8 is not supported for the current GPU. Minimum "
                          "capability: 89. Current capability: 80.", "fp8"),
                         ("ValueError: Unknown quantization method: mxfp8. Must be one of ['fp8', 'awq'].", "mxfp8"),
                         ("ValueError: bitsandbytes quantization is currently not supported in ROCm.", "bitsandbytes"),
                         ("RuntimeError: ('Quantization scheme is not supported for ', 'the current GPU. Min "
                          "capability: 80. ', 'Current capability: 75.')", None)]:  # fmt: skip
        d = classify(line + "\n")
        assert (d.category, d.quantization) == ("unsupported_quantization", scheme), line
    # the checkpoint and the flag disagreeing is the flag's problem, not the scheme's
    d = classify("ValueError: Quantization method specified in the model config (fp8) does not match the quantization "
                 "method specified in the `quantization` argument (awq).\n")
    assert (d.category, d.flag) == ("invalid_flag", "--quantization")


def test_the_tokenizer_and_its_chat_template():
    assert classify("ValueError: Cannot use chat template functions because tokenizer.chat_template is not set and no "
                    "template argument was passed!\n").category == "tokenizer_error"  # fmt: skip
    assert classify("Exception: data did not match any variant of untagged enum ModelWrapper at line 1 column 3\n"
                    ).category == "tokenizer_error"  # fmt: skip


def test_a_refused_graph_capture_over_the_process_group_watchdog_that_reports_it():
    log = ("[rank0]:[E1030 15:32:32.970893361 ProcessGroupNCCL.cpp:2055] [PG ID 5 PG GUID 51 Rank 0] Process group "
           "watchdog thread terminated with exception: HIP error: operation not permitted when stream is capturing\n"
           "[rank0]: NCCL error: unhandled cuda error, NCCL version 2.21.5\n")
    d = classify(log)
    assert d.category == "graph_capture_error"
    assert "operation not permitted when stream is capturing" in d.summary


def test_a_kernel_library_without_a_kernel_for_the_problem():
    in_aiter = ('  File "/opt/venv/lib/python3.12/site-packages/aiter/ops/mha.py", line 88, in fmha_fwd\n'
                '    assert head_dim in (64, 128), f"{head_dim=} not supported"\n'
                "AssertionError: head_dim=96 not supported\n")
    d = classify(in_aiter)
    assert (d.category, d.library, d.kernel_path) == ("kernel_unavailable", "aiter", "attention")
    # the same refusal in the engine's own code is no kernel library's: nothing says which path has no kernel
    assert classify(in_aiter.replace("aiter/ops/mha.py", "myengine/ops/mha.py")).category == "unknown"
    d = classify("RuntimeError: wrong! device_gemm with the specified compilation parameters does not support this "
                 "GEMM problem\n")
    assert (d.category, d.library, d.kernel_path) == ("kernel_unavailable", "ck", "gemm")
    d = classify("RuntimeError: Unsupported kernel config for moe heuristic dispatch\n")
    assert (d.category, d.kernel_path) == ("kernel_unavailable", "moe")


def test_a_gemm_library_without_kernels_for_the_gpu_unless_it_fell_back():
    load = "rocblaslt error: Could not load /opt/rocm/lib/hipblaslt/library/TensileLibrary_lazy_gfx1201.dat\n"
    d = classify(load + "Aborted (core dumped)\n")
    assert (d.category, d.library, d.target, d.kernel_path) == ("kernel_unavailable", "hipblaslt", "gfx1201", "gemm")
    d = classify(load + "hipBLASLt error: Heuristic Fetch Failed!\nrocBLAS warning: hipBlasLT failed, falling back to "
                 "tensile.\n")  # fmt: skip
    assert d.category == "unknown"
    # a failure the log reports besides is the diagnosis
    oom = "torch.OutOfMemoryError: HIP out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 191.98 GiB"
    assert classify(load + oom + "\n").category == "out_of_memory"
