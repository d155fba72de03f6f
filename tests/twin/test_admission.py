"""The twin admits requests as SGLang 0.5.12's scheduler does: with the radix cache on, running requests reserve
only ``new_token_ratio`` of the output they may still write, so the pool is over-committed and a full pool
retracts requests (they prefill again later and finish); with it off, ``bench_serving``'s ``ignore_eos`` requests
reserve their whole output and are never retracted."""

from __future__ import annotations

import json
import random
import statistics
import urllib.request

import pytest

from sandboxes.twin.perf.cost_model import CostModel
from sandboxes.twin.perf.serving_config import ServingConfig
from sandboxes.twin.perf.simulator import Reservation, simulate
from sandboxes.twin.perf.workload import DatasetSpec, arrival_times, build_requests
from sandboxes.twin.scenario import load

SC = load("glm52_mi355x")
PROMPT, OUTPUT, N = 1000, 4000, 48
POOL = 100_000  # tokens: room for 20 requests with their whole output, fewer than the load offers


def run(**config):
    cfg = ServingConfig(tp_size=8, **config)
    rng = random.Random(5)
    reqs = build_requests(DatasetSpec("random-ids", num_prompts=N, random_input_len=PROMPT,
                                      random_output_len=OUTPUT, random_range_ratio=1.0), rng)  # fmt: skip
    return simulate(CostModel(SC, cfg), reqs, arrival_times(N, 50.0, rng), POOL)


def test_over_commits_then_retracts_and_every_request_still_finishes():
    result = run()
    assert result.peak_running > POOL // (PROMPT + OUTPUT)  # more running than whole outputs would allow
    assert result.retracted > 0
    assert all(not t.error and t.done is not None for t in result.traces)
    retracted = [t for t in result.traces if t.retractions]
    assert retracted and all(t.resumed > 0 for t in retracted)
    # a retracted request keeps its first token's time: TTFT is not measured twice
    assert all(t.send < t.first_token < t.done for t in result.traces)
    # waiting again and prefilling again costs it time: retracted requests take longer from first token to end
    kept = [t for t in result.traces if not t.retractions]
    assert statistics.median(t.done - t.first_token for t in retracted) > statistics.median(
        t.done - t.first_token for t in kept
    )


def test_without_the_radix_cache_whole_outputs_are_reserved_and_nothing_is_retracted():
    result = run(disable_radix_cache=True)
    assert result.retracted == 0
    assert result.peak_running <= POOL // (PROMPT + OUTPUT)
    assert all(not t.error and t.done is not None for t in result.traces)


def test_a_pool_large_enough_never_retracts():
    cfg = ServingConfig(tp_size=8)
    rng = random.Random(5)
    reqs = build_requests(DatasetSpec("random-ids", num_prompts=N, random_input_len=PROMPT,
                                      random_output_len=OUTPUT, random_range_ratio=1.0), rng)  # fmt: skip
    result = simulate(CostModel(SC, cfg), reqs, arrival_times(N, 50.0, rng), N * (PROMPT + OUTPUT) + N)
    assert result.retracted == 0 and result.peak_running == N


@pytest.mark.parametrize("conservativeness,start,floor", [(1.0, 0.7, 0.098), (0.3, 0.21, 0.0294)])
def test_reservation_follows_sglangs_new_token_ratio(conservativeness, start, floor):
    r = Reservation.sglang(conservativeness)
    assert r.ratio == pytest.approx(start) and r.floor == pytest.approx(floor)
    for _ in range(300):
        r.after_decode()
    assert r.ratio == pytest.approx((start + floor) / 2)  # halfway after 300 of SGLang's 600 decay steps
    for _ in range(1000):
        r.after_decode()
    assert r.ratio == pytest.approx(floor)


def test_dp_attention_schedules_less_conservatively(fixed_workspace, tmp_path):
    """``--enable-dp-attention`` scales ``--schedule-conservativeness`` by 0.3 (server_args.py): the launcher
    hands the resolved value to the performance model, so the twin reserves less under DP attention."""
    from tests.twin.conftest import running

    with running(fixed_workspace, tmp_path / "server.log", ["--tp-size", "8", "--dp-size", "2",
                                                             "--enable-dp-attention"]) as server:  # fmt: skip
        info = json.load(urllib.request.urlopen(f"{server.url}/server_info", timeout=10))
    lean = ServingConfig.from_dict(info["twin"]["serving_config"])
    assert lean.schedule_conservativeness == pytest.approx(0.3)
    assert Reservation.sglang(lean.schedule_conservativeness).ratio == pytest.approx(0.21)
