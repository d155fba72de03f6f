"""Issue 43's first two agent faults, as scenarios written from their mechanisms.

The checkpoint keeps every shared expert in bf16 (its exclude list names them), and SGLang fuses the shared expert
into the routed experts' FusedMoE on gfx942 and newer (``determine_num_fused_shared_experts``): the bf16 expert is
loaded into the MXFP4 fused weight and ``FusedMoE._load_w13`` fails. It fails in the **main** model (no speculation
in the launch), run from folders named for speculation, and no exclude entry can answer it (the module is
excluded already). The release's own switch, which the model's code reads, serves the model unfused.
"""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from agent.trace import read_trace
from tests.agent.conftest import DEFAULT_TASK, run_agent
from tests.twin.conftest import edited_default_scenario

SWITCH = "disable-shared-experts-fusion"


def test_a_main_model_failure_is_the_main_models_and_the_releases_switch_for_the_fusion_serves_it(tmp_path: Path):
    def bf16_shared_experts(data: dict) -> None:
        data["quantization"]["exclude"].append("re:model\\.layers\\.\\d+\\.mlp\\.shared_experts\\..*")
        data["name"] = "glm52_bf16_shared_experts"

    here = tmp_path / "eagle3-experiments" / "mtp-sweep"  # folders that say nothing of which model raised
    here.mkdir(parents=True)
    task = here / "task.yaml"
    task.write_text(yaml.safe_dump({
        "extends": str(DEFAULT_TASK),
        "workspace": {"twin": {"scenario": str(edited_default_scenario(tmp_path, bf16_shared_experts))}},
        "engines": {"twin": {"env": {"TWIN_TIME_SCALE": "0"}}},
        "targets": [{"name": "single_stream", "metric": "decode_tok_s", "workload": "single_stream", "min": 50}],
        "budgets": {"after_targets": {"node_hours": 0}},
    }))  # fmt: skip
    proc = run_agent(here, "run", str(task), "--policy", "playbook", "--run-id", "s")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    run_dir = here / "runs" / "s"
    events = list(read_trace(run_dir / "trace.jsonl"))
    launches = [e for e in events if e.kind == "tool_call" and e.tool == "launch_server"]
    first = launches[0]
    assert not first.ok and "speculative-algorithm" not in first.input["flags"]
    diag = first.result["diagnosis"]
    assert diag["category"] == "weight_shape_mismatch" and diag["component"] == "main_model"
    assert not diag["draft_model"] and "the main model's" in diag["summary"] and "draft" not in diag["summary"]
    assert diag["loader"].endswith("_load_w13")
    # the remedy: the same configuration with the release's switch, said in the decision that relaunches it
    second = launches[1]
    assert second.ok and second.input["flags"] == {**first.input["flags"], SWITCH: True}
    why = [e.rationale for e in events if e.kind == "decision" and f"--{SWITCH}" in (e.rationale or "")]
    assert why and "fused layer FusedMoE" in why[0] and "the main model's" in why[0]
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["finish_reason"] == "all targets met"
    assert f"--{SWITCH}" in (run_dir / "launch.sh").read_text()  # the winning command carries it
