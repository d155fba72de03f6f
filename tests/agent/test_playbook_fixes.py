"""The playbook's patches in a reviewer's terms: the exclude list's own style and layout, and a guard that
follows the file's own guarded includes."""

from __future__ import annotations

import json

from agent.policies.playbook import (
    HIP_COUNTERPARTS,
    _engine_excludes,
    _excluded,
    _insert_entries,
    _own_counterparts,
    _regex_for_engine,
)

LAYER = "model.layers.78"
MODULES = [f"{LAYER}.{s}" for s in ("eh_proj", "enorm", "mlp.experts.0.gate_proj", "mlp.shared_experts.gate_proj",
                                    "mlp.shared_experts.up_proj", "self_attn.indexer.wk", "self_attn.kv_b_proj")]  # fmt: skip


def test_a_pattern_is_rewritten_for_the_engine_prefix() -> None:
    entry = r"re:model\.layers\.\d+\.mlp\.shared_experts\..*"
    rewritten = _regex_for_engine(entry, LAYER, "model.decoder")
    assert rewritten == r"re:model\.decoder\.mlp\.shared_experts\..*"
    assert _excluded("model.decoder.mlp.shared_experts.up_proj", [rewritten])
    assert not _excluded("model.layers.3.mlp.shared_experts.up_proj", [rewritten])
    assert _regex_for_engine(r"re:lm_head", LAYER, "model.decoder") is None  # no leading part matches the layer


def test_excludes_follow_the_lists_style_and_the_engines_names() -> None:
    patterns = ["lm_head", r"re:model\.layers\.\d+\.mlp\.shared_experts\..*", r"re:model\.layers\.\d+\.self_attn\.indexer\..*"]
    adds = _engine_excludes(MODULES, LAYER, "model.decoder", patterns)
    assert adds == [r"re:model\.decoder\.mlp\.shared_experts\..*", r"re:model\.decoder\.self_attn\.indexer\..*"]
    exact = ["lm_head", f"{LAYER}.mlp.shared_experts.gate_proj", f"{LAYER}.mlp.shared_experts.up_proj",
             f"{LAYER}.self_attn.kv_b_proj", f"{LAYER}.eh_proj"]  # fmt: skip
    adds = _engine_excludes(MODULES, LAYER, "model.decoder", exact)
    # eh_proj lives outside the decoder layer, on the draft model itself (model.eh_proj)
    assert sorted(adds) == ["model.decoder.mlp.shared_experts.gate_proj", "model.decoder.mlp.shared_experts.up_proj",
                            "model.decoder.self_attn.kv_b_proj", "model.eh_proj"]  # fmt: skip
    whole = [r"re:model\.layers\.78\..*"]  # a fully bf16 MTP layer: routed experts too
    adds = _engine_excludes(MODULES, LAYER, "model.decoder", whole)
    assert _excluded("model.decoder.mlp.experts", adds) and _excluded("model.eh_proj", adds)
    assert not any(".experts." in a for a in adds)  # the fused experts as a whole, never one expert


def test_entries_keep_the_files_layout() -> None:
    multi = '{\n  "exclude": [\n    "lm_head",\n    "x"\n  ]\n}\n'
    old, new = _insert_entries(multi, ["a", "b"])
    edited = multi.replace(old, new, 1)
    assert edited == '{\n  "exclude": [\n    "a",\n    "b",\n    "lm_head",\n    "x"\n  ]\n}\n'
    assert json.loads(edited)["exclude"] == ["a", "b", "lm_head", "x"]
    inline = '{"exclude": ["lm_head"]}'
    old, new = _insert_entries(inline, ["a"])
    assert json.loads(inline.replace(old, new, 1))["exclude"] == ["a", "lm_head"]
    empty = '{"exclude": []}'
    old, new = _insert_entries(empty, ["a"])
    assert json.loads(empty.replace(old, new, 1))["exclude"] == ["a"]


def test_guard_counterparts_come_from_the_file_first() -> None:
    own = "#ifndef USE_ROCM\n#include <cuda_fp8.h>\n#else\n#include <hip/hip_fp8_ocp.h>\n#endif\n"
    assert _own_counterparts(own) == {"cuda_fp8.h": "hip/hip_fp8_ocp.h"}  # the file's own choice wins
    assert HIP_COUNTERPARTS["cuda_fp8.h"] == "hip/hip_fp8.h"  # hipify's mapping otherwise
    uneven = "#ifndef USE_ROCM\n#include <a.h>\n#include <b.h>\n#else\n#include <c.h>\n#endif\n"
    assert _own_counterparts(uneven) == {}  # no one-for-one pairing to learn from


def test_an_unfixable_crash_blocks_its_feature_at_every_depth() -> None:
    from agent.policies.playbook import PlaybookPolicy

    memo = {"queue": [{"label": "speculative decoding 4/1/5", "feature": "speculative decoding"},
                      {"label": "speculative decoding 5/1/6", "feature": "speculative decoding"},
                      {"label": "KV cache fp8_e4m3"}], "current": {}}  # fmt: skip
    cur = {"label": "speculative decoding 3/1/4", "keep_as": "single", "feature": "speculative decoding"}
    assert PlaybookPolicy()._abandon(memo, cur, "No module named 'sglang.srt.models.deepseek_nextn'") is None
    assert [q["label"] for q in memo["queue"]] == ["KV cache fp8_e4m3"]
    blocked = memo["blocked"]["speculative decoding"]
    assert blocked["tried"] == "speculative decoding 3/1/4" and "deepseek_nextn" in blocked["why"]
    assert blocked["skipped"] == ["speculative decoding 4/1/5", "speculative decoding 5/1/6"]


# --- out of memory: the fix moves the way the diagnosis' memory_phase says -------------------------------------------


def _oom_setup(flags: dict):
    from pathlib import Path

    from tasks.spec import load_task

    task = load_task(Path(__file__).resolve().parents[2] / "tasks" / "glm52_mi355x.yaml")
    # mem-fraction-static [0.8, 0.85, 0.9, 0.93], cuda-graph-max-bs [128, 256, 512], max-running-requests [null, 64, ...]
    return task, {"label": "bring-up at TP8", "keep_as": "base", "flags": dict(flags), "seen": [], "fixes": 0}


def _oom(log: str) -> dict:
    from tools.diagnose import classify

    d = classify(log)
    assert d.category == "out_of_memory", d
    return d.model_dump()


# SGLang 0.5.14+ (mem_cache/kv_cache_configurator.py _profile_available_bytes), values filled in
WEIGHTS_LEAVE_NO_KV = ("ValueError: Loaded weights leave no GPU memory for the KV cache under --mem-fraction-static=0.8. "
                       "Raise --mem-fraction-static above 0.853 (minimum viable = 1 - available/pre = 0.8521). If using "
                       "speculative decoding, draft weights are now counted.\n")  # fmt: skip
HIP_OOM = ("torch.OutOfMemoryError: HIP out of memory. Tried to allocate 4.78 GiB. GPU 0 has a total capacity of "
           "287.98 GiB of which 1.20 GiB is free.\n")  # fmt: skip


def test_no_room_for_the_kv_cache_raises_the_fraction_past_the_engines_minimum() -> None:
    from agent.policies.playbook import PlaybookPolicy

    task, cur = _oom_setup({"tp-size": 8, "mem-fraction-static": 0.8})
    assert PlaybookPolicy._memory_fix(task, cur, _oom(WEIGHTS_LEAVE_NO_KV))
    assert cur["flags"]["mem-fraction-static"] == 0.9  # 0.85 is not above 0.853
    # the older check; the flag was left to the engine, whose value the message names
    task, cur = _oom_setup({"tp-size": 8})
    old = "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static. Current value: " \
          "mem_fraction_static=0.85\n"  # fmt: skip
    assert PlaybookPolicy._memory_fix(task, cur, _oom(old))
    assert cur["flags"]["mem-fraction-static"] == 0.9
    task, cur = _oom_setup({"tp-size": 8, "mem-fraction-static": 0.93})  # nothing higher allowed: more GPUs
    assert not PlaybookPolicy._memory_fix(task, cur, _oom(WEIGHTS_LEAVE_NO_KV.replace("=0.8.", "=0.93.")))
    assert cur["flags"]["mem-fraction-static"] == 0.93


def test_a_runtime_oom_lowers_the_fraction_then_the_graph_batch() -> None:
    from agent.policies.playbook import PlaybookPolicy

    capture = "[TP0] Capture cuda graph begin. This can take up to several minutes.\n" + HIP_OOM
    diag = _oom(capture)
    assert diag["memory_phase"] == "runtime"
    task, cur = _oom_setup({"tp-size": 8, "mem-fraction-static": 0.9})
    assert PlaybookPolicy._memory_fix(task, cur, diag)
    assert cur["flags"]["mem-fraction-static"] == 0.85
    task, cur = _oom_setup({"tp-size": 8, "mem-fraction-static": 0.8})  # the lowest allowed: smaller graphs
    assert PlaybookPolicy._memory_fix(task, cur, diag)
    assert cur["flags"] == {"tp-size": 8, "mem-fraction-static": 0.8, "cuda-graph-max-bs": 256}
    assert PlaybookPolicy._memory_fix(task, cur, diag)
    assert cur["flags"]["cuda-graph-max-bs"] == 128
    assert PlaybookPolicy._memory_fix(task, cur, diag)  # then the prefill chunk
    assert cur["flags"]["chunked-prefill-size"] == 16384


def test_weights_that_do_not_fit_ask_for_more_gpus_per_rank() -> None:
    from types import SimpleNamespace

    from agent.policies.playbook import PlaybookPolicy
    from agent.state import Observation

    log = ("[TP0] Load weight begin. avail mem=283.68 GB\nTraceback (most recent call last):\n"
           '  File "/sgl-workspace/sglang/python/sglang/srt/model_executor/model_runner.py", line 901, in load_model\n'
           "    self.model = self.loader.load_model(\n" + HIP_OOM)  # fmt: skip
    diag = _oom(log)
    assert diag["memory_phase"] == "weights"
    task, cur = _oom_setup({"tp-size": 4, "mem-fraction-static": 0.9})
    assert not PlaybookPolicy._memory_fix(task, cur, diag)
    assert cur["flags"] == {"tp-size": 4, "mem-fraction-static": 0.9}  # no memory flag helps
    memo = {"queue": [], "current": cur}
    obs = Observation(call_id="c1", tool="launch_server", args={}, ok=False, result={"diagnosis": diag})
    PlaybookPolicy()._fix(None, SimpleNamespace(task=task), memo, cur, obs)
    assert memo["min_tp"] == 8


def test_the_engines_pools_running_dry_lower_the_running_requests() -> None:
    from agent.policies.playbook import PlaybookPolicy

    diag = _oom("RuntimeError: Decode out of memory. Try to lower your batch size.\nTry to allocate 148 tokens.\n")
    assert diag["memory_phase"] == "kv_pool"
    task, cur = _oom_setup({"tp-size": 8, "mem-fraction-static": 0.9})
    assert PlaybookPolicy._memory_fix(task, cur, diag)
    assert cur["flags"] == {"tp-size": 8, "mem-fraction-static": 0.9, "max-running-requests": 256}


def test_a_diagnosis_without_the_phase_still_moves_the_right_way() -> None:
    from agent.policies.playbook import PlaybookPolicy

    task, cur = _oom_setup({"mem-fraction-static": 0.8})  # a trace recorded before memory_phase existed
    old = {"category": "out_of_memory", "summary": "out of memory: Not enough memory", "evidence": []}
    assert PlaybookPolicy._memory_fix(task, cur, old)
    assert cur["flags"]["mem-fraction-static"] == 0.85
    task, cur = _oom_setup({"mem-fraction-static": 0.85})
    assert PlaybookPolicy._memory_fix(task, cur, {"summary": "out of memory: out of memory", "evidence": [HIP_OOM]})
    assert cur["flags"]["mem-fraction-static"] == 0.8


def test_a_refused_flag_is_the_one_named_else_the_only_one_set_to_the_refused_value() -> None:
    from agent.policies.playbook import PlaybookPolicy

    flags = {"tp-size": 8, "attention-backend": "aiter", "moe-runner-backend": "aiter"}
    assert PlaybookPolicy._refused_flag(flags, {"flag": "--attention-backend", "value": "x"}) == "attention-backend"
    assert PlaybookPolicy._refused_flag({"tp-size": 8, "attention-backend": "triton"},
                                        {"flag": "--backend", "value": "TRITON"}) == "attention-backend"  # fmt: skip
    assert PlaybookPolicy._refused_flag(flags, {"value": "aiter"}) is None  # two flags hold it: neither is known
    assert PlaybookPolicy._refused_flag(flags, {"flag": "--turbo"}) is None


def test_a_kernel_library_without_a_kernel_moves_the_work_to_another_allowed_path() -> None:
    from agent.policies.known_failures import fails_again
    from agent.policies.playbook import PlaybookPolicy
    from tools.diagnose import classify

    diag = classify('  File "/usr/local/lib/python3.12/dist-packages/aiter/jit/core.py", line 1205, in wrapper\n'
                    "RuntimeError: invalid argument for fmha_v3_varlen_fwd\n").model_dump()  # fmt: skip
    assert (diag["category"], diag["kernel_path"]) == ("kernel_unavailable", "attention")
    assert fails_again(diag["category"])  # the same launch would fail again: not relaunched unchanged
    task, cur = _oom_setup({"tp-size": 8, "attention-backend": "aiter"})  # attention-backend [aiter, triton]
    assert PlaybookPolicy._kernel_path_fix(task, cur, diag) == "attention-backend aiter -> triton"
    assert cur["flags"]["attention-backend"] == "triton"
    assert PlaybookPolicy._kernel_path_fix(task, cur, diag) is None  # both were run: nothing left
    # a GEMM library's kernels have no flag to choose another path; a MoE runner the task does not allow is none
    assert PlaybookPolicy._kernel_path_fix(task, cur, {**diag, "kernel_path": "gemm"}) is None
    assert PlaybookPolicy._kernel_path_fix(task, cur, {**diag, "kernel_path": "moe"}) is None
