"""Targets are a floor: once every target is met the run keeps improving while the after-targets budget lasts."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent.outcomes import after_targets_spent
from agent.state import AgentState, Budget, TargetsMet
from tasks.spec import TaskError, load_task

REPO = Path(__file__).resolve().parents[2]


def task_with(tmp_path: Path, budgets: str):
    path = tmp_path / "t.yaml"
    path.write_text(f"extends: {REPO / 'tasks' / 'glm52_mi355x.yaml'}\nbudgets:\n{budgets}")
    return load_task(path)


def state(node_hours: float, runs: int, met: TargetsMet | None) -> AgentState:
    return AgentState(run_id="r", task_path="t.yaml", targets_met=met,
                      budget=Budget(node_hours=node_hours, benchmark_runs=runs))  # fmt: skip


MET = TargetsMet(step=20, node_hours=2.5, benchmark_runs=22, trials=12, values={"throughput": 3000.0})


def test_the_default_is_a_quarter_of_the_node_hours(tmp_path):
    task = task_with(tmp_path, "  node_hours: 30\n  after_targets: {node_hours: null}\n")  # the task's 3 unset
    assert task.budgets.after_targets_node_hours() == pytest.approx(7.5)
    assert after_targets_spent(state(9.9, 40, MET), task) is None  # 7.4 of 7.5 spent
    assert "7.50 of 7.5 node-hours" in after_targets_spent(state(10.0, 40, MET), task)


def test_nothing_is_spent_before_the_targets_are_met(tmp_path):
    task = task_with(tmp_path, "  node_hours: 30\n")
    assert after_targets_spent(state(29.0, 400, None), task) is None


def test_zero_stops_at_the_targets_and_runs_can_bound_it_too(tmp_path):
    assert after_targets_spent(state(2.5, 22, MET), task_with(tmp_path, "  after_targets: {node_hours: 0}\n"))
    task = task_with(tmp_path, "  after_targets: {node_hours: 100, benchmark_runs: 5}\n")
    assert after_targets_spent(state(3.0, 26, MET), task) is None
    assert "5 of 5 benchmark runs" in after_targets_spent(state(3.0, 27, MET), task)


def test_a_bad_value_names_its_place(tmp_path):
    with pytest.raises(TaskError, match=r"budgets\.after_targets\.node_hours"):
        task_with(tmp_path, "  after_targets: {node_hours: -1}\n")


def test_what_is_left_bounds_a_measurement_once_the_targets_are_met(tmp_path):
    from agent.outcomes import node_hours_left

    task = task_with(tmp_path, "  node_hours: 30\n  after_targets: {node_hours: 3}\n")
    assert node_hours_left(state(10.0, 40, None), task) == pytest.approx(20.0)  # before: the whole budget's rest
    assert node_hours_left(state(4.0, 40, MET), task) == pytest.approx(1.5)  # 1.5 of 3 spent since 2.5
    assert node_hours_left(state(29.5, 40, MET.model_copy(update={"node_hours": 28.0})), task) == pytest.approx(0.5)
    assert node_hours_left(state(6.0, 40, MET), task) == 0.0  # overspent: nothing, never negative
