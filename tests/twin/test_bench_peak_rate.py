"""bench_serving's peak output rate: the most output tokens any one-second bucket holds, each request's tokens
spread evenly over its decode time, checked against the buckets counted second by second."""

from __future__ import annotations

import random
from types import SimpleNamespace

from sandboxes.twin.bench_serving import _peak_output_rate


def _request(first_token: float, done: float, tokens: int) -> SimpleNamespace:
    return SimpleNamespace(first_token=first_token, done=done, req=SimpleNamespace(output_len=tokens))


def _counted(ok: list) -> float:
    """Each bucket's tokens, counted one second at a time."""
    buckets = [0.0] * (int(max(t.done for t in ok)) + 2)
    for t in ok:
        start, stop = t.first_token, max(t.done, t.first_token + 1e-9)
        rate = t.req.output_len / (stop - start)
        s = int(start)
        while s < stop:
            buckets[s] += rate * (min(s + 1, stop) - max(s, start))
            s += 1
    return max(buckets)


def test_a_request_spreads_its_tokens_over_the_seconds_it_decodes():
    assert _peak_output_rate([]) == 0.0
    assert _peak_output_rate([_request(0.5, 2.5, 200)]) == 100.0  # 50, 100, 50
    assert _peak_output_rate([_request(1.25, 1.75, 30)]) == 30.0  # inside one second
    assert _peak_output_rate([_request(0.5, 2.5, 200), _request(1.0, 2.0, 40)]) == 140.0


def test_the_peak_matches_the_buckets_counted_second_by_second():
    rng = random.Random(7)
    for _ in range(200):
        ok = []
        for _ in range(rng.randint(1, 40)):
            start = float(rng.randint(0, 30)) if rng.random() < 0.3 else rng.uniform(0, 30)
            length = rng.choice([0.0, rng.uniform(0, 0.9), rng.uniform(0, 120), float(rng.randint(1, 4))])
            ok.append(_request(start, start + length, rng.randint(1, 1500)))
        assert abs(_peak_output_rate(ok) - _counted(ok)) <= 1e-9 * _counted(ok)
