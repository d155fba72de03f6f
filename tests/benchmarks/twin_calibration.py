"""Print the twin's figures beside the published GLM-5.2 on 8x MI355X ones (what test_calibration asserts).

    python -m tests.benchmarks.twin_calibration
    python -m tests.benchmarks.twin_calibration --ttft     # TTFT p50/p95 at every published rate, over seeds

Runs real twin servers and the twin's bench_serving, as the calibration tests do.
"""

from __future__ import annotations

import statistics
import sys
import tempfile
from pathlib import Path

from tests.twin.conftest import fixed_workspace, running
from tests.twin.test_calibration import SINGLE_STREAM, SPEC_314, SPEC_516, TUNED_FLAGS, knee, throughput_flags


class _Factory:
    def __init__(self, root: Path):
        self.root = root

    def mktemp(self, name: str) -> Path:
        path = self.root / name
        path.mkdir()
        return path


# the case study's table (final configuration): rate -> (TTFT p50, TTFT p95) in seconds
PUBLISHED_TTFT = {0.5: (0.59, 0.60), 1.0: (0.60, 0.81), 1.5: (0.62, 1.03), 2.0: (0.62, 1.05), 2.25: (0.63, 1.23),
                  2.4: (0.81, 2.22)}  # fmt: skip


def ttft_table(ws: Path, tmp: Path, seeds: range = range(4)) -> None:
    """TTFT p50 and p95 of the final configuration at every published rate: the median over benchmark seeds,
    and the seeds' range, beside the published pair."""
    env = {"AITER_CONFIG_FMOE": str(ws / "tuned.csv")}
    print(f"{'RPS':>5} {'p50 twin (seeds)':>22} {'pub':>5} {'p95 twin (seeds)':>23} {'pub':>5} {'retracted':>9}")
    with running(ws, tmp / "ttft.log", TUNED_FLAGS, env) as s:
        for rate, (p50, p95) in PUBLISHED_TTFT.items():
            recs = [s.bench(tmp, *throughput_flags(rate), "--seed", str(seed)) for seed in seeds]
            a = [r["median_ttft_ms"] / 1000 for r in recs]
            b = [r["p95_ttft_ms"] / 1000 for r in recs]
            out = sum(r["retracted_requests"] for r in recs)
            print(f"{rate:>5} {statistics.median(a):>7.2f} ({min(a):.2f}-{max(a):.2f}) {p50:>5.2f} "
                  f"{statistics.median(b):>7.2f} ({min(b):.2f}-{max(b):.2f}) {p95:>5.2f} {out:>9}")  # fmt: skip


def main() -> None:
    tmp = Path(tempfile.mkdtemp())
    ws = fixed_workspace.__wrapped__(_Factory(tmp))
    if "--ttft" in sys.argv[1:]:
        ttft_table(ws, tmp)
        return
    env = {"AITER_CONFIG_FMOE": str(ws / "tuned.csv")}
    print(f"{'figure':<48} {'twin':>9} {'published':>10}")
    with running(ws, tmp / "final.log", TUNED_FLAGS, env) as s:
        sweep = {r: s.bench(tmp, *throughput_flags(r)) for r in (0.5, 1.0, 2.0, 2.4, 2.5, 2.6, 2.7, 2.8)}
    for rate, pub in ((0.5, 449), (1.0, 974), (2.0, 1944), (2.4, 2626)):
        print(f"{f'TP4xDP2 tuned, tok/s at {rate} RPS':<48} {sweep[rate]['output_throughput']:>9.0f} {pub:>10}")
    for rate, pub in ((0.5, 0.59), (2.4, 0.81)):
        print(f"{f'TP4xDP2 tuned, TTFT p50 at {rate} RPS (s)':<48} {sweep[rate]['median_ttft_ms'] / 1000:>9.2f} {pub:>10}")
    k = knee(sweep)
    print(f"{'TP4xDP2 tuned, knee (TTFT p50 <= 5 s), RPS':<48} {k:>9} {'2.4-2.7':>10}")
    print(f"{'TP4xDP2 tuned, tok/s at the knee':<48} {sweep[k]['output_throughput']:>9.0f} {2626:>10}")
    with running(ws, tmp / "untuned.log", TUNED_FLAGS) as s:
        print(f"{'TP4xDP2 untuned, tok/s at 2.0 RPS':<48} {s.bench(tmp, *throughput_flags(2.0))['output_throughput']:>9.0f} {1944:>10}")
    with running(ws, tmp / "tp8.log", ["--tp-size", "8"]) as s:
        tp8 = {r: s.bench(tmp, *throughput_flags(r)) for r in (1.3, 1.4, 1.5, 1.6, 1.7, 1.8, 1.9)}
    print(f"{'TP8 untuned, tok/s at its knee':<48} {tp8[knee(tp8)]['output_throughput']:>9.0f} {1461:>10}")
    speeds = {}
    for name, flags in (("no speculation", []), ("MTP 3/1/4", SPEC_314), ("MTP 5/1/6 + fp8 KV + AR fusion", SPEC_516)):
        with running(ws, tmp / "ss.log", ["--tp-size", "8", *flags]) as s:
            rec = s.bench(tmp, *SINGLE_STREAM)
        speeds[name] = 1000 / rec["median_tpot_ms"]
    pub = {"no speculation": "55-80", "MTP 3/1/4": "~3x", "MTP 5/1/6 + fp8 KV + AR fusion": "213"}
    for name, v in speeds.items():
        ratio = v / speeds["no speculation"]
        print(f"{f'single stream TP8 {name}, tok/s (x base)':<48} {v:>5.0f} x{ratio:.2f} {pub[name]:>10}")


if __name__ == "__main__":
    main()
