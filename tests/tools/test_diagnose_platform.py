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
