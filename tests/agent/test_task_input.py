"""Task input through ``agent run`` (issue "Nothing lost, nothing leaked"): an unbounded value, an alias bomb, a
scenario, eval dataset or prior run that is not what it should be is refused before the run exists: exit 2, one
line that quotes none of the file, no run folder. The bounds themselves are unit-tested in
tests/tasks/test_task_bounds.py."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest

from agent.trace import TraceWriter
from tests.agent.test_validation import TASK, no_run_created, one_error_line, variant
from tests.shared_runs import run_agent

SECRET = "s3cr3tHASHvalue"
SHADOW = f"root:$6${SECRET}$AbCdEf/gh.ij:20228:0:99999:7:::\ndaemon:*:20228:0:99999:7:::\n"
BOMB = "".join(f"l{i}: &l{i} [{', '.join([f'*l{i - 1}' if i else 'lol'] * 9)}]\n" for i in range(10))


def refused(tmp_path: Path, task: Path, *args: str) -> str:
    """``agent run TASK ARGS`` exits 2 with one line and leaves no run folder; the line."""
    proc = run_agent(tmp_path, "run", str(task), "--run-id", "x", *args, timeout=120)
    line = one_error_line(proc)
    assert proc.returncode == 2, (proc.returncode, line, proc.stderr[-2000:])
    assert SECRET not in proc.stdout + proc.stderr and "root:" not in proc.stdout
    no_run_created(tmp_path)
    return line


@pytest.mark.parametrize("text,expect", [
    ("hardware: {gpus: 1000000000000000000000000000000}\n", "hardware.gpus: Input should be less than or equal to 1024"),
    (f"budgets: {{trials: {10**40}}}\n", "budgets.trials: Input should be less than or equal to 100000"),
    ("engines: {twin: {startup_timeout_s: 1e308}}\n",
     "engines.twin.startup_timeout_s: Input should be less than or equal to 604800"),
    ("model: {name: " + "m" * 2**20 + "}\n", "over the 1.0 MiB such a file may be: not read"),
    ("model: {name: " + "m" * 100_000 + "}\n", "model.name: String should have at most 256 characters"),
    ("llm:\n  extra_body:\n" + "".join(f"    {ln}\n" for ln in BOMB.splitlines()),
     "expands to more than 100000 values once its aliases are expanded"),
])  # fmt: skip
def test_unbounded_values_and_alias_bombs_are_refused_before_the_run(tmp_path, text, expect):
    assert expect in refused(tmp_path, variant(tmp_path, "t.yaml", text))


@pytest.mark.parametrize("args,expect", [
    (["--max-trials", str(10**40)], f"error: --max-trials {10**40}: give 1 to 100000"),
    (["--llm-timeout", "1e308"], "error: --llm-timeout 1e+308: give a number of seconds up to 604800 (a week)"),
    (["--policy", "replay", "--replay", "/dev/zero"],
     "error: --replay /dev/zero: not a readable trace (is not a regular file)"),
])  # fmt: skip
def test_command_line_numbers_and_files_are_bounded(tmp_path, args, expect):
    """``--max-trials`` overrides budgets.trials, ``--llm-timeout`` llm.timeout_s: the same bounds; a replay trace
    that is not a regular file is not read (``/dev/zero`` was, without end)."""
    assert refused(tmp_path, TASK, *args) == expect


def fifo(path: Path) -> Path:
    os.mkfifo(path)
    return path


@pytest.mark.parametrize("name,expect", [
    ("/dev/zero", "/dev/zero: is not a regular file (a device, FIFO or socket): not read"),
    ("fifo.yaml", "fifo.yaml: is not a regular file (a device, FIFO or socket): not read"),
    ("/", "/: is a directory, not a file"),
    ("shadow.yaml", ":1: not a scenario file (none of its top-level keys is a scenario's section"),
    ("bomb.yaml", "expands to more than 100000 values once its aliases are expanded"),
])  # fmt: skip
def test_scenario_files_are_checked_before_the_run(tmp_path, name, expect):
    """``scenario: /dev/zero`` is not read (it was, 4.9 GB in 15 s), nor a FIFO (it waited forever); /etc/shadow's
    first line is not printed (it was, as an unknown field)."""
    (tmp_path / "tasks").mkdir()
    if name == "fifo.yaml":
        fifo(tmp_path / "tasks" / name)
    elif name == "shadow.yaml":
        (tmp_path / "tasks" / name).write_text(SHADOW)
    elif name == "bomb.yaml":
        (tmp_path / "tasks" / name).write_text(BOMB)
    task = variant(tmp_path, "t.yaml", f"workspace: {{twin: {{scenario: {name}}}}}\n")
    line = refused(tmp_path, task)
    assert line.startswith(f"error: {task}: workspace.twin.scenario: ") and expect in line, line


@pytest.mark.parametrize("dataset,expect", [
    ("../" * 30 + "etc/passwd", "/etc/passwd: is not valid JSON (line 1: Expecting value)"),
    ("/", "/: is a directory, not a file"),
    ("missing.json", "missing.json: no such file"),
    ("/dev/zero", "/dev/zero: is not a regular file (a device, FIFO or socket): not read"),
    ("fifo.json", "fifo.json: is not a regular file (a device, FIFO or socket): not read"),
    ("object.json", "object.json: not a JSON list of questions (a list of {question, answer, solution})"),
    ("no_answer.json", "no_answer.json: item 2 has no 'answer' (a number)"),
    ("few.json", "few.json: 2 item(s), but 5 few-shot examples and at least one question are needed"),
    ("shadow.json", "shadow.json: is not valid JSON (line 1: Expecting value)"),
])  # fmt: skip
def test_eval_datasets_are_checked_before_the_run(tmp_path, dataset, expect):
    """An eval's dataset that is not a JSON list of questions was found only when the eval ran: the run then
    crashed with a TypeError, leaving its folder."""
    data = tmp_path / "tasks"
    data.mkdir()
    item = {"question": "1 + 1?", "answer": 2, "solution": "1 + 1 = 2\n#### 2"}
    files = {"object.json": {"questions": [item]}, "no_answer.json": [item, item, {"question": "q", "solution": "s"}],
             "few.json": [item, item]}  # fmt: skip
    if dataset in files:
        (data / dataset).write_text(json.dumps(files[dataset]))
    elif dataset == "fifo.json":
        fifo(data / dataset)
    elif dataset == "shadow.json":
        (data / dataset).write_text(SHADOW)
    task = variant(tmp_path, "t.yaml", f"evals: {{gsm8k: {{dataset: {dataset}}}}}\n")
    line = refused(tmp_path, task, "--policy", "playbook")
    assert line.startswith(f"error: {task}: evals.gsm8k.dataset: ") and expect in line, line


def prior_run(root: Path, task: Path, summary: object) -> Path:
    """A run folder as agent/prior.py reads it: a trace opening with this task's run_started, a summary."""
    run = root / "prior"
    writer = TraceWriter(run / "trace.jsonl", "prior")
    writer.emit("run_started", task="glm52_mi355x", task_path=str(task), policy="playbook", sandbox="local",
                engine="twin", task_sha256=hashlib.sha256(task.read_bytes()).hexdigest())  # fmt: skip
    writer.close()
    (run / "summary.json").write_text(json.dumps(summary))
    return run


@pytest.mark.parametrize("case,expect", [
    ("a file", "not a finished run (not a folder)"),
    ("summary a FIFO", "summary.json: is not a regular file (a device, FIFO or socket): not read"),
    ("trace /dev/zero", "trace.jsonl: is not a regular file (a device, FIFO or socket): not read"),
    ("summary a list", "its summary.json is not a JSON object"),
    ("trials garbage", "its summary's trials[0] do not read (id: Field required)"),
    ("trace garbage", "its trace.jsonl does not open with a run_started event"),
])  # fmt: skip
def test_prior_runs_are_checked_before_the_run(tmp_path, case, expect):
    task = variant(tmp_path, "t.yaml", "")
    run = prior_run(tmp_path / "earlier", task, {"run_id": "prior", "trials": [], "targets": {}})
    if case == "a file":
        run = run / "summary.json"
    elif case == "summary a FIFO":
        (run / "summary.json").unlink()
        fifo(run / "summary.json")
    elif case == "trace /dev/zero":
        (run / "trace.jsonl").unlink()
        (run / "trace.jsonl").symlink_to("/dev/zero")
    elif case == "summary a list":
        (run / "summary.json").write_text("[1, 2]")
    elif case == "trials garbage":
        (run / "summary.json").write_text(json.dumps({"trials": [{SECRET: SHADOW}]}))
    elif case == "trace garbage":
        (run / "trace.jsonl").write_text(SHADOW)
    line = refused(tmp_path, task, "--prior", str(run))
    assert line.startswith(f"error: --prior {run}: ") and expect in line, line
