"""Session-wide arrangements for the suite's expensive shared runs (``tests/shared_runs.py``): they start
building in the background as the session begins, and the tests that read them run last, so that by then
they are built and no test worker sits waiting for one. The old sessions' folders pytest deletes are deleted
in the background too, from the start, instead of after the last test."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

from hypothesis import settings

from tests.shared_runs import FIXTURES, REPO

# Some machines export PYTHONDONTWRITEBYTECODE=1. Under it every process of the suite compiles the repository's
# modules from source again, and pytest rewrites every test module's asserts again: about 9 CPU-seconds of each
# worker's collection and 0.45 s of each of the ~150 `agent` commands the tests start. The suite lets Python keep
# its bytecode, as it does by default (set here, before the workers and the shared runs' builder start).
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
sys.dont_write_bytecode = False

# property tests draw the same examples every run (a CI run says what the code does, not what a draw found); a
# case a draw finds is kept as an explicit test. HYPOTHESIS_PROFILE=explore draws afresh.
settings.register_profile("repeatable", derandomize=True)
settings.register_profile("explore", derandomize=False)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "repeatable"))

_builder: subprocess.Popen | None = None


def _whole_suite_or_agent_tests(config) -> bool:
    """Whether this session collects the tests/agent folder whole (a narrower selection builds on first use)."""
    wanted = {REPO, REPO / "tests", REPO / "tests" / "agent"}
    args = [a.split("::")[0] for a in config.args if not a.startswith("-")] or ["tests"]
    return any(Path(config.invocation_params.dir, a).resolve() in wanted for a in args)


# pytest's own clean-up of old session folders (its locks respected), run as a command
_CLEANUP = "; ".join([
    "import sys, time",
    "from pathlib import Path",
    "from _pytest.pathlib import LOCK_TIMEOUT, cleanup_numbered_dir",
    "cleanup_numbered_dir(Path(sys.argv[1]), 'pytest-', int(sys.argv[2]), time.time() - LOCK_TIMEOUT)",
])  # fmt: skip


def _old_sessions_cleared_in_the_background(config) -> None:
    """When a session ends, pytest deletes the folders of the sessions beyond ``tmp_path_retention_count``:
    about 7 GB for one of this suite's sessions, a minute after the last test. The same deletion starts as the
    session begins instead, at idle priority while the tests run; what it has not finished by the end, pytest
    finishes then, as before."""
    factory = config._tmp_path_factory
    keep = int(config.getini("tmp_path_retention_count"))
    if config.getini("tmp_path_retention_policy") == "none":
        keep = 0  # pytest deletes this session's own folder at its end: nothing to do before
    if factory._given_basetemp is not None or keep < 1:
        return
    root = factory.getbasetemp().parent
    idle = ["ionice", "-c", "3"] if shutil.which("ionice") else []
    with contextlib.suppress(OSError):
        subprocess.Popen([*idle, sys.executable, "-c", _CLEANUP, str(root), str(keep)], stdin=subprocess.DEVNULL,
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
                         preexec_fn=lambda: os.nice(19))  # fmt: skip


def pytest_sessionstart(session) -> None:
    global _builder
    config = session.config
    if hasattr(config, "workerinput") or config.option.collectonly:
        return  # a test worker (the controller starts what is session-wide), or no tests run
    _old_sessions_cleared_in_the_background(config)
    if not _whole_suite_or_agent_tests(config):
        return  # a narrow selection builds the shared runs on first use
    base = config._tmp_path_factory.getbasetemp()  # the workers' folders are inside it
    with open(base / "built-once.log", "w") as log:  # what went wrong, if a build failed (its fixture says too)
        _builder = subprocess.Popen([sys.executable, "-m", "tests.shared_runs", str(base)], cwd=REPO,
                                    stdout=log, stderr=subprocess.STDOUT, start_new_session=True)  # fmt: skip


def pytest_sessionfinish(session) -> None:
    if _builder is not None and _builder.poll() is None:  # the session ended before they were needed
        os.killpg(_builder.pid, signal.SIGINT)  # an interrupted agent run stops its servers
        try:
            _builder.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(_builder.pid, signal.SIGKILL)
            _builder.wait()


def pytest_collection_modifyitems(config, items) -> None:
    """The tests that read a shared run go last (the order is stable otherwise)."""
    items.sort(key=lambda item: bool(FIXTURES & set(getattr(item, "fixturenames", ()))))
