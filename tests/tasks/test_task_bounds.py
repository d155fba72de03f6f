"""Task input, bounded (issue "Nothing lost, nothing leaked"): every number, text and list of a task has a finite
bound (``tasks/limits.py``); a task file is read as a regular file of a bounded size, as YAML whose aliases
cannot expand past a bound, and a file that is not a task is refused in one line that quotes none of its content.
The scenario file: test_scenario_files.py; the same refusals through ``agent run`` (exit 2, no run folder):
tests/agent/test_task_input.py."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tasks import limits
from tasks.spec import TaskError, load_task
from tests.tasks.test_spec import BASE  # a minimal valid task

REPO = Path(__file__).resolve().parents[2]
SECRET = "s3cr3tHASHvalue"
# what /etc/shadow holds: a line of colon-separated fields, a password hash among them
SHADOW = f"root:$6${SECRET}$AbCdEf/gh.ij:20228:0:99999:7:::\ndaemon:*:20228:0:99999:7:::\n"


def error_of(path: Path, text: str | None = None) -> str:
    if text is not None:
        path.write_text(text)
    with pytest.raises(TaskError) as info:
        load_task(path)
    message = str(info.value)
    assert "\n" not in message, message
    return message


BIG = 10**30


@pytest.mark.parametrize("extra,field,problem", [
    (f"hardware: {{accelerator: X, gpus: {BIG}}}\n", "hardware.gpus", "less than or equal to 1024"),
    ("hardware: {accelerator: X, gpus: 8, gpu_memory_gb: 1.0e+30}\n", "hardware.gpu_memory_gb", "less than or equal"),
    (f"budgets: {{trials: {10**40}}}\n", "budgets.trials", "less than or equal to 100000"),
    ("budgets: {wall_minutes: 1e308}\n", "budgets.wall_minutes", "less than or equal to 10080"),
    ("budgets: {node_hours: 1e308}\n", "budgets.node_hours", "less than or equal"),
    (f"budgets: {{llm_tokens: {BIG}}}\n", "budgets.llm_tokens", "less than or equal"),
    ("budgets: {after_targets: {node_hours: 1e308}}\n", "budgets.after_targets.node_hours", "less than or equal"),
    (f"budgets: {{after_targets: {{benchmark_runs: {BIG}}}}}\n", "budgets.after_targets.benchmark_runs",
     "less than or equal"),
    ("llm: {timeout_s: 1e308}\n", "llm.timeout_s", "less than or equal to 604800"),
    ("report: {gpu_hour_usd: 1e308}\n", "report.gpu_hour_usd", "less than or equal"),
    ("sandbox: {docker: {gpus: [0, 100000]}}\n", "sandbox.docker.gpus[1]", "Input should be less than 1024"),
    (f"search_space: {{flags: {{tp-size: [1, {BIG}]}}}}\n", "search_space.flags.tp-size[1]", "within"),
    ("accuracy: {suite: e, baseline: 5}\nevals: {e: {dataset: d.json}}\n", "accuracy.baseline", "less than or equal"),
    ("accuracy: {suite: e, max_drop: 1e308}\nevals: {e: {dataset: d.json}}\n", "accuracy.max_drop", "less than or equal"),
])  # fmt: skip
def test_every_number_of_a_task_is_bounded(tmp_path, extra, field, problem):
    base = BASE.replace("hardware: {accelerator: X, gpus: 8}\n", "") if extra.startswith("hardware") else BASE
    path = tmp_path / "task.yaml"
    message = error_of(path, base + extra)
    assert f": {field}: " in message and problem in message, message


@pytest.mark.parametrize("edit,field", [
    (("tune_moe: [c]}", "tune_moe: [c], startup_timeout_s: 1e308}"), "engines.twin.startup_timeout_s"),
    (("tune_moe: [c]}", "tune_moe: [c], benchmark_timeout_s: 1e308}"), "engines.twin.benchmark_timeout_s"),
    (("{dataset: random-ids}", "{dataset: random-ids, request_rate: 1e308}"), "workloads.w.request_rate"),
    (("{dataset: random-ids}", f"{{dataset: random-ids, max_concurrency: {BIG}}}"), "workloads.w.max_concurrency"),
    (("{dataset: random-ids}", "{dataset: random-ids, duration_s: 1e308}"), "workloads.w.duration_s"),
    (("{dataset: random-ids}", "{dataset: random-ids, ttft_limit_ms: 1e308}"), "workloads.w.ttft_limit_ms"),
    (("{dataset: random-ids}", f"{{dataset: random-ids, prefix_groups: {BIG}}}"), "workloads.w.prefix_groups"),
    (("{dataset: random-ids}", f"{{dataset: random-ids, knee_seeds: [1, {2**64}]}}"), "workloads.w.knee_seeds[1]"),
    (("{dataset: random-ids}", f"{{dataset: random-ids, params: {{num-prompts: {BIG}}}}}"),
     "workloads.w.params.num-prompts"),
    (("min: 10", "min: 1e308"), "targets[0].min"),
    (("min: 10", "min: 10, min_tok_s_per_user: 1e308"), "targets[0].min_tok_s_per_user"),
    (("min: 10", "min: 10, max_tpot_ms: 1e308"), "targets[0].max_tpot_ms"),
])  # fmt: skip
def test_engine_workload_and_target_numbers_are_bounded(tmp_path, edit, field):
    message = error_of(tmp_path / "task.yaml", BASE.replace(*edit))
    assert f": {field}: " in message and ("less than or equal" in message or "within" in message), message


@pytest.mark.parametrize("extra,field", [
    ("evals: {e: {dataset: d.json, n: 100000000000000000000}}\n", "evals.e.n"),
    ("evals: {e: {dataset: d.json, max_tokens: 100000000000000000000}}\n", "evals.e.max_tokens"),
    ("evals: {e: {dataset: d.json, few_shot: 100000000000000000000}}\n", "evals.e.few_shot"),
])  # fmt: skip
def test_eval_numbers_are_bounded(tmp_path, extra, field):
    message = error_of(tmp_path / "task.yaml", BASE + extra)
    assert f": {field}: Input should be less than or equal" in message, message


LONG = "x" * 100_000


@pytest.mark.parametrize("edit,field,problem", [
    (("name: t", f"name: {LONG}"), "name", "at most 256 characters"),
    (("{name: m,", f"{{name: {LONG},"), "model.name", "at most 256 characters"),
    (("accelerator: X", f"accelerator: {LONG}"), "hardware.accelerator", "at most 256 characters"),
    (("launch: [a]", f"launch: [{LONG}]"), "engines.twin.launch[0]", "at most 4096 characters"),
    (("launch: [a]", f"launch: [{', '.join(['a'] * 1000)}]"), "engines.twin.launch", "at most 256 items"),
    (("{name: speed,", f"{{name: {LONG},"), "targets[0].name", "at most 256 characters"),
    (("{dataset: random-ids}", f"{{dataset: random-ids, description: {LONG}}}"), "workloads.w.description",
     "at most 10000 characters"),
])  # fmt: skip
def test_texts_and_lists_are_bounded(tmp_path, edit, field, problem):
    message = error_of(tmp_path / "task.yaml", BASE.replace(*edit))
    assert f": {field}: " in message and problem in message, message
    assert len(message) < 500  # the long value is not in it


@pytest.mark.parametrize("extra,field,problem", [
    (f"workspace: {{twin: {{scenario: {LONG}.yaml}}}}\n", "workspace.twin.scenario", "at most 4096 characters"),
    (f"search_space: {{flags: {{tp-size: [{', '.join(['1'] * 2000)}]}}}}\n", "search_space.flags.tp-size",
     "at most 1024 items"),
    (f"search_space: {{env: {{A: [{LONG}]}}}}\n", "search_space.env.A[0]", "at most 4096 characters"),
    (f"env: {{A: {{value: {'y' * 40_000}}}}}\n", "env.A.value", "at most 32768 characters"),
    (f"llm: {{extra_body: {{a: {'z' * 70_000}}}}}\n", "llm.extra_body", "at most 65536 characters"),
    ("evals:\n" + "".join(f"  e{i}: {{dataset: d.json}}\n" for i in range(100)), "evals", "at most 64 items"),
])  # fmt: skip
def test_paths_values_and_sections_are_bounded(tmp_path, extra, field, problem):
    message = error_of(tmp_path / "task.yaml", BASE + extra)
    assert f": {field}: " in message and problem in message, message
    assert len(message) < 500


def test_the_shipped_tasks_are_within_the_bounds():
    for path in sorted((REPO / "tasks").glob("*.yaml")):
        load_task(path)
        assert path.stat().st_size < limits.TASK_FILE_BYTES


# --- the task file itself ----------------------------------------------------------------------------------------

BOMB = "".join(f"l{i}: &l{i} [{', '.join([f'*l{i - 1}' if i else 'lol'] * 9)}]\n" for i in range(10))


@pytest.mark.parametrize("text,line,problem", [
    (BASE + "llm:\n  extra_body:\n" + "".join("    " + ln + "\n" for ln in BOMB.splitlines()), 0,
     "expands to more than 100000 values once its aliases are expanded"),
    (BASE + "llm: {extra_body: &a {x: [*a]}}\n", 10, "an alias refers to a node that contains it"),
    (BASE + "llm: {extra_body: {a: " + "[" * 3000 + "]" * 3000 + "}}\n", 0, "nested deeper than 64 levels"),
    (BASE + "llm: {extra_body: {a: " + "1" * 5000 + "}}\n", 0, "a value YAML cannot read"),
])  # fmt: skip
def test_yaml_that_expands_or_nests_without_bound_is_refused(tmp_path, text, line, problem):
    """A billion laughs (10 levels of 9 aliases: 3.5e9 values) is refused from the node graph, before anything is
    built or walked; so are a recursive alias, a nesting no task needs, and a number Python will not convert."""
    path = tmp_path / "task.yaml"
    message = error_of(path, text)
    assert message.startswith(f"{path}:") and problem in message, message
    if line:
        assert message.startswith(f"{path}:{line}: "), message


def test_a_task_file_over_its_size_or_not_a_regular_file_is_not_read(tmp_path):
    big = tmp_path / "big.yaml"
    message = error_of(big, BASE + "# padding\n" * 200_000)
    assert message == f"{big}: is 1.9 MiB, over the 1.0 MiB such a file may be: not read", message
    fifo = tmp_path / "fifo.yaml"
    os.mkfifo(fifo)  # a reader would wait for a writer forever
    assert error_of(fifo) == f"{fifo}: is not a regular file (a device, FIFO or socket): not read"
    assert error_of(Path("/dev/zero")) == "/dev/zero: is not a regular file (a device, FIFO or socket): not read"
    assert error_of(tmp_path) == f"{tmp_path}: is a directory, not a file"


def test_a_binary_or_secret_file_is_refused_without_quoting_it(tmp_path):
    binary = tmp_path / "binary.yaml"
    binary.write_bytes(b"name: t\n\x7fELF\x02\x01\x01" + SECRET.encode() + b"\xff\xfe\n")
    message = error_of(binary)
    assert message == f"{binary}:2: is not UTF-8 text (a binary file?)", message
    control = tmp_path / "control.yaml"
    message = error_of(control, f"name: t\nx: {SECRET}\x00\n")
    assert message.startswith(f"{control}:2: not valid YAML: a control character") and SECRET not in message
    # a task naming /etc/shadow (as a task, or as the task it extends): neither its keys nor its values come out
    shadow = tmp_path / "shadow"
    shadow.write_text(SHADOW)
    message = error_of(shadow)
    assert SECRET not in message and "root:" not in message and message.startswith(f"{shadow}:1: not a task file")
    child = tmp_path / "child.yaml"
    message = error_of(child, f"extends: {shadow}\n")
    assert SECRET not in message and message.startswith(f"{shadow}:1: not a task file"), message
    # a YAML error quotes no text of the file (a tag is the file's own text)
    tagged = tmp_path / "tagged.yaml"
    message = error_of(tagged, BASE + f"description: !{SECRET} x\n")
    assert SECRET not in message and f"{tagged}:10: not valid YAML: could not determine a constructor" in message
    # an unknown key in a real task is named when it is a plain name, described otherwise
    odd = tmp_path / "odd.yaml"
    assert error_of(odd, BASE + "colour: blue\n").endswith(":10: colour: unknown field")
    message = error_of(odd, BASE + f"'{SECRET}: $6$x': 1\n")
    assert SECRET not in message and message.endswith(":10: (a key of 21 characters): unknown field"), message
