"""The Pareto frontier of a run (agent/inspector/frontier.py) on points made up to have a known answer, and the
report's words for its shorthand (agent/inspector/wording.py): cheap, no run needed."""

from __future__ import annotations

import re

import pytest

from agent.inspector.frontier import FrontierPoint, frontier_of, pareto
from agent.inspector.plots import frontier_overlay
from agent.inspector.report import _trees_html
from agent.inspector.wording import STAGES, accuracy_goal_words, stage_name, tree_words
from tests.shared_runs import REPO


def _point(i: int, per_user: float, per_gpu: float, **kw) -> FrontierPoint:
    gpus = kw.pop("gpus", 8)
    return FrontierPoint(run_index=i, file=f"bench/{i:03d}-x.jsonl", trial=i, workload="throughput",
                         flags={"tp-size": gpus}, gpus=gpus, output_throughput=per_gpu * gpus,
                         throughput_per_gpu=per_gpu, tok_s_per_user=per_user, tpot_p50_ms=1000 / per_user, **kw)  # fmt: skip


def test_the_frontier_is_the_undominated_points():
    points = [_point(1, 200, 20), _point(2, 50, 150), _point(3, 10, 300), _point(4, 40, 100),  # 4: below 2
              _point(5, 10, 250), _point(6, 3, 310)]  # fmt: skip
    assert [p.run_index for p in pareto(points)] == [6, 3, 2, 1]  # by tok/s per user
    front = frontier_of(points)
    assert {p.run_index for p in front.points if p.on_frontier} == {6, 3, 2, 1}
    for p in front.points:  # no point beats a frontier point on both axes
        if p.on_frontier:
            assert not any(q.tok_s_per_user >= p.tok_s_per_user and q.throughput_per_gpu > p.throughput_per_gpu
                           for q in front.points)  # fmt: skip


def test_screening_and_over_the_ttft_limit_are_drawn_but_not_candidates():
    points = [_point(1, 200, 20), _point(2, 50, 150), _point(3, 60, 400, screening=True),
              _point(4, 70, 500, within_ttft_limit=False), _point(5, 10, 300, within_ttft_limit=True)]  # fmt: skip
    front = frontier_of(points)
    assert len(front.points) == 5
    assert {p.run_index for p in front.frontier} == {1, 2, 5}
    roles = {k.role: k.point.run_index for k in front.picks}
    assert roles["max throughput"] == 5 and roles["max interactivity"] == 1


def test_the_balanced_point_is_the_frontiers_knee():
    # a frontier that stays high until 40 tok/s per user, then falls: its knee is the point at 40
    points = [_point(1, 5, 300), _point(2, 20, 290), _point(3, 40, 270), _point(4, 80, 90), _point(5, 200, 20)]
    picks = {k.role: k.point.run_index for k in frontier_of(points).picks}
    assert picks == {"max throughput": 1, "balanced": 3, "max interactivity": 5}
    # two points: no inner point to balance; one point: it is every end, named once
    assert [k.role for k in frontier_of(points[:1]).picks] == ["max throughput"]
    assert {k.role for k in frontier_of([points[0], points[4]]).picks} == {"max throughput", "max interactivity"}


def test_frontier_overlay_draws_each_run():
    a = frontier_of([_point(1, 5, 300), _point(2, 40, 270), _point(3, 200, 20)])
    b = frontier_of([_point(1, 5, 200), _point(2, 40, 150), _point(3, 200, 10)])
    one, two = frontier_overlay([("a", a)]), frontier_overlay([("a", a), ("b", b)])
    assert one.startswith(b"\x89PNG") and two.startswith(b"\x89PNG") and one != two


def test_accuracy_goal_and_draft_tree_in_words():
    assert accuracy_goal_words(-0.02) == "at most 0.02 below the reference"
    assert accuracy_goal_words(0.01, "the first configuration's accuracy") == \
        "at least 0.01 above the first configuration's accuracy"  # fmt: skip
    assert tree_words(3, 1, 4) == "3 draft steps, a chain (top-1), 4 tokens verified per pass"
    html = str(_trees_html("try speculative decoding 3/1/4 <b> (wider than 6/2/8), not 2026/12/03 or a/1/2/3"))
    assert html.count("<abbr") == 2 and "&lt;b&gt;" in html
    assert 'title="6 draft steps, 2 branches per step (top-2), 8 tokens verified per pass">6/2/8</abbr>' in html


def test_every_playbook_stage_has_a_display_name():
    """Display names only: the playbook's stage keys (memo["phase"]) are read from its source, never renamed."""
    source = (REPO / "agent" / "policies" / "playbook.py").read_text()
    keys = set(re.findall(r"""memo\["phase"\] = "(\w+)\"""", source)) | {"bringup"}
    assert keys <= set(STAGES), keys - set(STAGES)
    assert stage_name("knee") == "draft-tree search and refinement"
    assert stage_name("llm") == "llm" and stage_name(None) == "-"


@pytest.mark.parametrize("delta", [-0.02, -0.05])
def test_a_drop_goal_names_its_size(delta):
    assert f"{abs(delta):g} below" in accuracy_goal_words(delta)
