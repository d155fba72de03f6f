"""Task files: the shipped task loads; a malformed one fails with one located line, never a traceback."""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

import pytest

from sandboxes.base import SandboxError
from sandboxes.select import choose
from tasks.spec import TaskError, load_task

GOOD = Path("tasks/glm52_mi355x.yaml")


def test_shipped_task_loads():
    task = load_task(GOOD)
    assert {t.name for t in task.targets} == {"throughput", "single_stream", "accuracy"}
    assert task.workloads["throughput"].ttft_limit_ms == 5000
    assert task.engines.twin and task.engines.sglang


def write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "task.yaml"
    p.write_text(textwrap.dedent(text))
    return p


BASE = """\
name: t
model: {name: m, architecture: A, quantization: mxfp4}
hardware: {accelerator: X, gpus: 8}
engines:
  twin: {launch: [a], benchmark: [b], tune_moe: [c]}
workloads:
  w: {dataset: random-ids}
targets:
  - {name: speed, metric: decode_tok_s, workload: w, min: 10}
"""


@pytest.mark.parametrize(
    "edit,expect",
    [
        (("min: 10", "min: fast"), r":9: targets\[0\]\.min: Input should be a valid number"),
        (("workload: w, min", "workload: nope, min"), r":9: targets\[0\]\.workload: unknown workload 'nope'"),
        (("gpus: 8", "gpus: 0"), r":3: hardware\.gpus: Input should be greater than 0"),
        (("dataset: random-ids", "dataset: sharegpt"), r":7: workloads\.w\.dataset: Input should be"),
        (("name: t\n", "name: t\ncolour: blue\n"), r":2: colour: unknown field"),
        (("hardware: {accelerator: X, gpus: 8}\n", ""), r":1: hardware: required field is missing"),
        (("targets:\n", "targets: [\n"), r": not valid YAML"),
        (("min: 10", "min: 10, min_tok_s_per_user: 0"), r":9: targets\[0\]\.min_tok_s_per_user: Input should be greater"),
        (("min: 10}", "min: 10}\n  - {name: acc, metric: accuracy_delta, min: -0.1, max_tpot_ms: 50}"),
         r":10: targets\[1\]\.max_tpot_ms: an interactivity bound needs a target that serves a workload"),
    ],
)
def test_malformed_task_is_one_located_line(tmp_path, edit, expect):
    path = write(tmp_path, BASE.replace(*edit))
    with pytest.raises(TaskError) as info:
        load_task(path)
    message = str(info.value)
    assert "\n" not in message and message.startswith(str(path))
    assert re.search(expect, message), message


def test_missing_file(tmp_path):
    with pytest.raises(TaskError, match="nope.yaml: no such file"):
        load_task(tmp_path / "nope.yaml")


def test_auto_sandbox_explains_its_choice(monkeypatch):
    task = load_task(GOOD)
    monkeypatch.setattr("sandboxes.select.has_amd_gpu", lambda: False)
    choice = choose(task)
    assert choice.engine == "twin" and "no /dev/kfd" in choice.reason and "simulated" in choice.reason
    monkeypatch.setattr("sandboxes.docker.docker_available", lambda: "no Docker engine: socket missing")
    with pytest.raises(SandboxError, match="no Docker engine"):
        choose(task, "docker")
    monkeypatch.setattr("sandboxes.select.has_amd_gpu", lambda: True)
    monkeypatch.setattr("sandboxes.select.has_docker", lambda: True)
    real = choose(task)
    assert (real.kind, real.engine) == ("docker", "sglang") and "AMD GPUs" in real.reason


def test_secrets_come_from_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("MY_TOKEN", "s3cret-value")
    path = write(tmp_path, BASE + "env:\n  HF_TOKEN: {from_env: MY_TOKEN, secret: true}\n  PLAIN: {value: x}\n")
    task = load_task(path)
    assert task.secrets() == ["s3cret-value"]
    assert task.resolved_env() == {"HF_TOKEN": "s3cret-value", "PLAIN": "x"}
