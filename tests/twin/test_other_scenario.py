"""A scenario nobody calibrated (other model, names, MTP prefix, header, hardware) runs end to end."""

from __future__ import annotations

import json

import pytest

from sandboxes.twin.materialize import materialize
from tests.twin.conftest import LaunchFailed, running, start_server
from tests.twin.test_workspace import _other_scenario

SPEC = ["--speculative-algorithm", "EAGLE", "--speculative-num-steps", "3", "--speculative-eagle-topk", "1",
        "--speculative-num-draft-tokens", "4"]  # fmt: skip


def test_unseen_scenario_crashes_patches_and_benchmarks(tmp_path):
    path = _other_scenario(tmp_path)
    text = path.read_text().replace("name: MI355X", "name: MI300X-like").replace("memory_gb: 288", "memory_gb: 192")
    path.write_text(text)
    ws = tmp_path / "ws"
    materialize(path, ws)

    with running(ws, tmp_path / "base.log", ["--tp-size", "2", "--dp-size", "4"]) as server:
        rec = server.bench(tmp_path, "--dataset-name", "generated-shared-prefix", "--gsp-num-groups", "4",
                           "--gsp-prompts-per-group", "25", "--gsp-system-prompt-len", "4000",
                           "--gsp-question-len", "2000", "--gsp-output-len", "500", "--request-rate", "4")  # fmt: skip
    assert rec["completed"] == 100 and rec["simulated"]
    assert 0 < rec["output_throughput"] <= 4 * 500 * 1.05
    log = (tmp_path / "base.log").read_text()
    assert "using 2stage default for (256, 1, 4096, 1024, 64, 4" in log
    assert "MI300X-like" in log

    with pytest.raises(LaunchFailed) as info:
        start_server(ws, tmp_path / "mtp.log", ["--tp-size", "8", *SPEC])
    assert "model.mtp_block.mlp.shared_experts." in info.value.log

    cfg_path = ws / "model" / "config.json"
    cfg = json.loads(cfg_path.read_text())
    cfg["quantization_config"]["exclude"].append(r"re:model\.mtp_block\.(mlp\.shared_experts|self_attn\.indexer)\..*")
    cfg_path.write_text(json.dumps(cfg))
    with pytest.raises(LaunchFailed) as info:  # three draft steps already compile this scenario's kernel
        start_server(ws, tmp_path / "mtp.log", ["--tp-size", "8", *SPEC])
    assert "cuda_fp16.h: No such file or directory" in info.value.log

    kernel = ws / "sglang/sgl-kernel/csrc/spec/draft_extend_meta.cuh"
    kernel.write_text(kernel.read_text().replace("#include <cuda_fp16.h>", "#ifndef USE_ROCM\n#include <cuda_fp16.h>\n#endif", 1))
    with running(ws, tmp_path / "mtp.log", ["--tp-size", "8", *SPEC]) as server:
        rec = server.bench(tmp_path, "--dataset-name", "random-ids", "--random-input-len", "2000",
                           "--random-output-len", "300", "--random-range-ratio", "1", "--num-prompts", "3",
                           "--max-concurrency", "1")  # fmt: skip
    assert rec["accept_length"] > 1.5
