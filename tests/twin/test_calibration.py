"""The twin reproduces the published GLM-5.2 on 8x MI355X figures (the team's case study).

Every figure is measured the way a user measures it: a real ``launch_server`` process, the twin's
``bench_serving`` against it. Throughput runs use the production workload (20k in with a 12k shared prefix,
1k out) for ten simulated minutes of Poisson arrivals per point; single-stream runs use 10k in / 1.5k out,
one request at a time, and report decode speed as 1000 / median TPOT.
"""

from __future__ import annotations

import statistics

import pytest

from tests.twin.conftest import running

WITHIN = 0.10
# the case study's table (final configuration): rate -> (TTFT p50, TTFT p95) in seconds
PUBLISHED_TTFT = {0.5: (0.59, 0.60), 1.0: (0.60, 0.81), 1.5: (0.62, 1.03), 2.0: (0.62, 1.05), 2.25: (0.63, 1.23),
                  2.4: (0.81, 2.22)}  # fmt: skip
TUNED_FLAGS = ["--tp-size", "4", "--dp-size", "2"]
SPEC_314 = ["--speculative-algorithm", "EAGLE", "--speculative-num-steps", "3", "--speculative-eagle-topk", "1",
            "--speculative-num-draft-tokens", "4"]  # fmt: skip
SPEC_516 = ["--speculative-algorithm", "EAGLE", "--speculative-num-steps", "5", "--speculative-eagle-topk", "1",
            "--speculative-num-draft-tokens", "6", "--kv-cache-dtype", "fp8_e4m3", "--enable-aiter-allreduce-fusion"]  # fmt: skip


def throughput_flags(rate: float, minutes: float = 10, per_group: int = 50) -> list[str]:
    """The production workload at ``rate``; ``per_group``: prompts sharing one 12k prefix (the published case does
    not say; the first of a group on each DP rank misses the cache)."""
    groups = max(2, round(rate * minutes * 60 / per_group))
    return ["--dataset-name", "generated-shared-prefix", "--gsp-num-groups", str(groups),
            "--gsp-prompts-per-group", str(per_group), "--gsp-system-prompt-len", "12000", "--gsp-question-len", "8000",
            "--gsp-output-len", "1000", "--request-rate", str(rate)]  # fmt: skip


SINGLE_STREAM = ["--dataset-name", "random-ids", "--random-input-len", "10000", "--random-output-len", "1500",
                 "--random-range-ratio", "1", "--num-prompts", "4", "--max-concurrency", "1"]  # fmt: skip


def close(value: float, published: float, within: float = WITHIN) -> bool:
    return abs(value - published) <= within * published


def sweep(server, tmp_path, rates):
    return {r: server.bench(tmp_path, *throughput_flags(r)) for r in rates}


def knee(results: dict) -> float:
    ok = [r for r, rec in results.items() if rec["median_ttft_ms"] <= 5000]
    return max(ok)


@pytest.fixture(scope="module")
def final_sweep(fixed_workspace, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("final")
    env = {"AITER_CONFIG_FMOE": str(fixed_workspace / "tuned.csv")}
    with running(fixed_workspace, tmp / "server.log", TUNED_FLAGS, env) as server:
        assert server.bench(tmp, *throughput_flags(0.5, 1))["server_info"]["twin"]["moe_kernels"] == "tuned"
        return sweep(server, tmp, [0.5, 1.0, 1.5, 2.0, 2.25, 2.4, 2.5, 2.6, 2.7, 2.8])


@pytest.mark.parametrize("rate,published", [(0.5, 449), (1.0, 974), (2.0, 1944)])
def test_final_configuration_throughput_below_saturation(final_sweep, rate, published):
    assert close(final_sweep[rate]["output_throughput"], published)


@pytest.mark.parametrize("rate,published", [(r, p50) for r, (p50, _) in PUBLISHED_TTFT.items() if r != 2.4])
def test_final_configuration_ttft(final_sweep, rate, published):
    assert close(final_sweep[rate]["median_ttft_ms"] / 1000, published)


def test_final_configuration_ttft_at_saturation(fixed_workspace, tmp_path):
    """At 2.4 RPS the median sits where the TTFT distribution is steep (about half the requests wait for another's
    prefill), so one run's figure depends on its arrivals: seeds 0-7 give 0.72-8.2 s (docs/twin.md, "The overlap
    scheduler's extra step"). The twin's figure is the median over bench_serving's seeds 0-4."""
    env = {"AITER_CONFIG_FMOE": str(fixed_workspace / "tuned.csv")}
    with running(fixed_workspace, tmp_path / "server.log", TUNED_FLAGS, env) as server:
        p50s = [server.bench(tmp_path, *throughput_flags(2.4), "--seed", str(seed))["median_ttft_ms"] / 1000
                for seed in range(5)]  # fmt: skip
    assert close(statistics.median(p50s), PUBLISHED_TTFT[2.4][0])


def test_final_configuration_knee_and_saturation(final_sweep):
    k = knee(final_sweep)
    assert 2.4 <= k <= 2.7
    assert final_sweep[2.8]["median_ttft_ms"] > 5000
    # The published "2.4 RPS (saturation)" row reports 2626 tok/s, more than 2.4 req/s x 1000 tokens can
    # produce in an open-loop run; it is the node's saturation throughput. The twin's saturation point is
    # its knee, and at 2.4 RPS it delivers the offered load (less the tail of the last requests).
    assert close(final_sweep[k]["output_throughput"], 2626)
    assert final_sweep[2.4]["output_throughput"] >= 0.95 * 2400


def test_tp8_baseline_saturates_near_1461(fixed_workspace, tmp_path):
    with running(fixed_workspace, tmp_path / "server.log", ["--tp-size", "8"]) as server:
        results = sweep(server, tmp_path, [1.3, 1.4, 1.5, 1.6, 1.7, 1.8, 1.9])
    assert close(results[knee(results)]["output_throughput"], 1461)


def test_tp4_dp2_untuned_at_2_rps(fixed_workspace, tmp_path):
    with running(fixed_workspace, tmp_path / "server.log", TUNED_FLAGS) as server:
        rec = server.bench(tmp_path, *throughput_flags(2.0))
    assert rec["server_info"]["twin"]["moe_kernels"] == "fallback"
    assert close(rec["output_throughput"], 1944)
    assert rec["median_ttft_ms"] <= 5000


def decode_speed(server, tmp_path) -> float:
    return 1000.0 / server.bench(tmp_path, *SINGLE_STREAM)["median_tpot_ms"]


def test_single_stream_speculation(fixed_workspace, tmp_path):
    speeds = {}
    for name, flags in (("none", []), ("3/1/4", SPEC_314), ("5/1/6", SPEC_516)):
        with running(fixed_workspace, tmp_path / f"{name.replace('/', '')}.log", ["--tp-size", "8", *flags]) as s:
            speeds[name] = decode_speed(s, tmp_path)
    assert 55 <= speeds["none"] <= 80
    assert 2.6 <= speeds["3/1/4"] / speeds["none"] <= 3.2
    assert close(speeds["5/1/6"], 213)
    assert speeds["5/1/6"] == max(speeds.values())
