"""A patch quotes the crash of its own defect: an engine fix applied after other trials crashed for other reasons
still answers the trial its diagnosis came from (agent/outcomes.py: ``answered_crash``)."""

from __future__ import annotations

from types import SimpleNamespace

from agent.outcomes import answered_crash, apply_observations
from agent.state import AgentState, Observation, Trial
from tasks.spec import load_task
from tests.shared_runs import DEFAULT_TASK

SPEC = {"tp-size": 8, "speculative-algorithm": "EAGLE", "speculative-num-steps": 4}
WEIGHTS = Trial(id=2, flags=SPEC, status="crashed", category="weight_shape_mismatch",
                diagnosis="weight loading failed for the draft model's parameter",
                excerpt=['File "python/sglang/srt/layers/linear.py", line 274, in weight_loader'])  # fmt: skip
COMPILE = Trial(id=3, flags=SPEC, status="crashed", category="compile_error",
                diagnosis="fused_metadata_copy.cuh:38: missing header cuda_runtime.h",
                excerpt=["fused_metadata_copy.cuh:38:10: fatal error: 'cuda_runtime.h' file not found"])  # fmt: skip
TRIALS = [Trial(id=1, flags={"tp-size": 8}, status="up", step=1), WEIGHTS.model_copy(update={"step": 4}),
          COMPILE.model_copy(update={"step": 7}), Trial(id=4, flags=SPEC, status="up", step=9)]  # fmt: skip
ENGINE_NOTE = {"category": "weight_shape_mismatch", "defect": "engine:sglang/python/sglang/srt/models/x_nextn.py:X",
               "title": "Map the checkpoint's MTP-layer exclude entries", "root_cause": "r", "change": "c"}  # fmt: skip


def _patch_after(note: dict, **args: object) -> object:
    """The patch recorded for an engine fix applied after trial 4 came up (the config fix of trial 2 held, on
    the relaunch that first crashed compiling another kernel, trial 3)."""
    obs = Observation(call_id="s12c0", tool="apply_patch", args={"diff": "--- a/x\n+++ b/x\n", **args}, ok=True,
                      result={"files": ["sglang/python/sglang/srt/models/x_nextn.py"], "diff": "d"}, step=12)  # fmt: skip
    state = AgentState(run_id="r", task_path="t", step=12, trials=TRIALS, observations=[obs],
                       annotations={"patch": note})  # fmt: skip
    run = SimpleNamespace(task=load_task(DEFAULT_TASK))
    [patch] = apply_observations(state, run)["patches"]  # type: ignore[arg-type]
    return patch


def test_an_engine_fix_applied_after_another_crash_quotes_its_own() -> None:
    patch = _patch_after({**ENGINE_NOTE, "crash_trial": 2})
    assert (patch.crash_trial, patch.reason, patch.excerpt) == (2, WEIGHTS.diagnosis, WEIGHTS.excerpt)


def test_a_note_without_its_trial_is_matched_by_its_diagnosis() -> None:
    patch = _patch_after(ENGINE_NOTE)  # a policy that names no trial (the LLM's edits): the latest crash of its kind
    assert (patch.crash_trial, patch.excerpt) == (2, WEIGHTS.excerpt)
    assert answered_crash(TRIALS, {"category": "compile_error"}).id == 3
    assert answered_crash(TRIALS, {}).id == 3  # nothing to go by: the latest crash
    assert answered_crash(TRIALS, {"crash_trial": 4, "category": "compile_error"}).id == 3  # 4 did not crash
    assert answered_crash(TRIALS[:1], {"category": "compile_error"}) is None


def test_an_llm_names_the_crash_on_its_edit_call() -> None:
    patch = _patch_after({}, fixes_trial=2)  # the LLM policy leaves no note: the call's own argument
    assert (patch.crash_trial, patch.excerpt) == (2, WEIGHTS.excerpt)
    assert _patch_after({}).crash_trial == 3  # without it, and nothing else to go by: the latest crash
