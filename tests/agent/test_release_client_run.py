"""The agent benchmarks with the pinned release's own client (``tasks/glm52_mi355x_release_client.yaml``): the
default task, its twin's benchmark command the workspace's ``bench_serving.py`` through
``sandboxes.twin.release_bench``, cut to its single-stream target. End to end, in local processes and in the
twin's Docker image: the run fixes what breaks, measures with real HTTP requests in scaled wall time, and meets
its target; every record it keeps is the release client's, converted to simulated time."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from tests.agent.conftest import DEFAULT_TASK
from tests.docker_engine import docker_or_skip, twin_sandbox
from tests.shared_runs import run_agent

REPO = Path(__file__).resolve().parents[2]
RELEASE_CLIENT_TASK = REPO / "tasks" / "glm52_mi355x_release_client.yaml"
SCALE = 0.05


@pytest.mark.parametrize("sandbox", ["local", "docker"])
def test_a_run_measured_by_the_release_client_meets_its_target(tmp_path: Path, sandbox: str) -> None:
    if sandbox == "docker":
        docker_or_skip()
    shipped = yaml.safe_load(RELEASE_CLIENT_TASK.read_text())  # a task extends one level: its option copied
    assert shipped["extends"] == DEFAULT_TASK.name
    task = tmp_path / "task.yaml"
    task.write_text(yaml.safe_dump({
        "extends": str(DEFAULT_TASK),
        # a single stream the host follows at a twentieth of real time (the shipped task: real time, for its crowds)
        "engines": {"twin": {**shipped["engines"]["twin"],
                             "env": {**shipped["engines"]["twin"]["env"], "TWIN_TIME_SCALE": str(SCALE)}}},
        "targets": [{"name": "single_stream", "metric": "decode_tok_s", "workload": "single_stream", "min": 50}],
        "budgets": {"after_targets": {"node_hours": 0}},
        "sandbox": twin_sandbox() if sandbox == "docker" else {"kind": "local"},
    }))  # fmt: skip
    proc = run_agent(tmp_path, "run", str(task), "--policy", "playbook", "--run-id", "rc", timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    run_dir = tmp_path / "runs" / "rc"
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["targets"]["single_stream"]["met"], summary["targets"]
    records = sorted((run_dir / "bench").glob("*.jsonl"))
    assert records, "no benchmark ran"
    for path in records:
        record = json.loads(path.read_text().strip().splitlines()[-1])
        client = record["client"]
        assert client["bench_serving"].endswith("sglang/python/sglang/bench_serving.py"), client
        assert "tokenizer_stand_in" in client  # the workspace holds the checkpoint's configs, not its vocabulary
        assert record["simulated"] and record["time_scale"] == SCALE and record["backend"] == "sglang"
        wall = record["wall"]
        assert abs(record["duration"] * record["time_scale"] - wall["duration"]) < 1e-6 * wall["duration"] + 1e-9
        log = path.with_suffix(".log").read_text()
        assert "Serving Benchmark Result" in log and "dayzero twin: the record in simulated time" in log
    if sandbox == "local":  # the figure the run kept is the virtual benchmark's for the same flags and workload
        _agrees_with_the_virtual_benchmark(tmp_path, run_dir, summary["targets"]["single_stream"]["flags"], record)


def _agrees_with_the_virtual_benchmark(tmp_path: Path, run_dir: Path, flags: dict, record: dict) -> None:
    from tasks.spec import load_task
    from tests.twin.conftest import running
    from tests.twin.test_release_client import TOLERANCE
    from tools.bench import workload_flags

    argv = [f"--{k}" if v is True else f"--{k}={v}" for k, v in flags.items() if v not in (False, None)]
    workload, _ = workload_flags(load_task(DEFAULT_TASK).workloads["single_stream"], None)
    with running(run_dir / "workspace", tmp_path / "virtual.log", argv) as server:  # virtual time
        virtual = server.bench(tmp_path, *workload)
    for metric, tolerance in TOLERANCE.items():
        assert abs(record[metric] / virtual[metric] - 1) <= tolerance, (metric, record[metric], virtual[metric])
