"""The fault suite: an agent run on the twin with one fault injected (``TWIN_FAULTS``, sandboxes/twin/engine/faults.py)
records the fault, recovers, and ends as a run without it would, with nothing lost.

Each run is the default task cut short: its only target is a single-stream figure the bring-up configuration
meets, with nothing to spend after it, so a run is one launch, one benchmark and the accuracy check, plus what
the fault costs. The LLM side's faults (429 with retry-after, 500s, timeouts, malformed or repeated calls) are
in test_llm_compat.py and test_llm_policy.py; a full runs folder in test_exit_codes.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from agent.trace import read_trace
from tests.agent.conftest import DEFAULT_TASK, run_agent


def faulty_task(tmp_path: Path, faults: str, **engine) -> Path:
    """The short task with ``faults`` injected into the twin."""
    path = tmp_path / "faulty.yaml"
    twin = {"env": {"TWIN_FAULTS": faults, "TWIN_TIME_SCALE": "0.0005"}, **engine}
    path.write_text(yaml.safe_dump({
        "extends": str(DEFAULT_TASK),
        "targets": [{"name": "single_stream", "metric": "decode_tok_s", "workload": "single_stream", "min": 50}],
        "budgets": {"after_targets": {"node_hours": 0}},
        "engines": {"twin": twin},
    }))  # fmt: skip
    return path


def run_with(tmp_path: Path, faults: str, **engine) -> tuple[dict, list]:
    proc = run_agent(tmp_path, "run", str(faulty_task(tmp_path, faults, **engine)), "--policy", "playbook",
                     "--run-id", "f")  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]  # recovered: every target met
    run_dir = tmp_path / "runs" / "f"
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["targets"]["single_stream"]["met"]
    events = read_trace(run_dir / "trace.jsonl")
    kinds = [e.kind for e in events]
    assert kinds.count("run_started") == 1 and kinds.count("run_finished") == 1
    audit = run_agent(tmp_path, "replay", "f")  # the trace and the state it implies still agree
    assert audit.returncode == 0, audit.stdout[-2000:]
    return summary, [e for e in events if e.kind == "tool_call"]


@pytest.mark.parametrize("fault,engine,says", [
    ("hang_before_ready@1", {"startup_timeout_s": 5}, "did not become ready"),
    ("slow_start@1", {"startup_timeout_s": 5, "env": {"TWIN_FAULTS": "slow_start@1", "TWIN_SLOW_START_S": "30",
                                                      "TWIN_TIME_SCALE": "0.0005"}}, "did not become ready"),
    ("port_taken@1", {}, "port the server binds is taken"),
])  # fmt: skip
def test_a_launch_that_fails_for_the_node_is_launched_again(tmp_path, fault, engine, says):
    summary, calls = run_with(tmp_path, fault, **engine)
    launches = [c for c in calls if c.tool == "launch_server"]
    assert not launches[0].ok and says in (launches[0].error or "")  # the fault, recorded as it happened
    assert launches[1].ok and launches[1].input == launches[0].input  # the same configuration, launched again


@pytest.mark.parametrize("fault,engine,says", [
    ("crash_mid_benchmark@1", {}, "stopped answering during the benchmark"),
    ("bench_hang@1", {"benchmark_timeout_s": 5}, "did not finish within 5 s"),
])  # fmt: skip
def test_a_benchmark_that_loses_its_server_is_measured_again(tmp_path, fault, engine, says):
    summary, calls = run_with(tmp_path, fault, **engine)
    benches = [c for c in calls if c.tool == "run_benchmark"]
    assert not benches[0].ok and says in (benches[0].error or "") and benches[0].result.get("server_lost")
    assert benches[1].ok  # measured again, on a new launch of the same configuration
    launches = [c for c in calls if c.tool == "launch_server"]
    assert len(launches) == 2 and launches[0].input == launches[1].input
    # the figure is the clean run's, not the failed one's
    assert summary["targets"]["single_stream"]["achieved"] == pytest.approx(benches[1].result["runs"][0]["decode_tok_s"])
