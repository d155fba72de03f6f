"""Failures while serving, end to end: an ``agent run`` of a short task on the twin meets each class of failure under
the benchmark (sandboxes/twin/engine/serving_faults.py), diagnoses it from the server's log, and recovers the way the
failure calls for, with nothing lost: the trial keeps its failure, the run goes on, a resumed run repeats nothing.

- out of memory while serving -> a lower --mem-fraction-static, computed from the engine's figures;
- a collective that hangs (the scheduler watchdog ends it) -> another all-reduce path (--disable-custom-all-reduce);
- a crashed TP worker -> relaunched once as it was, then that configuration is given up, and the run goes on.

Each run is the default task cut short (one target the bring-up configuration meets, nothing spent after it), so it
costs the failure, its fix and one benchmark more; runs do not pace simulated time with real sleeps.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
import yaml

from agent.graph import saved_state
from agent.policies.base import PolicyContext
from agent.policies.playbook import PlaybookPolicy
from agent.state import AgentState, Observation
from agent.trace import read_trace
from tasks.spec import load_task
from tests.agent.conftest import DEFAULT_TASK, run_agent
from tests.twin.conftest import edited_default_scenario

# the user's own launch command, as tight on memory as the node allows: all the static memory it will take, small
# graphs and prefill chunks so that it still starts
TIGHT = ["--mem-fraction-static", "0.985", "--cuda-graph-max-bs", "128", "--chunked-prefill-size", "4096"]
# many short requests at once: thousands decode together, far above the graphs' largest batch
BURST = {"description": "6000 short requests at once", "dataset": "random-ids",
         "params": {"random-input-len": 256, "random-output-len": 256, "random-range-ratio": 1, "num-prompts": 6000}}


def _task(tmp_path: Path, *, scenario: Path | None = None, launch_extra: list[str] | None = None,
          workloads: dict | None = None, target: dict | None = None, after_targets: float = 0,
          space: dict | None = None) -> Path:  # fmt: skip
    base = yaml.safe_load(DEFAULT_TASK.read_text())
    twin = {"env": {"TWIN_TIME_SCALE": "0"}}
    if launch_extra:
        twin["launch"] = base["engines"]["twin"]["launch"] + launch_extra
    data: dict = {
        "extends": str(DEFAULT_TASK),
        "targets": [target or {"name": "single_stream", "metric": "decode_tok_s", "workload": "single_stream", "min": 50}],
        "budgets": {"after_targets": {"node_hours": after_targets}},
        "engines": {"twin": twin},
    }  # fmt: skip
    if scenario is not None:
        data["workspace"] = {"twin": {"scenario": str(scenario)}}
    if workloads:
        data["workloads"] = workloads
    if space:
        data["search_space"] = {"flags": space}
    path = tmp_path / "task.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def _scenario(tmp_path: Path, **defects) -> Path:
    def edit(data):
        data["defects"].update(defects)

    return edited_default_scenario(tmp_path, edit)


def _run(tmp_path: Path, task: Path, run_id: str = "s") -> tuple[dict, list, Path]:
    proc = run_agent(tmp_path, "run", str(task), "--policy", "playbook", "--run-id", run_id)
    run_dir = tmp_path / "runs" / run_id
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    summary = json.loads((run_dir / "summary.json").read_text())
    calls = [e for e in read_trace(run_dir / "trace.jsonl") if e.kind == "tool_call"]
    audit = run_agent(tmp_path, "replay", run_id)  # the trace and the state it implies still agree
    assert audit.returncode == 0, audit.stdout[-2000:]
    return summary, calls, run_dir


def _state(run_dir: Path) -> dict:
    """The run's last checkpointed state."""
    state = saved_state(run_dir, run_dir.name)
    assert state is not None
    return state.model_dump()


def test_out_of_memory_under_load_lowers_the_static_fraction_from_the_engines_figures(tmp_path):
    task = _task(tmp_path, launch_extra=TIGHT, workloads={"burst": BURST},
                 target={"name": "burst", "metric": "decode_tok_s", "workload": "burst", "min": 1})
    summary, calls, run_dir = _run(tmp_path, task)
    launches = [c for c in calls if c.tool == "launch_server"]
    benches = [c for c in calls if c.tool == "run_benchmark"]
    first = benches[0]
    assert not first.ok and first.result["server_lost"]
    diag = first.result["diagnosis"]
    assert (diag["category"], diag["memory_phase"]) == ("out_of_memory", "serving")
    assert diag["tried_bytes"] and diag["running_requests"] and diag["mem_fraction_static"] == 0.985
    # the fix: the largest allowed fraction under the bound the figures give, not the same value again
    assert launches[1].input["flags"]["mem-fraction-static"] == 0.93
    assert launches[1].result["serving_config"]["mem_fraction_static"] != launches[0].result["serving_config"][
        "mem_fraction_static"]
    assert benches[1].ok and summary["targets"]["burst"]["met"]
    state = _state(run_dir)
    assert state["trials"][0]["serving_failure"].startswith("out_of_memory: out of memory: torch.OutOfMemoryError")
    assert any("GiB asked" in t and "running requests" in t for t in state["memo"]["tried"])


def test_a_hung_collective_moves_the_all_reduce_to_another_path(tmp_path):
    scenario = _scenario(tmp_path, collective_faults=[{"allreduce": "custom_allreduce", "min_tokens": 1}])
    summary, calls, run_dir = _run(tmp_path, _task(tmp_path, scenario=scenario))
    launches = [c for c in calls if c.tool == "launch_server"]
    benches = [c for c in calls if c.tool == "run_benchmark"]
    assert not benches[0].ok and benches[0].result["server_lost"]
    diag = benches[0].result["diagnosis"]
    assert diag["category"] == "hang_timeout" and "watchdog timeout" in diag["summary"]
    assert "disable-custom-all-reduce" not in launches[0].input["flags"]
    assert launches[1].input["flags"]["disable-custom-all-reduce"] is True  # a flag the release's parser has
    assert benches[1].ok and summary["targets"]["single_stream"]["met"]
    assert "Scheduler watchdog timeout" in (run_dir / launches[0].result["log_path"]).read_text()
    assert _state(run_dir)["trials"][0]["serving_failure"].startswith("hang_timeout:")


def test_a_crashed_worker_is_relaunched_once_then_its_configuration_given_up_and_the_run_goes_on(tmp_path):
    scenario = _scenario(tmp_path, worker_faults=[{"rank": 3, "when": {"flag": "kv_cache_dtype", "equals": "fp8_e4m3"}}])
    space = {"tp-size": [8], "kv-cache-dtype": ["auto", "fp8_e4m3"], "enable-aiter-allreduce-fusion": [False, True],
             "speculative-algorithm": [None]}  # fmt: skip
    summary, calls, run_dir = _run(tmp_path, _task(tmp_path, scenario=scenario, after_targets=0.5, space=space))
    launches = [c for c in calls if c.tool == "launch_server"]
    fp8 = [c for c in launches if c.input["flags"].get("kv-cache-dtype") == "fp8_e4m3"]
    assert len(fp8) == 2 and fp8[0].input == fp8[1].input  # relaunched once, as it was
    lost = [c for c in calls if c.tool == "run_benchmark" and not c.ok]
    assert len(lost) == 2
    for c in lost:
        assert c.result["diagnosis"]["category"] == "worker_crash"
        assert (c.result["diagnosis"]["worker"], c.result["diagnosis"]["exit_code"]) == ("scheduler_3", -6)
    state = _state(run_dir)
    assert sum(1 for t in state["trials"] if (t.get("serving_failure") or "").startswith("worker_crash")) == 2
    given_up = [t for t in state["memo"]["tried"] if "abandoned" in t and "died twice" in t]
    assert given_up and "scheduler_3" in given_up[0]
    # the run went on: the next item of the plan was launched and served after it
    after = launches[launches.index(fp8[1]) + 1:]
    assert after and after[0].input["flags"].get("enable-aiter-allreduce-fusion") is True
    assert summary["finish_reason"] == "all targets met"


def test_a_run_killed_after_the_failure_resumes_with_the_fix_and_repeats_nothing(tmp_path):
    task = _task(tmp_path, launch_extra=TIGHT, workloads={"burst": BURST},
                 target={"name": "burst", "metric": "decode_tok_s", "workload": "burst", "min": 1})
    proc = subprocess.Popen([sys.executable, "-c", "from agent.cli import app; app()", "run", str(task), "--policy",
                             "playbook", "--run-id", "k"], cwd=tmp_path, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)  # fmt: skip
    trace = tmp_path / "runs" / "k" / "trace.jsonl"

    def lost() -> bool:
        try:
            return any(json.loads(line).get("tool") == "run_benchmark" and not json.loads(line).get("ok", True)
                       for line in trace.read_text().splitlines() if '"tool_call"' in line)  # fmt: skip
        except (FileNotFoundError, json.JSONDecodeError):
            return False

    while proc.poll() is None and not lost():
        time.sleep(0.02)
    assert proc.poll() is None, "the run ended before its benchmark failed"
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    resumed = run_agent(tmp_path, "resume", "k")
    assert resumed.returncode == 0, resumed.stdout[-2000:] + resumed.stderr[-2000:]
    events = read_trace(trace)
    ids = Counter(e.call_id for e in events if e.kind == "tool_call")
    assert all(n == 1 for n in ids.values())  # nothing done twice
    benches = [e for e in events if e.kind == "tool_call" and e.tool == "run_benchmark"]
    assert [b.ok for b in benches] == [False, True]  # the failure kept once, then the fix measured
    launches = [e for e in events if e.kind == "tool_call" and e.tool == "launch_server"]
    assert launches[-1].input["flags"].get("mem-fraction-static") == 0.93
    assert _state(tmp_path / "runs" / "k")["trials"][0]["serving_failure"].startswith("out_of_memory")


@pytest.mark.parametrize("category", ["out_of_memory", "collective_error", "hang_timeout"])
def test_a_relaunch_that_serves_what_failed_is_not_measured_again(category):
    """The engine rescales or ignores a flag: the fix changed the command line, not what runs. The playbook sees it in
    the launch's serving configuration and moves on to the next change instead of measuring it."""
    policy = PlaybookPolicy()
    task = load_task(DEFAULT_TASK)
    serving = {"tp_size": 8, "mem_fraction_static": 0.975, "disable_custom_all_reduce": False}
    diag = {"category": category, "summary": "watchdog timeout (self.watchdog_timeout=300, self.soft=False)"
            if category == "hang_timeout" else "failed", "memory_phase": "serving", "tried_bytes": 2 << 30,
            "free_bytes": 1 << 30, "running_requests": 4096, "max_running_requests": 4096,
            "avail_before_weights_gb": 283.68, "mem_fraction_static": 0.975,
            "collective_library": "rccl" if category == "collective_error" else None}  # fmt: skip
    cur = {"label": "x", "flags": {"tp-size": 8}, "env": {}, "measure": "single", "keep_as": "single", "step": "launching",
           "fixes": 0, "seen": [], "serving": serving}  # fmt: skip
    memo = {"phase": "single", "queue": [], "current": cur, "best": {},
            "failed_serving": {policy._serving_signature(cur): {"why": f"{category}: failed", "diagnosis": diag}}}
    obs = Observation(call_id="l", tool="launch_server", args={"flags": cur["flags"]}, ok=True,
                      result={"status": "up", "serving_config": serving})  # fmt: skip
    state = AgentState(run_id="r", task_path=str(DEFAULT_TASK), observations=[obs], memo=memo)
    ctx = PolicyContext(task=task, workspace=None, tool_schemas=[], run_id="r")
    out = policy._work_on(state, ctx, memo, cur, obs)
    assert out is None or not any(c.tool in ("run_benchmark", "find_knee") for c in out[0])
    assert any("serves what failed before" in t for t in memo["tried"])
    if category == "collective_error":  # RCCL failed and the custom all-reduce was on: nothing left to move to
        assert memo["current"] is None and any("abandoned" in t for t in memo["tried"])
    else:
        assert cur["step"] == "launch" and cur["flags"] != {"tp-size": 8}


# --- the LLM policy, with the same tools: a scripted model takes the obvious path ---------------------------------------


def test_the_llm_reads_the_lost_benchmarks_diagnosis_and_the_expert_moves_the_all_reduce(tmp_path):
    from tests.agent.llm_server import ScriptedLLM
    from tests.agent.test_llm_end_to_end import ROOT, agent_command, checked, expect_up, tool_replies

    scenario = _scenario(tmp_path, collective_faults=[{"allreduce": "custom_allreduce", "min_tokens": 1}])
    task = _task(tmp_path, scenario=scenario)
    flags = {"tp-size": 8}

    def after_loss(request):
        reply = tool_replies(request)["bench"]
        assert not reply["ok"] and reply["server_lost"] and reply["diagnosis"]["category"] == "hang_timeout", reply
        return {"tool_calls": [("propose_allreduce_fix", {"flags": flags}, "propose")]}

    def apply(request):
        reply = tool_replies(request)["propose"]
        assert reply["ok"] and reply["call"]["tool"] == "launch_server", reply
        assert reply["call"]["args"]["flags"]["disable-custom-all-reduce"] is True
        return {"content": reply["rationale"], "tool_calls": [("launch_server", reply["call"]["args"], "relaunch")]}

    def benchmark(request):
        expect_up(request, "relaunch")
        return {"tool_calls": [("run_benchmark", {"workload": "single_stream"}, "bench2")]}

    def finish(request):
        assert tool_replies(request)["bench2"]["ok"], tool_replies(request)["bench2"]
        return {"tool_calls": [("finish", {"reason": "serves on RCCL"})]}

    def first_bench(request):
        expect_up(request, "launch")
        return {"tool_calls": [("run_benchmark", {"workload": "single_stream"}, "bench")]}

    problems: list[str] = []
    steps = [{"tool_calls": [("launch_server", {"flags": flags}, "launch")]},
             *[checked(s, problems) for s in (first_bench, after_loss, apply, benchmark, finish)]]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "200"}
    env.pop("OPENAI_API_KEY", None)
    env.pop("OPENAI_BASE_URL", None)
    with ScriptedLLM(steps, strict=True) as llm:
        proc = subprocess.run([*agent_command(), "run", str(task), "--policy", "llm", "--llm-model", "scripted",
                               "--llm-base-url", llm.base_url, "--run-id", "llm"],
                              cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)  # fmt: skip
    assert not problems, problems
    assert proc.returncode in (0, 3), proc.stdout[-3000:] + proc.stderr[-3000:]
    trials = _state(tmp_path / "runs" / "llm")["trials"]
    assert trials[0]["serving_failure"].startswith("hang_timeout:") and trials[1]["served"]
