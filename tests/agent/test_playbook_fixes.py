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


def test_excludes_follow_the_lists_style_and_name_only_layer_modules() -> None:
    patterns = ["lm_head", r"re:model\.layers\.\d+\.mlp\.shared_experts\..*", r"re:model\.layers\.\d+\.self_attn\.indexer\..*"]
    adds = _engine_excludes(MODULES, LAYER, "model.decoder", patterns)
    assert adds == [r"re:model\.decoder\.mlp\.shared_experts\..*", r"re:model\.decoder\.self_attn\.indexer\..*"]
    exact = ["lm_head", f"{LAYER}.mlp.shared_experts.gate_proj", f"{LAYER}.mlp.shared_experts.up_proj",
             f"{LAYER}.self_attn.kv_b_proj", f"{LAYER}.eh_proj"]  # fmt: skip
    adds = _engine_excludes(MODULES, LAYER, "model.decoder", exact)
    assert adds == ["model.decoder.mlp.shared_experts.gate_proj", "model.decoder.mlp.shared_experts.up_proj",
                    "model.decoder.self_attn.kv_b_proj"]  # eh_proj lives outside the decoder layer: not renamed
    whole = [r"re:model\.layers\.78\..*"]  # a fully bf16 MTP layer: routed experts too
    adds = _engine_excludes(MODULES, LAYER, "model.decoder", whole)
    assert _excluded("model.decoder.mlp.experts.0.gate_proj", adds)


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
