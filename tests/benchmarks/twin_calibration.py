"""Print every calibration point of the twin: the twin's figure, the published one, their ratio and the bottleneck.

    python -m tests.benchmarks.twin_calibration                    # the published case, then InferenceX's points
    python -m tests.benchmarks.twin_calibration --only-published   # the published GLM-5.2 case alone
    python -m tests.benchmarks.twin_calibration --ttft [--seeds N] # TTFT p50/p95 at every published rate, over seeds

The published GLM-5.2 on 8x MI355X case is what ``tests/twin/test_calibration.py`` asserts (+-10 %); InferenceX's
GLM-5 FP8 points (``tests/benchmarks/inferencex_calibration.py``) are what ``tests/twin/test_public_calibration.py``
asserts (+-15 %). Runs real twin servers and the twin's bench_serving, as the tests do. "bottleneck" is where the
run's simulated GPU time went, as the twin's bench_serving reports it.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from tests.twin.conftest import fixed_workspace, running
from tests.twin.test_calibration import (
    PUBLISHED_TTFT,
    SINGLE_STREAM,
    SPEC_314,
    SPEC_516,
    TUNED_FLAGS,
    knee,
    throughput_flags,
)


class _Factory:
    def __init__(self, root: Path):
        self.root = root

    def mktemp(self, name: str) -> Path:
        path = self.root / name
        path.mkdir()
        return path


@dataclass(frozen=True)
class Row:
    """One figure: the twin's value, the published value (a number, or a range ``(low, high)``), the bottleneck."""

    figure: str
    twin: float
    published: float | tuple[float, float]
    bottleneck: str = ""
    digits: int = 0

    @property
    def ratio(self) -> str:
        if isinstance(self.published, tuple):
            low, high = self.published
            return "in" if low <= self.twin <= high else f"{self.twin / (low if self.twin < low else high):.2f}"
        return f"{self.twin / self.published:.2f}"

    def line(self) -> str:
        pub = (f"{self.published[0]:g}-{self.published[1]:g}" if isinstance(self.published, tuple)
               else f"{self.published:g}")  # fmt: skip
        return f"{self.figure:<52} {self.twin:>9.{self.digits}f} {pub:>10} {self.ratio:>6}  {self.bottleneck}"


def published_case(ws: Path, tmp: Path) -> list[Row]:
    rows = []
    env = {"AITER_CONFIG_FMOE": str(ws / "tuned.csv")}
    with running(ws, tmp / "final.log", TUNED_FLAGS, env) as s:
        rates = (0.5, 1.0, 1.5, 2.0, 2.25, 2.4, 2.5, 2.6, 2.7, 2.8)
        sweep = {r: s.bench(tmp, *throughput_flags(r)) for r in rates}
    for rate, pub in ((0.5, 449), (1.0, 974), (2.0, 1944)):
        rec = sweep[rate]
        rows.append(Row(f"TP4xDP2 tuned, tok/s at {rate} RPS", rec["output_throughput"], pub, rec["bottleneck"]))
    # the published "2.4 RPS (saturation)" row's 2626 tok/s is more than 2.4 RPS x 1000 tokens: it is compared at
    # the knee below, and the run at 2.4 RPS against the load it offers
    rec = sweep[2.4]
    rows.append(Row("TP4xDP2 tuned, tok/s at 2.4 RPS, of 2400 offered", rec["output_throughput"], 2400,
                    rec["bottleneck"]))  # fmt: skip
    for rate, (pub, _) in PUBLISHED_TTFT.items():
        rec = sweep[rate]
        rows.append(Row(f"TP4xDP2 tuned, TTFT p50 at {rate} RPS (s)", rec["median_ttft_ms"] / 1000, pub,
                        rec["bottleneck"], 2))  # fmt: skip
    k = knee(sweep)
    rows.append(Row("TP4xDP2 tuned, knee (TTFT p50 <= 5 s), RPS", k, (2.4, 2.7), sweep[k]["bottleneck"], 1))
    rows.append(Row("TP4xDP2 tuned, tok/s at the knee", sweep[k]["output_throughput"], 2626, sweep[k]["bottleneck"]))
    with running(ws, tmp / "untuned.log", TUNED_FLAGS) as s:
        rec = s.bench(tmp, *throughput_flags(2.0))
    rows.append(Row("TP4xDP2 untuned, tok/s at 2.0 RPS", rec["output_throughput"], 1944, rec["bottleneck"]))
    with running(ws, tmp / "tp8.log", ["--tp-size", "8"]) as s:
        tp8 = {r: s.bench(tmp, *throughput_flags(r)) for r in (1.3, 1.4, 1.5, 1.6, 1.7, 1.8, 1.9)}
    rec = tp8[knee(tp8)]
    rows.append(Row("TP8 untuned, tok/s at its knee", rec["output_throughput"], 1461, rec["bottleneck"]))
    speeds = {}
    for name, flags in (("no speculation", []), ("MTP 3/1/4", SPEC_314), ("MTP 5/1/6 + fp8 KV + AR fusion", SPEC_516)):
        with running(ws, tmp / "ss.log", ["--tp-size", "8", *flags]) as s:
            rec = s.bench(tmp, *SINGLE_STREAM)
        speeds[name] = (1000 / rec["median_tpot_ms"], rec["bottleneck"])
    base = speeds["no speculation"][0]
    rows.append(Row("single stream TP8 no speculation, tok/s", base, (55, 80), speeds["no speculation"][1]))
    rows.append(Row("single stream TP8 MTP 3/1/4, x no speculation", speeds["MTP 3/1/4"][0] / base, 3.0,
                    speeds["MTP 3/1/4"][1], 2))  # fmt: skip
    deep = speeds["MTP 5/1/6 + fp8 KV + AR fusion"]
    rows.append(Row("single stream TP8 MTP 5/1/6 + fp8 KV + AR fusion, tok/s", deep[0], 213, deep[1]))
    return rows


def print_rows(rows: list[Row]) -> None:
    print("The published GLM-5.2 MXFP4 on 8x MI355X case (simulated: the dayzero digital twin); ratio = twin / published")
    head = f"{'figure':<52} {'twin':>9} {'published':>10} {'ratio':>6}  bottleneck (the run's GPU time)"
    print(head)
    print("-" * len(head))
    for row in rows:
        print(row.line())


def ttft_table(ws: Path, tmp: Path, seeds: range = range(4), per_group: int = 50) -> None:
    """TTFT p50 and p95 of the final configuration at every published rate: the median over benchmark seeds,
    and the seeds' range, beside the published pair; ``near`` counts the seeds whose p50 is within 10 % of the
    published one. ``per_group``: prompts per shared prefix."""
    env = {"AITER_CONFIG_FMOE": str(ws / "tuned.csv")}
    print(f"{'RPS':>5} {'p50 twin (seeds)':>22} {'pub':>5} {'near':>5} {'p95 twin (seeds)':>23} {'pub':>5} "
          f"{'retracted':>9}")  # fmt: skip
    with running(ws, tmp / "ttft.log", TUNED_FLAGS, env) as s:
        for rate, (p50, p95) in PUBLISHED_TTFT.items():
            recs = [s.bench(tmp, *throughput_flags(rate, per_group=per_group), "--seed", str(seed)) for seed in seeds]
            a = [r["median_ttft_ms"] / 1000 for r in recs]
            b = [r["p95_ttft_ms"] / 1000 for r in recs]
            out = sum(r["retracted_requests"] for r in recs)
            near = f"{sum(abs(x - p50) <= 0.1 * p50 for x in a)}/{len(a)}"
            print(f"{rate:>5} {statistics.median(a):>7.2f} ({min(a):.2f}-{max(a):.2f}) {p50:>5.2f} {near:>5} "
                  f"{statistics.median(b):>7.2f} ({min(b):.2f}-{max(b):.2f}) {p95:>5.2f} {out:>9}")  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only-published", action="store_true", help="skip InferenceX's GLM-5 FP8 points")
    parser.add_argument("--ttft", action="store_true", help="TTFT p50/p95 at every published rate, over seeds")
    parser.add_argument("--seeds", type=int, default=4, help="benchmark seeds per rate for --ttft (default 4)")
    parser.add_argument("--prompts-per-group", type=int, default=50,
                        help="prompts sharing one prefix, for --ttft (default 50, as the tests)")
    args = parser.parse_args(argv)
    tmp = Path(tempfile.mkdtemp())
    ws = fixed_workspace.__wrapped__(_Factory(tmp))
    if args.ttft:
        ttft_table(ws, tmp, range(args.seeds), args.prompts_per_group)
        return 0
    print_rows(published_case(ws, tmp))
    if not args.only_published:
        from tests.benchmarks import inferencex_calibration

        print()
        sys.stdout.flush()
        inferencex_calibration.main(["--only-inferencex"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
