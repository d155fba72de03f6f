"""A finished run of the default task on the twin, shared by the tests that read a run's artefacts (review,
report, replay audit, web view): one `agent run` per test session instead of one per test."""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DEFAULT_TASK = REPO / "tasks" / "glm52_mi355x.yaml"
FINISHED_RUN_ID = "e2e"


def run_agent(cwd: Path, *args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    """``agent ARGS`` in ``cwd`` (its ``runs/`` folder), as a user's shell would run it."""
    return subprocess.run([sys.executable, "-c", "from agent.cli import app; app()", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=timeout)  # fmt: skip


def built_once(tmp_path_factory, name: str, build: Callable[[Path], None]) -> Path:
    """A folder ``build(folder)`` filled once for the whole session, whichever test worker asks first (the
    others wait for it, then share it): runs are the suite's most expensive fixtures."""
    base = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        base = base.parent  # the session's folder, above every worker's own
    shared = base / "built-once"
    shared.mkdir(exist_ok=True)
    root, done = shared / name, shared / f"{name}.done"
    with open(shared / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not done.exists():
            shutil.rmtree(root, ignore_errors=True)  # what a failed attempt left
            root.mkdir()
            build(root)
            done.touch()
    return root


@pytest.fixture(scope="session")
def finished_run_root(tmp_path_factory) -> Path:
    """A folder whose ``runs/e2e`` holds a finished playbook run of the default task. Treat it as read-only;
    a test that writes into a run copies it first (:func:`copy_of_finished_run`)."""

    def build(root: Path) -> None:
        proc = run_agent(root, "run", str(DEFAULT_TASK), "--policy", "playbook", "--run-id", FINISHED_RUN_ID)
        assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
        (root / "agent-run.stdout").write_text(proc.stdout)  # what the user saw, for tests of the terminal output

    return built_once(tmp_path_factory, "finished", build)


SHORT_RUN_ID = "short"


@pytest.fixture(scope="session")
def short_run_root(tmp_path_factory) -> Path:
    """A folder whose ``runs/short`` holds a finished playbook run of the default task stopped at its targets
    (nothing spent after them): the reference of tests that re-run a whole run (kill and resume, replay, an LLM
    taking the playbook's path), half the length of the full run. Read-only, like :func:`finished_run_root`."""

    def build(root: Path) -> None:
        task = root / "to_targets.yaml"
        task.write_text(f"extends: {DEFAULT_TASK}\nbudgets:\n  after_targets: {{node_hours: 0}}\n")
        proc = run_agent(root, "run", str(task), "--policy", "playbook", "--run-id", SHORT_RUN_ID)
        assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]

    return built_once(tmp_path_factory, "short", build)


@pytest.fixture
def copy_of_finished_run(finished_run_root, tmp_path) -> Path:
    """A private copy of the finished run's folder (cwd with ``runs/e2e``) that a test may write into."""
    dest = tmp_path / "copy"
    shutil.copytree(finished_run_root, dest, symlinks=True)
    return dest
