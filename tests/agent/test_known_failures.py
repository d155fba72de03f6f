"""What the playbook learns from failed launches: an unfixable kernel blocks only what builds it (its trigger read
from the real engine's call site, else bounded by what crashed), a launch that failed is not made again unchanged,
and a memory flag the engine rescales is moved past the value that failed as the engine runs it."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent.policies.known_failures import (
    Condition,
    KernelBlock,
    acceptance_rate,
    accepted_per_step,
    launch_key,
    trigger_at,
)
from agent.policies.playbook import PlaybookPolicy
from tasks.spec import load_task

ROOT = Path(__file__).resolve().parents[2]
SPEC_FLAGS = {"speculative-algorithm", "speculative-num-steps", "speculative-eagle-topk",
              "speculative-num-draft-tokens", "tp-size"}  # fmt: skip


def _chain(steps: int, topk: int = 1, tp: int = 8) -> dict:
    return {"speculative-algorithm": "EAGLE", "speculative-num-steps": steps, "speculative-eagle-topk": topk,
            "speculative-num-draft-tokens": steps * topk + 1, "tp-size": tp}  # fmt: skip


def test_the_trigger_is_read_from_the_real_call_site() -> None:
    from sandboxes.twin.workspace.release import Unavailable, release_tree

    tree = release_tree("0.5.12")
    if isinstance(tree, Unavailable):
        pytest.skip(tree.reason)
    source = (tree.package / "srt" / "layers" / "attention" / "nsa_backend.py").read_text()
    # the release loads its multi-backend metadata copy kernel only for chains deeper than three steps
    line = next(i for i, text in enumerate(source.splitlines(), 1) if "fused_metadata_copy_multi_cuda(" in text
                and "import" not in text)  # fmt: skip
    assert trigger_at(source, line, SPEC_FLAGS) == [Condition(flag="speculative-num-steps", op=">", value=3)]
    # a call with no condition on the task's flags has no trigger
    assert trigger_at(source, 1, SPEC_FLAGS) == []


def test_else_branches_and_mirrored_comparisons() -> None:
    source = "def f(self):\n    if 2 >= self.speculative_eagle_topk:\n        a()\n    else:\n        build()\n"
    assert trigger_at(source, 5, SPEC_FLAGS) == [Condition(flag="speculative-eagle-topk", op=">", value=2)]
    assert trigger_at(source, 3, SPEC_FLAGS) == [Condition(flag="speculative-eagle-topk", op="<=", value=2)]
    env_only = "if os.environ.get('X'):\n    build()\n"
    assert trigger_at(env_only, 2, SPEC_FLAGS) == []
    assert trigger_at("def broken(:\n", 1, SPEC_FLAGS) == []


def test_a_trigger_decides_while_every_launch_agrees_with_it() -> None:
    block = KernelBlock(signature="compile_error:k.cuh", why="x",
                        trigger=[Condition(flag="speculative-num-steps", op=">", value=3)])  # fmt: skip
    block.crashed.append({"flags": _chain(4), "changed": sorted(_chain(4))})
    assert block.builds(_chain(5)) and block.builds(_chain(4, topk=2))
    assert not block.builds(_chain(3)) and not block.builds(_chain(1))
    assert "speculative-num-steps > 3" in block.explain()
    # a launch the trigger did not predict crashed, the same way: two identical crashes that differ in depth say
    # the depth does not decide it (issue 43: after two identical crashes, another knob)
    block.crashed.append({"flags": _chain(2), "changed": ["speculative-num-draft-tokens", "speculative-num-steps"]})
    assert block.region() == {"tp-size": 8, "speculative-algorithm": "EAGLE", "speculative-eagle-topk": 1}
    assert block.builds(_chain(1)) and block.builds(_chain(3)) and not block.builds(_chain(1, tp=4))
    assert "2 configurations crashed the same way whatever their speculative-num-draft-tokens, " \
           "speculative-num-steps" in block.explain()
    # until a chain in that region launches: then what crashed bounds the rest
    block.launched.append(_chain(1))
    assert block.region() is None
    assert block.builds(_chain(3)) and not block.builds(_chain(1))
    assert "at least as deep" in block.explain()


def test_without_a_trigger_what_crashed_bounds_what_will() -> None:
    changed = ["speculative-algorithm", "speculative-eagle-topk", "speculative-num-draft-tokens",
               "speculative-num-steps"]  # fmt: skip
    block = KernelBlock(signature="compile_error:k.cuh", why="x", crashed=[{"flags": _chain(3), "changed": changed}])
    assert block.builds(_chain(3)) and block.builds(_chain(5)) and block.builds(_chain(3, topk=2))
    assert block.builds(_chain(3, tp=4))  # a flag the crashed configuration did not change does not matter
    assert not block.builds(_chain(2)) and not block.builds(_chain(1))
    assert not block.builds({"tp-size": 8})  # no speculation at all


def test_the_acceptance_rate_inverts_the_accept_length() -> None:
    alpha = acceptance_rate(2.5, 3)
    assert alpha is not None and accepted_per_step(alpha, 3) == pytest.approx(2.5, abs=1e-6)
    assert accepted_per_step(alpha, 5) > 2.5
    assert acceptance_rate(5.0, 3) is None  # more than a three-step chain can accept


# --- the playbook with those lessons ------------------------------------------------------------------------------


class _Workspace:
    def __init__(self, files: dict[str, str]) -> None:
        self.files = files

    def exists(self, path: str) -> bool:
        return path in self.files

    def read_file(self, path: str) -> str:
        return self.files[path]


class _Ctx:
    def __init__(self, files: dict[str, str] | None = None) -> None:
        self.task = load_task(ROOT / "tasks" / "glm52_mi355x.yaml")
        self.workspace = _Workspace(files or {})


def _memo(base: dict) -> dict:
    entry = {"flags": base, "env": {}, "value": 100.0, "accept_length": None}
    return {"phase": "single", "queue": [], "current": None, "best": {"single": dict(entry), "none": dict(entry)},
            "base": dict(entry)}  # fmt: skip


def _current(flags: dict, label: str) -> dict:
    return {"label": label, "flags": flags, "env": {}, "measure": "single", "keep_as": "single", "from": "single",
            "feature": "speculative decoding", "step": "launching", "fixes": 1, "seen": []}  # fmt: skip


COMPILE = {"category": "compile_error", "summary": "use of undeclared identifier 'cudaFoo'", "file": "k/runtime.cuh",
           "symbol": "cudaFoo", "frames": [{"file": "srt/backend.py", "line": 3, "function": "f"},
                                           {"file": "jit/utils.py", "line": 9, "function": "load_jit"}]}  # fmt: skip


def test_an_unfixable_kernel_keeps_the_chains_that_do_not_build_it() -> None:
    policy, ctx = PlaybookPolicy(), _Ctx()
    base = {"tp-size": 8}
    memo = _memo(base)
    memo["queue"] = [{"label": "draft tree depth", "tree_search": True, "moves": ["deeper", "shallower"],
                      "from": "single", "measure": "single", "keep_as": "single", "feature": "speculative decoding"},
                     {"label": "KV cache fp8", "from": "single", "set": {"kv-cache-dtype": "fp8_e4m3"},
                      "measure": "single", "keep_as": "single"}]  # fmt: skip
    cur = _current({**base, **_chain(3)}, "speculative decoding 3/1/4")
    assert policy._give_up(ctx, memo, cur, COMPILE, "persists") is None
    labels = [q["label"] for q in memo["queue"]]
    # the shallower chains first, the shallowest first (a second identical crash there says the depth does not
    # decide it), then the rest of the plan, the feature's tree search included
    assert labels[:2] == ["speculative decoding 1/1/2 (no k/runtime.cuh)", "speculative decoding 2/1/3 (no k/runtime.cuh)"]
    assert "draft tree depth" in labels and "KV cache fp8" in labels
    assert memo["blocked"]["speculative decoding"]["kernel"] == "k/runtime.cuh"
    # a deeper chain is never launched: it would build the same kernel
    assert policy._blocking(memo, {**base, **_chain(4)}) is not None
    assert policy._blocking(memo, {**base, **_chain(2)}) is None


def test_the_blocked_part_is_estimated_from_the_measured_acceptance() -> None:
    ctx = _Ctx()
    memo = _memo({"tp-size": 8})
    PlaybookPolicy()._give_up(ctx, memo, _current({"tp-size": 8, **_chain(3)}, "speculative decoding 3/1/4"), COMPILE, "x")
    memo["best"]["single"] = {"flags": {"tp-size": 8, **_chain(2)}, "env": {}, "value": 150.0, "accept_length": 2.4}
    PlaybookPolicy._estimate_blocked(ctx.task, memo)
    would = memo["blocked"]["speculative decoding"]["would_give"]
    deepest = max(v for v in ctx.task.search_space.flags["speculative-num-steps"] if v)
    alpha = acceptance_rate(2.4, 2)
    assert would["steps"] == deepest
    assert would["at_most"] == pytest.approx(150.0 * accepted_per_step(alpha, deepest) / 2.4, abs=0.1)
    assert would["at_most"] > 150.0


def test_a_launch_that_failed_is_not_made_again_unchanged() -> None:
    policy, ctx = PlaybookPolicy(), _Ctx()
    memo = _memo({"tp-size": 8})
    cur = _current({"tp-size": 8, "kv-cache-dtype": "fp8_e4m3"}, "KV cache fp8")
    memo["failed_launches"] = {launch_key(cur["flags"], {}, 0): "an earlier trial: out of memory"}
    cur["step"] = "launch"
    memo["current"] = cur
    assert policy._work_on(None, ctx, memo, cur, None) is None  # type: ignore[arg-type]
    assert memo["current"] is None and "crashed before" in memo["tried"][-1]
    # after a workspace change the same flags are a new launch
    memo["workspace_changes"] = 1
    cur = {**cur, "step": "launch"}
    calls, _ = policy._work_on(None, ctx, memo, cur, None)  # type: ignore[arg-type,misc]
    assert calls[0].tool == "launch_server"


NOT_ENOUGH = ("RuntimeError: Not enough memory. Please try to increase --mem-fraction-static. Current value: "
              "mem_fraction_static=0.68\n")  # fmt: skip


def test_a_fraction_the_engine_rescales_moves_past_what_failed_as_the_engine_runs_it() -> None:
    from tools.diagnose import classify

    task = load_task(ROOT / "tasks" / "glm52_mi355x.yaml")  # mem-fraction-static [0.8, 0.85, 0.9, 0.93]
    diag = classify(NOT_ENOUGH).model_dump()
    cur = {"flags": {"tp-size": 8, "mem-fraction-static": 0.8}}
    assert PlaybookPolicy._memory_fix(task, cur, diag)
    # 0.8 is what ran as 0.68 (the release scales it for this backend): the next value that runs above 0.68
    assert cur["flags"]["mem-fraction-static"] == 0.85
    # a launch that left the flag to the engine learns nothing from itself; the scale an earlier launch showed
    cur = {"flags": {"tp-size": 8}}
    assert PlaybookPolicy._memory_fix(task, cur, diag, scale=0.85)
    assert cur["flags"]["mem-fraction-static"] == 0.85


# --- end to end: a kernel no fix makes build, reached by every chain deeper than one step ----------------------------


def test_a_run_keeps_the_chains_that_do_not_build_an_unfixable_kernel(tmp_path: Path) -> None:
    """The default case with its speculative kernel replaced by one of the release's kernels that has no ROCm port
    (it includes ``<cooperative_groups/reduce.h>``), built for every chain deeper than one step: the run declines
    the port, launches the shallower chains until one does not build it, measures it, and reports the block with
    what the deeper chains would have given."""
    import json

    import yaml

    from tests.shared_runs import DEFAULT_TASK, NO_PACING, run_agent
    from tests.twin.conftest import edited_default_scenario

    def edit(data: dict) -> None:
        data["engine"]["jit_kernels"] = [{
            "name": "fused_add_rmsnorm", "source": "python/sglang/jit_kernel/csrc/elementwise/fused_add_rmsnorm.cuh",
            "when": {"flag": "speculative_num_steps", "above": 1}, "includes": ["cooperative_groups/reduce.h"]}]

    scenario = edited_default_scenario(tmp_path, edit)
    targets = [{"name": "single_stream", "metric": "decode_tok_s", "workload": "single_stream", "min": 80}]
    task = tmp_path / "task.yaml"
    task.write_text(f"extends: {DEFAULT_TASK}\n" + yaml.safe_dump({"workspace": {"twin": {"scenario": str(scenario)}},
                                                                  "targets": targets}, sort_keys=False)
                    + "budgets:\n  after_targets: {node_hours: 0}\n" + NO_PACING)  # fmt: skip
    proc = run_agent(tmp_path, "run", str(task), "--policy", "playbook", "--run-id", "blocked")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    summary = json.loads((tmp_path / "runs" / "blocked" / "summary.json").read_text())
    blocked = summary["blocked"]["speculative decoding"]
    assert blocked["kernel"].endswith("fused_add_rmsnorm.cuh") and "cooperative_groups/reduce.h" in blocked["why"]
    spec = [t for t in summary["trials"] if t["flags"].get("speculative-algorithm")]
    deepest_tried = max(t["flags"]["speculative-num-steps"] for t in spec)
    # no chain deeper than the first that crashed was launched, and every chain that crashed on the kernel was
    # launched once after its crash (no fix tried on a kernel known to be unfixable)
    assert all(t["status"] == "crashed" for t in spec if t["flags"]["speculative-num-steps"] > 1)
    assert deepest_tried == 3
    # the one-step chain, which never builds the kernel, was measured and is the single-stream best
    best = summary["targets"]["single_stream"]
    assert best["met"] and best["flags"]["speculative-num-steps"] == 1
    one_step = [t for t in spec if t["flags"]["speculative-num-steps"] == 1 and t["status"] != "crashed"]
    assert one_step and max(t["metrics"].get("single_stream") or 0 for t in one_step) == pytest.approx(best["achieved"])
    # what the blocked depths would have given: an estimate from the measured acceptance, above what was reached
    would = blocked["would_give"]
    assert would["steps"] == 6 and would["at_most"] > best["achieved"] and would["measured"]["steps"] == 1
    said = " ".join(proc.stdout.split())
    assert "blocked: speculative decoding where it builds kernel" in said and "would give at most" in said
