"""Resume with a server the killed process took along (the relaunch window): whichever node's checkpoint the kill
left last, the configuration the state says is up (its unassessed observations included) is launched again as it
was launched, as the run's own call; nothing is launched when nothing was up. The whole-run version is
``tests/agent/test_kill_anywhere.py::test_killed_with_a_server_up_ends_as_an_uninterrupted_run``, which lands in
one of these windows depending on timing; this checks each."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from agent.graph import _server_again, serves
from agent.run import Run
from agent.state import AgentState, Observation, Trial
from tasks.spec import load_task
from tools.base import Cost
from tools.runner import ToolCallRecord

TASK = Path(__file__).resolve().parents[2] / "tasks" / "glm52_mi355x.yaml"
FLAGS = {"tp-size": 8, "speculative-algorithm": "EAGLE"}
ENV = {"SGLANG_X": "1"}


class FakeRunner:
    def __init__(self, ok: bool = True):
        self.calls: list[tuple[str, dict, str]] = []
        self.ok = ok

    def call(self, tool: str, args: dict, call_id: str) -> ToolCallRecord:
        self.calls.append((tool, args, call_id))
        return ToolCallRecord(call_id=call_id, tool=tool, input=args, result={}, ok=self.ok, wall_seconds=1.0,
                              cost=Cost(wall_seconds=1.0, node_hours=0.01))  # fmt: skip


def fake_run(ok: bool = True) -> SimpleNamespace:
    return SimpleNamespace(task=load_task(TASK), ctx=SimpleNamespace(server=None), runner=FakeRunner(ok),
                           resumed_id=lambda cid: f"{cid}-resumed", charge=Run.charge)  # fmt: skip


def launch(call_id: str = "s6c0", status: str = "up") -> Observation:
    return Observation(call_id=call_id, tool="launch_server", args={"flags": FLAGS, "env": ENV,
                       "pristine": ["model/config.json"]}, ok=status == "up", result={"status": status}, step=6)  # fmt: skip


def up_trial() -> Trial:
    return Trial(id=3, flags=FLAGS, env=ENV, status="up", pristine=["model/config.json"], step=6)


def state(**kw) -> AgentState:
    return AgentState(run_id="r", task_path=str(TASK), step=6, **kw)


def assessed(obs: Observation) -> dict:
    return {"observations": [obs], "history": [obs], "trials": [up_trial()], "server_flags": FLAGS, "server_env": ENV}


@pytest.mark.parametrize("window, kw", [
    ("after act, before assess", {"observations": [launch()]}),
    ("after assess (or verify, commit, decide)", assessed(launch())),
])  # fmt: skip
def test_the_server_that_was_up_is_launched_again_as_it_was(window, kw):
    run = fake_run()
    update = _server_again(run, state(**kw))
    assert run.runner.calls == [("launch_server", {"flags": FLAGS, "env": ENV, "pristine": ["model/config.json"]},
                                 "s6server-resumed")], window  # fmt: skip
    assert update["budget"].node_hours == pytest.approx(0.01) and update["budget"].trials == 0  # charged, no trial
    assert "server_flags" not in update  # the state's (or the assessment's to come) stands


@pytest.mark.parametrize("window, kw", [
    ("nothing launched yet", {}),
    ("a crash, unassessed", {"observations": [launch(status="crashed")]}),
    ("a stop, unassessed", {**assessed(launch()), "observations": [Observation(call_id="s7c0", tool="stop_server",
                                                                               args={}, ok=True, step=7)]}),
])  # fmt: skip
def test_nothing_is_launched_when_nothing_was_up(window, kw):
    run = fake_run()
    assert _server_again(run, state(**kw)) == {} and run.runner.calls == [], window


def test_a_relaunch_that_fails_leaves_the_state_without_a_server():
    run = fake_run(ok=False)
    update = _server_again(run, state(**assessed(launch())))
    assert update["server_flags"] is None and update["server_env"] == {}


def _server(flags: dict, env: dict, pristine: list[str]) -> SimpleNamespace:
    return SimpleNamespace(flags=flags, env=env, pristine=pristine)


def test_a_recorded_launch_is_made_again_unless_the_server_up_is_the_one_it_started():
    """Killed after a launch's record and before the next checkpoint, the resumed run first brings back the server
    the state had (the previous trial's); the recorded launch must then start its own, not let the calls after it
    measure the previous configuration (issue 42: an ablation trial read the previous trial's 1289 tok/s)."""
    recorded = launch().args
    assert not serves(None, recorded)  # nothing up: the killed process took it along
    assert not serves(_server({"tp-size": 4, "dp-size": 2}, ENV, ["model/config.json"]), recorded)  # another layout
    assert not serves(_server(FLAGS, {}, ["model/config.json"]), recorded)  # another environment
    assert not serves(_server(FLAGS, ENV, []), recorded)  # the files as they are, not as released
    assert serves(_server(dict(FLAGS), dict(ENV), ["model/config.json"]), recorded)  # the same launch: kept
    assert not serves(_server(FLAGS, ENV, []), {"flags": "not a mapping"})  # not a launch this run could make
