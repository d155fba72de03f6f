"""A finished run of the default task on the twin, shared by the tests that read a run's artefacts (review,
report, replay audit, web view): one `agent run` per test session instead of one per test (``tests/shared_runs``
builds them)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from tests.shared_runs import DEFAULT_TASK, FINISHED_RUN_ID, REPO, SHORT_RUN_ID, built_once, run_agent

__all__ = ["DEFAULT_TASK", "FINISHED_RUN_ID", "REPO", "SHORT_RUN_ID", "run_agent"]


def _session_folder(tmp_path_factory) -> Path:
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base  # above every worker's own


@pytest.fixture(scope="session")
def finished_run_root(tmp_path_factory) -> Path:
    """A folder whose ``runs/e2e`` holds a finished playbook run of the default task. Treat it as read-only;
    a test that writes into a run copies it first (:func:`copy_of_finished_run`)."""
    return built_once(_session_folder(tmp_path_factory), "finished")


@pytest.fixture(scope="session")
def short_run_root(tmp_path_factory) -> Path:
    """A folder whose ``runs/short`` holds a finished playbook run of the default task stopped at its targets
    (nothing spent after them): the reference of tests that re-run a whole run (kill and resume, replay, an LLM
    taking the playbook's path), half the length of the full run. Read-only, like :func:`finished_run_root`."""
    return built_once(_session_folder(tmp_path_factory), "short")


@pytest.fixture
def copy_of_finished_run(finished_run_root, tmp_path) -> Path:
    """A private copy of the finished run's folder (cwd with ``runs/e2e``) that a test may write into."""
    dest = tmp_path / "copy"
    shutil.copytree(finished_run_root, dest, symlinks=True)
    return dest
