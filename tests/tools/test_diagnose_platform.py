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
