"""Issue 43's third agent fault, as a scenario written from its mechanism: a speculation crash that never changes.

The default case, but the image's speculative path JIT-builds one of the release's kernels that has no ROCm port
(``fused_add_rmsnorm.cuh`` includes ``<cooperative_groups/reduce.h>``) for **every** EAGLE launch, whatever its
depth. The first speculative launch also meets the checkpoint's draft exclude mismatch, which the agent fixes; the
launch then stops on the kernel. The agent may try one more depth (the crash could depend on it), but after two
identical crashes at two depths it must stop varying the depth: the rest of speculation is blocked with the reason,
the fix that held is made again before the second launch instead of being rediscovered by a crash, and the run goes
on to the other knobs and meets its target.
"""

from __future__ import annotations

import json
from pathlib import Path

from agent.trace import read_trace
from tests.agent.test_serving_failures import _task
from tests.shared_runs import run_agent
from tests.twin.conftest import edited_default_scenario

KERNEL = "python/sglang/jit_kernel/csrc/elementwise/fused_add_rmsnorm.cuh"


def _run(tmp_path: Path, when: dict) -> tuple[object, Path, list]:
    """The default task with the kernel built where ``when`` holds, and room for many more speculative trials."""
    def kernel(data: dict) -> None:
        data["engine"]["jit_kernels"] = [{"name": "fused_add_rmsnorm", "source": KERNEL, "when": when,
                                          "includes": ["cooperative_groups/reduce.h"]}]  # fmt: skip

    task = _task(tmp_path, scenario=edited_default_scenario(tmp_path, kernel), after_targets=2)
    proc = run_agent(tmp_path, "run", str(task), "--policy", "playbook", "--run-id", "r")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    run_dir = tmp_path / "runs" / "r"
    return proc, run_dir, list(read_trace(run_dir / "trace.jsonl"))


def test_a_speculation_crash_that_never_changes_stops_after_two_and_the_run_moves_on(tmp_path: Path) -> None:
    proc, run_dir, events = _run(tmp_path, {"flag": "speculative_algorithm", "equals": "EAGLE"})
    calls = [e for e in events if e.kind == "tool_call"]
    launches = [e for e in calls if e.tool == "launch_server"]
    speculative = [e for e in launches if e.input["flags"].get("speculative-algorithm")]
    kernel_crashes = [e for e in speculative if not e.ok and e.result["diagnosis"]["category"] == "compile_error"]
    # two identical crashes, at two depths, attributed to the kernel's build; no third
    assert len(kernel_crashes) == 2
    assert len({e.input["flags"]["speculative-num-steps"] for e in kernel_crashes}) == 2
    for e in kernel_crashes:
        diag = e.result["diagnosis"]
        assert diag["component"] == "kernel_build" and diag["file"].endswith(KERNEL)
        assert diag["header"] == "cooperative_groups/reduce.h"
    assert all(not e.ok for e in speculative)  # nothing speculative ever came up
    # the draft's exclude mismatch crashed once; the fix that held was made again before the second depth
    draft_crashes = [e for e in speculative if not e.ok and e.result["diagnosis"]["category"] == "weight_shape_mismatch"]
    assert len(draft_crashes) == 1 and draft_crashes[0].result["diagnosis"]["component"] == "draft_model"
    second = calls.index(kernel_crashes[1])
    before = [e for e in calls[:second] if e.tool == "edit_file"]
    assert len(before) == 2 and before[0].input == before[1].input  # the same fix, made twice, crashed once
    again = [e.rationale for e in events if e.kind == "decision" and "make again the fix that held" in (e.rationale or "")]
    assert len(again) == 1
    # the block, its reason and its rule, in the summary and in what the run printed
    summary = json.loads((run_dir / "summary.json").read_text())
    blocked = summary["blocked"]["speculative decoding"]
    assert blocked["kernel"].endswith(KERNEL) and "cooperative_groups/reduce.h" in blocked["why"]
    assert "2 configurations crashed the same way whatever their" in blocked["rule"]
    assert "speculative-num-steps" in blocked["rule"] and "speculative-algorithm=EAGLE" in blocked["rule"]
    assert blocked["skipped"]  # the depths it did not launch, by name
    said = " ".join(proc.stdout.split())
    assert "blocked: speculative decoding where it builds kernel" in said and "crashed the same way" in said
    # the run went on with other knobs after the block, and met its target
    after = launches[launches.index(kernel_crashes[1]) + 1:]
    assert after and all(e.ok and not e.input["flags"].get("speculative-algorithm") for e in after)
    assert any(set(e.input["flags"]) - {"tp-size"} or e.input.get("env") for e in after)
    assert summary["finish_reason"] == "all targets met"


def test_a_fix_made_again_and_verified_is_kept_when_a_deeper_chain_crashes_on_the_kernel(tmp_path: Path) -> None:
    """The kernel is built only by chains deeper than one step: the one-step chain comes up with the fix made again,
    which verifies it; the two-step chain that follows crashes on the kernel alone and undoes nothing."""
    _, _, events = _run(tmp_path, {"flag": "speculative_num_steps", "above": 1})
    calls = [e for e in events if e.kind == "tool_call"]
    launches = [e for e in calls if e.tool == "launch_server"]
    up = next(e for e in launches if e.ok and e.input["flags"].get("speculative-num-steps") == 1)
    after = calls[calls.index(up) + 1:]
    deeper = [e for e in after if e.tool == "launch_server" and (e.input["flags"].get("speculative-num-steps") or 0) > 1]
    assert deeper and all(e.result["diagnosis"]["category"] == "compile_error" for e in deeper)
    assert not [e for e in after if e.tool in ("discard_changes", "edit_file")]  # the verified fix stays
    draft_crashes = [e for e in launches if not e.ok and e.result["diagnosis"]["category"] == "weight_shape_mismatch"]
    assert len(draft_crashes) == 1  # met once, never again
    assert all(e.ok for e in after if e.tool == "launch_server" and e.input["flags"].get("speculative-num-steps") == 1)
