"""Everything a run needs is checked before anything is created (issue 13): a problem is one line, exit 2 for bad
input and 5 for the machinery (Docker, the runs folder), and leaves no run folder. Paths in a task resolve from
the file that names them; `agent resume` on a run that cannot continue says why in one line."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.shared_runs import run_agent

REPO = Path(__file__).resolve().parents[2]
TASK = REPO / "tasks" / "glm52_mi355x.yaml"
DOCKER_TASK = REPO / "tasks" / "glm52_mi355x_docker.yaml"


def agent_env(cwd: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    """``agent ARGS`` in ``cwd`` with the environment ``env``."""
    return run_agent(cwd, *args, env=env, timeout=300)


def one_error_line(proc: subprocess.CompletedProcess) -> str:
    """The single line a refused command prints (and nothing else: no traceback, no stderr)."""
    lines = [ln for ln in proc.stdout.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr
    return lines[0]


def no_run_created(root: Path) -> None:
    runs = root / "runs"
    assert not runs.exists() or not any(runs.iterdir()), list(runs.iterdir())


def variant(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / "tasks" / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"extends: {TASK}\n{text}")
    return path


@pytest.mark.parametrize("case,args,expect", [
    ("unknown policy", ["--policy", "nope"], "unknown policy 'nope'"),
    ("replay without a trace", ["--policy", "replay"], "--policy replay needs --replay TRACE"),
    ("missing trace", ["--policy", "replay", "--replay", "gone.jsonl"], "--replay gone.jsonl: not a readable trace"),
    ("no API key", ["--policy", "llm", "--llm-model", "m", "--llm-base-url", "https://llm.example.invalid/v1"],
     "no API key for https://llm.example.invalid/v1"),
    ("llm without a model", ["--policy", "llm"], "--policy llm needs --llm-model"),
    ("unknown sandbox", ["--sandbox", "cloud"], "--sandbox cloud: choose auto, local or docker"),
    ("unknown executor", ["--executor", "slurm"], "--executor slurm: choose inline or ray"),
    ("run id climbing out", ["--run-id", "../../x"], "run id '../../x': use a plain name"),
    ("run id with a separator", ["--run-id", "a/b"], "run id 'a/b': use a plain name"),
    ("run id ..", ["--run-id", ".."], "run id '..': use a plain name"),
])  # fmt: skip
def test_bad_input_is_one_line_and_creates_nothing(tmp_path, case, args, expect):
    env = {k: v for k, v in os.environ.items() if k not in ("OPENAI_API_KEY", "OPENAI_BASE_URL")}
    proc = agent_env(tmp_path, env, "run", str(TASK), *args)
    assert proc.returncode == 2, (case, proc.stdout, proc.stderr)
    assert expect in one_error_line(proc), case
    no_run_created(tmp_path)
    assert not (tmp_path.parent / "x").exists()


def test_bad_scenarios_and_sources_are_refused_before_the_run(tmp_path):
    unknown = variant(tmp_path, "unknown.yaml", "workspace: {twin: {scenario: no_such_scenario}}\n")
    line = one_error_line(proc := run_agent(tmp_path, "run", str(unknown), "--run-id", "u"))
    assert proc.returncode == 2 and "no_such_scenario: unknown scenario (known:" in line
    missing = variant(tmp_path, "missing.yaml", "workspace: {twin: {scenario: scenarios/mine.yaml}}\n")
    line = one_error_line(proc := run_agent(tmp_path, "run", str(missing), "--run-id", "m"))
    assert proc.returncode == 2 and f"{tmp_path / 'tasks' / 'scenarios' / 'mine.yaml'}: no such scenario file" in line
    dup = variant(tmp_path, "dup.yaml", "name: a\nname: b\n")
    line = one_error_line(proc := run_agent(tmp_path, "run", str(dup), "--run-id", "d"))
    assert proc.returncode == 2 and line.endswith("dup.yaml:3: name: duplicate key (YAML would keep only the last)")
    no_run_created(tmp_path)


def test_docker_that_is_not_there_is_an_infrastructure_failure(tmp_path):
    proc = agent_env(tmp_path, {**os.environ, "DOCKER_HOST": f"unix://{tmp_path}/no-docker.sock"}, "run",
                     str(DOCKER_TASK), "--run-id", "d")  # fmt: skip
    assert proc.returncode == 5 and "the task runs in Docker, but no Docker engine" in one_error_line(proc)
    no_run_created(tmp_path)
    if shutil.which("docker") is None or subprocess.run(["docker", "info"], capture_output=True).returncode != 0:
        return
    image = tmp_path / "tasks" / "image.yaml"
    image.parent.mkdir()
    image.write_text(f"extends: {TASK}\nsandbox: {{kind: docker, docker: {{image: 'dayzero-no-such-image:none', "
                     "engine: twin, devices: [], group_add: []}}\n")  # fmt: skip
    proc = run_agent(tmp_path, "run", str(image), "--run-id", "i")
    assert proc.returncode == 5 and "Docker image 'dayzero-no-such-image:none' is not here" in one_error_line(proc)
    no_run_created(tmp_path)


def test_task_paths_resolve_from_the_task_file_not_the_cwd(tmp_path):
    """A task in one folder naming a scenario file beside it, run from another folder: it runs that scenario."""
    scenario = (REPO / "sandboxes" / "twin" / "scenarios" / "vega_mi355x.yaml").read_text()
    (tmp_path / "tasks" / "scenarios").mkdir(parents=True)
    (tmp_path / "tasks" / "scenarios" / "mine.yaml").write_text(scenario)
    task = variant(tmp_path, "mine.yaml", "workspace: {twin: {scenario: scenarios/mine.yaml}}\n")
    cwd = tmp_path / "elsewhere"
    cwd.mkdir()
    proc = run_agent(cwd, "run", os.path.relpath(task, cwd), "--policy", "playbook", "--max-trials", "1",
                     "--run-id", "mine")  # fmt: skip
    assert proc.returncode == 4, proc.stdout[-2000:] + proc.stderr[-2000:]
    run_dir = cwd / "runs" / "mine"
    assert (run_dir / "workspace" / ".dayzero-materialized").read_text().strip() == str(
        tmp_path / "tasks" / "scenarios" / "mine.yaml")  # fmt: skip
    assert json.loads((run_dir / "run.json").read_text())["task_path"] == str(task)  # resumable from anywhere


def test_runs_folder_read_only_or_full_is_refused_before_the_run(tmp_path):
    runs = tmp_path / "runs"
    runs.mkdir()
    mount = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(runs)], capture_output=True)
    if mount.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mount.stderr.decode().strip()}")
    try:
        proc = run_agent(tmp_path, "run", str(TASK), "--run-id", "x")  # 4 MB free, a run needs 1024
        assert proc.returncode == 5 and "4 MB free" in one_error_line(proc) and "a run needs 1024 MB" in proc.stdout
        env = {**os.environ, "DAYZERO_MIN_FREE_MB": "1"}  # let it start: the workspace does not fit
        proc = agent_env(tmp_path, env, "run", str(TASK), "--run-id", "x")
        assert proc.returncode == 5 and "run x could not be set up: No space left on device" in one_error_line(proc)
        no_run_created(tmp_path)
        subprocess.run(["mount", "-o", "remount,ro", str(runs)], check=True)
        proc = agent_env(tmp_path, env, "run", str(TASK), "--run-id", "x")
        assert proc.returncode == 5 and "is on a read-only file system" in one_error_line(proc)
        no_run_created(tmp_path)
    finally:
        subprocess.run(["umount", "-l", str(runs)], capture_output=True)


def test_resume_says_in_one_line_why_a_run_cannot_continue(tmp_path):
    assert "no run 'nope' under runs/" in one_error_line(proc := run_agent(tmp_path, "resume", "nope"))
    assert proc.returncode == 2
    assert "use a plain name" in one_error_line(run_agent(tmp_path, "resume", "../x"))
    # a run folder left by an older version that failed while being set up: run.json, nothing else
    legacy = tmp_path / "runs" / "legacy"
    legacy.mkdir(parents=True)
    (legacy / "run.json").write_text(json.dumps({"run_id": "legacy", "task_path": str(TASK)}))
    line = one_error_line(proc := run_agent(tmp_path, "resume", "legacy"))
    assert proc.returncode == 2 and "cannot resume: it never started" in line
    listing = run_agent(tmp_path, "runs", env={**os.environ, "COLUMNS": "200"}).stdout  # the words on one line
    assert "never started (nothing to resume)" in listing
    # an interrupted run (its summary not written yet) whose task file was edited, then removed
    task = variant(tmp_path, "t.yaml", "")
    made = run_agent(tmp_path, "run", str(task), "--policy", "playbook", "--max-trials", "1", "--run-id", "cut")
    assert made.returncode == 4, made.stdout[-2000:] + made.stderr[-2000:]
    (tmp_path / "runs" / "cut" / "summary.json").unlink()
    task.write_text(task.read_text() + "description: edited\n")
    line = one_error_line(proc := run_agent(tmp_path, "resume", "cut"))
    assert proc.returncode == 2 and f"its task file {task} changed since the run started" in line
    task.unlink()
    line = one_error_line(proc := run_agent(tmp_path, "resume", "cut"))
    assert proc.returncode == 2 and f"its task file {task} is not there" in line


def test_errors_are_printed_literally(tmp_path):
    """A file name holding Rich markup and an emoji code comes out as written."""
    odd = tmp_path / "[red]bad[bold] :thumbs_up: [link=x]\\[y].yaml"
    odd.write_text(TASK.read_text().replace("gpus: 8", "gpus: eight"))
    line = one_error_line(proc := run_agent(tmp_path, "run", str(odd)))
    at = odd.read_text().splitlines().index("  gpus: eight") + 1
    assert proc.returncode == 2 and line == f"error: {odd}:{at}: hardware.gpus: Input should be a valid integer, " \
        "unable to parse string as an integer"
