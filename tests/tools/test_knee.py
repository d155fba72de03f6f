"""``find_knee``'s search over rates and benchmark seeds, on a server whose TTFT depends on rate and seed.

The benchmark is replaced by a table (rate, seed) -> TTFT, so the search's decisions are checked exactly: which
runs it makes, which rate it reports, and that a knee one seed does not sustain is not reported."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from tasks.spec import Target, Workload
from tools import bench
from tools.base import Cost
from tools.bench import BenchMetrics, KneeInput, find_knee

LIMIT_MS = 5000.0


def fake_ctx(targets: list[Target] | None = None) -> SimpleNamespace:
    workload = Workload(dataset="generated-shared-prefix", duration_s=600, ttft_limit_ms=LIMIT_MS, knee_seeds=[1, 2])
    return SimpleNamespace(server=object(), task=SimpleNamespace(workloads={"tp": workload}, targets=targets or []),
                           node_fraction=lambda: 0.5)  # fmt: skip


@pytest.fixture
def served(monkeypatch):
    """A server that sustains up to ``capacity[seed]`` requests/s; records every (rate, seed) benchmarked."""
    capacity: dict[int, float] = {}
    calls: list[tuple[float, int]] = []
    tpot_per_rate: list[float] = [0.0]  # > 0: TPOT p50 grows with the rate (ms per req/s), as batches grow

    def run_one(ctx, name, rate, duration_s=None, seed=None):
        calls.append((rate, seed))
        ttft = 600.0 if rate <= capacity[seed] else 20_000.0
        m = BenchMetrics(workload=name, request_rate=rate, completed=100, num_prompts=100, success_rate=1.0,
                         output_throughput=rate * 1000 - seed, request_throughput=rate, median_ttft_ms=ttft,
                         p99_ttft_ms=ttft * 3, median_tpot_ms=tpot_per_rate[0] * rate or 20, p99_tpot_ms=30, median_itl_ms=20, p99_itl_ms=30,
                         median_e2e_latency_ms=20_000, decode_tok_s=50, duration_s=600, seed=seed)  # fmt: skip
        return m, "", Cost(node_hours=0.1), None  # no server lost, so no diagnosis

    monkeypatch.setattr(bench, "run_one", run_one)
    return SimpleNamespace(capacity=capacity, calls=calls, tpot_per_rate=tpot_per_rate)


def test_the_knee_is_the_rate_every_seed_sustains(served):
    served.capacity.update({1: 2.7, 2: 2.45})  # seed 2 saturates earlier
    r = find_knee(fake_ctx(), KneeInput(workload="tp", start_rate=2.0, resolution=0.1))
    assert r.ok and r.seeds == [1, 2]
    assert 2.35 < r.knee_rate <= 2.45  # within the resolution below what seed 2 sustains, above what it does not
    at_knee = [m for m in r.runs if m.request_rate == r.knee_rate]
    assert sorted(m.seed for m in at_knee) == [1, 2]  # confirmed by both
    assert r.throughput_at_knee == min(m.output_throughput for m in at_knee)  # the lower figure is reported
    assert r.ttft_p99_ms == 1800.0 and r.ttft_p50_ms == 600.0
    assert r.first_failing_rate is not None and r.first_failing_rate - r.knee_rate <= 0.1 + 1e-9
    assert r.cost.node_hours == pytest.approx(0.1 * len(served.calls))


def test_the_second_seed_runs_only_to_confirm(served):
    served.capacity.update({1: 2.7, 2: 2.7})
    r = find_knee(fake_ctx(), KneeInput(workload="tp", start_rate=2.0, resolution=0.1))
    assert r.ok and 2.6 < r.knee_rate <= 2.7
    # the bracket and bisection ran on seed 1; seed 2 ran only where a knee was to be confirmed
    assert [rate for rate, seed in served.calls if seed == 2] == [r.knee_rate]


def test_one_seed_for_a_screening_pass(served):
    served.capacity.update({1: 3.3})
    r = find_knee(fake_ctx(), KneeInput(workload="tp", start_rate=1.0, resolution=0.25, seeds=[1]))
    assert r.ok and r.seeds == [1] and {s for _, s in served.calls} == {1}
    assert 3.05 <= r.knee_rate <= 3.3


def test_no_sustained_rate_is_an_error_not_a_knee(served):
    served.capacity.update({1: 0.05, 2: 0.05})
    r = find_knee(fake_ctx(), KneeInput(workload="tp", start_rate=1.0, resolution=0.1))
    assert not r.ok and r.knee_rate is None and "exceeds" in r.summary


def test_an_allowance_stops_the_search_before_the_run_that_would_pass_it(served):
    served.capacity.update({1: 2.7, 2: 2.7})
    unlimited = find_knee(fake_ctx(), KneeInput(workload="tp", start_rate=1.0, resolution=0.05))
    full_runs = len(served.calls)
    served.calls.clear()
    r = find_knee(fake_ctx(), KneeInput(workload="tp", start_rate=1.0, resolution=0.05, max_node_hours=0.45))
    # each run costs 0.1 node-hours: the fifth would pass 0.45, so four run
    assert len(served.calls) == 4 < full_runs and r.cost.node_hours <= 0.45
    assert r.stopped_by_budget and not unlimited.stopped_by_budget
    # what it claims is only what every seed sustained: the first rate, which both seeds ran before going higher
    assert (1.0, 2) in served.calls[:2]
    assert r.ok and r.knee_rate == 1.0 and "allowance" in r.summary


def test_a_stopped_search_reports_the_best_rate_every_seed_sustained(served):
    served.capacity.update({1: 2.7, 2: 2.45})  # seed 2 saturates earlier
    # with an allowance the bracket's low end is confirmed by both seeds first, so a stop mid-way still has a claim
    r = find_knee(fake_ctx(), KneeInput(workload="tp", start_rate=2.0, growth=1.1, resolution=0.02,
                                        max_node_hours=0.75))
    assert r.stopped_by_budget and r.ok
    both = {rate for rate, seed in served.calls if seed == 2 and rate <= 2.45}
    assert both and r.knee_rate == max(both)  # the highest rate both seeds ran and sustained
    assert r.first_failing_rate is not None and r.first_failing_rate > r.knee_rate
    assert "allowance" in r.summary


def test_an_allowance_below_one_run_runs_nothing(served):
    served.capacity.update({1: 2.7, 2: 2.7})
    # one run of the workload (600 s on half the node) costs 600 / 3600 * 0.5 node-hours
    r = find_knee(fake_ctx(), KneeInput(workload="tp", start_rate=2.0, max_node_hours=600 / 3600 * 0.5 * 0.9))
    assert served.calls == [] and not r.ok and r.stopped_by_budget


def test_an_ample_allowance_finds_the_same_knee(served):
    served.capacity.update({1: 2.7, 2: 2.45})
    free = find_knee(fake_ctx(), KneeInput(workload="tp", start_rate=2.0, growth=1.1, resolution=0.02))
    ample = find_knee(fake_ctx(), KneeInput(workload="tp", start_rate=2.0, growth=1.1, resolution=0.02,
                                            max_node_hours=100))
    assert ample.ok and not ample.stopped_by_budget and ample.knee_rate == free.knee_rate


def test_the_resolution_cannot_be_finer_than_the_rates_are_kept():
    with pytest.raises(ValueError):
        KneeInput(workload="tp", resolution=0.0005)


def test_a_rate_below_the_minimum_is_never_searched(served):
    served.capacity.update({1: 2.0, 2: 2.0})  # does not sustain the knee it must beat
    r = find_knee(fake_ctx(), KneeInput(workload="tp", start_rate=2.5, min_rate=2.5, resolution=0.1))
    assert served.calls == [(2.5, 1)]  # one run shows it, nothing lower is tried
    assert not r.ok and r.knee_rate is None and r.first_failing_rate == 2.5


def test_a_minimum_that_holds_is_the_searchs_first_run(served):
    served.capacity.update({1: 2.9, 2: 2.9})
    # an allowance of two runs: the first run at the minimum and its confirmation by the second seed
    r = find_knee(fake_ctx(), KneeInput(workload="tp", start_rate=2.5, min_rate=2.5, growth=1.1, resolution=0.1,
                                        max_node_hours=0.25))
    assert r.ok and r.stopped_by_budget and r.knee_rate == 2.5
    assert served.calls[:1] == [(2.5, 1)] and (2.5, 2) in served.calls
    free = find_knee(fake_ctx(), KneeInput(workload="tp", start_rate=2.5, min_rate=2.5, growth=1.1, resolution=0.1))
    assert free.ok and 2.8 < free.knee_rate <= 2.9


def test_the_knee_holds_the_task_s_interactivity_bound(served):
    """A knee target's min_tok_s_per_user is a TPOT bound the knee search holds by default: the knee is the highest
    rate where TTFT and TPOT are both within their limits, and the result says what a user gets there."""
    served.capacity.update({1: 3.3, 2: 3.3})
    served.tpot_per_rate[0] = 20.0  # TPOT p50 = 20 ms per req/s: 50 ms (20 tok/s per user) at 2.5 req/s
    bound = Target(name="tput", metric="throughput_at_knee", workload="tp", min=1, min_tok_s_per_user=20)
    r = find_knee(fake_ctx([bound]), KneeInput(workload="tp", start_rate=1.0, resolution=0.1))
    assert r.ok and 2.4 <= r.knee_rate <= 2.5 and r.max_tpot_ms == 50.0  # not 3.3: users would get 15 tok/s
    assert r.tpot_p50_ms == pytest.approx(20.0 * r.knee_rate) and "tok/s per user" in r.summary
    unbounded = find_knee(fake_ctx(), KneeInput(workload="tp", start_rate=1.0, resolution=0.1))
    assert 3.2 <= unbounded.knee_rate <= 3.3 and unbounded.max_tpot_ms is None


def test_a_configuration_that_sustains_max_rate_is_climbed_on_until_a_rate_fails(served):
    """max_rate is where the climb is expected to fail, not where it stops: a knee needs a failing rate above it."""
    served.capacity.update({1: 5.0, 2: 5.0})
    r = find_knee(fake_ctx(), KneeInput(workload="tp", start_rate=1.0, max_rate=2.0, resolution=0.1))
    assert r.ok and not r.knee_is_lower_bound and not bench.knee_is_lower_bound(r.model_dump())
    assert 4.9 < r.knee_rate <= 5.0  # not 1.5, the last rate of the climb at or below max_rate
    assert r.first_failing_rate is not None and r.knee_rate < r.first_failing_rate <= 5.0 + 0.1 + 1e-9
    assert any(rate > 5.0 for rate, _ in served.calls)  # a failing run, above max_rate
    assert r.summary.startswith(f"knee at {r.knee_rate:g} req/s") and f"{r.first_failing_rate:g} req/s fails" in r.summary


def test_a_climb_that_never_fails_within_its_cap_is_a_lower_bound(served):
    served.capacity.update({1: 100.0, 2: 100.0})
    r = find_knee(fake_ctx(), KneeInput(workload="tp", start_rate=1.0, max_rate=2.0, resolution=0.1))
    cap = 2.0 * bench.RATE_CAP_FACTOR
    assert max(rate for rate, _ in served.calls) <= cap  # the climb stops at its cap
    assert r.ok and r.knee_is_lower_bound and r.first_failing_rate is None and not r.stopped_by_budget
    assert r.knee_rate > cap / 1.5  # the last rate of the climb, confirmed by every seed
    assert sorted(s for rate, s in served.calls if rate == r.knee_rate) == [1, 2]
    assert r.summary.startswith(f"at least {r.throughput_at_knee:.0f} tok/s ({r.knee_rate:g} req/s sustained")
    assert "no failing rate was seen" in r.summary and "knee at" not in r.summary
    # a recorded result says so too, and one recorded before the flag existed is read the same way
    assert bench.knee_is_lower_bound(r.model_dump(exclude={"knee_is_lower_bound"}))


def test_an_allowance_that_runs_out_before_a_failure_gives_a_lower_bound(served):
    served.capacity.update({1: 100.0, 2: 100.0})
    # four runs: the first rate on both seeds, then two rates of the climb on the first seed; none fails
    r = find_knee(fake_ctx(), KneeInput(workload="tp", start_rate=1.0, resolution=0.1, max_node_hours=0.45))
    assert len(served.calls) == 4 and r.stopped_by_budget and r.ok and r.knee_rate == 1.0
    # the rates only the first seed ran held: none is a failing rate, so the knee is only a floor
    assert r.first_failing_rate is None and r.knee_is_lower_bound
    assert r.summary.startswith("at least") and "allowance" in r.summary


def test_a_first_rate_above_max_rate_is_run(served):
    """A search asked to start above max_rate (from just above a best knee) runs its first rate and climbs from it."""
    served.capacity.update({1: 21.0, 2: 21.0})
    r = find_knee(fake_ctx(), KneeInput(workload="tp", start_rate=20.0, min_rate=20.0, max_rate=16.0, growth=1.1,
                                        resolution=0.1))
    assert served.calls[0] == (20.0, 1) and r.ok and 20.9 < r.knee_rate <= 21.0 and not r.knee_is_lower_bound
