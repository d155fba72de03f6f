"""A finished run of the default task on the twin, shared by the tests that read a run's artefacts (review,
report, replay audit, web view): one `agent run` per test session instead of one per test (``tests/shared_runs``
builds them)."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

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


def other_run_without_the_best(runs: Path) -> Any:
    """Makes ``runs/other``: a copy of the finished run that never measured its max-throughput configuration
    (those benchmark records removed), so that two runs' frontiers differ where it matters. Returns the finished
    run's max-throughput point (``agent.inspector.frontier``), the one the other run lacks."""
    from agent.inspector.report import build_report

    other = runs / "other"
    shutil.copytree(runs / FINISHED_RUN_ID, other, symlinks=True)
    report = build_report(runs / FINISHED_RUN_ID)
    top = next(k.point for k in report.frontier.picks if k.role == "max throughput")
    for r in report.bench_runs:
        if r.trial == top.trial:
            (other / r.file).unlink()
    return top


@pytest.fixture(scope="module")
def chromium() -> Iterator[object]:
    """Debian's chromium driven by Playwright (no browser download); the browser tests skip without it, except
    in CI (CI set), where they must run."""
    executable = shutil.which("chromium")
    why = None if executable else "no chromium on PATH (apt-get install chromium)"
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        why = "the playwright package is not installed (pip install -e '.[dev]')"
    if why:
        if os.environ.get("CI"):
            pytest.fail(f"CI must run the browser tests: {why}")
        pytest.skip(f"browser tests skipped: {why}")
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=executable, headless=True, args=["--no-sandbox"])
        yield browser
        browser.close()
