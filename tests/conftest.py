"""Session-wide arrangements for the suite's expensive shared runs (``tests/shared_runs.py``): they start
building in the background as the session begins, and the tests that read them run last, so that by then
they are built and no test worker sits waiting for one."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from tests.shared_runs import FIXTURES, REPO

_builder: subprocess.Popen | None = None


def _whole_suite_or_agent_tests(config) -> bool:
    """Whether this session collects the tests/agent folder whole (a narrower selection builds on first use)."""
    wanted = {REPO, REPO / "tests", REPO / "tests" / "agent"}
    args = [a.split("::")[0] for a in config.args if not a.startswith("-")] or ["tests"]
    return any(Path(config.invocation_params.dir, a).resolve() in wanted for a in args)


def pytest_sessionstart(session) -> None:
    global _builder
    config = session.config
    if hasattr(config, "workerinput") or config.option.collectonly or not _whole_suite_or_agent_tests(config):
        return  # a test worker (the controller starts the builds), or no tests run, or a narrow selection
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
