"""The live server's scheduler is the virtual-time benchmark's, step for step, and it makes the server load-aware.

At ``time_scale`` 0 (no sleeping) requests submitted together reach the schedulers at the same simulated time,
so the live scheduler must finish each one exactly when ``simulate`` does for the same requests arriving at once;
and a request's first token and end come later when many others share the node than when it is alone.
"""

from __future__ import annotations

import threading
import time

import pytest

from sandboxes.twin.engine.live_scheduler import LiveScheduler
from sandboxes.twin.engine.memory import plan_memory
from sandboxes.twin.perf.cost_model import TOKEN_NOISE, CostModel
from sandboxes.twin.perf.serving_config import ServingConfig
from sandboxes.twin.perf.simulator import simulate
from sandboxes.twin.perf.workload import SimRequest
from sandboxes.twin.scenario import load

LAYOUTS = [dict(tp_size=8), dict(tp_size=8, dp_size=2, enable_dp_attention=True)]


def _model(layout: dict) -> tuple[CostModel, int]:
    model = CostModel(load("glm52_mi355x"), ServingConfig(**layout))
    return model, plan_memory(model).max_total_num_tokens


def _serve(live: LiveScheduler, n: int, input_len: int, output_len: int) -> list:
    cond = threading.Condition()
    tickets = [live.submit(input_len, output_len, [], TOKEN_NOISE, cond) for _ in range(n)]
    deadline = time.monotonic() + 60
    while not all(t.progress.done for t in tickets):
        assert time.monotonic() < deadline, "the live scheduler did not finish"
        time.sleep(0.005)
    return [t.progress for t in tickets]


@pytest.mark.parametrize("layout", LAYOUTS, ids=["tp8", "tp8-dp2-attention"])
def test_live_requests_finish_when_the_virtual_benchmark_says(layout):
    model, kv = _model(layout)
    live = LiveScheduler(model, kv, time_scale=0.0)
    try:
        got = _serve(live, 24, 2048, 64)
    finally:
        live.close()
    reqs = [SimRequest(i, None, 0, 2048, 64) for i in range(24)]
    want = simulate(model, reqs, [0.0] * 24, kv, content=TOKEN_NOISE)
    assert all(p.tokens == 64 and not p.error for p in got)
    assert [round(p.t_sim, 9) for p in got] == [round(t.done - t.send, 9) for t in want.traces]


def test_a_loaded_server_answers_later_than_an_idle_one():
    model, kv = _model(LAYOUTS[0])
    live = LiveScheduler(model, kv, time_scale=0.0)
    try:
        alone = _serve(live, 1, 4096, 128)[0]
        crowd = _serve(live, 96, 4096, 128)
    finally:
        live.close()
    assert max(p.t_sim for p in crowd) > 2 * alone.t_sim
