"""Task files (issue 13): paths relative to the file that names them, duplicate keys and non-finite numbers
refused with file:line, an error in an ``extends`` parent reported at the parent's file and line."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from tasks.spec import TaskError, load_task
from tests.tasks.test_spec import BASE  # a minimal valid task

REPO = Path(__file__).resolve().parents[2]



def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text))
    return path


def error_of(path: Path) -> str:
    with pytest.raises(TaskError) as info:
        load_task(path)
    message = str(info.value)
    assert "\n" not in message, message
    return message


@pytest.mark.parametrize("extra,line,key", [
    ("name: again\n", 10, "name"),
    ("evals:\n  a: {dataset: x.json}\n  a: {dataset: y.json}\n", 12, "a"),
    ("budgets:\n  trials: 3\n  wall_minutes: 1\n  trials: 4\n", 13, "trials"),
])  # fmt: skip
def test_duplicate_keys_are_refused_at_their_line(tmp_path, extra, line, key):
    path = write(tmp_path / "task.yaml", BASE + extra)
    assert error_of(path) == f"{path}:{line}: {key}: duplicate key (YAML would keep only the last)"


@pytest.mark.parametrize("edit,where", [
    (("min: 10", "min: .nan"), r":9: targets[0].min: Input should be a finite number"),
    (("{dataset: random-ids}", "{dataset: random-ids, request_rate: .inf}"), ":7: workloads.w.request_rate: "),
    (("gpus: 8}", "gpus: 8, gpu_memory_gb: -.inf}"), ":3: hardware.gpu_memory_gb: "),
    (("{dataset: random-ids}", "{dataset: random-ids, params: {random-input-len: .NaN}}"),
     ":7: workloads.w.params.random-input-len: Input should be a finite number"),
])  # fmt: skip
def test_non_finite_numbers_are_refused(tmp_path, edit, where):
    path = write(tmp_path / "task.yaml", BASE.replace(*edit))
    message = error_of(path)
    assert message.startswith(f"{path}{where}"), message
    assert "finite" in message


def test_an_error_inherited_from_extends_is_reported_in_the_parent(tmp_path):
    parent = write(tmp_path / "base" / "parent.yaml", BASE.replace("gpus: 8", "gpus: 0"))
    child = write(tmp_path / "child.yaml", "extends: base/parent.yaml\nname: child\n")
    assert error_of(child).startswith(f"{tmp_path / 'base' / 'parent.yaml'}:3: hardware.gpus: ")
    # the child overrides the mapping key by key: its own bad value is its own line
    child.write_text("extends: base/parent.yaml\nname: child\nhardware: {gpus: -1}\n")
    assert error_of(child).startswith(f"{child}:3: hardware.gpus: Input should be greater than 0")
    # a list is replaced whole: the error is where the child wrote it
    parent.write_text(BASE)
    child.write_text("extends: base/parent.yaml\ntargets:\n  - {name: s, metric: decode_tok_s, workload: nope, min: 1}\n")
    assert error_of(child).startswith(f"{child}:3: targets[0].workload: unknown workload 'nope'")
    # the parent's duplicate key is the parent's
    parent.write_text(BASE + "name: twice\n")
    assert error_of(child) == f"{parent}:10: name: duplicate key (YAML would keep only the last)"


def test_a_missing_parent_is_named_at_the_extends_line(tmp_path):
    child = write(tmp_path / "child.yaml", "# a comment\nextends: gone.yaml\n")
    assert error_of(child) == f"{child}:2: extends: no task file {tmp_path / 'gone.yaml'}"


def test_paths_resolve_relative_to_the_file_that_names_them(tmp_path, monkeypatch):
    """A scenario file, sources, a Docker mount's host side and an eval's dataset, each relative to its own file,
    from whatever directory the task is loaded."""
    scenario = (REPO / "sandboxes" / "twin" / "scenarios" / "glm52_mi355x.yaml").read_text()
    write(tmp_path / "tasks" / "scenarios" / "mine.yaml", scenario)
    write(tmp_path / "tasks" / "data" / "qa.json", "[]")
    write(tmp_path / "tasks" / "base.yaml", BASE + textwrap.dedent("""\
        workspace:
          sources: {model: ../checkpoint}
          twin: {scenario: scenarios/mine.yaml}
        evals:
          qa: {dataset: data/qa.json}
        sandbox:
          docker:
            mounts: {"{workspace}/sglang": /sgl, "patches": /patches}
    """))
    child = write(tmp_path / "elsewhere" / "child.yaml", "extends: ../tasks/base.yaml\nworkspace:\n"
                                                          "  sources: {sglang: trees/sglang}\n")  # fmt: skip
    monkeypatch.chdir(tmp_path / "elsewhere")  # a cwd neither file is in
    for path in (Path("child.yaml"), child, Path("../tasks/base.yaml")):
        task = load_task(path)
        assert task.workspace.twin.scenario == str(tmp_path / "tasks" / "scenarios" / "mine.yaml")
        assert Path(task.workspace.twin.scenario).is_file()
        assert task.evals["qa"].dataset == str(tmp_path / "tasks" / "data" / "qa.json")
        assert task.workspace.sources["model"] == str(tmp_path / "checkpoint")
        assert task.sandbox.docker.mounts == {"{workspace}/sglang": "/sgl", str(tmp_path / "tasks" / "patches"): "/patches"}
    assert load_task(child).workspace.sources["sglang"] == str(tmp_path / "elsewhere" / "trees" / "sglang")
    # a bundled scenario's name stays a name
    plain = write(tmp_path / "plain.yaml", BASE + "workspace: {twin: {scenario: vega_mi355x}}\n")
    assert load_task(plain).workspace.twin.scenario == "vega_mi355x"


def test_the_shipped_tasks_load_from_any_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for path in sorted((REPO / "tasks").glob("*.yaml")):
        task = load_task(path)
        for suite in task.evals.values():
            assert Path(suite.dataset).is_file(), (path, suite.dataset)
