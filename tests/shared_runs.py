"""The suite's most expensive fixtures: whole agent runs of the default task that many tests read, built once
per test session in a folder every test worker shares.

``built_once(base, name)`` builds ``base/built-once/<name>`` under a file lock unless it is built already: the
first process to ask builds, the others wait and share. ``tests/conftest.py`` starts the builds in the
background when a session begins (``python -m tests.shared_runs BASE``), so that by the time the tests that read
them run (they are ordered last) nobody waits; a session that did not start them builds on first use.
"""

from __future__ import annotations

import fcntl
import shutil
import subprocess
import sys
from collections.abc import Callable, Mapping
from pathlib import Path

from tests.agent_process import run_cli

REPO = Path(__file__).resolve().parents[1]
DEFAULT_TASK = REPO / "tasks" / "glm52_mi355x.yaml"
FINISHED_RUN_ID = "e2e"
SHORT_RUN_ID = "short"
# a task variant's lines that make the twin answer without pacing simulated time with real sleeps (the figures,
# simulated seconds and node-hours are the same): for runs made to be compared, not watched
NO_PACING = 'engines:\n  twin:\n    env: {TWIN_TIME_SCALE: "0"}\n'


def run_agent(cwd: Path, *args: str, timeout: float = 600, env: Mapping[str, str] | None = None,
              fresh: bool = False) -> subprocess.CompletedProcess:  # fmt: skip
    """``agent ARGS`` in ``cwd`` (its ``runs/`` folder), as a user's shell would run it (``env``: its whole
    environment, else this process's), in a process forked from a preloaded interpreter unless ``fresh``
    (``tests/agent_process.py``)."""
    return run_cli(args, cwd=cwd, env=env, timeout=timeout, fresh=fresh)


def build_finished(root: Path) -> None:
    """``runs/e2e``: a finished playbook run of the default task, and ``agent-run.stdout``, what the user saw."""
    # built by a fresh interpreter, as a user's shell starts one (the builder process runs nothing else)
    proc = run_agent(root, "run", str(DEFAULT_TASK), "--policy", "playbook", "--run-id", FINISHED_RUN_ID,
                     fresh=True)  # fmt: skip
    if proc.returncode != 0:
        raise RuntimeError(f"agent run exited {proc.returncode}:\n{proc.stdout[-2000:]}{proc.stderr[-2000:]}")
    (root / "agent-run.stdout").write_text(proc.stdout)


def build_short(root: Path) -> None:
    """``runs/short``: the same run stopped at its targets (nothing spent after them), unpaced."""
    task = root / "to_targets.yaml"
    task.write_text(f"extends: {DEFAULT_TASK}\nbudgets:\n  after_targets: {{node_hours: 0}}\n{NO_PACING}")
    proc = run_agent(root, "run", str(task), "--policy", "playbook", "--run-id", SHORT_RUN_ID, fresh=True)
    if proc.returncode != 0:
        raise RuntimeError(f"agent run exited {proc.returncode}:\n{proc.stdout[-2000:]}{proc.stderr[-2000:]}")


BUILDS: dict[str, Callable[[Path], None]] = {"short": build_short, "finished": build_finished}
FIXTURES = {"finished_run_root", "short_run_root"}  # the fixtures that read them (tests/agent/conftest.py)


def built_once(base: Path, name: str) -> Path:
    """``base/built-once/<name>``, built by ``BUILDS[name]`` unless it is built already."""
    shared = base / "built-once"
    shared.mkdir(parents=True, exist_ok=True)
    root, done = shared / name, shared / f"{name}.done"
    with open(shared / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not done.exists():
            shutil.rmtree(root, ignore_errors=True)  # what a failed attempt left
            root.mkdir()
            BUILDS[name](root)
            done.touch()
    return root


if __name__ == "__main__":  # python -m tests.shared_runs BASE: build them all, one after the other
    try:
        for name in BUILDS:
            try:
                built_once(Path(sys.argv[1]), name)
            except Exception as exc:  # noqa: BLE001  (the fixture that needs it builds it again and fails visibly)
                print(f"building {name} failed: {exc}", file=sys.stderr)
    except KeyboardInterrupt:  # the session ended first
        sys.exit(130)
