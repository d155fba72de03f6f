"""Warm start (``agent run --prior RUN``): an earlier run of the same task seeds the search, and says so."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agent.policies.base import PolicyContext
from agent.policies.playbook import PlaybookPolicy
from agent.prior import PriorError, load_prior
from tasks.spec import load_task
from tests.agent.conftest import DEFAULT_TASK, FINISHED_RUN_ID, run_agent

REPO = Path(__file__).resolve().parents[2]


def test_a_finished_run_of_the_task_gives_its_measurements_and_best(finished_run_root):
    run_dir = finished_run_root / "runs" / FINISHED_RUN_ID
    task = load_task(DEFAULT_TASK)
    prior = load_prior(run_dir, task, DEFAULT_TASK)
    summary = json.loads((run_dir / "summary.json").read_text())
    knee = [t for t in summary["trials"] if "throughput" in t["metrics"]]
    crashed = [t for t in summary["trials"] if t["status"] != "up"]
    assert len(prior.measured) == len(knee) + len(crashed) and prior.target == "throughput"
    assert prior.best.value == summary["targets"]["throughput"]["achieved"]
    assert prior.best.candidate.flags == summary["best_config"]["flags"]
    assert f"from run {FINISHED_RUN_ID}" in prior.describe()

    # the playbook's search starts from them: the history holds them, the prior best is its first candidate
    ctx = PolicyContext(task=task, workspace=None, tool_schemas=[], run_id="new", prior=[prior])
    memo = PlaybookPolicy._fresh_memo(ctx)
    assert len(memo["measured"]) == len(prior.measured) and memo["prior_best"][0]["run"] == FINISHED_RUN_ID
    memo["best"] = {"throughput": {"flags": {"tp-size": 8}, "env": {}, "value": 1500.0}}
    item = PlaybookPolicy._search_item(task, memo)
    assert item["candidate"]["flags"] == prior.best.candidate.flags and not memo["prior_best"]


def test_another_tasks_run_or_no_run_is_refused_in_one_line(finished_run_root, tmp_path):
    other = REPO / "tasks" / "vega_mi355x.yaml"
    with pytest.raises(PriorError, match="a prior must run the same task"):
        load_prior(finished_run_root / "runs" / FINISHED_RUN_ID, load_task(other), other)
    proc = run_agent(tmp_path, "run", str(DEFAULT_TASK), "--prior", "nope", "--run-id", "x")
    assert proc.returncode == 2 and proc.stdout.count("\n") == 1 and "--prior nope: not a finished run" in proc.stdout
    assert not (tmp_path / "runs" / "x").exists()  # refused before the run existed
